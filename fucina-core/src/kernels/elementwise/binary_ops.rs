//! THE table of binary pointwise ops (NumPy broadcasting): each op is declared
//! here once — its `BinaryOp` variant, name, `Tensor` method, what its backward
//! node keeps, kernel forward `f` and partials `da` / `db`, scalar reference
//! `ref_f` / `ref_da` / `ref_db`, the gradcheck inputs of its row (domain and
//! shape of a and b) and PyTorch name. [`for_each_binary_op!`](crate::for_each_binary_op)
//! hands the table to a generator macro; the generators produce the `BinaryOp`
//! enum, its dispatch and metadata (`elementwise.rs`), the kernel structs
//! (`pointwise.rs`), the reference (`reference.rs`), the autograd methods and
//! backward node (`fucina-autograd/src/ops/elementwise.rs`) and the gradcheck
//! rows (`fucina-autograd/src/suite.rs`, which the op-table export prints for
//! `tools/gen_op_goldens.py`). Adding an op: one entry here plus its torch
//! lambda in `tools/gen_op_goldens.py` (see CONTRIBUTING.md).
//!
//! A partial is one of the cheap forms `One` (∂ = 1: the gradient is gy
//! itself), `MinusOne` (−gy), `A` / `B` (gy times that operand), or
//! `Expr = |a, b, out| ..` (one fused pass over a, b, out and gy), see
//! [`Partial`](super::Partial). `saves` says what the backward node keeps
//! alive: `Nothing` (constant partials), `Operands` (a, b) or
//! `OperandsAndOutput` (a, b and out = f(a, b)). Kernel bodies expand in
//! `pointwise.rs` (helpers `c`, `pick`, `tie_split`), reference bodies in `reference.rs`; the
//! reference partials are written in terms of a and b only. Every partial
//! carries its math. Maximum and minimum share their forms: `pick`, `tie_split` and
//! the reference `ref_pick`.

use super::unary_ops::c;
use crate::dtype::Float;

/// Calls the generator macro `$cb` with every binary pointwise op of the table.
///
/// The `@parse` arm (at the end) is the one place the entry grammar is written:
/// it parses each entry once and calls `$cb!` with the entries in a normalised
/// form, one brace group each of fixed bracketed fields, so a generator matches
/// that short form (skipping the fields it does not read as `$_:tt`):
///
/// ```text
/// { [docs] Variant "name" method Saves [|a, b| f] [DA (|a, b, out| da)] [DB (|a, b, out| db)]
///   [|a, b| ref_f] [|a, b| ref_da] [|a, b| ref_db] [a's Domain expr] [a's shape]
///   [b's Domain expr] [b's shape] "torch" }
/// ```
#[macro_export]
macro_rules! for_each_binary_op {
    ($cb:ident) => {
        $crate::for_each_binary_op! { @parse $cb;
            /// a + b.
            Add {
                name: "add", method: add, saves: Nothing,
                f: |a, b| a + b,
                // ∂/∂a = 1, ∂/∂b = 1: gy passes through to both.
                da: One,
                db: One,
                ref_f: |a, b| a + b,
                ref_da: |_, _| T::ONE,
                ref_db: |_, _| T::ONE,
                a: Float[3, 4], b: Float[4],
                torch: "torch.add",
            }
            /// a − b.
            Sub {
                name: "sub", method: sub, saves: Nothing,
                f: |a, b| a - b,
                // ∂/∂a = 1, ∂/∂b = −1
                da: One,
                db: MinusOne,
                ref_f: |a, b| a - b,
                ref_da: |_, _| T::ONE,
                ref_db: |_, _| -T::ONE,
                a: Float[3, 4], b: Float[3, 1],
                torch: "torch.sub",
            }
            /// a · b.
            Mul {
                name: "mul", method: mul, saves: Operands,
                f: |a, b| a * b,
                // ∂/∂a = b, ∂/∂b = a
                da: B,
                db: A,
                ref_f: |a, b| a * b,
                ref_da: |_, b| b,
                ref_db: |a, _| a,
                a: Float[2, 3, 4], b: Float[3, 1],
                torch: "torch.mul",
            }
            /// a / b.
            Div {
                name: "div", method: div, saves: Operands,
                f: |a, b| a / b,
                // ∂/∂a = 1/b, ∂/∂b = −a/b²
                da: Expr = |_, b, _| T::ONE / b,
                db: Expr = |a, b, _| -a / (b * b),
                ref_f: |a, b| a / b,
                ref_da: |_, b| T::ONE / b,
                ref_db: |a, b| -a / (b * b),
                a: Float[3, 4], b: Range(0.5, 2.0)[4],
                torch: "torch.div",
            }
            /// aᵇ (tensor exponent).
            Pow {
                name: "pow", method: pow, saves: OperandsAndOutput,
                f: |a, b| a.powf(b),
                // ∂/∂a = b·a^(b−1) (0 where b == 0, as PyTorch)
                da: Expr = |a, b, _| if b == T::ZERO {
                    T::ZERO
                } else {
                    b * a.powf(b - T::ONE)
                },
                // ∂/∂b = aᵇ·ln a = out·ln a (0 where a == 0 and b >= 0, as PyTorch)
                db: Expr = |a, b, out| if a == T::ZERO && b >= T::ZERO {
                    T::ZERO
                } else {
                    out * a.ln()
                },
                ref_f: |a, b| a.powf(b),
                ref_da: |a, b| if b == T::ZERO {
                    T::ZERO
                } else {
                    b * a.powf(b - T::ONE)
                },
                ref_db: |a, b| if a == T::ZERO && b >= T::ZERO {
                    T::ZERO
                } else {
                    a.powf(b) * a.ln()
                },
                a: Range(0.5, 2.0)[3, 4], b: Range(-1.0, 2.0)[3, 4],
                torch: "torch.pow",
            }
            /// max(a, b), NaN-propagating; the gradient is split evenly on ties.
            Maximum {
                name: "maximum", method: maximum, saves: Operands,
                // Ties give a; NaN in either gives NaN (a + b).
                f: |a, b| pick(a, b, a >= b, a < b),
                // ∂/∂a = a > b ? 1 : (a == b ? 0.5 : 0); the tie is split evenly.
                da: Expr = |a, b, _| tie_split::<T>(a > b, a == b),
                // ∂/∂b = b > a ? 1 : (a == b ? 0.5 : 0)
                db: Expr = |a, b, _| tie_split::<T>(b > a, a == b),
                ref_f: |a, b| ref_pick(a, b, b > a),
                ref_da: |a, b| tie_split::<T>(a > b, a == b),
                ref_db: |a, b| tie_split::<T>(b > a, a == b),
                a: Float[3, 4], b: Float[4],
                torch: "torch.maximum",
            }
            /// min(a, b), NaN-propagating; the gradient is split evenly on ties.
            Minimum {
                name: "minimum", method: minimum, saves: Operands,
                // Ties give a; NaN in either gives NaN (a + b).
                f: |a, b| pick(a, b, a <= b, a > b),
                // ∂/∂a = a < b ? 1 : (a == b ? 0.5 : 0)
                da: Expr = |a, b, _| tie_split::<T>(a < b, a == b),
                // ∂/∂b = b < a ? 1 : (a == b ? 0.5 : 0)
                db: Expr = |a, b, _| tie_split::<T>(b < a, a == b),
                ref_f: |a, b| ref_pick(a, b, b < a),
                ref_da: |a, b| tie_split::<T>(a < b, a == b),
                ref_db: |a, b| tie_split::<T>(b < a, a == b),
                a: Float[3, 4], b: Float[3, 1],
                torch: "torch.minimum",
            }
        }
    };
    (@parse $cb:ident; $(
        $(#[doc = $doc:literal])*
        $V:ident {
            name: $name:literal, method: $method:ident, saves: $saves:ident,
            f: |$fa:ident, $fb:ident| $f:expr,
            da: $DA:ident $( = |$daa:pat_param, $dab:pat_param, $dao:pat_param| $da:expr )?,
            db: $DB:ident $( = |$dba:pat_param, $dbb:pat_param, $dbo:pat_param| $db:expr )?,
            ref_f: |$rfa:ident, $rfb:ident| $rf:expr,
            ref_da: |$rdaa:pat_param, $rdab:pat_param| $rda:expr,
            ref_db: |$rdba:pat_param, $rdbb:pat_param| $rdb:expr,
            a: $adom:ident $( ( $($adv:expr),+ ) )? [ $($ash:expr),* ],
            b: $bdom:ident $( ( $($bdv:expr),+ ) )? [ $($bsh:expr),* ],
            torch: $torch:literal $(,)?
        }
    )*) => {
        $cb! { $( {
            [$(#[doc = $doc])*] $V $name $method $saves [|$fa, $fb| $f]
            [$DA $( (|$daa, $dab, $dao| $da) )?] [$DB $( (|$dba, $dbb, $dbo| $db) )?]
            [|$rfa, $rfb| $rf] [|$rdaa, $rdab| $rda] [|$rdba, $rdbb| $rdb]
            [$crate::kernels::elementwise::Domain::$adom $( ( $($adv),+ ) )?] [$($ash),*]
            [$crate::kernels::elementwise::Domain::$bdom $( ( $($bdv),+ ) )?] [$($bsh),*]
            $torch
        } )* }
    };
}

/// Maximum's and minimum's kernel forward: `a` where `a_wins`, `b` where `b_wins`, and
/// `a + b` (NaN) where neither holds (a NaN operand).
#[inline(always)]
pub(super) fn pick<T: Float>(a: T, b: T, a_wins: bool, b_wins: bool) -> T {
    if a_wins {
        a
    } else if b_wins {
        b
    } else {
        a + b
    }
}

/// Maximum's and minimum's partial in one operand (kernel and reference): 1 where it
/// `wins`, ½ on a `tie` (the gradient split evenly), 0 where it loses or a NaN is involved.
#[inline(always)]
pub(super) fn tie_split<T: Float>(wins: bool, tie: bool) -> T {
    if wins {
        T::ONE
    } else if tie {
        c::<T>(0.5)
    } else {
        T::ZERO
    }
}

/// The reference maximum / minimum: NaN in either gives NaN (`a + b`); else `b` where
/// `b_wins`, `a` otherwise (ties give a).
pub(super) fn ref_pick<T: Float>(a: T, b: T, b_wins: bool) -> T {
    if a.is_nan() || b.is_nan() {
        a + b
    } else if b_wins {
        b
    } else {
        a
    }
}
