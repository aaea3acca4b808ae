//! Contractions: matmul (2-D and batched, broadcast batch dims) and linear.
//! Backward uses transposed views, never materialised transposes.

use fucina_core::kernels::reduce::ReduceOp;
use fucina_core::{ExecContext, RawTensor};

use crate::error::Result;
use crate::ops::same_dtype;
use crate::tape::graph::{record, Backward, Grads};
use crate::tape::tensor::Tensor;

/// The last two axes swapped (a view).
fn t_last(x: &RawTensor) -> Result<RawTensor> {
    let r = x.rank();
    Ok(x.transpose(r - 2, r - 1)?)
}

/// C = A·B: dA = dC·Bᵀ, dB = Aᵀ·dC (at the broadcast batch shape; the engine
/// sums broadcast batch axes away).
struct MatmulBackward {
    a: RawTensor,
    b: RawTensor,
}

impl Backward for MatmulBackward {
    fn name(&self) -> &'static str {
        "matmul"
    }
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let ga = if needs[0] {
            Some(ctx.matmul(gy, &t_last(&self.b)?)?)
        } else {
            None
        };
        let gb = if needs[1] {
            Some(ctx.matmul(&t_last(&self.a)?, gy)?)
        } else {
            None
        };
        Ok(smallvec::smallvec![ga, gb])
    }
}

/// y = x·Wᵀ + b over rows r: dx = dy·W, dW = Σ_r dyᵣᵀ xᵣ = dy₂ᵀ·x₂, db = Σ_r dyᵣ.
struct LinearBackward {
    x: RawTensor,
    w: RawTensor,
}

impl Backward for LinearBackward {
    fn name(&self) -> &'static str {
        "linear"
    }
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let n = self.w.shape()[0];
        let k = self.w.shape()[1];
        let rows = gy.numel() / n.max(1);
        let gx = if needs[0] {
            Some(ctx.matmul(gy, &self.w)?)
        } else {
            None
        };
        let (mut gw, mut gb) = (None, None);
        if needs[1] || needs.get(2).copied().unwrap_or(false) {
            let gy2 = ctx.reshape(gy, &[rows, n])?;
            if needs[1] {
                let x2 = ctx.reshape(&self.x, &[rows, k])?;
                gw = Some(ctx.matmul(&gy2.transpose(0, 1)?, &x2)?);
            }
            if needs.get(2).copied().unwrap_or(false) {
                gb = Some(ctx.reduce(&gy2, ReduceOp::Sum, &[0], false)?);
            }
        }
        Ok(smallvec::smallvec![gx, gw, gb])
    }
}

impl Tensor {
    /// Matrix product: `[.., M, K] @ [.., K, N] -> [.., M, N]`, batch dims broadcast.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let a = Tensor::constant(&ctx, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let w = Tensor::variable(&ctx, &[1.0f32, 0.0, 0.0, 1.0], &[2, 2])?;
    /// let y = a.matmul(&w)?; // identity
    /// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
    /// // linear(x, W, b) = x Wᵀ + b, as torch.nn.functional.linear
    /// assert_eq!(a.linear(&w, None)?.shape(), &[2, 2]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        same_dtype("matmul", self, other)?;
        let a = self.raw()?;
        let b = other.raw()?;
        let ctx = self.ctx();
        let y = ctx.matmul(&a, &b)?;
        Ok(record(ctx, "matmul", y, &[self, other], |_| {
            Box::new(MatmulBackward { a, b })
        }))
    }

    /// `x·Wᵀ + b` with `W` of shape `[N, K]` and optional bias `[N]` (fused).
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        same_dtype("linear", self, weight)?;
        let x = self.raw()?;
        let w = weight.raw()?;
        let ctx = self.ctx();
        let braw = match bias {
            Some(b) => {
                same_dtype("linear", self, b)?;
                Some(b.raw()?)
            }
            None => None,
        };
        let y = ctx.linear(&x, &w, braw.as_ref())?;
        let inputs: Vec<&Tensor> = match bias {
            Some(b) => vec![self, weight, b],
            None => vec![self, weight],
        };
        Ok(record(ctx, "linear", y, &inputs, |_| {
            Box::new(LinearBackward { x, w })
        }))
    }
}
