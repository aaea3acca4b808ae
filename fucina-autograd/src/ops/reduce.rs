//! Reductions: sum and mean over any axes (keepdim like PyTorch), max/min,
//! variance, the L2 norm, cumsum, and logsumexp (over the softmax row kernels).

use fucina_core::kernels::elementwise::UnaryOp;
use fucina_core::kernels::reduce::ReduceOp;
use fucina_core::shape::Dims;
use fucina_core::{ExecContext, RawTensor};

use crate::error::Result;
use crate::ops::linear_map::linear_map;
use crate::ops::{axes_of, axis_of};
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;

/// The shape `gy` has with the reduced axes kept as size 1.
fn keepdim_shape(in_shape: &[usize], axes: &[usize]) -> Dims {
    in_shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect()
}

/// sum: gx = broadcast(gy) over the reduced axes; mean: the same times 1/n.
struct SumBackward {
    in_shape: Dims,
    axes: Vec<usize>,
    scale: Option<f64>,
}

impl Backward for SumBackward {
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
    fn backward_graph(&self, _s: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let kd = keepdim_shape(&self.in_shape, &self.axes);
        let g = gy.reshape(&kd[..])?;
        // A mean over zero elements has an empty gradient: no 1/0 scale is
        // recorded (its derivative with respect to gy would be 0·∞).
        let g = match self.scale {
            Some(s) if s.is_finite() => g.mul_scalar(s)?,
            _ => g,
        };
        Ok(smallvec::smallvec![Some(g.broadcast_to(&self.in_shape)?)])
    }
}

/// lse = log Σ eˣ: gx = gy ⊙ exp(x − lse).
struct LogsumexpBackward {
    x: RawTensor,
    lse_keepdim: RawTensor,
}

impl Backward for LogsumexpBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        use fucina_core::kernels::elementwise::{BinaryOp, UnaryOp};
        let p = ctx.unary(
            &ctx.binary(&self.x, &self.lse_keepdim, BinaryOp::Sub)?,
            UnaryOp::Exp,
        )?;
        let gy = ctx.reshape(gy, self.lse_keepdim.shape())?;
        Ok(smallvec::smallvec![Some(ctx.binary(
            &p,
            &gy,
            BinaryOp::Mul
        )?)])
    }
    /// lse is recomputed from the lifted x, so its own dependence on x is recorded.
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let x = saved.input(0, &self.x);
        let axis = reduced_axis(x.shape(), self.lse_keepdim.shape());
        let p = x.sub(&x.logsumexp(axis as isize, true)?)?.exp()?;
        let gy = gy.reshape(self.lse_keepdim.shape())?;
        Ok(smallvec::smallvec![Some(p.mul(&gy)?)])
    }
}

/// The axis a keepdim reduction of `in_shape` to `kd` reduced (the first
/// where they differ; 0 when none does, where any size-1 axis is the same).
fn reduced_axis(in_shape: &[usize], kd: &[usize]) -> usize {
    in_shape
        .iter()
        .zip(kd)
        .position(|(a, b)| a != b)
        .unwrap_or(0)
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
        Ok(record(
            ctx,
            if mean { "mean" } else { "sum" },
            y,
            &[self],
            |_| {
                Box::new(SumBackward {
                    in_shape,
                    axes: ax,
                    scale: mean.then(|| 1.0 / n as f64),
                })
            },
        ))
    }

    /// Sum over `axes` (negative counts from the end; empty = all).
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let x = Tensor::constant(&ctx, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// assert_eq!(x.sum(&[-1], false)?.to_vec::<f32>()?, vec![6.0, 15.0]);
    /// assert_eq!(x.mean(&[0], true)?.shape(), &[1, 3]);
    /// assert_eq!(x.max_all()?.item()?, 6.0);
    /// assert_eq!(x.argmax(1, false)?.to_vec::<i64>()?, vec![2, 2]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
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

/// max/min along an axis: the gradient goes to the first extremum
/// (gx = scatter_add(zeros, axis, argidx, gy)), documented as PyTorch's
/// `max(dim)`; ties elsewhere get 0.
struct ExtremumBackward {
    in_shape: Dims,
    axis: usize,
    /// Computed in the forward whenever a node is recorded.
    idx_keepdim: Option<RawTensor>,
}

impl ExtremumBackward {
    /// The saved argmax/argmin indices (keepdim shape).
    fn idx(&self) -> Result<&RawTensor> {
        self.idx_keepdim
            .as_ref()
            .ok_or(crate::Error::MissingGradient {
                op: "max/min",
                input: 0,
            })
    }
}

impl Backward for ExtremumBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        let idx = self.idx()?;
        let g = ctx.reshape(gy, idx.shape())?;
        Ok(smallvec::smallvec![Some(ctx.scatter_add(
            &self.in_shape,
            self.axis,
            idx,
            &g
        )?)])
    }
    fn backward_graph(&self, _s: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let idx = self.idx()?.clone();
        let g = gy.reshape(idx.shape())?;
        let (in_shape, axis) = (self.in_shape.clone(), self.axis);
        let idx2 = idx.clone();
        Ok(smallvec::smallvec![Some(linear_map(
            "max/min",
            &g,
            std::sync::Arc::new(move |ctx, g| ctx.scatter_add(&in_shape, axis, &idx, g)),
            std::sync::Arc::new(move |ctx, g| ctx.gather(g, axis, &idx2)),
        )?)])
    }
}

/// ‖x‖₂ over axes: gx = gy · x / ‖x‖ (0 where ‖x‖ = 0, as PyTorch).
struct NormBackward {
    x: RawTensor,
    y_keepdim: RawTensor,
}

impl Backward for NormBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        use fucina_core::kernels::elementwise::{BinaryOp, CmpOp};
        let gy = ctx.reshape(gy, self.y_keepdim.shape())?;
        let zero = ctx.compare_scalar(&self.y_keepdim, 0.0, CmpOp::Eq)?;
        let ratio = ctx.binary(&gy, &self.y_keepdim, BinaryOp::Div)?;
        let ratio = ctx.masked_fill(&ratio, &zero, 0.0)?;
        Ok(smallvec::smallvec![Some(ctx.binary(
            &self.x,
            &ratio,
            BinaryOp::Mul
        )?)])
    }
    /// ‖x‖ is recomputed from the lifted x (over the axes the keepdim shape
    /// shows reduced), so its own dependence on x is recorded.
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        use fucina_core::kernels::elementwise::CmpOp;
        let x = saved.input(0, &self.x);
        let kd = self.y_keepdim.shape();
        let axes: Vec<isize> = (0..kd.len())
            .filter(|&i| kd[i] != x.shape()[i] || kd[i] == 1)
            .map(|i| i as isize)
            .collect();
        let n = x.square()?.sum(&axes, true)?.sqrt()?;
        let zero = saved.constant(
            &saved
                .ctx()
                .compare_scalar(&self.y_keepdim, 0.0, CmpOp::Eq)?,
        );
        let ratio = gy.reshape(kd)?.div(&n)?.masked_fill(&zero, 0.0)?;
        Ok(smallvec::smallvec![Some(x.mul(&ratio)?)])
    }
}

impl Tensor {
    fn extremum(&self, axis: isize, keepdim: bool, max: bool) -> Result<Tensor> {
        let name = if max { "max" } else { "min" };
        let a = crate::ops::axis_of(name, self, axis)?;
        let ctx = self.ctx();
        let x = self.value()?;
        let y = ctx.reduce(
            &x,
            if max { ReduceOp::Max } else { ReduceOp::Min },
            &[a],
            keepdim,
        )?;
        let record_needed = crate::tape::graph::should_record(&[self]);
        let idx = if record_needed {
            Some(if max {
                ctx.argmax(&x, a, true)?
            } else {
                ctx.argmin(&x, a, true)?
            })
        } else {
            None
        };
        drop(x);
        let in_shape: Dims = smallvec::SmallVec::from_slice(self.shape());
        Ok(record(ctx, name, y, &[self], |_| {
            Box::new(ExtremumBackward {
                in_shape,
                axis: a,
                idx_keepdim: idx,
            })
        }))
    }

    /// Maximum along `axis`; the gradient goes to the first maximum.
    pub fn max(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        self.extremum(axis, keepdim, true)
    }

    /// Minimum along `axis`; the gradient goes to the first minimum.
    pub fn min(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        self.extremum(axis, keepdim, false)
    }

    /// Maximum of all elements (gradient to the first maximum).
    pub fn max_all(&self) -> Result<Tensor> {
        self.reshape([-1])?.max(0, false)
    }

    /// Minimum of all elements (gradient to the first minimum).
    pub fn min_all(&self) -> Result<Tensor> {
        self.reshape([-1])?.min(0, false)
    }

    /// Indices (I64 constant) of the first maximum along `axis`.
    pub fn argmax(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        let a = crate::ops::axis_of("argmax", self, axis)?;
        let t = Tensor::leaf(self.ctx(), self.ctx().argmax(&self.value()?, a, keepdim)?);
        crate::tape::scope::adopt(&t);
        Ok(t)
    }

    /// Variance over `axes` with `ddof` (1 = unbiased, PyTorch's default):
    /// Σ(x − mean)² / (n − ddof), composed from differentiable primitives.
    pub fn var(&self, axes: &[isize], ddof: usize, keepdim: bool) -> Result<Tensor> {
        let ax = axes_of("var", self, axes)?;
        let n: usize = ax.iter().map(|&a| self.shape()[a]).product();
        let axi: Vec<isize> = ax.iter().map(|&a| a as isize).collect();
        let mu = self.mean(&axi, true)?;
        let d = self.sub(&mu)?;
        d.square()?
            .sum(&axi, keepdim)?
            .div_scalar((n as f64 - ddof as f64).max(0.0))
    }

    /// L2 norm over `axes` (empty = all); gradient 0 where the norm is 0.
    pub fn norm(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        let ax = axes_of("norm", self, axes)?;
        let ctx = self.ctx();
        let x = self.raw()?;
        let sq = ctx.unary(&x, UnaryOp::Square)?;
        let y_kd = ctx.unary(&ctx.reduce(&sq, ReduceOp::Sum, &ax, true)?, UnaryOp::Sqrt)?;
        drop(sq);
        let y = if keepdim {
            y_kd.clone()
        } else {
            let shape: Vec<usize> = self
                .shape()
                .iter()
                .enumerate()
                .filter(|(i, _)| !ax.contains(i))
                .map(|(_, &d)| d)
                .collect();
            y_kd.reshape(&shape)?
        };
        Ok(record(ctx, "norm", y, &[self], |_| {
            Box::new(NormBackward { x, y_keepdim: y_kd })
        }))
    }

    /// Cumulative sum along `axis`.
    ///
    /// A linear map: gx = the reverse cumulative sum of gy along the axis,
    /// whose own backward is the cumsum again.
    pub fn cumsum(&self, axis: isize) -> Result<Tensor> {
        let a = crate::ops::axis_of("cumsum", self, axis)?;
        linear_map(
            "cumsum",
            self,
            std::sync::Arc::new(move |ctx, x| ctx.cumsum(x, a)),
            std::sync::Arc::new(move |ctx, g| ctx.cumsum_reverse(g, a)),
        )
    }

    /// log Σ exp(x) along `axis`, computed stably.
    pub fn logsumexp(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        let a = axis_of("logsumexp", self, axis)?;
        let ctx = self.ctx();
        let x = self.raw()?;
        let y = ctx.logsumexp(&x, a, keepdim)?;
        Ok(record(ctx, "logsumexp", y, &[self], |y| {
            let mut kd: Vec<usize> = x.shape().to_vec();
            kd[a] = 1;
            let lse_keepdim = match y.reshape(&kd) {
                Ok(v) => v,
                Err(_) => y.clone(),
            };
            Box::new(LogsumexpBackward { x, lse_keepdim })
        }))
    }
}
