//! The pointwise tier: each op is one struct carrying its forward `f` and
//! its derivative together ([`Pointwise`] for unary ops, [`PointwiseBinary`]
//! for binary ones). The unary structs are generated from the op table
//! (`unary_ops.rs`, where their bodies and math live); the binary ones are
//! written here. Every derivative carries its math.

use super::unary_ops::{c, KernelParam, GELU_C, SQRT_2_OVER_PI};
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
pub(super) fn sigmoid<T: Float>(x: T) -> T {
    // Stable both ways: e = e^{-|x|} never overflows.
    let e = (-x.abs()).exp();
    if x >= T::ZERO {
        T::ONE / (T::ONE + e)
    } else {
        e / (T::ONE + e)
    }
}

/// Generates one kernel struct and its [`Pointwise`] impl per op of the table.
macro_rules! unary_kernels {
    ($(
        $(#[doc = $doc:literal])*
        $V:ident $( ( $($p:ident : $pt:ty = $a:expr),+ ) )? {
            name: $name:literal, method: $method:ident, saved: $saved:ident,
            domain: $dom:ident $( ( $($dv:expr),+ ) )?,
            f: |$x:ident| $f:expr,
            df: |$s:pat_param| $df:expr,
            ref_f: |$rx:ident| $rf:expr,
            ref_df: |$rdx:pat_param| $rdf:expr,
            torch: $torch:literal $(,)?
        }
    )*) => {$(
        unary_kernels!(@one [$(#[doc = $doc])*] $V [$($($p: $pt),+)?] $saved |$x| $f, |$s| $df);
    )*};
    (@one [$(#[$m:meta])*] $V:ident [] $saved:ident |$x:ident| $f:expr, |$s:pat_param| $df:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug)]
        pub struct $V;
        impl<T: Float> Pointwise<T> for $V {
            const SAVED: Saved = Saved::$saved;
            #[inline(always)]
            fn f(self, $x: T) -> T {
                $f
            }
            #[inline(always)]
            fn df(self, $s: T) -> T {
                $df
            }
        }
    };
    (@one [$(#[$m:meta])*] $V:ident [$($p:ident: $pt:ty),+] $saved:ident |$x:ident| $f:expr, |$s:pat_param| $df:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug)]
        pub struct $V<T>($(pub <$pt as KernelParam<T>>::Field),+);
        impl<T: Float> Pointwise<T> for $V<T> {
            const SAVED: Saved = Saved::$saved;
            #[inline(always)]
            #[allow(unused_variables)]
            fn f(self, $x: T) -> T {
                let $V($($p),+) = self;
                $f
            }
            #[inline(always)]
            #[allow(unused_variables)]
            fn df(self, $s: T) -> T {
                let $V($($p),+) = self;
                $df
            }
        }
    };
}
crate::for_each_unary_op!(unary_kernels);

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
