//! gradcheck: central finite differences against the analytical backward.
//!
//! The output is projected on a fixed random vector `w` (deterministic from
//! the seed), so one backward gives `Jᵀw` and each input element needs two
//! forward evaluations: numerical = (⟨w, f(x+ε)⟩ − ⟨w, f(x−ε)⟩) / 2ε. An
//! element passes iff |analytical − numerical| ≤ atol + rtol·|numerical|
//! (PyTorch's `allclose`). Defaults are PyTorch's f64 contract; an f32
//! profile is provided, and f32 inputs with a step below f32's resolution
//! (the f64 profile) are an error that names the profile to use. Leaf gradients are never touched (functional
//! [`crate::grad`]) and every evaluation runs in its own exec scope.

use fucina_core::rng;
use fucina_core::{DType, RawTensor};

use crate::error::{Error, Result};
use crate::grad_mode::no_grad;
use crate::tape::engine;
use crate::tape::scope::ExecScope;
use crate::tape::tensor::Tensor;

/// Tolerances and step of a gradcheck.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradcheckOpts {
    /// Finite-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
    /// Seed of the projection vector.
    pub seed: u64,
}

impl GradcheckOpts {
    /// PyTorch's f64 contract: eps 1e-6, atol 1e-5, rtol 1e-3.
    pub const fn f64() -> GradcheckOpts {
        GradcheckOpts {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-3,
            seed: 0x5EED,
        }
    }
    /// The f32 profile: eps 1e-3, atol 1e-3, rtol 1e-2.
    pub const fn f32() -> GradcheckOpts {
        GradcheckOpts {
            eps: 1e-3,
            atol: 1e-3,
            rtol: 1e-2,
            seed: 0x5EED,
        }
    }
}

impl Default for GradcheckOpts {
    fn default() -> Self {
        Self::f64()
    }
}

/// What a passing gradcheck measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GradcheckReport {
    /// Input elements checked.
    pub checked: usize,
    /// Worst |analytical − numerical|.
    pub max_abs_err: f64,
    /// Worst relative error (abs err / max(|numerical|, |analytical|)).
    pub max_rel_err: f64,
    /// The input holding the worst absolute error.
    pub worst_input: usize,
    /// The row-major element index of the worst absolute error.
    pub worst_index: usize,
    /// The step and tolerances the check ran with.
    pub opts: GradcheckOpts,
}

/// One paragraph saying what was compared and what each number means.
impl std::fmt::Display for GradcheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.opts;
        write!(
            f,
            "gradcheck passed: {} input elements; for each, the analytical gradient a (one backward \
             of the output projected on a fixed random vector) was compared with the central \
             difference n = (f(x+eps) - f(x-eps)) / 2eps, eps = {:e}. \
             Worst absolute error |a - n| = {:e} (input {}, element {}); \
             worst relative error |a - n| / max(|a|, |n|) = {:e}. \
             An element passes when |a - n| <= atol + rtol*|n| (atol {:e}, rtol {:e}).",
            self.checked,
            o.eps,
            self.max_abs_err,
            self.worst_input,
            self.worst_index,
            self.max_rel_err,
            o.atol,
            o.rtol
        )
    }
}

fn projection(out: &Tensor, seed: u64) -> Result<RawTensor> {
    // Values in ±[0.5, 1.5): never near zero, so no element of Jᵀw is hidden.
    // Non-finite outputs (a masked −∞) have no derivative and get weight 0.
    let y = out.to_vec_f64()?;
    let w: Vec<f64> = (0..out.numel() as u64)
        .map(|i| {
            if !y[i as usize].is_finite() {
                return 0.0;
            }
            let u = rng::uniform(seed, i);
            let s = if rng::at(seed ^ 0xA5A5, i) & 1 == 0 {
                1.0
            } else {
                -1.0
            };
            s * (0.5 + u)
        })
        .collect();
    let ctx = out.ctx();
    let r = ctx.from_slice(&w, out.shape())?;
    Ok(ctx.to_dtype(&r, out.dtype())?)
}

fn projected(f: &dyn Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor], w: &[f64]) -> Result<f64> {
    let _ng = no_grad();
    let _scope = ExecScope::open();
    let y = f(inputs)?.to_vec_f64()?;
    Ok(y.iter()
        .zip(w)
        .map(|(a, b)| if *b == 0.0 { 0.0 } else { a * b })
        .sum())
}

/// Checks the analytical gradients of `f` at `inputs` (those that require a
/// gradient) against central differences.
///
/// ```
/// use fucina_autograd::{gradcheck, GradcheckOpts, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let x = Tensor::variable(&ctx, &[0.3f64, -0.7, 1.1], &[3]).unwrap();
/// let report = gradcheck(|xs| xs[0].tanh()?.mul(&xs[0]), &[x], &GradcheckOpts::f64()).unwrap();
/// assert_eq!(report.checked, 3);
/// ```
pub fn gradcheck<F>(f: F, inputs: &[Tensor], opts: &GradcheckOpts) -> Result<GradcheckReport>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    if !inputs.iter().any(|t| t.requires_grad()) {
        return Err(Error::NoVariableInputs);
    }
    // A step below f32's resolution measures rounding, not the derivative.
    let min_eps = GradcheckOpts::f32().eps / 10.0;
    if let Some(input) = inputs
        .iter()
        .position(|t| t.requires_grad() && t.dtype() == DType::F32)
    {
        if opts.eps < min_eps {
            return Err(Error::GradcheckProfile {
                input,
                dtype: DType::F32,
                eps: opts.eps,
            });
        }
    }
    // Analytical Jᵀw.
    let (analytical, w) = {
        let _scope = ExecScope::open();
        let out = f(inputs)?;
        let w = projection(&out, opts.seed)?;
        let wanted: Vec<&Tensor> = inputs.iter().collect();
        let grads = if out.requires_grad() {
            engine::grad(&out, &wanted, Some(&w))?
        } else {
            vec![None; inputs.len()]
        };
        let w64: Vec<f64> = fucina_core::dispatch_float!(w.dtype(), "gradcheck", T => {
            Ok::<Vec<f64>, fucina_core::Error>(w.to_vec::<T>()?.into_iter().map(fucina_core::Element::to_f64).collect())
        })?;
        (grads, w64)
    };
    let mut report = GradcheckReport {
        opts: *opts,
        ..GradcheckReport::default()
    };
    for (i, x) in inputs.iter().enumerate() {
        if !x.requires_grad() {
            continue;
        }
        let ana: Vec<f64> = match &analytical[i] {
            Some(g) => {
                let t = Tensor::leaf(x.ctx(), g.clone());
                t.to_vec_f64()?
            }
            None => vec![0.0; x.numel()],
        };
        let orig = x.raw()?;
        let base = x.to_vec_f64()?;
        let dtype: DType = x.dtype();
        let set = |vals: &[f64]| -> Result<()> {
            let r = x.ctx().from_slice(vals, x.shape())?;
            x.set_value(x.ctx().to_dtype(&r, dtype)?)
        };
        let mut result = Ok(());
        for j in 0..base.len() {
            let mut v = base.clone();
            v[j] = base[j] + opts.eps;
            set(&v)?;
            let fp = projected(&f, inputs, &w);
            v[j] = base[j] - opts.eps;
            set(&v)?;
            let fm = projected(&f, inputs, &w);
            let (fp, fm) = match (fp, fm) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => {
                    result = Err(e);
                    break;
                }
            };
            let num = (fp - fm) / (2.0 * opts.eps);
            let a = ana[j];
            let abs_err = (a - num).abs();
            let denom = num.abs().max(a.abs());
            let rel_err = if denom == 0.0 { 0.0 } else { abs_err / denom };
            report.checked += 1;
            if abs_err > report.max_abs_err {
                report.max_abs_err = abs_err;
                report.worst_input = i;
                report.worst_index = j;
            }
            report.max_rel_err = report.max_rel_err.max(rel_err);
            if abs_err.is_nan() || abs_err > opts.atol + opts.rtol * num.abs() {
                result = Err(Error::GradcheckFailed {
                    input: i,
                    index: j,
                    analytical: a,
                    numerical: num,
                    abs_err,
                    rel_err,
                });
                break;
            }
        }
        x.set_value(orig)?;
        result?;
    }
    Ok(report)
}
