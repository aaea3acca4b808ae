//! Custom ops: a user implements forward and backward in one trait impl and
//! gets a first-class differentiable op. The backward must return a gradient
//! of exactly the input's shape for every input flagged in `needs`.
//!
//! Two forms. [`CustomFunction`] (PyTorch's `autograd.Function`) writes both
//! with autograd [`Tensor`] ops: its backward is recorded under
//! `create_graph`, so the op has second derivatives for free. [`CustomOp`]
//! writes them with raw core calls for speed; a backward with `create_graph`
//! through it is [`Error::NoDoubleBackward`] naming the op.

use std::sync::Arc;

use fucina_core::{ExecContext, RawTensor};
use smallvec::SmallVec;

use crate::error::{check_grad_fits, Error, Result};
use crate::grad_mode::no_grad;
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;

/// A user-defined differentiable op. `Send + Sync` because its backward node
/// travels with the tensors between threads.
pub trait CustomOp: Send + Sync {
    /// The op's name (used in errors and gradcheck reports).
    fn name(&self) -> &'static str;
    /// Computes the output from the input values.
    fn forward(&self, ctx: &ExecContext, inputs: &[&RawTensor]) -> Result<RawTensor>;
    /// Computes the gradient of every input flagged in `needs` from the
    /// upstream gradient `gy` (the output's shape).
    fn backward(
        &self,
        ctx: &ExecContext,
        inputs: &[&RawTensor],
        output: &RawTensor,
        gy: &RawTensor,
        needs: &[bool],
    ) -> Result<Vec<Option<RawTensor>>>;
}

/// A gradient as a custom backward returns it: a raw value ([`CustomOp`]) or
/// a tensor ([`CustomFunction`]).
trait UserGrad: Clone {
    fn shape(&self) -> &[usize];
    fn dtype(&self) -> fucina_core::DType;
}

impl UserGrad for RawTensor {
    fn shape(&self) -> &[usize] {
        RawTensor::shape(self)
    }
    fn dtype(&self) -> fucina_core::DType {
        RawTensor::dtype(self)
    }
}

impl UserGrad for Tensor {
    fn shape(&self) -> &[usize] {
        Tensor::shape(self)
    }
    fn dtype(&self) -> fucina_core::DType {
        Tensor::dtype(self)
    }
}

/// Checks a custom backward's gradients against its `inputs`: one for each
/// input flagged in `needs`, of its shape and dtype; none for the others.
fn checked<G: UserGrad>(
    op: &'static str,
    inputs: &[RawTensor],
    grads: Vec<Option<G>>,
    needs: &[bool],
) -> Result<SmallVec<[Option<G>; 3]>> {
    let mut out = SmallVec::new();
    for (i, x) in inputs.iter().enumerate() {
        if !needs.get(i).copied().unwrap_or(false) {
            out.push(None);
            continue;
        }
        let g = grads
            .get(i)
            .cloned()
            .flatten()
            .ok_or(Error::MissingGradient { op, input: i })?;
        check_grad_fits(op, i, (x.shape(), x.dtype()), (g.shape(), g.dtype()))?;
        out.push(Some(g));
    }
    Ok(out)
}

/// The context and the values of a custom op's `inputs` (`op` names the
/// entry point in the error for none).
fn input_values(op: &'static str, inputs: &[&Tensor]) -> Result<(ExecContext, Vec<RawTensor>)> {
    let first = inputs.first().ok_or_else(|| {
        Error::Core(fucina_core::Error::InvalidArgument {
            op,
            msg: "no inputs".into(),
        })
    })?;
    let values = inputs.iter().map(|t| t.raw()).collect::<Result<_>>()?;
    Ok((first.ctx().clone(), values))
}

/// The user's op behind a [`CustomBackward`]: either form.
enum UserOp {
    /// A [`CustomOp`]: raw core calls, first order only.
    Raw(Arc<dyn CustomOp>),
    /// A [`CustomFunction`]: tensor ops, differentiable again.
    Function(Arc<dyn CustomFunction>),
}

impl UserOp {
    fn name(&self) -> &'static str {
        match self {
            UserOp::Raw(op) => op.name(),
            UserOp::Function(op) => op.name(),
        }
    }
}

/// The node of either custom form: the op, its input values and its output.
/// Whatever the form, its gradients go through [`checked`].
struct CustomBackward {
    op: UserOp,
    inputs: Vec<RawTensor>,
    output: RawTensor,
}

impl Backward for CustomBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let name = self.op.name();
        match &self.op {
            UserOp::Raw(op) => {
                let ins: Vec<&RawTensor> = self.inputs.iter().collect();
                let grads = op.backward(ctx, &ins, &self.output, gy, needs)?;
                checked(name, &self.inputs, grads, needs)
            }
            UserOp::Function(op) => {
                let _ng = no_grad();
                let constant = |v: &RawTensor| Tensor::from_raw(ctx, v.clone(), false);
                let ins: Vec<Tensor> = self.inputs.iter().map(constant).collect::<Result<_>>()?;
                let grads = op.backward(&ins, &constant(&self.output)?, &constant(gy)?, needs)?;
                checked(name, &self.inputs, grads, needs)?
                    .into_iter()
                    .map(|g| g.map(|g| g.raw()).transpose())
                    .collect()
            }
        }
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let UserOp::Function(op) = &self.op else {
            return Err(Error::NoDoubleBackward { op: self.op.name() });
        };
        let needs = saved.needs_input_grad();
        let ins: Vec<Tensor> = self
            .inputs
            .iter()
            .enumerate()
            .map(|(i, v)| saved.input(i, v))
            .collect();
        let grads = op.backward(&ins, &saved.output(&self.output), gy, needs)?;
        checked(op.name(), &self.inputs, grads, needs)
    }
}

/// Records the node of a custom op: `y`, computed from `values` (the values
/// of `inputs`) by `op`.
fn record_custom(
    ctx: &ExecContext,
    op: UserOp,
    y: RawTensor,
    inputs: &[&Tensor],
    values: Vec<RawTensor>,
) -> Tensor {
    let name = op.name();
    record(ctx, name, y, inputs, move |y| {
        Box::new(CustomBackward {
            op,
            inputs: values,
            output: y.clone(),
        })
    })
}

/// Applies a custom op to `inputs`, recording its backward.
pub fn custom_op(op: Arc<dyn CustomOp>, inputs: &[&Tensor]) -> Result<Tensor> {
    let (ctx, values) = input_values("custom_op", inputs)?;
    let refs: Vec<&RawTensor> = values.iter().collect();
    let y = op.forward(&ctx, &refs)?;
    Ok(record_custom(&ctx, UserOp::Raw(op), y, inputs, values))
}

/// A user-defined differentiable op written with autograd [`Tensor`] ops
/// (PyTorch's `torch.autograd.Function`). The forward runs under no-grad
/// (nothing inside it is recorded); the backward gets the inputs, the output
/// and the upstream gradient as tensors. In a plain backward they are
/// constants; in a backward with `create_graph` they carry their history and
/// the backward's ops are recorded, so the op can be differentiated again.
///
/// ```
/// use std::sync::Arc;
/// use fucina_autograd::{custom_function, gradgradcheck, CustomFunction, GradcheckOpts, Result, Tensor};
///
/// /// y = x·tanh(x), with f'(x) = tanh x + x·(1 − tanh² x).
/// struct XTanh;
/// impl CustomFunction for XTanh {
///     fn name(&self) -> &'static str {
///         "x_tanh"
///     }
///     fn forward(&self, x: &[Tensor]) -> Result<Tensor> {
///         x[0].mul(&x[0].tanh()?)
///     }
///     fn backward(&self, x: &[Tensor], _y: &Tensor, gy: &Tensor, _needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
///         let t = x[0].tanh()?;
///         let d = t.add(&x[0].mul(&t.square()?.rsub_scalar(1.0)?)?)?;
///         Ok(vec![Some(gy.mul(&d)?)])
///     }
/// }
///
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let x = Tensor::variable(&ctx, &[0.3f64, -1.2, 0.8], &[3])?;
/// let op: Arc<dyn CustomFunction> = Arc::new(XTanh);
/// gradgradcheck(|xs| custom_function(op.clone(), &[&xs[0]]), &[x], &GradcheckOpts::f64())?;
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
pub trait CustomFunction: Send + Sync {
    /// The op's name (used in errors and gradcheck reports).
    fn name(&self) -> &'static str;
    /// Computes the output from the inputs (run under no-grad).
    fn forward(&self, inputs: &[Tensor]) -> Result<Tensor>;
    /// Computes the gradient of every input flagged in `needs` from the
    /// upstream gradient `gy` (the output's shape), with tensor ops.
    fn backward(
        &self,
        inputs: &[Tensor],
        output: &Tensor,
        gy: &Tensor,
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>>;
}

/// Applies a [`CustomFunction`] to `inputs`, recording its backward.
pub fn custom_function(op: Arc<dyn CustomFunction>, inputs: &[&Tensor]) -> Result<Tensor> {
    let (ctx, values) = input_values("custom_function", inputs)?;
    let y = {
        let _ng = no_grad();
        let consts: Vec<Tensor> = values
            .iter()
            .map(|v| Tensor::from_raw(&ctx, v.clone(), false))
            .collect::<Result<_>>()?;
        op.forward(&consts)?.raw()?
    };
    Ok(record_custom(&ctx, UserOp::Function(op), y, inputs, values))
}
