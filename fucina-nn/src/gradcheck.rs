//! Whole-module gradient checks: every trainable parameter and every input
//! that requires a gradient, against central differences, in one call.
//!
//! Reuses `fucina_autograd::gradcheck` (projection on a fixed random vector,
//! two forwards per element, PyTorch's `allclose` rule): the module's
//! parameters are passed as extra inputs — they are the same shared handles
//! the module holds, so perturbing them perturbs the module. Failures and
//! the report name the parameter by its dotted path (inputs as `input.N`).
//! Build the module in f64 for the default f64 tolerances, and put modules
//! with dropout in eval mode (each forward draws a new mask).

use fucina_autograd::{gradcheck, GradcheckOpts, Tensor};

use crate::error::{Error, Result};
use crate::module::{Forward, Module};

/// What a passing [`gradcheck_module`] measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModuleGradcheckReport {
    /// Elements checked (inputs and parameters).
    pub checked: usize,
    /// Parameters (and inputs) checked, by name.
    pub tensors: Vec<String>,
    /// Worst |analytical − numerical|.
    pub max_abs_err: f64,
    /// Worst relative error.
    pub max_rel_err: f64,
    /// The tensor holding the worst absolute error.
    pub worst: String,
    /// Its row-major element index.
    pub worst_index: usize,
    /// The same element as a multi-index (`None` in fast mode).
    pub worst_element: Option<Vec<usize>>,
}

fn to_autograd(e: Error) -> fucina_autograd::Error {
    match e {
        Error::Autograd(e) => e,
        Error::Core(e) => e.into(),
        other => fucina_autograd::Error::Core(fucina_core::Error::InvalidArgument {
            op: "gradcheck_module",
            msg: other.to_string(),
        }),
    }
}

/// Checks a one-input module's gradients with respect to `input` (when it
/// requires a gradient) and every trainable parameter.
///
/// ```
/// use fucina_nn::{gradcheck_module, Init, Linear};
/// use fucina_autograd::{GradcheckOpts, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let lin = Linear::new(&mut Init::new(&ctx, fucina_core::DType::F64, 0), 3, 2, true).unwrap();
/// let x = Tensor::variable(&ctx, &[0.1f64, -0.4, 0.9, 0.3, 0.2, -0.8], &[2, 3]).unwrap();
/// let r = gradcheck_module(&lin, &x, &GradcheckOpts::f64()).unwrap();
/// assert_eq!(r.checked, 6 + 6 + 2);
/// assert_eq!(r.tensors, ["input.0", "weight", "bias"]);
/// ```
pub fn gradcheck_module<M: Module + Forward>(
    module: &M,
    input: &Tensor,
    opts: &GradcheckOpts,
) -> Result<ModuleGradcheckReport> {
    gradcheck_module_with(
        module,
        std::slice::from_ref(input),
        |m, xs| m.forward(&xs[0]),
        opts,
    )
}

/// Checks `forward(module, inputs)` (any arity, any output shape) with
/// respect to every input that requires a gradient and every trainable
/// parameter. Inputs that need none (token ids, masks) are held fixed.
pub fn gradcheck_module_with<M, F>(
    module: &M,
    inputs: &[Tensor],
    forward: F,
    opts: &GradcheckOpts,
) -> Result<ModuleGradcheckReport>
where
    M: Module + ?Sized,
    F: Fn(&M, &[Tensor]) -> Result<Tensor>,
{
    let n_in = inputs.len();
    let mut names: Vec<String> = (0..n_in).map(|i| format!("input.{i}")).collect();
    let mut all: Vec<Tensor> = inputs.to_vec();
    for (name, p) in module.named_parameters() {
        if p.requires_grad() {
            names.push(name);
            all.push(p);
        }
    }
    let f = |xs: &[Tensor]| forward(module, &xs[..n_in]).map_err(to_autograd);
    // `fucina_nn::linear::Linear` -> `Linear` (generic arguments dropped).
    let module_name = std::any::type_name::<M>()
        .split('<')
        .next()
        .unwrap_or_default()
        .rsplit("::")
        .next()
        .unwrap_or_default()
        .to_string();
    let report = gradcheck(f, &all, opts).map_err(|e| match e {
        fucina_autograd::Error::GradcheckFailed {
            input,
            index,
            analytical,
            numerical,
            abs_err,
            rel_err,
            failure,
        } => Error::GradcheckFailed {
            name: names.get(input).cloned().unwrap_or_default(),
            index,
            analytical,
            numerical,
            abs_err,
            rel_err,
            failure: Box::new(failure.in_op(module_name).with_input_names(names.clone())),
        },
        other => Error::from(other),
    })?;
    let tensors = names
        .iter()
        .zip(&all)
        .filter(|(_, t)| t.requires_grad())
        .map(|(n, _)| n.clone())
        .collect();
    Ok(ModuleGradcheckReport {
        checked: report.checked,
        tensors,
        max_abs_err: report.max_abs_err,
        max_rel_err: report.max_rel_err,
        worst: names.get(report.worst_input).cloned().unwrap_or_default(),
        worst_index: report.worst_index,
        worst_element: report.worst_element,
    })
}
