//! A custom op written both ways, each checked by gradcheck:
//! - `CustomFunction`: forward and backward with autograd tensor ops, so the
//!   op has second derivatives too (gradgradcheck passes);
//! - `CustomOp`: the same op on raw core kernels, for speed; its backward is
//!   first order only, and `create_graph` through it is an error naming it.
//!
//! The op is the "softclip" y = x / (1 + |x|), f'(x) = 1 / (1 + |x|)².
//!
//! Run: `cargo run --release --example custom_op`

use std::sync::Arc;

use fucina::autograd::{
    custom_function, custom_op, grad_with, gradgradcheck, CustomFunction, CustomOp, GradOpts,
    UnaryOp,
};
use fucina::prelude::*;

/// The tensor form: every op recorded, so it differentiates twice.
struct SoftClip;
impl CustomFunction for SoftClip {
    fn name(&self) -> &'static str {
        "softclip"
    }
    fn forward(&self, x: &[Tensor]) -> fucina::autograd::Result<Tensor> {
        x[0].div(&x[0].abs()?.add_scalar(1.0)?)
    }
    fn backward(
        &self,
        x: &[Tensor],
        _y: &Tensor,
        gy: &Tensor,
        _needs: &[bool],
    ) -> fucina::autograd::Result<Vec<Option<Tensor>>> {
        let d = x[0].abs()?.add_scalar(1.0)?.square()?.recip()?;
        Ok(vec![Some(gy.mul(&d)?)])
    }
}

/// The raw form: core kernels on `RawTensor`s, no recording.
struct RawSoftClip;
impl CustomOp for RawSoftClip {
    fn name(&self) -> &'static str {
        "raw_softclip"
    }
    fn forward(&self, ctx: &ExecContext, x: &[&RawTensor]) -> fucina::autograd::Result<RawTensor> {
        let den = ctx.unary(&ctx.unary(x[0], UnaryOp::Abs)?, UnaryOp::AddScalar(1.0))?;
        Ok(ctx.binary(x[0], &den, fucina::autograd::BinaryOp::Div)?)
    }
    fn backward(
        &self,
        ctx: &ExecContext,
        x: &[&RawTensor],
        _y: &RawTensor,
        gy: &RawTensor,
        _needs: &[bool],
    ) -> fucina::autograd::Result<Vec<Option<RawTensor>>> {
        let den = ctx.unary(&ctx.unary(x[0], UnaryOp::Abs)?, UnaryOp::AddScalar(1.0))?;
        let d = ctx.unary(&ctx.unary(&den, UnaryOp::Square)?, UnaryOp::Recip)?;
        Ok(vec![Some(ctx.binary(
            gy,
            &d,
            fucina::autograd::BinaryOp::Mul,
        )?)])
    }
}

fn main() -> Result<()> {
    let ctx = ExecContext::with_threads(1)?;
    let x = Tensor::variable(&ctx, &[0.3f64, -1.7, 2.2, -0.4], &[4])?;
    let tensor_form: Arc<dyn CustomFunction> = Arc::new(SoftClip);
    let raw_form: Arc<dyn CustomOp> = Arc::new(RawSoftClip);
    let f = |xs: &[Tensor]| custom_function(tensor_form.clone(), &[&xs[0]]);
    let g = |xs: &[Tensor]| custom_op(raw_form.clone(), &[&xs[0]]);
    let opts = GradcheckOpts::f64();
    println!(
        "tensor form, first order:  {}",
        gradcheck(f, std::slice::from_ref(&x), &opts)?
    );
    println!(
        "tensor form, second order: {}",
        gradgradcheck(f, std::slice::from_ref(&x), &opts)?
    );
    println!(
        "raw form, first order:     {}",
        gradcheck(g, std::slice::from_ref(&x), &opts)?
    );
    let y = g(std::slice::from_ref(&x))?.sum_all()?;
    match grad_with(&y, &[&x], &GradOpts::create_graph()) {
        Err(e) => println!("raw form, create_graph:    refused: {e}"),
        Ok(_) => println!("raw form, create_graph:    unexpectedly accepted"),
    }
    Ok(())
}
