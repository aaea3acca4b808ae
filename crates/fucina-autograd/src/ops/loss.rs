//! Losses: cross-entropy from logits (ignore_index, label smoothing, mean /
//! sum / none). The backward reuses the forward's per-row max and sum.

use fucina_core::kernels::loss::{CrossEntropyOpts, CrossEntropySaved};
use fucina_core::{ExecContext, RawTensor};

use crate::error::Result;
use crate::graph::{record, Backward, Grads};
use crate::ops::elementwise::not_differentiable;
use crate::tensor::Tensor;



/// dlogits = gy · (softmax(x) − target distribution) [/ count for mean];
/// ignored rows get 0.
struct CrossEntropyBackward {
    logits: RawTensor,
    targets: RawTensor,
    saved: CrossEntropySaved,
    opts: CrossEntropyOpts,
}

impl Backward for CrossEntropyBackward {
    fn name(&self) -> &'static str {
        "cross_entropy"
    }
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        let g = ctx.cross_entropy_backward(&self.logits, &self.targets, &self.saved, gy, self.opts)?;
        Ok(smallvec::smallvec![Some(g), None])
    }
}

impl Tensor {
    /// Cross-entropy of `[N, C]` logits against `[N]` integer targets.
    /// With mean reduction and every row ignored, the loss is 0 (not NaN).
    pub fn cross_entropy(&self, targets: &Tensor, opts: CrossEntropyOpts) -> Result<Tensor> {
        if targets.requires_grad() {
            return Err(not_differentiable("cross_entropy (targets)"));
        }
        let x = self.raw()?;
        let t = targets.raw()?;
        let ctx = self.ctx();
        let (loss, saved) = ctx.cross_entropy(&x, &t, opts)?;
        Ok(record(ctx, "cross_entropy", loss, &[self, targets], |_| {
            Box::new(CrossEntropyBackward { logits: x, targets: t, saved, opts })
        }))
    }
}
