//! `Tensor::to_dtype`: a tensor converted to another dtype, differentiable
//! between the compute floats (f32 ↔ f64: the gradient converts back to the
//! input's dtype), detached otherwise (an integer or f16/bf16 tensor carries
//! no gradient). The conversion itself is core's `ExecContext::to_dtype`
//! (round to nearest), so the values are those of
//! `Tensor::from_raw(ctx, ctx.to_dtype(&t.raw()?, dtype)?, false)`.

use std::sync::Arc;

use fucina_core::{DType, ExecContext, RawTensor};

use crate::custom::{custom_op, CustomOp};
use crate::error::Result;
use crate::tape::tensor::Tensor;

/// The recorded conversion: forward to `to`, backward to the input's dtype.
struct ToDType {
    to: DType,
}

impl CustomOp for ToDType {
    fn name(&self) -> &'static str {
        "to_dtype"
    }

    fn forward(&self, ctx: &ExecContext, inputs: &[&RawTensor]) -> Result<RawTensor> {
        Ok(ctx.to_dtype(inputs[0], self.to)?)
    }

    // d(convert(x))/dx = 1: the upstream gradient, converted back.
    fn backward(
        &self,
        ctx: &ExecContext,
        inputs: &[&RawTensor],
        _output: &RawTensor,
        gy: &RawTensor,
        needs: &[bool],
    ) -> Result<Vec<Option<RawTensor>>> {
        Ok(vec![if needs[0] {
            Some(ctx.to_dtype(gy, inputs[0].dtype())?)
        } else {
            None
        }])
    }
}

impl Tensor {
    /// This tensor converted to `dtype` (round to nearest; PyTorch's
    /// `tensor.to(dtype)`). The same dtype gives the tensor itself. Between
    /// f32 and f64 the conversion is recorded and the gradient flows back in
    /// the input's dtype; to any other dtype the result is detached (only
    /// f32/f64 tensors carry gradients).
    ///
    /// ```
    /// use fucina_autograd::{DType, Tensor};
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let x = Tensor::variable(&ctx, &[1.5f32, -2.0], &[2])?;
    /// let y = x.to_dtype(DType::F64)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![1.5, -2.0]);
    /// y.mul_scalar(3.0)?.sum_all()?.backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![3.0, 3.0]);
    /// let h = x.to_dtype(DType::BF16)?; // storage only: detached
    /// assert!(!h.requires_grad());
    /// assert_eq!(h.to_dtype(DType::F32)?.to_vec::<f32>()?, vec![1.5, -2.0]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if self.dtype() == dtype {
            return Ok(self.clone());
        }
        let differentiable = |d: DType| matches!(d, DType::F32 | DType::F64);
        if differentiable(self.dtype()) && differentiable(dtype) {
            return custom_op(Arc::new(ToDType { to: dtype }), &[self]);
        }
        let ctx = self.ctx();
        Tensor::from_raw(ctx, ctx.to_dtype(&self.raw()?, dtype)?, false)
    }
}
