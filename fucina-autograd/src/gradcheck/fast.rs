//! Fast mode: one random projection per input (PyTorch's `fast_mode`).
//!
//! For input i with stored elements x_k, a direction u (entries ±[0.5, 1.5),
//! scaled to unit L2 norm, so no element's weight is near zero and one wrong
//! element always moves the projection) is drawn from the seed and the
//! input's position. The central difference moves every element at once:
//! x ± εu, two forwards, numerical n = ⟨v, f(x+εu) − f(x−εu)⟩ / 2ε. The
//! analytical side is ⟨Jᵀv, d⟩ / 2ε with d the move as actually stored
//! (x⁺ − x⁻: an f32 input rounds εu_k, and the difference then follows the
//! rounded step, not the intended one), from the single backward the full
//! check also uses. Cost: one backward plus two forwards per input, against
//! two forwards per element.
//!
//! Tolerance: the same |a − n| ≤ atol + rtol·|n| rule on the projected pair.
//! PyTorch scales atol by Σu·Σv (the bound an element-wise atol would give),
//! which grows with the input's size and, on a 10⁴-element input, hides a
//! 0.5 % error; with a unit u and v of entries ~1 the projected value has the
//! magnitude of one element of Jᵀv, and a directional difference's truncation
//! and rounding errors are those of one element's difference, so atol is used
//! as is.

use fucina_core::rng;

use super::perturb::Slots;
use super::{elementwise, failure, projected, signed_unit, Func, GradcheckOpts, GradcheckReport};
use crate::error::Result;
use crate::gradcheck_report::ProjectedMismatch;
use crate::tape::tensor::Tensor;

/// The unit direction over `n` stored elements of input `input`.
fn direction(seed: u64, input: usize, n: usize) -> Vec<f64> {
    let s = rng::at(seed ^ 0xFA57, input as u64);
    let mut u: Vec<f64> = (0..n as u64).map(|k| signed_unit(s, k)).collect();
    let norm = u.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm > 0.0 {
        u.iter_mut().for_each(|x| *x /= norm);
    }
    u
}

pub(super) fn run(
    f: Func,
    inputs: &[Tensor],
    opts: &GradcheckOpts,
    ana: &[Vec<f64>],
    w: &[f64],
) -> Result<GradcheckReport> {
    let mut report = GradcheckReport {
        opts: *opts,
        ..GradcheckReport::default()
    };
    let mut worst = -1.0;
    for (i, x) in inputs.iter().enumerate() {
        if !x.requires_grad() {
            continue;
        }
        let slots = Slots::of(x)?;
        if slots.len() == 0 {
            continue;
        }
        let g = slots.gather(&ana[i]);
        let step: Vec<f64> = direction(opts.seed, i, slots.len())
            .into_iter()
            .map(|u| u * opts.eps)
            .collect();
        let back: Vec<f64> = step.iter().map(|d| -d).collect();
        let run = || -> Result<(f64, f64)> {
            let up = slots.set_all(x, &step)?;
            let fp = projected(f, inputs, w)?;
            let down = slots.set_all(x, &back)?;
            let fm = projected(f, inputs, w)?;
            let a: f64 = g
                .iter()
                .zip(up.iter().zip(&down))
                .map(|(g, (u, d))| g * (u - d))
                .sum::<f64>()
                / (2.0 * opts.eps);
            Ok((a, (fp - fm) / (2.0 * opts.eps)))
        };
        let r = run();
        slots.restore(x)?;
        let (a, n) = r?;
        let abs_err = (a - n).abs();
        let tol = opts.atol + opts.rtol * n.abs();
        let denom = a.abs().max(n.abs());
        report.checked += x.numel();
        report.max_rel_err =
            report
                .max_rel_err
                .max(if denom == 0.0 { 0.0 } else { abs_err / denom });
        if abs_err > worst {
            worst = abs_err;
            report.max_abs_err = abs_err;
            report.worst_input = i;
        }
        if abs_err.is_nan() || abs_err > tol {
            // Re-check this input element by element, so the error lists
            // the elements (PyTorch re-runs the slow mode the same way).
            let found = elementwise(f, inputs, opts, ana, w, Some(i))?;
            let p = ProjectedMismatch {
                analytical: a,
                numerical: n,
                abs_err,
                tol,
            };
            return Err(failure(inputs, opts, found, Some((i, p))));
        }
    }
    Ok(report)
}
