//! Shared helpers of the autograd tests: the one-thread context, custom ops
//! built from two closures (`fn_op`), the a·sin(b) custom op with its
//! deliberate backward faults (`a_sin_b`), bit patterns of values and
//! gradients, uniform f32 inputs, and a tensor released by its closed scope.
#![allow(dead_code)]

use std::sync::Arc;

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{CustomOp, Result, ScopeExt, Tensor};
use fucina_core::kernels::elementwise::{BinaryOp, UnaryOp};
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext, RawTensor};

/// A one-thread test context.
pub fn ctx() -> TestCtx {
    TestCtx::with_threads(1).unwrap()
}

/// Declares `$name` as an alias of the closure bound `$bound + Send + Sync`:
/// a trait with a blanket impl, so that the boxed field and [`fn_op`]'s
/// `impl` parameter name the one bound.
macro_rules! closure_alias {
    ($(#[$doc:meta])* $name:ident = $($bound:tt)+) => {
        $(#[$doc])*
        pub trait $name: $($bound)+ + Send + Sync {}
        impl<F: $($bound)+ + Send + Sync> $name for F {}
    };
}

closure_alias! {
    /// A custom op's forward: the context and the input values.
    ForwardFn = Fn(&ExecContext, &[&RawTensor]) -> Result<RawTensor>
}

closure_alias! {
    /// A custom op's backward: the context, the inputs, the output, the
    /// upstream gradient and which inputs need a gradient.
    BackwardFn = Fn(&ExecContext, &[&RawTensor], &RawTensor, &RawTensor, &[bool])
        -> Result<Vec<Option<RawTensor>>>
}

/// A [`CustomOp`] whose forward and backward are closures (see [`fn_op`]).
struct FnOp {
    name: &'static str,
    forward: Box<dyn ForwardFn>,
    backward: Box<dyn BackwardFn>,
}

impl CustomOp for FnOp {
    fn name(&self) -> &'static str {
        self.name
    }
    fn forward(&self, ctx: &ExecContext, inputs: &[&RawTensor]) -> Result<RawTensor> {
        (self.forward)(ctx, inputs)
    }
    fn backward(
        &self,
        ctx: &ExecContext,
        inputs: &[&RawTensor],
        output: &RawTensor,
        gy: &RawTensor,
        needs: &[bool],
    ) -> Result<Vec<Option<RawTensor>>> {
        (self.backward)(ctx, inputs, output, gy, needs)
    }
}

/// The custom op `name` with this forward and this backward
/// (`backward(ctx, inputs, output, gy, needs)`).
pub fn fn_op(
    name: &'static str,
    forward: impl ForwardFn + 'static,
    backward: impl BackwardFn + 'static,
) -> Arc<dyn CustomOp> {
    Arc::new(FnOp {
        name,
        forward: Box::new(forward),
        backward: Box::new(backward),
    })
}

/// The deliberate fault of an [`a_sin_b`] backward (all in b's gradient).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    None,
    /// db = a · sin(b): sin instead of cos.
    SinForCos,
    /// db = −(true db).
    SignFlip,
    /// db = 1.005 · (true db).
    Scale,
    /// db is right except at the middle element, which is off by 0.5.
    OneElement,
    /// b's gradient is all zeros (a custom op may not return none for an
    /// input that needs one: the engine refuses it, see custom.rs).
    Zero,
    /// The forward multiplies by a detached copy of b: one path is cut (the
    /// op itself is the fault-free one; the test's function detaches).
    Detach,
}

/// f(a, b) = a · sin(b), elementwise, as a custom op ("a_sin_b"). df/da =
/// sin(b), df/db = a · cos(b), the latter with `fault` applied.
pub fn a_sin_b(fault: Fault) -> Arc<dyn CustomOp> {
    fn_op(
        "a_sin_b",
        |ctx, x| {
            let s = ctx.unary(x[1], UnaryOp::Sin)?;
            Ok(ctx.binary(x[0], &s, BinaryOp::Mul)?)
        },
        move |ctx, x, _y, gy, needs| {
            let ga = if needs[0] {
                Some(ctx.binary(gy, &ctx.unary(x[1], UnaryOp::Sin)?, BinaryOp::Mul)?)
            } else {
                None
            };
            let gb = if needs[1] {
                let d = ctx.unary(
                    x[1],
                    if fault == Fault::SinForCos {
                        UnaryOp::Sin
                    } else {
                        UnaryOp::Cos
                    },
                )?;
                let g = ctx.binary(&ctx.binary(gy, x[0], BinaryOp::Mul)?, &d, BinaryOp::Mul)?;
                Some(match fault {
                    Fault::SignFlip => ctx.unary(&g, UnaryOp::MulScalar(-1.0))?,
                    Fault::Scale => ctx.unary(&g, UnaryOp::MulScalar(1.005))?,
                    Fault::Zero => ctx.zeros(g.dtype(), g.shape())?,
                    Fault::OneElement => {
                        let mut v = g.to_vec::<f64>()?;
                        let k = v.len() / 2;
                        v[k] += 0.5;
                        ctx.from_slice(&v, g.shape())?
                    }
                    Fault::None | Fault::SinForCos | Fault::Detach => g,
                })
            } else {
                None
            };
            Ok(vec![ga, gb])
        },
    )
}

/// The bits of an f32 or f64 tensor's values, widened to u64.
pub fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits() as u64)
            .collect(),
        DType::F64 => t
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect(),
        d => panic!("dtype {d} not used here"),
    }
}

/// The bits of the tensor's gradient ([`bits`]), `None` when it has none.
pub fn grad_bits(t: &Tensor) -> Option<Vec<u64>> {
    t.grad().map(|g| bits(&g))
}

/// `n` uniform draws in `[lo, hi)`, rounded to f32.
pub fn uniform_f32(rng: &mut SplitMix64, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    rng.vec_uniform(n, lo, hi)
        .into_iter()
        .map(|x| x as f32)
        .collect()
}

/// An f32 variable of `shape`, uniform draws in `[-1, 1)`.
pub fn uniform_var(ctx: &ExecContext, rng: &mut SplitMix64, shape: &[usize]) -> Tensor {
    let v = uniform_f32(rng, shape.iter().product(), -1.0, 1.0);
    Tensor::variable(ctx, &v, shape).unwrap()
}

/// `f`'s result, computed inside a scope that has closed since: a tensor
/// whose value and node are released, its shape and flags kept.
pub fn released(ctx: &ExecContext, f: impl FnOnce() -> Result<Tensor>) -> Tensor {
    let _scope = ctx.scope();
    f().unwrap()
}

/// Runs `f` in a fresh test context of one thread, then of two (each
/// checked when it drops): the thread-count sweep of the determinism tests.
pub fn on_one_and_two_threads(mut f: impl FnMut(&TestCtx)) {
    for threads in [1, 2] {
        f(&TestCtx::with_threads(threads).unwrap());
    }
}
