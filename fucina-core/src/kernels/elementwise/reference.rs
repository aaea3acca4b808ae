//! The plain scalar spec of every op in `elementwise`: one element at a
//! time, with per-element dispatch and `offset_of` indexing. Slow on purpose;
//! the tests compare the kernels against it.

use super::binary_ops::{ref_pick, tie_split};
use super::unary_ops::{c, sign, GELU_C, SQRT_2_OVER_PI};
use super::{BinaryOp, CmpOp, UnaryOp};
use crate::dtype::{Element, Float};
use crate::error::Result;
use crate::shape;
use crate::tensor::RawTensor;

fn sigmoid_ref<T: Float>(x: T) -> T {
    if x >= T::ZERO {
        T::ONE / (T::ONE + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::ONE + e)
    }
}

/// One scalar reference over the op table: `$name(op, x)` matches `op` and evaluates that
/// op's expression with `x` bound by the op's own pattern. [`unary_scalar`] and
/// [`unary_df`] are two such matches, over the table's `ref_f` and `ref_df`.
macro_rules! reference_match {
    ($(#[$doc:meta])* $name:ident: $( $V:ident [$($params:tt)*] |$x:pat_param| $e:expr ),*) => {
        $(#[$doc])*
        #[allow(unused_variables)]
        pub fn $name<T: Float>(op: UnaryOp, x: T) -> T {
            match op {
                $( UnaryOp::$V $($params)* => {
                    let $x = x;
                    $e
                } )*
            }
        }
    };
}

/// Generates [`unary_scalar`] and [`unary_df`] from the op table's `ref_f`
/// and `ref_df` (parameters bound as f64).
macro_rules! unary_reference {
    ($( {
        $docs:tt $V:ident [$( ( $($p:ident : $pt:ty = $a:expr),+ ) )?] $name:literal $method:ident
        $saved:ident $dom:tt $f:tt $df:tt [|$rx:ident| $rf:expr] [|$rdx:pat_param| $rdf:expr] $($rest:tt)*
    } )*) => {
        reference_match! {
            /// f(x) for one element, computed in `T`.
            unary_scalar: $( $V [$( ( $($p),+ ) )?] |$rx| $rf ),*
        }

        reference_match! {
            /// f'(x) for one element, written in terms of the INPUT x (independent of
            /// the kernels' saved-output forms). Kinks follow PyTorch: relu'(0) = 0,
            /// leaky_relu'(0) = slope, abs'(0) = 0, clamp passes on [lo, hi] inclusive.
            unary_df: $( $V [$( ( $($p),+ ) )?] |$rdx| $rdf ),*
        }
    };
}
crate::for_each_unary_op!(unary_reference);

trait CoshRef {
    fn cosh_ref(self) -> Self;
}
impl<T: Float> CoshRef for T {
    fn cosh_ref(self) -> T {
        let e = self.abs().exp();
        T::from_f64(0.5) * (e + T::ONE / e)
    }
}

/// Generates [`binary_scalar`] and [`binary_partials`] from the binary op
/// table's `ref_f`, `ref_da` and `ref_db`.
macro_rules! binary_reference {
    ($( {
        $docs:tt $V:ident $name:literal $method:ident $saves:ident $f:tt $da:tt $db:tt
        [|$rfa:ident, $rfb:ident| $rf:expr] [|$rdaa:pat_param, $rdab:pat_param| $rda:expr]
        [|$rdba:pat_param, $rdbb:pat_param| $rdb:expr] $($rest:tt)*
    } )*) => {
        /// op(a, b) for one element.
        pub fn binary_scalar<T: Float>(op: BinaryOp, a: T, b: T) -> T {
            match op {
                $( BinaryOp::$V => {
                    let ($rfa, $rfb) = (a, b);
                    $rf
                } )*
            }
        }

        /// (∂/∂a, ∂/∂b) of op at (a, b), written in terms of a and b only.
        /// Maximum/Minimum split ties 0.5/0.5; Pow: ∂/∂a = 0 where b == 0,
        /// ∂/∂b = 0 where a == 0 and b >= 0.
        pub fn binary_partials<T: Float>(op: BinaryOp, a: T, b: T) -> (T, T) {
            match op {
                $( BinaryOp::$V => (
                    {
                        let ($rdaa, $rdab) = (a, b);
                        $rda
                    },
                    {
                        let ($rdba, $rdbb) = (a, b);
                        $rdb
                    },
                ), )*
            }
        }
    };
}
crate::for_each_binary_op!(binary_reference);

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
