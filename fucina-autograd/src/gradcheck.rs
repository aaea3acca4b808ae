//! gradcheck: central finite differences against the analytical backward.
//!
//! The output is projected on a fixed random vector `v` (deterministic from
//! the seed), so one backward gives `Jᵀv`. The full check then needs two
//! forward evaluations per input element: numerical = (⟨v, f(x+ε)⟩ −
//! ⟨v, f(x−ε)⟩) / 2ε. An element passes iff |analytical − numerical| ≤
//! atol + rtol·|numerical| (PyTorch's `allclose`). Defaults are PyTorch's f64
//! contract; an f32 profile is provided, and f32 inputs with a step below
//! f32's resolution (the f64 profile) are an error that names the profile to
//! use. Leaf gradients are never touched (functional [`crate::grad`]) and
//! every evaluation runs in its own exec scope.
//!
//! **Fast mode** ([`GradcheckOpts::fast`], PyTorch's `fast_mode=True`)
//! compares, per input, one number instead of one per element: a random unit
//! direction `u` over the input's elements gives analytical ⟨Jᵀv, u⟩ (from
//! the same single backward) and numerical ⟨v, f(x+εu) − f(x−εu)⟩ / 2ε (two
//! forwards), held to the same `atol + rtol·|n|` rule (see `fast.rs` for why
//! atol is not rescaled). When an input fails, it is re-checked element-wise
//! so the error still lists the failing elements.
//!
//! Inputs are perturbed in place of their stored values, keeping their layout
//! (a transposed, narrowed or broadcast input stays so; see `perturb.rs`).
//! A failure is [`Error::GradcheckFailed`] holding a [`GradcheckFailure`]:
//! the worst input and element (multi-index), every failing element up to
//! [`GradcheckOpts::max_reported`], the tolerance, the input's layout, and
//! the op / sample / input names callers attach.

use fucina_core::rng;
use fucina_core::{DType, RawTensor};

use crate::error::{Error, Result};
use crate::grad_mode::no_grad;
use crate::tape::engine;
use crate::tape::scope::ExecScope;
use crate::tape::tensor::Tensor;

mod fast;
mod perturb;

pub(crate) use crate::gradcheck_report::fmt_index;
pub use crate::gradcheck_report::{
    describe_layout, unravel, ElementMismatch, GradcheckFailure, GradcheckOpts, GradcheckReport,
    ProjectedMismatch,
};
use perturb::{raw_to_f64, Slots};

fn projection(out: &Tensor, seed: u64) -> Result<RawTensor> {
    // Values in ±[0.5, 1.5): never near zero, so no element of Jᵀv is hidden.
    // Non-finite outputs (a masked −∞) have no derivative and get weight 0.
    let y = out.to_vec_f64()?;
    let w: Vec<f64> = (0..out.numel() as u64)
        .map(|i| {
            if !y[i as usize].is_finite() {
                return 0.0;
            }
            signed_unit(seed, i)
        })
        .collect();
    let ctx = out.ctx();
    let r = ctx.from_slice(&w, out.shape())?;
    Ok(ctx.to_dtype(&r, out.dtype())?)
}

/// A deterministic value in ±[0.5, 1.5).
pub(crate) fn signed_unit(seed: u64, i: u64) -> f64 {
    let u = rng::uniform(seed, i);
    let s = if rng::at(seed ^ 0xA5A5, i) & 1 == 0 {
        1.0
    } else {
        -1.0
    };
    s * (0.5 + u)
}

type Func<'a> = &'a dyn Fn(&[Tensor]) -> Result<Tensor>;

fn projected(f: Func, inputs: &[Tensor], w: &[f64]) -> Result<f64> {
    let _ng = no_grad();
    let _scope = ExecScope::open();
    let y = f(inputs)?.to_vec_f64()?;
    Ok(y.iter()
        .zip(w)
        .map(|(a, b)| if *b == 0.0 { 0.0 } else { a * b })
        .sum())
}

/// Refuses a check with nothing to check, or an f32 input with the f64 step.
fn check_inputs(inputs: &[Tensor], opts: &GradcheckOpts) -> Result<()> {
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
    Ok(())
}

/// One backward: Jᵀv per input (per logical element, f64; zeros where the
/// input got no gradient) and the projection v.
fn analytical(f: Func, inputs: &[Tensor], seed: u64) -> Result<(Vec<Vec<f64>>, Vec<f64>)> {
    let _scope = ExecScope::open();
    let out = f(inputs)?;
    let w = projection(&out, seed)?;
    let wanted: Vec<&Tensor> = inputs.iter().collect();
    let grads = if out.requires_grad() {
        engine::grad(&out, &wanted, Some(&w))?
    } else {
        vec![None; inputs.len()]
    };
    let w64 = raw_to_f64(&w)?;
    let ana = inputs
        .iter()
        .zip(grads)
        .map(|(x, g)| match g {
            Some(g) => Tensor::leaf(x.ctx(), g).to_vec_f64(),
            None => Ok(vec![0.0; x.numel()]),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((ana, w64))
}

/// Checks the analytical gradients of `f` at `inputs` (those that require a
/// gradient) against central differences; in fast mode
/// ([`GradcheckOpts::fast`]) against one directional difference per input.
///
/// ```
/// use fucina_autograd::{gradcheck, GradcheckOpts, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let x = Tensor::variable(&ctx, &[0.3f64, -0.7, 1.1], &[3]).unwrap();
/// let report = gradcheck(|xs| xs[0].tanh()?.mul(&xs[0]), &[x.clone()], &GradcheckOpts::f64()).unwrap();
/// assert_eq!(report.checked, 3);
/// assert!(report.worst_element.is_some());
/// let fast = gradcheck(|xs| xs[0].tanh()?.mul(&xs[0]), &[x], &GradcheckOpts::f64().fast()).unwrap();
/// assert_eq!(fast.checked, 3);
/// ```
///
/// A wrong gradient is an [`Error::GradcheckFailed`] naming the input and
/// the element as a multi-index:
///
/// ```
/// use fucina_autograd::{gradcheck, Error, GradcheckOpts, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let x = Tensor::variable(&ctx, &[0.3f64, -0.7, 1.1, 0.2], &[2, 2]).unwrap();
/// // detach() hides one path: d/dx (x·x) is 2x, the backward sees x.
/// let err = gradcheck(|xs| xs[0].detach()?.mul(&xs[0]), &[x], &GradcheckOpts::f64()).unwrap_err();
/// let Error::GradcheckFailed { failure, .. } = &err else { panic!() };
/// assert_eq!(failure.failing, 4);
/// assert!(err.to_string().contains("element [1, 0]"), "{err}");
/// ```
pub fn gradcheck<F>(f: F, inputs: &[Tensor], opts: &GradcheckOpts) -> Result<GradcheckReport>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    check_inputs(inputs, opts)?;
    let (ana, w) = analytical(&f, inputs, opts.seed)?;
    if opts.fast_mode {
        return fast::run(&f, inputs, opts, &ana, &w);
    }
    let found = elementwise(&f, inputs, opts, &ana, &w, None)?;
    if found.failing > 0 {
        return Err(failure(inputs, opts, found, None));
    }
    Ok(found.report)
}

/// What an element-wise pass found.
pub(crate) struct Found {
    pub report: GradcheckReport,
    /// Failing elements, worst first, capped.
    pub mismatches: Vec<ElementMismatch>,
    pub failing: usize,
}

/// The element-wise check over every input (or only input `only`).
pub(crate) fn elementwise(
    f: Func,
    inputs: &[Tensor],
    opts: &GradcheckOpts,
    ana: &[Vec<f64>],
    w: &[f64],
    only: Option<usize>,
) -> Result<Found> {
    let mut report = GradcheckReport {
        opts: *opts,
        ..GradcheckReport::default()
    };
    let mut mismatches = Vec::new();
    let mut failing = 0;
    let mut worst = -1.0;
    for (i, x) in inputs.iter().enumerate() {
        if !x.requires_grad() || only.is_some_and(|o| o != i) {
            continue;
        }
        let slots = Slots::of(x)?;
        let g = slots.gather(&ana[i]);
        let mut run = || -> Result<()> {
            for k in 0..slots.len() {
                slots.set_one(x, k, opts.eps)?;
                let fp = projected(f, inputs, w)?;
                slots.set_one(x, k, -opts.eps)?;
                let fm = projected(f, inputs, w)?;
                let num = (fp - fm) / (2.0 * opts.eps);
                let a = g[k];
                let abs_err = (a - num).abs();
                let denom = num.abs().max(a.abs());
                let rel_err = if denom == 0.0 { 0.0 } else { abs_err / denom };
                let tol = opts.atol + opts.rtol * num.abs();
                report.checked += 1;
                if abs_err > worst {
                    worst = abs_err;
                    report.max_abs_err = abs_err;
                    report.worst_input = i;
                    report.worst_index = slots.first[k];
                    report.worst_element = Some(unravel(slots.first[k], x.shape()));
                }
                report.max_rel_err = report.max_rel_err.max(rel_err);
                if abs_err.is_nan() || abs_err > tol {
                    failing += 1;
                    mismatches.push(ElementMismatch {
                        input: i,
                        index: unravel(slots.first[k], x.shape()),
                        flat: slots.first[k],
                        analytical: a,
                        numerical: num,
                        abs_err,
                        rel_err,
                        tol,
                        aliases: slots.aliases[k],
                    });
                }
            }
            Ok(())
        };
        let r = run();
        slots.restore(x)?;
        r?;
    }
    // Worst first (NaN counts as the worst), then capped.
    let key = |m: &ElementMismatch| {
        if m.abs_err.is_nan() {
            f64::INFINITY
        } else {
            m.abs_err
        }
    };
    mismatches.sort_by(|a, b| key(b).total_cmp(&key(a)));
    mismatches.truncate(opts.max_reported);
    Ok(Found {
        report,
        mismatches,
        failing,
    })
}

/// The error for what was found (`projected`: a fast-mode input that failed).
pub(crate) fn failure(
    inputs: &[Tensor],
    opts: &GradcheckOpts,
    found: Found,
    projected: Option<(usize, ProjectedMismatch)>,
) -> Error {
    let input = match (&projected, found.mismatches.first()) {
        (Some((i, _)), _) => *i,
        (None, Some(m)) => m.input,
        (None, None) => 0,
    };
    let x = &inputs[input];
    let (strides, offset) = match x.raw() {
        Ok(r) => (r.strides().to_vec(), r.offset()),
        Err(_) => (
            fucina_core::shape::contiguous_strides(x.shape()).to_vec(),
            0,
        ),
    };
    let fail = GradcheckFailure {
        op: None,
        sample: None,
        input_names: Vec::new(),
        input,
        shape: x.shape().to_vec(),
        strides,
        offset,
        dtype: x.dtype(),
        projected: projected.map(|(_, p)| p),
        mismatches: found.mismatches,
        failing: found.failing,
        checked: found.report.checked,
        opts: *opts,
    };
    let (index, analytical, numerical, abs_err, rel_err) = match (fail.worst(), &fail.projected) {
        (Some(m), _) => (m.flat, m.analytical, m.numerical, m.abs_err, m.rel_err),
        (None, Some(p)) => {
            let d = p.analytical.abs().max(p.numerical.abs());
            let rel = if d == 0.0 { 0.0 } else { p.abs_err / d };
            (0, p.analytical, p.numerical, p.abs_err, rel)
        }
        (None, None) => (0, 0.0, 0.0, 0.0, 0.0),
    };
    Error::GradcheckFailed {
        input,
        index,
        analytical,
        numerical,
        abs_err,
        rel_err,
        failure: Box::new(fail),
    }
}

impl Error {
    /// Attaches the op (case, module) name to a gradcheck failure; other
    /// errors pass through unchanged.
    pub fn in_gradcheck_op(self, op: &str) -> Error {
        self.map_gradcheck(|f| f.in_op(op))
    }
    /// Attaches a sample label to a gradcheck failure.
    pub fn on_gradcheck_sample(self, sample: &str) -> Error {
        self.map_gradcheck(|f| f.on_sample(sample))
    }
    /// Applies `g` to the failure of a gradcheck error.
    pub fn map_gradcheck(mut self, g: impl FnOnce(GradcheckFailure) -> GradcheckFailure) -> Error {
        if let Error::GradcheckFailed { failure, .. } = &mut self {
            // An error path: the clone keeps the other fields where they are.
            **failure = g(GradcheckFailure::clone(failure));
        }
        self
    }
}
