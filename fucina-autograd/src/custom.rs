//! Custom ops: a user implements forward and backward in one trait impl and
//! gets a first-class differentiable op. The backward must return a gradient
//! of exactly the input's shape for every input flagged in `needs`.

use std::sync::Arc;

use fucina_core::{ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::tape::graph::{record, Backward, Grads};
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

struct CustomBackward {
    op: Arc<dyn CustomOp>,
    inputs: Vec<RawTensor>,
    output: RawTensor,
}

impl Backward for CustomBackward {
    fn name(&self) -> &'static str {
        self.op.name()
    }
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let ins: Vec<&RawTensor> = self.inputs.iter().collect();
        let grads = self.op.backward(ctx, &ins, &self.output, gy, needs)?;
        let mut out = Grads::new();
        for (i, x) in self.inputs.iter().enumerate() {
            let g = grads.get(i).cloned().flatten();
            if needs.get(i).copied().unwrap_or(false) {
                let g = g.ok_or(Error::MissingGradient {
                    op: self.op.name(),
                    input: i,
                })?;
                if g.shape() != x.shape() || g.dtype() != x.dtype() {
                    return Err(Error::GradientShapeMismatch {
                        op: self.op.name(),
                        input: i,
                        expected: x.shape().to_vec(),
                        got: g.shape().to_vec(),
                    });
                }
                out.push(Some(g));
            } else {
                out.push(None);
            }
        }
        Ok(out)
    }
}

/// Applies a custom op to `inputs`, recording its backward.
pub fn custom_op(op: Arc<dyn CustomOp>, inputs: &[&Tensor]) -> Result<Tensor> {
    let first = inputs.first().ok_or_else(|| {
        Error::Core(fucina_core::Error::InvalidArgument {
            op: "custom_op",
            msg: "no inputs".into(),
        })
    })?;
    let ctx = first.ctx().clone();
    let values: Vec<RawTensor> = inputs.iter().map(|t| t.raw()).collect::<Result<_>>()?;
    let refs: Vec<&RawTensor> = values.iter().collect();
    let y = op.forward(&ctx, &refs)?;
    let name = op.name();
    Ok(record(&ctx, name, y, inputs, move |y| {
        Box::new(CustomBackward {
            op,
            inputs: values,
            output: y.clone(),
        })
    }))
}
