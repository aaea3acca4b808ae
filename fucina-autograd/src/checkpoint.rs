//! Activation checkpointing: run a block without recording, keep only its
//! inputs and output, and re-run it (recording) inside backward.
//!
//! The recompute runs the same kernels on the same values, so the gradients
//! are bitwise equal to the plain run's. A checkpoint inside a block that is
//! being recomputed is [`Error::NestedCheckpointRecompute`].

use std::cell::Cell;
use std::sync::Arc;

use fucina_core::{ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::grad_mode::no_grad;
use crate::tape::engine;
use crate::tape::graph::{record, Backward, Grads};
use crate::tape::scope::ExecScope;
use crate::tape::tensor::Tensor;

thread_local! {
    static RECOMPUTING: Cell<bool> = const { Cell::new(false) };
}

/// A checkpointable block: maps input tensors to one output tensor. `Send +
/// Sync` because the backward node that keeps it travels with the tensors.
pub type Block = Arc<dyn Fn(&[Tensor]) -> Result<Tensor> + Send + Sync>;

struct RecomputeFlag;
impl RecomputeFlag {
    fn set() -> Result<RecomputeFlag> {
        if RECOMPUTING.with(|r| r.replace(true)) {
            return Err(Error::NestedCheckpointRecompute);
        }
        Ok(RecomputeFlag)
    }
}
impl Drop for RecomputeFlag {
    fn drop(&mut self) {
        RECOMPUTING.with(|r| r.set(false));
    }
}

/// Re-runs the block with recording on and backpropagates `gy` to fresh leaves
/// over the saved input values: gx_i = ∂(gy · block(x))/∂x_i.
struct CheckpointBackward {
    block: Block,
    inputs: Vec<RawTensor>,
}

impl Backward for CheckpointBackward {
    fn name(&self) -> &'static str {
        "checkpoint"
    }
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let _flag = RecomputeFlag::set()?;
        let _scope = ExecScope::open();
        let leaves: Vec<Tensor> = self
            .inputs
            .iter()
            .zip(needs)
            .map(|(x, &n)| Tensor::from_raw(ctx, x.clone(), n))
            .collect::<Result<_>>()?;
        let out = (self.block)(&leaves)?;
        let wanted: Vec<&Tensor> = leaves.iter().collect();
        let mut grads: Vec<Option<RawTensor>> = if out.requires_grad() {
            engine::grad(&out, &wanted, Some(gy))?
        } else {
            vec![None; leaves.len()]
        };
        // An input the block ignores gets a zero gradient.
        for (i, g) in grads.iter_mut().enumerate() {
            if needs[i] && g.is_none() {
                *g = Some(ctx.zeros(self.inputs[i].dtype(), self.inputs[i].shape())?);
            }
        }
        Ok(grads.into_iter().collect())
    }
}

/// Runs `block(inputs)` without keeping its intermediates; backward recomputes them.
///
/// ```
/// use std::sync::Arc;
/// use fucina_autograd::{checkpoint, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let x = Tensor::variable(&ctx, &[0.5f64, 1.0], &[2]).unwrap();
/// let y = checkpoint(Arc::new(|xs: &[Tensor]| xs[0].tanh()?.exp()), &[&x]).unwrap();
/// y.sum_all().unwrap().backward().unwrap();
/// assert!(x.grad().is_some());
/// ```
pub fn checkpoint(block: Block, inputs: &[&Tensor]) -> Result<Tensor> {
    if RECOMPUTING.with(|r| r.get()) {
        return Err(Error::NestedCheckpointRecompute);
    }
    let ctx = match inputs.first() {
        Some(t) => t.ctx().clone(),
        None => {
            return Err(fucina_core::Error::InvalidArgument {
                op: "checkpoint",
                msg: "no inputs".into(),
            }
            .into())
        }
    };
    let values: Vec<RawTensor> = inputs.iter().map(|t| t.raw()).collect::<Result<_>>()?;
    let out_value = {
        let _ng = no_grad();
        let _scope = ExecScope::open();
        let consts: Vec<Tensor> = values
            .iter()
            .map(|v| Tensor::leaf(&ctx, v.clone()))
            .collect();
        let out = block(&consts)?;
        out.raw()?
    };
    Ok(record(&ctx, "checkpoint", out_value, inputs, move |_| {
        Box::new(CheckpointBackward {
            block,
            inputs: values,
        })
    }))
}
