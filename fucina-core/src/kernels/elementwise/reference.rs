//! The plain scalar spec of every op in `elementwise`: one element at a
//! time, with per-element dispatch and `offset_of` indexing. Slow on purpose;
//! the tests compare the kernels against it.

use super::{BinaryOp, CmpOp, UnaryOp};
use crate::dtype::{Element, Float};
use crate::error::Result;
use crate::shape;
use crate::tensor::RawTensor;

fn sigmoid<T: Float>(x: T) -> T {
    if x >= T::ZERO {
        T::ONE / (T::ONE + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::ONE + e)
    }
}

/// f(x) for one element, computed in `T`.
pub fn unary_scalar<T: Float>(op: UnaryOp, x: T) -> T {
    let h = T::from_f64(0.5);
    let k = |v: f64| T::from_f64(v);
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => T::ONE / x.sqrt(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Log1p => x.ln_1p(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Relu => {
            if x < T::ZERO {
                T::ZERO
            } else {
                x
            }
        }
        UnaryOp::LeakyRelu(s) => {
            if x > T::ZERO {
                x
            } else {
                x * k(s)
            }
        }
        UnaryOp::Elu(a) => {
            if x > T::ZERO {
                x
            } else {
                k(a) * (x.exp() - T::ONE)
            }
        }
        UnaryOp::GeluTanh => {
            let inner =
                k(super::pointwise::SQRT_2_OVER_PI) * (x + k(super::pointwise::GELU_C) * x * x * x);
            h * x * (T::ONE + inner.tanh())
        }
        UnaryOp::GeluErf => h * x * (T::ONE + (x * k(std::f64::consts::FRAC_1_SQRT_2)).erf()),
        UnaryOp::Silu => x * sigmoid(x),
        UnaryOp::Softplus => {
            if x > k(20.0) {
                x
            } else {
                x.exp().ln_1p()
            }
        }
        UnaryOp::Square => x * x,
        UnaryOp::Recip => T::ONE / x,
        UnaryOp::Sign => {
            if x > T::ZERO {
                T::ONE
            } else if x < T::ZERO {
                -T::ONE
            } else {
                x
            }
        }
        UnaryOp::AddScalar(s) => x + k(s),
        UnaryOp::MulScalar(s) => x * k(s),
        UnaryOp::PowScalar(p) => {
            if p == 2.0 {
                x * x
            } else {
                x.powf(k(p))
            }
        }
        UnaryOp::RSubScalar(s) => k(s) - x,
        UnaryOp::RDivScalar(s) => k(s) / x,
        UnaryOp::Clamp(lo, hi) => {
            if x.is_nan() {
                x
            } else {
                x.max(k(lo)).min(k(hi))
            }
        }
    }
}

/// f'(x) for one element, written in terms of the INPUT x (independent of
/// the kernels' saved-output forms). Kinks follow PyTorch: relu'(0) = 0,
/// leaky_relu'(0) = slope, abs'(0) = 0, clamp passes on [lo, hi] inclusive.
pub fn unary_df<T: Float>(op: UnaryOp, x: T) -> T {
    let k = |v: f64| T::from_f64(v);
    let one = T::ONE;
    let zero = T::ZERO;
    match op {
        UnaryOp::Neg => -one,
        UnaryOp::Abs => {
            if x == zero {
                zero
            } else if x > zero {
                one
            } else {
                -one
            }
        }
        UnaryOp::Sqrt => k(0.5) / x.sqrt(),
        UnaryOp::Rsqrt => k(-0.5) / (x * x.sqrt()),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => one / x,
        UnaryOp::Log1p => one / (one + x),
        UnaryOp::Sin => x.cos(),
        UnaryOp::Cos => -x.sin(),
        UnaryOp::Tanh => {
            let c = x.cosh_ref();
            one / (c * c)
        }
        UnaryOp::Sigmoid => {
            let s = sigmoid(x);
            s * (one - s)
        }
        UnaryOp::Relu => {
            if x > zero {
                one
            } else {
                zero
            }
        }
        UnaryOp::LeakyRelu(s) => {
            if x > zero {
                one
            } else {
                k(s)
            }
        }
        UnaryOp::Elu(a) => {
            if x > zero {
                one
            } else {
                k(a) * x.exp()
            }
        }
        UnaryOp::GeluTanh => {
            let c = k(super::pointwise::SQRT_2_OVER_PI);
            let u = c * (x + k(super::pointwise::GELU_C) * x * x * x);
            let ch = u.cosh_ref();
            let sech2 = one / (ch * ch);
            k(0.5) * (one + u.tanh())
                + k(0.5) * x * sech2 * c * (one + k(3.0 * super::pointwise::GELU_C) * x * x)
        }
        UnaryOp::GeluErf => {
            let cdf = k(0.5) * (one + (x / k(std::f64::consts::SQRT_2)).erf());
            cdf + x * (-(x * x) / k(2.0)).exp() / k((2.0 * std::f64::consts::PI).sqrt())
        }
        UnaryOp::Silu => {
            let s = sigmoid(x);
            s + x * s * (one - s)
        }
        UnaryOp::Softplus => {
            if x > k(20.0) {
                one
            } else {
                x.exp() / (one + x.exp())
            }
        }
        UnaryOp::Square => k(2.0) * x,
        UnaryOp::Recip => -one / (x * x),
        UnaryOp::Sign => zero,
        UnaryOp::AddScalar(_) => one,
        UnaryOp::MulScalar(s) => k(s),
        UnaryOp::PowScalar(p) => {
            if p == 0.0 {
                zero
            } else {
                k(p) * x.powf(k(p - 1.0))
            }
        }
        UnaryOp::RSubScalar(_) => -one,
        UnaryOp::RDivScalar(s) => -k(s) / (x * x),
        UnaryOp::Clamp(lo, hi) => {
            if x >= k(lo) && x <= k(hi) {
                one
            } else {
                zero
            }
        }
    }
}

trait CoshRef {
    fn cosh_ref(self) -> Self;
}
impl<T: Float> CoshRef for T {
    fn cosh_ref(self) -> T {
        let e = self.abs().exp();
        T::from_f64(0.5) * (e + T::ONE / e)
    }
}

/// op(a, b) for one element.
pub fn binary_scalar<T: Float>(op: BinaryOp, a: T, b: T) -> T {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => a.powf(b),
        BinaryOp::Maximum => {
            if a.is_nan() || b.is_nan() {
                a + b
            } else if b > a {
                b
            } else {
                a
            }
        }
        BinaryOp::Minimum => {
            if a.is_nan() || b.is_nan() {
                a + b
            } else if b < a {
                b
            } else {
                a
            }
        }
    }
}

/// (∂/∂a, ∂/∂b) of op at (a, b). Maximum/Minimum split ties 0.5/0.5;
/// Pow: ∂/∂a = 0 where b == 0, ∂/∂b = 0 where a == 0 and b >= 0.
pub fn binary_partials<T: Float>(op: BinaryOp, a: T, b: T) -> (T, T) {
    let one = T::ONE;
    let zero = T::ZERO;
    let half = T::from_f64(0.5);
    match op {
        BinaryOp::Add => (one, one),
        BinaryOp::Sub => (one, -one),
        BinaryOp::Mul => (b, a),
        BinaryOp::Div => (one / b, -a / (b * b)),
        BinaryOp::Pow => (
            if b == zero { zero } else { b * a.powf(b - one) },
            if a == zero && b >= zero {
                zero
            } else {
                a.powf(b) * a.ln()
            },
        ),
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let a_wins = if op == BinaryOp::Maximum {
                a > b
            } else {
                a < b
            };
            let b_wins = if op == BinaryOp::Maximum {
                b > a
            } else {
                b < a
            };
            if a == b {
                (half, half)
            } else {
                (
                    if a_wins { one } else { zero },
                    if b_wins { one } else { zero },
                )
            }
        }
    }
}

/// Evaluates `f` at every element of the broadcast of `ts`, in row-major
/// order, reading each operand through `offset_of` (any strides).
pub fn broadcast_eval<T: Element, O>(
    ts: &[&RawTensor],
    mut f: impl FnMut(&[T]) -> O,
) -> Result<(Vec<usize>, Vec<O>)> {
    let mut out_shape: Vec<usize> = ts.first().map(|t| t.shape().to_vec()).unwrap_or_default();
    for t in &ts[1..] {
        out_shape = shape::broadcast_shapes("reference", &out_shape, t.shape())?.to_vec();
    }
    let views: Vec<RawTensor> = ts
        .iter()
        .map(|t| t.broadcast_to(&out_shape))
        .collect::<Result<_>>()?;
    let stores: Vec<&[T]> = views
        .iter()
        .map(|v| v.storage::<T>())
        .collect::<Result<_>>()?;
    let n = shape::numel(&out_shape);
    let mut vals = vec![];
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        vals.clear();
        for (v, s) in views.iter().zip(&stores) {
            vals.push(s[v.offset() + shape::offset_of(&out_shape, v.strides(), i)]);
        }
        out.push(f(&vals));
    }
    Ok((out_shape, out))
}

/// The reference of `ctx.unary`.
pub fn unary<T: Float>(x: &RawTensor, op: UnaryOp) -> Result<Vec<T>> {
    Ok(broadcast_eval::<T, T>(&[x], |v| unary_scalar(op, v[0]))?.1)
}

/// The reference of `ctx.binary`: (output shape, values).
pub fn binary<T: Float>(
    a: &RawTensor,
    b: &RawTensor,
    op: BinaryOp,
) -> Result<(Vec<usize>, Vec<T>)> {
    broadcast_eval::<T, T>(&[a, b], |v| binary_scalar(op, v[0], v[1]))
}

/// The reference of `ctx.compare`.
pub fn compare<T: Element + PartialOrd>(
    a: &RawTensor,
    b: &RawTensor,
    op: CmpOp,
) -> Result<Vec<u8>> {
    Ok(broadcast_eval::<T, u8>(&[a, b], |v| op.eval(v[0], v[1]) as u8)?.1)
}
