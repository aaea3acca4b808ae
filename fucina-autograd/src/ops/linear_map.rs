//! Linear maps with their adjoints: the differentiable form of the backward of
//! every op whose gradient is linear in gy and reads nothing differentiable
//! (sum to a shape, scatter/gather by constant indices, cumsum, RoPE, dropout).
//!
//! A map `L` is recorded with its adjoint `Lᵀ`: backward is gx = Lᵀ(gy), and
//! the backward of that backward is `L` again, recorded the same way, so any
//! order of derivative is available. Both are raw kernels: the first-order
//! result is bitwise what the op's own backward computes.

use std::sync::Arc;

use fucina_core::{ExecContext, RawTensor};

use crate::error::Result;
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;

/// A raw linear map.
pub(crate) type RawMap =
    Arc<dyn Fn(&ExecContext, &RawTensor) -> fucina_core::Result<RawTensor> + Send + Sync>;

/// gx = Lᵀ(gy); its own backward records L.
struct LinearMapBackward {
    name: &'static str,
    map: RawMap,
    adjoint: RawMap,
}

impl Backward for LinearMapBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        Ok(smallvec::smallvec![Some((self.adjoint)(ctx, gy)?)])
    }
    fn backward_graph(&self, _saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        Ok(smallvec::smallvec![Some(linear_map(
            self.name,
            gy,
            self.adjoint.clone(),
            self.map.clone()
        )?)])
    }
}

/// Applies the linear map `map` to `x`, recording `adjoint` as its backward.
pub(crate) fn linear_map(
    name: &'static str,
    x: &Tensor,
    map: RawMap,
    adjoint: RawMap,
) -> Result<Tensor> {
    let ctx = x.ctx();
    let y = map(ctx, &x.raw()?)?;
    Ok(record(ctx, name, y, &[x], move |_| {
        Box::new(LinearMapBackward { name, map, adjoint })
    }))
}

impl Tensor {
    /// The sum of this tensor down to `shape`, a shape it broadcasts from
    /// (the adjoint of [`Tensor::broadcast_to`]: leading axes summed away,
    /// size-1 axes summed with the dimension kept).
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let x = Tensor::constant(&ctx, &[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// assert_eq!(x.sum_to_shape(&[3])?.to_vec::<f64>()?, vec![5.0, 7.0, 9.0]);
    /// assert_eq!(x.sum_to_shape(&[2, 1])?.to_vec::<f64>()?, vec![6.0, 15.0]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn sum_to_shape(&self, shape: &[usize]) -> Result<Tensor> {
        let to = shape.to_vec();
        let from = self.shape().to_vec();
        linear_map(
            "sum_to_shape",
            self,
            Arc::new(move |ctx, x| ctx.sum_to_shape(x, &to)),
            Arc::new(move |_ctx, g| g.broadcast_to(&from)),
        )
    }
}
