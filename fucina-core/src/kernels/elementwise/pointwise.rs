//! The pointwise tier: each op is one struct carrying its forward `f` and
//! its derivative together ([`Pointwise`] for unary ops, [`PointwiseBinary`]
//! for binary ones), generated from the op tables (`unary_ops.rs`,
//! `binary_ops.rs`, where their bodies and math live).

use super::binary_ops::{pick, tie_split};
use super::unary_ops::{c, sigmoid_exp, sigmoid_from_exp, sign, KernelParam};
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
    sigmoid_from_exp(x, sigmoid_exp(x))
}

/// Generates one kernel struct and its [`Pointwise`] impl per op of the table.
macro_rules! unary_kernels {
    ($( {
        $docs:tt $V:ident [$( ( $($p:ident : $pt:ty = $a:expr),+ ) )?] $name:literal $method:ident
        $saved:ident $dom:tt [|$x:ident| $f:expr] [|$s:pat_param| $df:expr] $($rest:tt)*
    } )*) => {$(
        unary_kernels!(@one $docs $V [$($($p: $pt),+)?] $saved |$x| $f, |$s| $df);
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
    /// The form of ∂f/∂a (backward takes the cheap path it names).
    const DA: Partial;
    /// The form of ∂f/∂b.
    const DB: Partial;
    /// out = f(a, b).
    fn f(self, a: T, b: T) -> T;
    /// ∂f/∂a at (a, b), given out = f(a, b).
    fn da(self, a: T, b: T, out: T) -> T;
    /// ∂f/∂b at (a, b), given out = f(a, b).
    fn db(self, a: T, b: T, out: T) -> T;
}

/// The form of one partial derivative of a binary op, as its table entry
/// writes it; backward evaluates the cheap forms without a fused pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partial {
    /// ∂ = 1: the gradient is gy itself (no kernel runs).
    One,
    /// ∂ = −1: the gradient is −gy.
    MinusOne,
    /// ∂ = a: the gradient is gy · a.
    A,
    /// ∂ = b: the gradient is gy · b.
    B,
    /// Any other expression of (a, b, out): one pass over a, b, out and gy.
    Expr,
}

/// The body of one partial of the binary table, for its form.
macro_rules! partial_body {
    (One ($a:ident, $b:ident, $o:ident)) => {
        T::ONE
    };
    (MinusOne ($a:ident, $b:ident, $o:ident)) => {
        -T::ONE
    };
    (A ($a:ident, $b:ident, $o:ident)) => {
        $a
    };
    (B ($a:ident, $b:ident, $o:ident)) => {
        $b
    };
    (Expr ($a:ident, $b:ident, $o:ident) (|$pa:pat_param, $pb:pat_param, $po:pat_param| $e:expr)) => {{
        let ($pa, $pb, $po) = ($a, $b, $o);
        $e
    }};
}

/// Generates one kernel struct and its [`PointwiseBinary`] impl per op of the
/// binary table.
macro_rules! binary_kernels {
    ($( {
        [$(#[doc = $doc:literal])*] $V:ident $name:literal $method:ident $saves:ident
        [|$fa:ident, $fb:ident| $f:expr] [$DA:ident $($da:tt)?] [$DB:ident $($db:tt)?] $($rest:tt)*
    } )*) => {$(
        $(#[doc = $doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $V;
        impl<T: Float> PointwiseBinary<T> for $V {
            const DA: Partial = Partial::$DA;
            const DB: Partial = Partial::$DB;
            #[inline(always)]
            fn f(self, $fa: T, $fb: T) -> T {
                $f
            }
            #[inline(always)]
            #[allow(unused_variables)]
            fn da(self, a: T, b: T, out: T) -> T {
                partial_body!($DA (a, b, out) $($da)?)
            }
            #[inline(always)]
            #[allow(unused_variables)]
            fn db(self, a: T, b: T, out: T) -> T {
                partial_body!($DB (a, b, out) $($db)?)
            }
        }
    )*};
}
crate::for_each_binary_op!(binary_kernels);
