//! The pointwise tiers' derivatives as recorded tensors, for backward with
//! `create_graph`: gx = gy · f'(x) with f' built from differentiable ops, so a
//! second (or third) derivative follows.
//!
//! One exhaustive `match` per table (no wildcard arm): adding an op to the core
//! unary or binary table without its entry here is a compile error. Each arm
//! writes f' in terms of what the node saved (`x`, or `y` for ops that save
//! their output), as in the table's `df`. Piecewise-linear ops (relu, abs,
//! clamp, ...) have a piecewise-constant f': the kernel's own f'(x), as a
//! constant (its derivative is 0 almost everywhere). `gelu_erf` and
//! `hardswish` use [`derivative`], a node whose value is the kernel's f'(x)
//! and whose backward is f''(x) written out below.

use fucina_core::kernels::elementwise::{BinaryOp, CmpOp, UnaryOp};
use fucina_core::{ExecContext, RawTensor};

use crate::error::Result;
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;

/// The kernel's f'(x) (or f'(y)) as a raw tensor: the unary backward with gy = 1.
fn kernel_derivative(ctx: &ExecContext, saved: &RawTensor, op: UnaryOp) -> Result<RawTensor> {
    let ones = ctx.ones(saved.dtype(), saved.shape())?;
    Ok(ctx.unary_backward(saved, &ones, op)?)
}

/// A node whose value is the kernel's f'(x) and whose backward is gd · f''(x).
struct DerivativeNode {
    op: UnaryOp,
    x: RawTensor,
}

impl Backward for DerivativeNode {
    fn backward(&self, ctx: &ExecContext, gd: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        let x = Tensor::new_internal(ctx, self.x.clone(), false, None);
        let gd = Tensor::new_internal(ctx, gd.clone(), false, None);
        let g = gd.mul(&second_derivative(self.op, &x)?)?;
        Ok(smallvec::smallvec![Some(g.raw()?)])
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gd: &Tensor) -> Result<TensorGrads> {
        let x = saved.input(0, &self.x);
        Ok(smallvec::smallvec![Some(
            gd.mul(&second_derivative(self.op, &x)?)?
        )])
    }
}

/// f'(x) recorded as a node over `x` (see [`DerivativeNode`]).
fn derivative(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let xr = x.raw()?;
    let ctx = x.ctx();
    let d = kernel_derivative(ctx, &xr, op)?;
    Ok(record(ctx, "unary_derivative", d, &[x], |_| {
        Box::new(DerivativeNode { op, x: xr })
    }))
}

/// A U8 mask constant computed from `x`'s value.
fn mask_where(
    x: &Tensor,
    f: impl Fn(&ExecContext, &RawTensor) -> fucina_core::Result<RawTensor>,
) -> Result<Tensor> {
    let m = f(x.ctx(), &x.raw()?)?;
    Ok(Tensor::new_internal(x.ctx(), m, false, None))
}

/// 1/√(2π).
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// f''(x) for the ops whose f' is a [`DerivativeNode`].
fn second_derivative(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    match op {
        // f = x·Φ(x): f'' = φ(x)·(2 − x²).
        UnaryOp::GeluErf => {
            let x2 = x.square()?;
            let phi = x2.mul_scalar(-0.5)?.exp()?.mul_scalar(INV_SQRT_2PI)?;
            phi.mul(&x2.rsub_scalar(2.0)?)
        }
        // f = x·(x + 3)/6 on (−3, 3), x above, 0 below: f'' = 1/3 inside, 0 outside.
        UnaryOp::Hardswish => {
            let inside = mask_where(x, |ctx, x| {
                let ax = ctx.unary(x, UnaryOp::Abs)?;
                ctx.compare_scalar(&ax, 3.0, CmpOp::Lt)
            })?;
            let zero = Tensor::scalar(x.ctx(), x.dtype(), 0.0)?;
            Tensor::scalar(x.ctx(), x.dtype(), 1.0 / 3.0)?.where_cond(&inside, &zero)
        }
        _ => Err(crate::Error::NoDoubleBackward { op: op.name() }),
    }
}

/// gx = gy · f'(·) for a unary op, recorded. `saved` is x or y as the table's
/// `saved` says (`None` for a constant derivative).
pub(crate) fn unary_graph(op: UnaryOp, saved: Option<&Tensor>, gy: &Tensor) -> Result<Tensor> {
    let s = || {
        saved.ok_or(crate::Error::MissingGradient {
            op: op.name(),
            input: 0,
        })
    };
    // The kernel's f' as a constant: piecewise-constant derivatives.
    let constant = || -> Result<Tensor> {
        let v = s()?;
        let d = kernel_derivative(v.ctx(), &v.raw()?, op)?;
        Ok(Tensor::new_internal(v.ctx(), d, false, None))
    };
    let d = match op {
        UnaryOp::Neg | UnaryOp::RSubScalar(_) => return gy.neg(),
        UnaryOp::AddScalar(_) => return Ok(gy.clone()),
        UnaryOp::MulScalar(c) => return gy.mul_scalar(c),
        UnaryOp::Abs
        | UnaryOp::Relu
        | UnaryOp::LeakyRelu(_)
        | UnaryOp::Sign
        | UnaryOp::Clamp(_, _) => constant()?,
        // y = √x: f' = 1/(2y).
        UnaryOp::Sqrt => s()?.mul_scalar(2.0)?.recip()?,
        // y = x^(−1/2): f' = −y³/2.
        UnaryOp::Rsqrt => {
            let y = s()?;
            y.square()?.mul(y)?.mul_scalar(-0.5)?
        }
        UnaryOp::Exp => s()?.clone(),
        UnaryOp::Log => return gy.div(s()?),
        UnaryOp::Log1p => return gy.div(&s()?.add_scalar(1.0)?),
        UnaryOp::Sin => s()?.cos()?,
        UnaryOp::Cos => s()?.sin()?.neg()?,
        UnaryOp::Tanh => s()?.square()?.rsub_scalar(1.0)?,
        UnaryOp::Sigmoid => {
            let y = s()?;
            y.mul(&y.rsub_scalar(1.0)?)?
        }
        // f' = 1 for x > 0, α·eˣ otherwise.
        UnaryOp::Elu(alpha) => {
            let x = s()?;
            let pos = mask_where(x, |ctx, x| ctx.compare_scalar(x, 0.0, CmpOp::Gt))?;
            let one = Tensor::scalar(x.ctx(), x.dtype(), 1.0)?;
            one.where_cond(&pos, &x.exp()?.mul_scalar(alpha)?)?
        }
        // f = x·(1 + tanh u)/2, u = c·(x + a·x³): f' = (1 + t)/2 + x·(1 − t²)·u'/2.
        UnaryOp::GeluTanh => {
            let x = s()?;
            const C: f64 = 0.797_884_560_802_865_4; // √(2/π)
            const A: f64 = 0.044_715;
            let x2 = x.square()?;
            let u = x.mul(&x2.mul_scalar(A)?.add_scalar(1.0)?)?.mul_scalar(C)?;
            let du = x2.mul_scalar(3.0 * A)?.add_scalar(1.0)?.mul_scalar(C)?;
            let t = u.tanh()?;
            let left = t.add_scalar(1.0)?.mul_scalar(0.5)?;
            let right = x
                .mul(&t.square()?.rsub_scalar(1.0)?)?
                .mul(&du)?
                .mul_scalar(0.5)?;
            left.add(&right)?
        }
        UnaryOp::GeluErf | UnaryOp::Hardswish => derivative(op, s()?)?,
        // f = x·σ(x): f' = σ·(1 + x·(1 − σ)).
        UnaryOp::Silu => {
            let x = s()?;
            let sg = x.sigmoid()?;
            sg.mul(&x.mul(&sg.rsub_scalar(1.0)?)?.add_scalar(1.0)?)?
        }
        UnaryOp::Softplus => s()?.sigmoid()?,
        // f = x·tanh(softplus x): f' = T + x·(1 − T²)·σ(x), T = tanh(softplus x).
        UnaryOp::Mish => {
            let x = s()?;
            let t = x.softplus()?.tanh()?;
            t.add(&x.mul(&t.square()?.rsub_scalar(1.0)?)?.mul(&x.sigmoid()?)?)?
        }
        // f = −softplus(−x): f' = σ(−x).
        UnaryOp::LogSigmoid => s()?.neg()?.sigmoid()?,
        UnaryOp::Square => s()?.mul_scalar(2.0)?,
        // y = 1/x: f' = −y².
        UnaryOp::Recip => s()?.square()?.neg()?,
        UnaryOp::PowScalar(p) => s()?.pow_scalar(p - 1.0)?.mul_scalar(p)?,
        // f = c/x: f' = −c/x².
        UnaryOp::RDivScalar(c) => s()?.square()?.rdiv_scalar(-c)?,
    };
    gy.mul(&d)
}

/// (ga, gb) = (gy·∂f/∂a, gy·∂f/∂b) for a binary op, recorded, at the
/// broadcast output shape (the walk reduces them). `a`, `b`, `out` are what
/// the node saved, lifted.
pub(crate) fn binary_graph(
    op: BinaryOp,
    a: Option<&Tensor>,
    b: Option<&Tensor>,
    out: Option<&Tensor>,
    gy: &Tensor,
    needs: [bool; 2],
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    let get = |t: Option<&Tensor>, input: usize| {
        t.cloned().ok_or(crate::Error::MissingGradient {
            op: op.name(),
            input,
        })
    };
    let when = |need: bool, f: &dyn Fn() -> Result<Tensor>| need.then(f).transpose();
    match op {
        BinaryOp::Add => Ok((
            when(needs[0], &|| Ok(gy.clone()))?,
            when(needs[1], &|| Ok(gy.clone()))?,
        )),
        BinaryOp::Sub => Ok((
            when(needs[0], &|| Ok(gy.clone()))?,
            when(needs[1], &|| gy.neg())?,
        )),
        BinaryOp::Mul => Ok((
            when(needs[0], &|| gy.mul(&get(b, 1)?))?,
            when(needs[1], &|| gy.mul(&get(a, 0)?))?,
        )),
        // a/b: (gy/b, −gy·a/b²).
        BinaryOp::Div => Ok((
            when(needs[0], &|| gy.div(&get(b, 1)?))?,
            when(needs[1], &|| {
                let b = get(b, 1)?;
                gy.mul(&get(a, 0)?)?.div(&b.square()?)?.neg()
            })?,
        )),
        // a^b: (gy·b·a^(b−1), gy·out·ln a).
        BinaryOp::Pow => Ok((
            when(needs[0], &|| {
                let (a, b) = (get(a, 0)?, get(b, 1)?);
                gy.mul(&b)?.mul(&a.pow(&b.sub_scalar(1.0)?)?)
            })?,
            when(needs[1], &|| gy.mul(&get(out, 2)?)?.mul(&get(a, 0)?.log()?))?,
        )),
        // Piecewise selections: the kernel's partials with gy = 1, as constants.
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let (a, b) = (get(a, 0)?, get(b, 1)?);
            let ctx = gy.ctx();
            let ones = ctx.ones(gy.dtype(), gy.shape())?;
            let (ar, br) = (a.raw()?, b.raw()?);
            let (ma, mb) = ctx.binary_backward(&ar, &br, &ones, &ones, op, needs)?;
            let lift = |m: Option<RawTensor>| -> Result<Option<Tensor>> {
                m.map(|m| gy.mul(&Tensor::new_internal(ctx, m, false, None)))
                    .transpose()
            };
            Ok((lift(ma)?, lift(mb)?))
        }
    }
}
