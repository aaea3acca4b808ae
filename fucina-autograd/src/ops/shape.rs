//! Shape ops: reshape, transpose, permute, squeeze, unsqueeze, broadcast_to,
//! narrow, select, flatten, contiguous. Forward results are views (no copy)
//! when the strides allow; backward maps the gradient back the same way.

use fucina_core::shape::Dims;
use fucina_core::{Error as CoreError, ExecContext, RawTensor};

use crate::dims::{resolve_shape, IntoShape};
use crate::error::Result;
use crate::ops::axis_of;
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;

/// reshape/squeeze/unsqueeze/flatten: gx = reshape(gy, input shape).
struct ReshapeBackward {
    in_shape: Dims,
}

impl Backward for ReshapeBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        Ok(smallvec::smallvec![Some(ctx.reshape(gy, &self.in_shape)?)])
    }
    fn backward_graph(&self, _s: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        Ok(smallvec::smallvec![Some(gy.reshape(&self.in_shape[..])?)])
    }
}

/// permute(p): gx = permute(gy, p⁻¹) (transpose is its own inverse).
struct PermuteBackward {
    inverse: Vec<usize>,
}

impl Backward for PermuteBackward {
    fn backward(&self, _ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        Ok(smallvec::smallvec![Some(gy.permute(&self.inverse)?)])
    }
    fn backward_graph(&self, _s: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let inv: Vec<isize> = self.inverse.iter().map(|&a| a as isize).collect();
        Ok(smallvec::smallvec![Some(gy.permute(&inv)?)])
    }
}

/// broadcast_to: gx = gy; the engine sums the broadcast axes away.
struct BroadcastBackward;

impl Backward for BroadcastBackward {
    fn backward(&self, _ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        Ok(smallvec::smallvec![Some(gy.clone())])
    }
    fn backward_graph(&self, _s: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        Ok(smallvec::smallvec![Some(gy.clone())])
    }
}

/// narrow(axis, start, len): gx = gy zero-padded back to the input extent.
struct NarrowBackward {
    in_shape: Dims,
    axis: usize,
    start: usize,
}

impl Backward for NarrowBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        let mut pads = vec![(0usize, 0usize); self.in_shape.len()];
        let len = gy.shape()[self.axis];
        pads[self.axis] = (self.start, self.in_shape[self.axis] - self.start - len);
        Ok(smallvec::smallvec![Some(ctx.pad(gy, &pads, 0.0)?)])
    }
    fn narrow_window(&self) -> Option<(usize, usize)> {
        Some((self.axis, self.start))
    }
    fn backward_graph(&self, _s: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let mut pads = vec![(0usize, 0usize); self.in_shape.len()];
        let len = gy.shape()[self.axis];
        pads[self.axis] = (self.start, self.in_shape[self.axis] - self.start - len);
        Ok(smallvec::smallvec![Some(gy.pad(&pads, 0.0)?)])
    }
}

impl Tensor {
    fn view_op(
        &self,
        name: &'static str,
        y: RawTensor,
        make: impl FnOnce() -> Box<dyn Backward>,
    ) -> Tensor {
        record(self.ctx(), name, y, &[self], |_| make())
    }

    fn reshape_to(&self, name: &'static str, shape: &[usize]) -> Result<Tensor> {
        let y = self.ctx().reshape(&self.value()?, shape)?;
        let in_shape: Dims = smallvec::SmallVec::from_slice(self.shape());
        Ok(self.view_op(name, y, || Box::new(ReshapeBackward { in_shape })))
    }

    /// A new shape with the same element count (one −1 is inferred); a view
    /// when the strides allow, else a copy.
    ///
    /// The shape may be any [`IntoShape`]: `[-1, 4]`, `(batch, -1)`,
    /// `x.shape()`, a `Vec<usize>`...
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let x = Tensor::arange(&ctx, fucina_core::DType::F32, 0.0, 6.0, 1.0)?;
    /// let y = x.reshape([2, -1])?.t()?; // [3, 2]
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn reshape(&self, shape: impl IntoShape) -> Result<Tensor> {
        let dims = shape.signed_dims("reshape")?;
        let s = resolve_shape("reshape", self.shape(), &dims)?;
        self.reshape_to("reshape", &s)
    }

    /// Alias of [`Tensor::reshape`] (PyTorch's `view`, but copies instead of failing).
    pub fn view(&self, shape: impl IntoShape) -> Result<Tensor> {
        self.reshape(shape)
    }

    /// Flattens axes `start..=end` into one.
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor> {
        if self.rank() == 0 {
            return self.reshape_to("flatten", &[1]);
        }
        let s = axis_of("flatten", self, start)?;
        let e = axis_of("flatten", self, end)?;
        if s > e {
            return Err(CoreError::InvalidArgument {
                op: "flatten",
                msg: format!("start {start} after end {end}"),
            }
            .into());
        }
        let mut shape: Vec<usize> = self.shape()[..s].to_vec();
        shape.push(self.shape()[s..=e].iter().product());
        shape.extend_from_slice(&self.shape()[e + 1..]);
        self.reshape_to("flatten", &shape)
    }

    /// Swaps two axes (a view).
    pub fn transpose(&self, a: isize, b: isize) -> Result<Tensor> {
        let a = axis_of("transpose", self, a)?;
        let b = axis_of("transpose", self, b)?;
        let y = self.value()?.transpose(a, b)?;
        let mut inverse: Vec<usize> = (0..self.rank()).collect();
        inverse.swap(a, b);
        Ok(self.view_op("transpose", y, || Box::new(PermuteBackward { inverse })))
    }

    /// The matrix transpose of a 2-D tensor.
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() != 2 {
            return Err(CoreError::InvalidArgument {
                op: "t",
                msg: format!("expects 2-D, got {:?}", self.shape()),
            }
            .into());
        }
        self.transpose(0, 1)
    }

    /// Reorders axes: output axis i is input axis `perm[i]` (a view).
    pub fn permute(&self, perm: &[isize]) -> Result<Tensor> {
        let p: Vec<usize> = perm
            .iter()
            .map(|&a| axis_of("permute", self, a))
            .collect::<Result<_>>()?;
        let y = self.value()?.permute(&p)?;
        let mut inverse = vec![0; p.len()];
        for (i, &pi) in p.iter().enumerate() {
            inverse[pi] = i;
        }
        Ok(self.view_op("permute", y, || Box::new(PermuteBackward { inverse })))
    }

    /// Removes a size-1 axis.
    pub fn squeeze(&self, axis: isize) -> Result<Tensor> {
        let a = axis_of("squeeze", self, axis)?;
        let y = self.value()?.squeeze(a)?;
        let in_shape: Dims = smallvec::SmallVec::from_slice(self.shape());
        Ok(self.view_op("squeeze", y, || Box::new(ReshapeBackward { in_shape })))
    }

    /// Inserts a size-1 axis at `axis` (negative counts from rank + 1).
    pub fn unsqueeze(&self, axis: isize) -> Result<Tensor> {
        let r = self.rank() as isize + 1;
        let a = if axis < 0 { axis + r } else { axis };
        if a < 0 || a >= r {
            return Err(CoreError::axis("unsqueeze", axis, r as usize, self.shape()).into());
        }
        let y = self.value()?.unsqueeze(a as usize)?;
        let in_shape: Dims = smallvec::SmallVec::from_slice(self.shape());
        Ok(self.view_op("unsqueeze", y, || Box::new(ReshapeBackward { in_shape })))
    }

    /// Broadcasts to `shape` (a stride-0 view).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        let y = self.value()?.broadcast_to(shape)?;
        Ok(self.view_op("broadcast_to", y, || Box::new(BroadcastBackward)))
    }

    /// The range `start..start + len` of `axis` (a view).
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Result<Tensor> {
        let a = axis_of("narrow", self, axis)?;
        let y = self.value()?.narrow(a, start, len)?;
        let in_shape: Dims = smallvec::SmallVec::from_slice(self.shape());
        Ok(self.view_op("narrow", y, || {
            Box::new(NarrowBackward {
                in_shape,
                axis: a,
                start,
            })
        }))
    }

    /// Index `index` of `axis`, removing the axis (a view).
    pub fn select(&self, axis: isize, index: usize) -> Result<Tensor> {
        let a = axis_of("select", self, axis)?;
        // Checked here so that the error names `select` and the index.
        if index >= self.shape()[a] {
            return Err(CoreError::out_of_range(
                "select",
                "index",
                index,
                self.shape()[a],
                self.shape(),
            )
            .into());
        }
        self.narrow(a as isize, index, 1)?.squeeze(a as isize)
    }

    /// A contiguous copy when needed (identity otherwise).
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.value()?.is_contiguous() {
            return Ok(self.clone());
        }
        let y = self.ctx().copy(&self.value()?)?;
        Ok(self.view_op("contiguous", y, || Box::new(BroadcastBackward)))
    }
}
