//! Contractions: matmul (2-D and batched, broadcast batch dims) and linear.
//! Backward uses transposed views, never materialised transposes.
//!
//! The right operand (linear's weight, matmul's B) may be a frozen bf16/f16
//! tensor under an f32/f64 input: the core GEMM widens it inside its B
//! packing, and the backward computes only the input gradient through the
//! same mixed GEMM. A node keeps an operand only when a gradient that reads
//! it is needed (decided at record time from `requires_grad`): a frozen
//! linear does not pin its input.

use fucina_core::kernels::reduce::ReduceOp;
use fucina_core::{ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::ops::same_dtype;
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;

/// The last two axes swapped (a view).
fn t_last(x: &RawTensor) -> Result<RawTensor> {
    let r = x.rank();
    Ok(x.transpose(r - 2, r - 1)?)
}

/// C = A·B: dA = dC·Bᵀ, dB = Aᵀ·dC (at the broadcast batch shape; the engine
/// sums broadcast batch axes away). `a` is kept only when dB is needed, `b`
/// only when dA is.
struct MatmulBackward {
    a: Option<RawTensor>,
    b: Option<RawTensor>,
}

impl Backward for MatmulBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let ga = match (&self.b, needs[0]) {
            (Some(b), true) => Some(ctx.matmul(gy, &t_last(b)?)?),
            _ => None,
        };
        let gb = match (&self.a, needs[1]) {
            (Some(a), true) => Some(ctx.matmul(&t_last(a)?, gy)?),
            _ => None,
        };
        Ok(smallvec::smallvec![ga, gb])
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let ga = match (&self.b, saved.needs(0)) {
            (Some(b), true) => Some(gy.matmul(&saved.input(1, b).transpose(-2, -1)?)?),
            _ => None,
        };
        let gb = match (&self.a, saved.needs(1)) {
            (Some(a), true) => Some(saved.input(0, a).transpose(-2, -1)?.matmul(gy)?),
            _ => None,
        };
        Ok(smallvec::smallvec![ga, gb])
    }
}

/// y = x·Wᵀ + b over rows r: dx = dy·W, dW = Σ_r dyᵣᵀ xᵣ = dy₂ᵀ·x₂, db = Σ_r dyᵣ.
/// `x` is kept only when dW is needed, `w` only when dx is (a bf16/f16 frozen
/// `w` makes dx a mixed GEMM, widened in its packing); `(n, k)` is W's shape.
struct LinearBackward {
    x: Option<RawTensor>,
    w: Option<RawTensor>,
    n: usize,
    k: usize,
}

impl Backward for LinearBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let (n, k) = (self.n, self.k);
        let rows = gy.numel() / n.max(1);
        let gx = match (&self.w, needs[0]) {
            (Some(w), true) => Some(ctx.matmul(gy, w)?),
            _ => None,
        };
        let (mut gw, mut gb) = (None, None);
        let need_b = needs.get(2).copied().unwrap_or(false);
        if needs[1] || need_b {
            let gy2 = ctx.reshape(gy, &[rows, n])?;
            if let (Some(x), true) = (&self.x, needs[1]) {
                let x2 = ctx.reshape(x, &[rows, k])?;
                gw = Some(ctx.matmul(&gy2.transpose(0, 1)?, &x2)?);
            }
            if need_b {
                gb = Some(ctx.reduce(&gy2, ReduceOp::Sum, &[0], false)?);
            }
        }
        Ok(smallvec::smallvec![gx, gw, gb])
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let needs = saved.needs_input_grad();
        let (n, k) = (self.n, self.k);
        let rows = gy.numel() / n.max(1);
        let gx = match (&self.w, needs[0]) {
            (Some(w), true) => Some(gy.matmul(&saved.input(1, w))?),
            _ => None,
        };
        let (mut gw, mut gb) = (None, None);
        let need_b = needs.get(2).copied().unwrap_or(false);
        if needs[1] || need_b {
            let gy2 = gy.reshape([rows, n])?;
            if let (Some(x), true) = (&self.x, needs[1]) {
                let x2 = saved.input(0, x).reshape([rows, k])?;
                gw = Some(gy2.t()?.matmul(&x2)?);
            }
            if need_b {
                gb = Some(gy2.sum(&[0], false)?);
            }
        }
        Ok(smallvec::smallvec![gx, gw, gb])
    }
}

/// The dtype rule of a contraction whose right operand is a weight: equal
/// dtypes, or a weight that needs no gradient (a frozen bf16/f16 base
/// weight, which the core widens in its GEMM; other pairs are the core's
/// `DTypeMismatch`).
fn weight_dtype(op: &'static str, arg: &'static str, x: &Tensor, w: &Tensor) -> Result<()> {
    if x.dtype() != w.dtype() && w.requires_grad() {
        return Err(Error::TrainableDTypeMismatch {
            op,
            arg,
            input: x.dtype(),
            weight: w.dtype(),
        });
    }
    Ok(())
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
    ///
    /// `other` may be a frozen bf16/f16 tensor under an f32/f64 `self`
    /// (widened inside the GEMM; only `self` then gets a gradient).
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        weight_dtype("matmul", "right operand", self, other)?;
        let a = self.raw()?;
        let b = other.raw()?;
        let ctx = self.ctx();
        let y = ctx.matmul(&a, &b)?;
        // Keep an operand only for the gradient that reads it.
        let a = other.requires_grad().then_some(a);
        let b = self.requires_grad().then_some(b);
        Ok(record(ctx, "matmul", y, &[self, other], |_| {
            Box::new(MatmulBackward { a, b })
        }))
    }

    /// `x·Wᵀ + b` with `W` of shape `[N, K]` and optional bias `[N]` (fused).
    ///
    /// A frozen `W` (no gradient) may be bf16 or f16 under an f32/f64 `x`:
    /// it is widened inside the GEMM's packing, never copied in full, and
    /// backward computes only dx (and db). A `W` that requires a gradient
    /// must have `x`'s dtype ([`Error::TrainableDTypeMismatch`]).
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// use fucina_core::DType;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let x = Tensor::variable(&ctx, &[1.0f32, 2.0], &[1, 2])?;
    /// let w32 = ctx.from_slice(&[1.0f32, 0.5, -1.0, 2.0], &[2, 2])?;
    /// let w = Tensor::from_raw(&ctx, ctx.to_dtype(&w32, DType::BF16)?, false)?;
    /// let y = x.linear(&w, None)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![2.0, 3.0]);
    /// y.sum_all()?.backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![0.0, 2.5]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        weight_dtype("linear", "weight", self, weight)?;
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
        let (n, k) = (w.shape()[0], w.shape()[1]);
        // Keep x only for dW and W only for dx: a frozen linear does not pin its input.
        let x = weight.requires_grad().then_some(x);
        let w = self.requires_grad().then_some(w);
        Ok(record(ctx, "linear", y, &inputs, |_| {
            Box::new(LinearBackward { x, w, n, k })
        }))
    }
}
