//! The pointwise tier: each op is one struct carrying its forward `f` and
//! its derivative together ([`Pointwise`] for unary ops, [`PointwiseBinary`]
//! for binary ones). A new pointwise op is written here once, plus one arm in
//! the enum dispatch of `elementwise`. Every derivative carries its math.

use super::Saved;
use crate::dtype::Float;

/// One unary pointwise op: its forward and its derivative, written together.
pub trait Pointwise<T: Float>: Copy + Send + Sync {
    /// Which value `df` reads.
    const SAVED: Saved;
    /// The forward value f(x).
    fn f(self, x: T) -> T;
    /// f'(x), expressed through the saved value `s` (x or y = f(x) per `SAVED`).
    fn df(self, s: T) -> T;
}

#[inline(always)]
pub(super) fn c<T: Float>(v: f64) -> T {
    T::from_f64(v)
}

#[inline(always)]
fn sigmoid<T: Float>(x: T) -> T {
    // Stable both ways: e = e^{-|x|} never overflows.
    let e = (-x.abs()).exp();
    if x >= T::ZERO {
        T::ONE / (T::ONE + e)
    } else {
        e / (T::ONE + e)
    }
}

macro_rules! unit_ops {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name;
    )*};
}
unit_ops!(
    /// -x
    Neg,
    /// |x|
    Abs,
    /// √x
    Sqrt,
    /// 1/√x
    Rsqrt,
    /// eˣ
    Exp,
    /// ln x
    Log,
    /// ln(1+x)
    Log1p,
    /// sin x
    Sin,
    /// cos x
    Cos,
    /// tanh x
    Tanh,
    /// sigmoid
    Sigmoid,
    /// relu
    Relu,
    /// tanh-approximated GELU
    GeluTanh,
    /// exact (erf) GELU
    GeluErf,
    /// x·sigmoid(x)
    Silu,
    /// softplus (β=1, threshold 20)
    Softplus,
    /// x²
    Square,
    /// 1/x
    Recip,
    /// sign
    Sign,
);

/// x > 0 ? x : slope·x
#[derive(Clone, Copy, Debug)]
pub struct LeakyRelu<T>(pub T);
/// x > 0 ? x : α(eˣ−1)
#[derive(Clone, Copy, Debug)]
pub struct Elu<T>(pub T);
/// x + s
#[derive(Clone, Copy, Debug)]
pub struct AddScalar<T>(pub T);
/// x · s
#[derive(Clone, Copy, Debug)]
pub struct MulScalar<T>(pub T);
/// xᵖ
#[derive(Clone, Copy, Debug)]
pub struct PowScalar<T>(pub T);
/// s − x
#[derive(Clone, Copy, Debug)]
pub struct RSubScalar<T>(pub T);
/// s / x
#[derive(Clone, Copy, Debug)]
pub struct RDivScalar<T>(pub T);
/// clamp to [lo, hi]
#[derive(Clone, Copy, Debug)]
pub struct Clamp<T>(pub T, pub T);

impl<T: Float> Pointwise<T> for Neg {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        -x
    }
    // d/dx (-x) = -1
    #[inline(always)]
    fn df(self, _: T) -> T {
        -T::ONE
    }
}
impl<T: Float> Pointwise<T> for Abs {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x.abs()
    }
    // d/dx |x| = sign(x); sign(0) = 0, as PyTorch.
    #[inline(always)]
    fn df(self, x: T) -> T {
        if x > T::ZERO {
            T::ONE
        } else if x < T::ZERO {
            -T::ONE
        } else {
            T::ZERO
        }
    }
}
impl<T: Float> Pointwise<T> for Sqrt {
    const SAVED: Saved = Saved::Output;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x.sqrt()
    }
    // d/dx √x = 0.5/√x = 0.5/y
    #[inline(always)]
    fn df(self, y: T) -> T {
        c::<T>(0.5) / y
    }
}
impl<T: Float> Pointwise<T> for Rsqrt {
    const SAVED: Saved = Saved::Output;
    #[inline(always)]
    fn f(self, x: T) -> T {
        T::ONE / x.sqrt()
    }
    // d/dx x^{-1/2} = -0.5·x^{-3/2} = -0.5·y³
    #[inline(always)]
    fn df(self, y: T) -> T {
        c::<T>(-0.5) * y * y * y
    }
}
impl<T: Float> Pointwise<T> for Exp {
    const SAVED: Saved = Saved::Output;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x.exp()
    }
    // d/dx eˣ = eˣ = y
    #[inline(always)]
    fn df(self, y: T) -> T {
        y
    }
}
impl<T: Float> Pointwise<T> for Log {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x.ln()
    }
    // d/dx ln x = 1/x
    #[inline(always)]
    fn df(self, x: T) -> T {
        T::ONE / x
    }
}
impl<T: Float> Pointwise<T> for Log1p {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x.ln_1p()
    }
    // d/dx ln(1+x) = 1/(1+x)
    #[inline(always)]
    fn df(self, x: T) -> T {
        T::ONE / (T::ONE + x)
    }
}
impl<T: Float> Pointwise<T> for Sin {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x.sin()
    }
    // d/dx sin x = cos x
    #[inline(always)]
    fn df(self, x: T) -> T {
        x.cos()
    }
}
impl<T: Float> Pointwise<T> for Cos {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x.cos()
    }
    // d/dx cos x = -sin x
    #[inline(always)]
    fn df(self, x: T) -> T {
        -x.sin()
    }
}
impl<T: Float> Pointwise<T> for Tanh {
    const SAVED: Saved = Saved::Output;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x.tanh()
    }
    // d/dx tanh x = 1 - tanh²x = 1 - y²
    #[inline(always)]
    fn df(self, y: T) -> T {
        T::ONE - y * y
    }
}
impl<T: Float> Pointwise<T> for Sigmoid {
    const SAVED: Saved = Saved::Output;
    #[inline(always)]
    fn f(self, x: T) -> T {
        sigmoid(x)
    }
    // d/dx σ(x) = σ(x)(1-σ(x)) = y(1-y)
    #[inline(always)]
    fn df(self, y: T) -> T {
        y * (T::ONE - y)
    }
}
impl<T: Float> Pointwise<T> for Relu {
    const SAVED: Saved = Saved::Output;
    #[inline(always)]
    fn f(self, x: T) -> T {
        // NaN propagates (NaN < 0 is false).
        if x < T::ZERO {
            T::ZERO
        } else {
            x
        }
    }
    // d/dx relu(x) = x > 0 ? 1 : 0 (relu'(0) = 0, as PyTorch); y > 0 iff x > 0.
    #[inline(always)]
    fn df(self, y: T) -> T {
        if y > T::ZERO {
            T::ONE
        } else {
            T::ZERO
        }
    }
}
impl<T: Float> Pointwise<T> for LeakyRelu<T> {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        if x > T::ZERO {
            x
        } else {
            x * self.0
        }
    }
    // d/dx = x > 0 ? 1 : slope (so the gradient at 0 is `slope`, as PyTorch).
    #[inline(always)]
    fn df(self, x: T) -> T {
        if x > T::ZERO {
            T::ONE
        } else {
            self.0
        }
    }
}
impl<T: Float> Pointwise<T> for Elu<T> {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        if x > T::ZERO {
            x
        } else {
            self.0 * (x.exp() - T::ONE)
        }
    }
    // d/dx = x > 0 ? 1 : α·eˣ (at 0 the left branch: α).
    #[inline(always)]
    fn df(self, x: T) -> T {
        if x > T::ZERO {
            T::ONE
        } else {
            self.0 * x.exp()
        }
    }
}

pub(super) const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
pub(super) const GELU_C: f64 = 0.044_715;
pub(super) const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

impl<T: Float> Pointwise<T> for GeluTanh {
    const SAVED: Saved = Saved::Input;
    // 0.5x(1+tanh u) with u = k(x + 0.044715x³), k = √(2/π). Since
    // 1 + tanh u = 2σ(2u), this is x·σ(2u): one exp instead of tanh, and no
    // cancellation in 1 + tanh u for negative x.
    #[inline(always)]
    fn f(self, x: T) -> T {
        let u = c::<T>(SQRT_2_OVER_PI) * (x + c::<T>(GELU_C) * x * x * x);
        x * sigmoid(u + u)
    }
    // With t = tanh u and s = σ(2u) (so 1+t = 2s, 1-t² = 4s(1-s)):
    // d/dx = 0.5(1+t) + 0.5x(1-t²)·k(1 + 3·0.044715x²) = s + 2x·s(1-s)·k(1 + 3·0.044715x²)
    #[inline(always)]
    fn df(self, x: T) -> T {
        let k = c::<T>(SQRT_2_OVER_PI);
        let x2 = x * x;
        let u = k * (x + c::<T>(GELU_C) * x2 * x);
        let s = sigmoid(u + u);
        let du = k * (T::ONE + c::<T>(3.0 * GELU_C) * x2);
        s + (x + x) * s * (T::ONE - s) * du
    }
}
impl<T: Float> Pointwise<T> for GeluErf {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        c::<T>(0.5) * x * (T::ONE + (x * c::<T>(std::f64::consts::FRAC_1_SQRT_2)).erf())
    }
    // d/dx xΦ(x) = Φ(x) + x·φ(x), Φ = 0.5(1+erf(x/√2)), φ = e^{-x²/2}/√(2π)
    #[inline(always)]
    fn df(self, x: T) -> T {
        let cdf = c::<T>(0.5) * (T::ONE + (x * c::<T>(std::f64::consts::FRAC_1_SQRT_2)).erf());
        let pdf = c::<T>(FRAC_1_SQRT_2PI) * (c::<T>(-0.5) * x * x).exp();
        cdf + x * pdf
    }
}
impl<T: Float> Pointwise<T> for Silu {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x * sigmoid(x)
    }
    // d/dx xσ(x) = σ(x)(1 + x(1-σ(x)))
    #[inline(always)]
    fn df(self, x: T) -> T {
        let s = sigmoid(x);
        s * (T::ONE + x * (T::ONE - s))
    }
}
impl<T: Float> Pointwise<T> for Softplus {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        if x > c::<T>(20.0) {
            x
        } else {
            x.exp().ln_1p()
        }
    }
    // d/dx = x > 20 ? 1 : σ(x)   (d/dx ln(1+eˣ) = eˣ/(1+eˣ))
    #[inline(always)]
    fn df(self, x: T) -> T {
        if x > c::<T>(20.0) {
            T::ONE
        } else {
            sigmoid(x)
        }
    }
}
impl<T: Float> Pointwise<T> for Square {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x * x
    }
    // d/dx x² = 2x
    #[inline(always)]
    fn df(self, x: T) -> T {
        x + x
    }
}
impl<T: Float> Pointwise<T> for Recip {
    const SAVED: Saved = Saved::Output;
    #[inline(always)]
    fn f(self, x: T) -> T {
        T::ONE / x
    }
    // d/dx 1/x = -1/x² = -y²
    #[inline(always)]
    fn df(self, y: T) -> T {
        -(y * y)
    }
}
impl<T: Float> Pointwise<T> for Sign {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        // ±0 and NaN map to themselves.
        if x > T::ZERO {
            T::ONE
        } else if x < T::ZERO {
            -T::ONE
        } else {
            x
        }
    }
    // sign is piecewise constant: zero gradient everywhere (as PyTorch).
    #[inline(always)]
    fn df(self, _: T) -> T {
        T::ZERO
    }
}
impl<T: Float> Pointwise<T> for AddScalar<T> {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x + self.0
    }
    // d/dx (x + s) = 1
    #[inline(always)]
    fn df(self, _: T) -> T {
        T::ONE
    }
}
impl<T: Float> Pointwise<T> for MulScalar<T> {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x * self.0
    }
    // d/dx (s·x) = s
    #[inline(always)]
    fn df(self, _: T) -> T {
        self.0
    }
}
impl<T: Float> Pointwise<T> for PowScalar<T> {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        x.powf(self.0)
    }
    // d/dx xᵖ = p·x^(p-1); exactly 0 when p == 0 (as PyTorch).
    #[inline(always)]
    fn df(self, x: T) -> T {
        if self.0 == T::ZERO {
            T::ZERO
        } else {
            self.0 * x.powf(self.0 - T::ONE)
        }
    }
}
impl<T: Float> Pointwise<T> for RSubScalar<T> {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        self.0 - x
    }
    // d/dx (s - x) = -1
    #[inline(always)]
    fn df(self, _: T) -> T {
        -T::ONE
    }
}
impl<T: Float> Pointwise<T> for RDivScalar<T> {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        self.0 / x
    }
    // d/dx (s/x) = -s/x²
    #[inline(always)]
    fn df(self, x: T) -> T {
        -self.0 / (x * x)
    }
}
impl<T: Float> Pointwise<T> for Clamp<T> {
    const SAVED: Saved = Saved::Input;
    #[inline(always)]
    fn f(self, x: T) -> T {
        // NaN passes through (both comparisons are false).
        if x < self.0 {
            self.0
        } else if x > self.1 {
            self.1
        } else {
            x
        }
    }
    // d/dx = lo <= x <= hi ? 1 : 0 (inclusive bounds, as PyTorch).
    #[inline(always)]
    fn df(self, x: T) -> T {
        if x >= self.0 && x <= self.1 {
            T::ONE
        } else {
            T::ZERO
        }
    }
}

/// One binary pointwise op: forward and both partial derivatives together.
pub trait PointwiseBinary<T: Float>: Copy + Send + Sync {
    /// out = f(a, b).
    fn f(self, a: T, b: T) -> T;
    /// ∂f/∂a at (a, b), given out = f(a, b).
    fn da(self, a: T, b: T, out: T) -> T;
    /// ∂f/∂b at (a, b), given out = f(a, b).
    fn db(self, a: T, b: T, out: T) -> T;
}

/// a + b
#[derive(Clone, Copy, Debug)]
pub struct Add;
/// a − b
#[derive(Clone, Copy, Debug)]
pub struct Sub;
/// a · b
#[derive(Clone, Copy, Debug)]
pub struct Mul;
/// a / b
#[derive(Clone, Copy, Debug)]
pub struct Div;
/// aᵇ
#[derive(Clone, Copy, Debug)]
pub struct Pow;
/// max(a, b)
#[derive(Clone, Copy, Debug)]
pub struct Maximum;
/// min(a, b)
#[derive(Clone, Copy, Debug)]
pub struct Minimum;

impl<T: Float> PointwiseBinary<T> for Add {
    #[inline(always)]
    fn f(self, a: T, b: T) -> T {
        a + b
    }
    // ∂/∂a = 1, ∂/∂b = 1
    #[inline(always)]
    fn da(self, _: T, _: T, _: T) -> T {
        T::ONE
    }
    #[inline(always)]
    fn db(self, _: T, _: T, _: T) -> T {
        T::ONE
    }
}
impl<T: Float> PointwiseBinary<T> for Sub {
    #[inline(always)]
    fn f(self, a: T, b: T) -> T {
        a - b
    }
    // ∂/∂a = 1, ∂/∂b = -1
    #[inline(always)]
    fn da(self, _: T, _: T, _: T) -> T {
        T::ONE
    }
    #[inline(always)]
    fn db(self, _: T, _: T, _: T) -> T {
        -T::ONE
    }
}
impl<T: Float> PointwiseBinary<T> for Mul {
    #[inline(always)]
    fn f(self, a: T, b: T) -> T {
        a * b
    }
    // ∂/∂a = b, ∂/∂b = a
    #[inline(always)]
    fn da(self, _: T, b: T, _: T) -> T {
        b
    }
    #[inline(always)]
    fn db(self, a: T, _: T, _: T) -> T {
        a
    }
}
impl<T: Float> PointwiseBinary<T> for Div {
    #[inline(always)]
    fn f(self, a: T, b: T) -> T {
        a / b
    }
    // ∂/∂a = 1/b, ∂/∂b = -a/b²
    #[inline(always)]
    fn da(self, _: T, b: T, _: T) -> T {
        T::ONE / b
    }
    #[inline(always)]
    fn db(self, a: T, b: T, _: T) -> T {
        -a / (b * b)
    }
}
impl<T: Float> PointwiseBinary<T> for Pow {
    #[inline(always)]
    fn f(self, a: T, b: T) -> T {
        a.powf(b)
    }
    // ∂/∂a = b·a^(b-1) (0 where b == 0, as PyTorch)
    #[inline(always)]
    fn da(self, a: T, b: T, _: T) -> T {
        if b == T::ZERO {
            T::ZERO
        } else {
            b * a.powf(b - T::ONE)
        }
    }
    // ∂/∂b = aᵇ·ln a = out·ln a (0 where a == 0 and b >= 0, as PyTorch)
    #[inline(always)]
    fn db(self, a: T, b: T, out: T) -> T {
        if a == T::ZERO && b >= T::ZERO {
            T::ZERO
        } else {
            out * a.ln()
        }
    }
}
impl<T: Float> PointwiseBinary<T> for Maximum {
    #[inline(always)]
    fn f(self, a: T, b: T) -> T {
        // Ties give a; NaN in either gives NaN (a + b).
        if a >= b {
            a
        } else if a < b {
            b
        } else {
            a + b
        }
    }
    // ∂/∂a = a > b ? 1 : (a == b ? 0.5 : 0); the tie is split evenly.
    #[inline(always)]
    fn da(self, a: T, b: T, _: T) -> T {
        if a > b {
            T::ONE
        } else if a == b {
            c::<T>(0.5)
        } else {
            T::ZERO
        }
    }
    // ∂/∂b = b > a ? 1 : (a == b ? 0.5 : 0)
    #[inline(always)]
    fn db(self, a: T, b: T, _: T) -> T {
        if b > a {
            T::ONE
        } else if a == b {
            c::<T>(0.5)
        } else {
            T::ZERO
        }
    }
}
impl<T: Float> PointwiseBinary<T> for Minimum {
    #[inline(always)]
    fn f(self, a: T, b: T) -> T {
        if a <= b {
            a
        } else if a > b {
            b
        } else {
            a + b
        }
    }
    // ∂/∂a = a < b ? 1 : (a == b ? 0.5 : 0)
    #[inline(always)]
    fn da(self, a: T, b: T, _: T) -> T {
        if a < b {
            T::ONE
        } else if a == b {
            c::<T>(0.5)
        } else {
            T::ZERO
        }
    }
    // ∂/∂b = b < a ? 1 : (a == b ? 0.5 : 0)
    #[inline(always)]
    fn db(self, a: T, b: T, _: T) -> T {
        if b < a {
            T::ONE
        } else if a == b {
            c::<T>(0.5)
        } else {
            T::ZERO
        }
    }
}
