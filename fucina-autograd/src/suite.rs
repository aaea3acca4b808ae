//! The built-in gradcheck suite: one row per differentiable op.
//!
//! Each [`OpCase`] names an op, describes its inputs (shape and domain, or an
//! integer index / mask constant) and maps them to one output. The table
//! drives the gradcheck test, the PyTorch golden parity test (the case names
//! match `tools/gen_op_goldens.py`) and the `gradcheck_all` example. Domains
//! keep inputs away from kinks; the kink conventions are tested separately.
//! The fused ops' rows live in their own files (`ops/fused/<op>.rs`, with
//! their torch lambdas) and come in through `ops::fused`'s registration list.

use fucina_core::kernels::elementwise::Domain;
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext};

use crate::error::Result;
use crate::tape::tensor::Tensor;

pub(crate) mod case;

use case::{f, fr, idx, mask, nz};
pub use case::{CaseFn, InputKind, InputSpec, OpCase};

/// An input of an op-table row: `shape`, drawn from the domain `d`.
fn from_domain(d: Domain, shape: &[usize]) -> InputSpec {
    match d {
        Domain::Float => f(shape),
        Domain::NonZero => nz(shape),
        Domain::Range(lo, hi) => fr(shape, lo, hi),
    }
}

macro_rules! case {
    ($name:expr, [$($i:expr),*], $f:expr) => {
        OpCase { name: $name, inputs: vec![$($i),*], f: $f, torch: None }
    };
}

/// Every differentiable op, with inputs that exercise broadcasting and
/// non-contiguous views.
pub fn cases() -> Vec<OpCase> {
    // ---- binary tier: one row per op of the table, then the aliases
    let mut cases = binary_cases();
    cases.push(case!("mul_noncontig", [f(&[4, 3]), f(&[3, 4])], |x| x[0]
        .t()?
        .mul(&x[1])));
    // ---- unary tier: one row per op of the table, then the aliases
    cases.extend(unary_cases());
    cases.extend(vec![
        case!("exp_noncontig", [f(&[4, 3])], |x| x[0].t()?.exp()),
        case!("sub_scalar", [f(&[3, 4])], |x| x[0].sub_scalar(0.5)),
        case!("div_scalar", [f(&[3, 4])], |x| x[0].div_scalar(4.0)),
        case!("where_cond", [mask(&[3, 4]), f(&[3, 4]), f(&[4])], |x| x[1]
            .where_cond(&x[0], &x[2])),
        case!("masked_fill", [f(&[3, 4]), mask(&[4])], |x| x[0]
            .masked_fill(&x[1], 2.0)),
        case!("dropout", [f(&[4, 8])], |x| x[0].dropout(0.3, 17)),
        // ---- reductions
        case!("sum", [f(&[3, 4, 2])], |x| x[0].sum(&[1], true)),
        case!("sum_all", [f(&[3, 4])], |x| x[0].sum_all()),
        case!("mean", [f(&[3, 4, 2])], |x| x[0].mean(&[0, 2], false)),
        case!("sum_to_shape", [f(&[2, 3, 4])], |x| x[0]
            .sum_to_shape(&[3, 1])?
            .sin()),
        case!("mean_all", [f(&[3, 4])], |x| x[0].mean_all()),
        case!("max", [f(&[3, 5])], |x| x[0].max(1, false)),
        case!("min", [f(&[3, 5])], |x| x[0].min(0, true)),
        case!("max_all", [f(&[3, 5])], |x| x[0].max_all()),
        case!("min_all", [f(&[3, 5])], |x| x[0].min_all()),
        case!("var", [f(&[3, 5])], |x| x[0].var(&[1], 1, false)),
        case!("logsumexp", [f(&[3, 5])], |x| x[0].logsumexp(1, false)),
        case!("norm", [f(&[3, 5])], |x| x[0].norm(&[1], true)),
        case!("cumsum", [f(&[3, 5])], |x| x[0].cumsum(1)),
        // ---- contractions
        case!("matmul", [f(&[3, 4]), f(&[4, 5])], |x| x[0].matmul(&x[1])),
        case!("matmul_batched", [f(&[2, 3, 4]), f(&[4, 5])], |x| x[0]
            .matmul(&x[1])),
        case!("matmul_transposed", [f(&[4, 3]), f(&[5, 4])], |x| x[0]
            .t()?
            .matmul(&x[1].t()?)),
        case!("linear", [f(&[2, 3, 4]), f(&[5, 4]), f(&[5])], |x| x[0]
            .linear(&x[1], Some(&x[2]))),
        case!("linear_nobias", [f(&[3, 4]), f(&[5, 4])], |x| x[0]
            .linear(&x[1], None)),
        // ---- shape
        case!("reshape", [f(&[3, 4])], |x| x[0]
            .t()?
            .reshape([2, -1])?
            .exp()),
        case!("view", [f(&[3, 4])], |x| x[0].view([4, 3])?.tanh()),
        case!("flatten", [f(&[2, 3, 2])], |x| x[0].flatten(1, 2)?.exp()),
        case!("transpose", [f(&[2, 3, 4])], |x| x[0]
            .transpose(0, 2)?
            .mul(&x[0].transpose(0, 2)?.exp()?)),
        case!("t", [f(&[3, 4])], |x| x[0].t()?.tanh()),
        case!("permute", [f(&[2, 3, 4])], |x| x[0]
            .permute(&[2, 0, 1])?
            .sin()),
        case!("squeeze", [f(&[3, 1, 4])], |x| x[0].squeeze(1)?.exp()),
        case!("unsqueeze", [f(&[3, 4])], |x| x[0].unsqueeze(1)?.exp()),
        case!("broadcast_to", [f(&[3, 1])], |x| x[0]
            .broadcast_to(&[2, 3, 4])?
            .sin()),
        case!("narrow", [f(&[4, 5])], |x| x[0].narrow(1, 1, 3)?.exp()),
        case!("select", [f(&[4, 5])], |x| x[0].select(0, 2)?.exp()),
        case!("contiguous", [f(&[4, 5])], |x| x[0]
            .t()?
            .contiguous()?
            .tanh()),
        case!("concat", [f(&[2, 3]), f(&[2, 2])], |x| Tensor::concat(
            &[&x[0], &x[1].exp()?],
            1
        )),
        case!("stack", [f(&[2, 3]), f(&[2, 3])], |x| Tensor::stack(
            &[&x[0], &x[1].exp()?],
            0
        )),
        case!("split", [f(&[2, 5])], |x| {
            let p = x[0].split(1, &[2, 3])?;
            Tensor::concat(&[&p[1].exp()?, &p[0]], 1)
        }),
        case!("chunk", [f(&[2, 5])], |x| {
            let p = x[0].chunk(2, 1)?;
            Tensor::concat(&[&p[1].tanh()?, &p[0].exp()?], 1)
        }),
        case!("pad", [f(&[2, 3])], |x| x[0]
            .pad(&[(1, 0), (0, 2)], 0.5)?
            .exp()),
        // ---- indexing
        case!("embedding", [f(&[6, 4]), idx(&[2, 5], 6)], |x| x[0]
            .embedding(&x[1])),
        case!("index_select", [f(&[5, 3]), idx(&[7], 5)], |x| x[0]
            .index_select(0, &x[1])),
        case!("gather", [f(&[3, 5]), idx(&[3, 4], 5)], |x| x[0]
            .gather(1, &x[1])),
        case!("take_along_axis", [f(&[4, 3]), idx(&[2, 3], 4)], |x| x[0]
            .take_along_axis(0, &x[1])),
        case!(
            "scatter_add",
            [f(&[3, 5]), idx(&[3, 4], 5), f(&[3, 4])],
            |x| x[0].scatter_add(1, &x[1], &x[2])
        ),
    ]);
    // ---- fused ops (softmax, norms, losses, attention): their rows live in
    // their files, `ops/fused/<op>.rs`, registered once in `ops/fused/mod.rs`
    cases.extend(crate::ops::fused::cases());
    cases
}

/// Generates `unary_cases`: one row per op of the unary table
/// (`fucina-core/src/kernels/elementwise/unary_ops.rs`), named after its
/// method, a `[3, 4]` input from its domain, called with its example parameters.
macro_rules! unary_rows {
    ($( {
        $docs:tt $V:ident [$( ( $($p:ident : $pt:ty = $a:expr),+ ) )?] $name:literal $method:ident
        $saved:ident [$dom:expr] $f:tt $df:tt $rf:tt $rdf:tt $torch:literal $($hooks:tt)*
    } )*) => {
        fn unary_cases() -> Vec<OpCase> {
            vec![$(
                OpCase {
                    name: stringify!($method),
                    inputs: vec![from_domain($dom, &[3, 4])],
                    f: |x| x[0].$method($($($a),+)?),
                    torch: Some($torch),
                },
            )*]
        }
    };
}
fucina_core::for_each_unary_op!(unary_rows);

/// Generates `binary_cases`: one row per op of the binary table
/// (`fucina-core/src/kernels/elementwise/binary_ops.rs`), named after its
/// method, with the domains and (broadcasting) shapes its entry gives a and b.
macro_rules! binary_rows {
    ($( {
        $docs:tt $V:ident $name:literal $method:ident $saves:ident $f:tt $da:tt $db:tt $rf:tt
        $rda:tt $rdb:tt [$adom:expr] [$($ash:expr),*] [$bdom:expr] [$($bsh:expr),*] $torch:literal
    } )*) => {
        fn binary_cases() -> Vec<OpCase> {
            vec![$(
                OpCase {
                    name: stringify!($method),
                    inputs: vec![from_domain($adom, &[$($ash),*]), from_domain($bdom, &[$($bsh),*])],
                    f: |x| x[0].$method(&x[1]),
                    torch: Some($torch),
                },
            )*]
        }
    };
}
fucina_core::for_each_binary_op!(binary_rows);

/// Ops that exist on `Tensor` but are not differentiable (or are aliases
/// covered by another row); the coverage test accepts these without a row.
/// (`embedding_to` is `embedding` into the table's own dtype, and a constant
/// for a frozen bf16/f16 table widened to f32/f64.)
pub const NOT_DIFFERENTIABLE: &[&str] = &[
    "compare",
    "argmax",
    "one_hot",
    "unary",
    "binary",
    "embedding_to",
];

/// Makes the inputs of `case` in `dtype`, deterministically from `seed`.
pub fn make_inputs(
    ctx: &ExecContext,
    case: &OpCase,
    dtype: DType,
    seed: u64,
) -> Result<Vec<Tensor>> {
    let mut g = SplitMix64::new(seed);
    case.inputs
        .iter()
        .map(|spec| {
            let n: usize = spec.shape.iter().product();
            Ok(match spec.kind {
                InputKind::Float(lo, hi) => {
                    let v = g.vec_uniform(n, lo, hi);
                    Tensor::from_raw(
                        ctx,
                        ctx.to_dtype(&ctx.from_slice(&v, &spec.shape)?, dtype)?,
                        true,
                    )?
                }
                InputKind::NonZero(lo, hi) => {
                    let v: Vec<f64> = (0..n)
                        .map(|_| {
                            let m = lo + (hi - lo) * g.next_f64();
                            if g.next_u64() & 1 == 0 {
                                m
                            } else {
                                -m
                            }
                        })
                        .collect();
                    Tensor::from_raw(
                        ctx,
                        ctx.to_dtype(&ctx.from_slice(&v, &spec.shape)?, dtype)?,
                        true,
                    )?
                }
                InputKind::Index(k) => {
                    let v: Vec<i64> = (0..n).map(|_| g.below(k as u64) as i64).collect();
                    Tensor::leaf(ctx, ctx.from_slice(&v, &spec.shape)?)
                }
                InputKind::Mask => {
                    let v: Vec<u8> = (0..n).map(|_| (g.next_u64() & 1) as u8).collect();
                    Tensor::leaf(ctx, ctx.from_slice(&v, &spec.shape)?)
                }
            })
        })
        .collect()
}
