//! Rotary position embedding (Hugging Face's rotate-half convention) as a
//! differentiable op on the fused kernels of `fucina-core/src/kernels/fused/rope.rs`,
//! and its gradcheck rows. The node keeps only the tables and the positions:
//! the backward is a rotation of the gradient and needs no activation.

use fucina_core::{DType, ExecContext, RawTensor};

use super::row;
use crate::error::Result;
use crate::ops::elementwise::not_differentiable;
use crate::suite::case::{f, OpCase};
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;

/// y = x·cos + rotate_half(x)·sin: per pair (x[i], x[i+h]) a rotation R(θᵢ) =
/// [[c, −s], [s, c]], linear in x, so gx = R(θ)ᵀ·gy:
/// gx[i] = g[i]·c[i] + g[i+h]·s[i], gx[i+h] = g[i+h]·c[i] − g[i]·s[i].
/// The tables and positions are constants: they get no gradient.
struct RopeBackward {
    cos: RawTensor,
    sin: RawTensor,
    positions: RawTensor,
}

impl Backward for RopeBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        if !needs[0] {
            return Ok(smallvec::smallvec![None]);
        }
        let gx = ctx.rope_backward(gy, &self.cos, &self.sin, &self.positions)?;
        Ok(smallvec::smallvec![Some(gx)])
    }
    /// gx = R(θ)ᵀ·gy, linear: recorded with R(θ) (the forward) as its adjoint.
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        if !saved.needs(0) {
            return Ok(smallvec::smallvec![None]);
        }
        let (c, s, p) = (self.cos.clone(), self.sin.clone(), self.positions.clone());
        let (c2, s2, p2) = (c.clone(), s.clone(), p.clone());
        Ok(smallvec::smallvec![Some(crate::ops::linear_map::linear_map(
            "rope",
            gy,
            std::sync::Arc::new(move |ctx, g| ctx.rope_backward(g, &c, &s, &p)),
            std::sync::Arc::new(move |ctx, g| ctx.rope(g, &c2, &s2, &p2)),
        )?)])
    }
}

impl Tensor {
    /// Rotary position embedding in Hugging Face's rotate-half convention:
    /// `x * cos[pos] + rotate_half(x) * sin[pos]` with
    /// `rotate_half(x) = cat(−x₂, x₁)` over the last axis.
    ///
    /// `self`: `[B, T, H, D]` (f32/f64, D even, any strides); `cos`, `sin`:
    /// `[P, D/2]` tables of x's dtype (HF's full-width table is
    /// `cat(freqs, freqs)`: only the half is stored; `fucina_nn::Rope` builds
    /// them); `positions`: I64 (or I32) `[B, T]`, each in `0..P`. The tables
    /// and positions are constants: a `cos` or `sin` that requires grad is
    /// [`crate::Error::NotDifferentiable`]. Returns a contiguous `[B, T, H, D]`.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// // One head of D = 2 at position 1, whose angle is a quarter turn.
    /// let x = Tensor::variable(&ctx, &[1.0f64, 0.0], &[1, 1, 1, 2])?;
    /// let cos = Tensor::constant(&ctx, &[1.0f64, 0.0], &[2, 1])?;
    /// let sin = Tensor::constant(&ctx, &[0.0f64, 1.0], &[2, 1])?;
    /// let pos = Tensor::constant(&ctx, &[1i64], &[1, 1])?;
    /// let y = x.rope(&cos, &sin, &pos)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![0.0, 1.0]);
    /// y.sum_all()?.backward()?; // gx = R(θ)ᵀ·[1, 1] = [1, −1]
    /// assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![1.0, -1.0]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn rope(&self, cos: &Tensor, sin: &Tensor, positions: &Tensor) -> Result<Tensor> {
        if cos.requires_grad() || sin.requires_grad() {
            return Err(not_differentiable("rope (cos/sin tables)"));
        }
        let ctx = self.ctx();
        let x = self.raw()?;
        // `raw` hands out views (`clone_view`s): the node keeps these three, not x.
        let (c, s, p) = (cos.raw()?, sin.raw()?, positions.raw()?);
        let y = ctx.rope(&x, &c, &s, &p)?;
        drop(x);
        Ok(record(ctx, "rope", y, &[self], |_| {
            Box::new(RopeBackward {
                cos: c,
                sin: s,
                positions: p,
            })
        }))
    }
}

/// HF's default `[p, d/2]` cos and sin tables for `theta` (angles
/// `pos · theta^(−2i/d)` in f64, rounded to `dtype`), as constants.
fn default_tables(
    ctx: &ExecContext,
    dtype: DType,
    p: usize,
    d: usize,
    theta: f64,
) -> Result<(Tensor, Tensor)> {
    let half = d / 2;
    let mut cos = Vec::with_capacity(p * half);
    let mut sin = Vec::with_capacity(p * half);
    for pos in 0..p {
        for i in 0..half {
            let inv = 1.0 / theta.powf((2 * i) as f64 / d as f64);
            let a = pos as f64 * inv;
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    let table = |v: &[f64]| -> Result<Tensor> {
        let t = ctx.to_dtype(&ctx.from_slice(v, &[p, half])?, dtype)?;
        Ok(Tensor::leaf(ctx, t))
    };
    Ok((table(&cos)?, table(&sin)?))
}

/// The gradcheck row: x `[2, 5, 3, 8]` with theta-10000 tables and fixed,
/// non-arange positions (batch 0 left-padded by two, batch 1 continuing at 3,
/// as after a cache of three tokens); the torch side's `rope_hf` is the
/// generator's HF rotate-half reference.
pub(crate) fn cases() -> Vec<OpCase> {
    vec![row(
        "rope",
        "lambda x: rope_hf(x[0], torch.tensor([[0, 0, 0, 1, 2], [3, 4, 5, 6, 7]]), 10000.0)",
        vec![f(&[2, 5, 3, 8])],
        |x| {
            let ctx = x[0].ctx();
            let (cos, sin) = default_tables(ctx, x[0].dtype(), 8, 8, 10000.0)?;
            let pos = Tensor::constant(ctx, &[0i64, 0, 0, 1, 2, 3, 4, 5, 6, 7], &[2, 5])?;
            x[0].rope(&cos, &sin, &pos)
        },
    )]
}
