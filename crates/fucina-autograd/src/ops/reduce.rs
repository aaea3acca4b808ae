//! Reductions: sum and mean over any axes (keepdim like PyTorch).

use fucina_core::kernels::elementwise::UnaryOp;
use fucina_core::kernels::reduce::ReduceOp;
use fucina_core::shape::Dims;
use fucina_core::{ExecContext, RawTensor};

use crate::error::Result;
use crate::graph::{record, Backward, Grads};
use crate::ops::axes_of;
use crate::tensor::Tensor;

/// The shape `gy` has with the reduced axes kept as size 1.
fn keepdim_shape(in_shape: &[usize], axes: &[usize]) -> Dims {
    in_shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect()
}

/// sum: gx = broadcast(gy) over the reduced axes; mean: the same times 1/n.
struct SumBackward {
    in_shape: Dims,
    axes: Vec<usize>,
    scale: Option<f64>,
}

impl Backward for SumBackward {
    fn name(&self) -> &'static str {
        if self.scale.is_some() {
            "mean"
        } else {
            "sum"
        }
    }
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        let kd = keepdim_shape(&self.in_shape, &self.axes);
        let g = ctx.reshape(gy, &kd)?;
        let g = match self.scale {
            Some(s) => ctx.unary(&g, UnaryOp::MulScalar(s))?,
            None => g,
        };
        // A stride-0 view: no copy; consumers read it through strides.
        Ok(smallvec::smallvec![Some(g.broadcast_to(&self.in_shape)?)])
    }
}

impl Tensor {
    fn sum_mean(&self, axes: &[isize], keepdim: bool, mean: bool) -> Result<Tensor> {
        let ax = axes_of(if mean { "mean" } else { "sum" }, self, axes)?;
        let x = self.raw()?;
        let ctx = self.ctx();
        let op = if mean { ReduceOp::Mean } else { ReduceOp::Sum };
        let y = ctx.reduce(&x, op, &ax, keepdim)?;
        let n: usize = ax.iter().map(|&a| self.shape()[a]).product();
        let in_shape: Dims = smallvec::SmallVec::from_slice(self.shape());
        Ok(record(ctx, if mean { "mean" } else { "sum" }, y, &[self], |_| {
            Box::new(SumBackward { in_shape, axes: ax, scale: mean.then(|| 1.0 / n as f64) })
        }))
    }

    /// Sum over `axes` (negative counts from the end; empty = all).
    pub fn sum(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.sum_mean(axes, keepdim, false)
    }

    /// Sum of every element, as a rank-0 tensor.
    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum_mean(&[], false, false)
    }

    /// Mean over `axes` (negative counts from the end; empty = all).
    pub fn mean(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.sum_mean(axes, keepdim, true)
    }

    /// Mean of every element, as a rank-0 tensor.
    pub fn mean_all(&self) -> Result<Tensor> {
        self.sum_mean(&[], false, true)
    }
}
