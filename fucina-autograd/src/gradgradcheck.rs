//! gradgradcheck: second derivatives against finite differences of the first.
//!
//! PyTorch's semantics: the function checked is the vector-Jacobian product
//! `(inputs, v) ↦ vᵀ·∂f/∂inputs`, built with `create_graph`, and [`gradcheck`]
//! compares its analytical gradient (a backward through the recorded
//! gradient: second derivatives of f with respect to the inputs, and the
//! first derivatives with respect to v) with central differences of it, in
//! both the inputs and the output gradient `v`. `v` is a fixed random tensor
//! (from the options' seed) that requires a gradient. The forward runs under
//! [`crate::higher_order`], and every option of [`GradcheckOpts`] applies.

use fucina_core::rng::SplitMix64;

use crate::error::Result;
use crate::grad_mode::{enable_grad, higher_order};
use crate::gradcheck::{gradcheck, GradcheckOpts, GradcheckReport};
use crate::tape::higher::{grad_with, GradOpts};
use crate::tape::tensor::Tensor;

/// Checks the second derivatives of `f` at `inputs` (those requiring a
/// gradient): [`gradcheck`] of the function `(inputs, v) ↦ vᵀJ`, whose last
/// input is the output gradient `v`. The report's input indices count `v` as
/// the last input.
///
/// ```
/// use fucina_autograd::{gradgradcheck, GradcheckOpts, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let x = Tensor::variable(&ctx, &[0.3f64, -0.7, 1.1], &[3]).unwrap();
/// let report = gradgradcheck(|xs| xs[0].tanh()?.mul(&xs[0]), &[x], &GradcheckOpts::f64()).unwrap();
/// assert_eq!(report.checked, 6); // 3 elements of x and 3 of v
/// ```
pub fn gradgradcheck<F>(f: F, inputs: &[Tensor], opts: &GradcheckOpts) -> Result<GradcheckReport>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    let _h = higher_order();
    let out = {
        let _g = enable_grad();
        f(inputs)?
    };
    // The output gradient: values in ±[0.5, 1.5), fixed by the seed.
    let mut rng = SplitMix64::new(opts.seed ^ 0x6767);
    let vals: Vec<f64> = (0..out.numel())
        .map(|_| {
            let m = 0.5 + rng.next_f64();
            if rng.next_u64() & 1 == 0 {
                m
            } else {
                -m
            }
        })
        .collect();
    let ctx = out.ctx();
    let v = ctx.to_dtype(&ctx.from_slice(&vals, out.shape())?, out.dtype())?;
    let v = Tensor::from_raw(ctx, v, true)?;
    drop(out);
    let mut all: Vec<Tensor> = inputs.to_vec();
    all.push(v);
    let vjp = |xs: &[Tensor]| -> Result<Tensor> {
        let _g = enable_grad();
        let _h = higher_order();
        let (ins, v) = xs.split_at(xs.len() - 1);
        let out = f(ins)?;
        let wanted: Vec<&Tensor> = ins.iter().filter(|t| t.requires_grad()).collect();
        let grads = if out.requires_grad() {
            let opts = GradOpts {
                grad_output: Some(v[0].clone()),
                create_graph: true,
            };
            grad_with(&out, &wanted, &opts)?
        } else {
            vec![None; wanted.len()]
        };
        let flat: Vec<Tensor> = grads
            .into_iter()
            .zip(&wanted)
            .map(|(g, x)| match g {
                Some(g) => g.reshape([-1]),
                None => x.zeros_like()?.reshape([-1]),
            })
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = flat.iter().collect();
        Tensor::concat(&refs, 0)
    };
    gradcheck(vjp, &all, opts)
}

/// The rows of the op suite (`crate::suite::cases`) without second-order
/// support, each with the reason; a backward with `create_graph` through them
/// is [`crate::Error::NoDoubleBackward`]. The gradgradcheck suite test fails
/// if a row is missing here and fails, or is listed here and passes.
pub const NO_SECOND_ORDER: &[(&str, &str)] = &[
    ("scaled_dot_product_attention", STREAMING),
    ("sdpa_causal", STREAMING),
    ("sdpa_padding_mask", STREAMING),
    ("sdpa_gqa", STREAMING),
    ("sdpa_mqa", STREAMING),
    ("sdpa_gqa_decode", STREAMING),
];

/// Why the fused attention has no second order.
const STREAMING: &str = "the streaming attention recomputes its probabilities tile by tile in a \
    raw kernel and keeps no [T, S] block; compose softmax(q·kᵀ·s + mask)·v from matmul and \
    softmax to differentiate attention twice";
