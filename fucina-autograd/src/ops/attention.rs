//! Scaled dot-product attention with causal and padding masks, streamed over key blocks.
//! The node keeps q, k, v, the mask, the output and each row's logsumexp (`[B, H, T]`):
//! no `[T, S]` probability block is saved, the backward recomputes it tile by tile.

pub use fucina_core::kernels::attention::AttentionOpts;
use fucina_core::{ExecContext, RawTensor};

use crate::error::Result;
use crate::ops::elementwise::not_differentiable;
use crate::tape::graph::{record, Backward, Grads};
use crate::tape::tensor::Tensor;

/// P = softmax(QKᵀ·s + M), O = P·V, saved lse = ln Σ_j e^(QKᵀ·s + M)_ij; P is recomputed
/// as e^(QKᵀ·s + M − lse). With Δ = rowsum(gO ⊙ O) (= rowsum(gP ⊙ P)):
/// gV = Pᵀ·gO; gP = gO·Vᵀ; gS = P ⊙ (gP − Δ); gQ = s·gS·K; gK = s·gSᵀ·Q.
/// The mask is a constant: it gets no gradient.
struct AttentionBackward {
    q: RawTensor,
    k: RawTensor,
    v: RawTensor,
    mask: Option<RawTensor>,
    out: RawTensor,
    lse: RawTensor,
    opts: AttentionOpts,
}

impl Backward for AttentionBackward {
    fn name(&self) -> &'static str {
        "scaled_dot_product_attention"
    }
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let (gq, gk, gv) = ctx.attention_backward(
            &self.q,
            &self.k,
            &self.v,
            self.mask.as_ref(),
            &self.out,
            &self.lse,
            gy,
            self.opts,
            [needs[0], needs[1], needs[2]],
        )?;
        Ok(smallvec::smallvec![gq, gk, gv, None])
    }
}

impl Tensor {
    /// Scaled dot-product attention: q `[B,H,T,D]`, k `[B,H,S,D]`, v `[B,H,S,Dv]`;
    /// `mask`: an additive float bias or a U8 keep-mask broadcastable to
    /// `[B,H,T,S]` (a constant, e.g. a `[B,1,1,S]` key-padding mask); `opts`: causal flag
    /// and scale (default 1/√D). Memory is linear in T and S: no `[T, S]` block is kept.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// use fucina_autograd::ops::attention::AttentionOpts;
    /// let q = Tensor::randn(&ctx, fucina_core::DType::F32, &[1, 2, 4, 8], 1)?.requires_grad_(true)?;
    /// let kv = Tensor::randn(&ctx, fucina_core::DType::F32, &[1, 2, 4, 8], 2)?;
    /// let opts = AttentionOpts { causal: true, ..Default::default() };
    /// let o = Tensor::scaled_dot_product_attention(&q, &kv, &kv, None, opts)?;
    /// assert_eq!(o.shape(), &[1, 2, 4, 8]);
    /// o.sum_all()?.backward()?;
    /// assert_eq!(q.grad().unwrap().shape(), &[1, 2, 4, 8]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn scaled_dot_product_attention(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        opts: AttentionOpts,
    ) -> Result<Tensor> {
        if mask.is_some_and(|m| m.requires_grad()) {
            return Err(not_differentiable("scaled_dot_product_attention (mask)"));
        }
        let ctx = q.ctx();
        let (qr, kr, vr) = (q.raw()?, k.raw()?, v.raw()?);
        let mr = mask.map(|m| m.raw()).transpose()?;
        let (out, lse) = ctx.attention(&qr, &kr, &vr, mr.as_ref(), opts)?;
        let mut inputs = vec![q, k, v];
        inputs.extend(mask);
        Ok(record(
            ctx,
            "scaled_dot_product_attention",
            out,
            &inputs,
            |out| {
                Box::new(AttentionBackward {
                    q: qr,
                    k: kr,
                    v: vr,
                    mask: mr,
                    out: out.clone_view(),
                    lse,
                    opts,
                })
            },
        ))
    }
}
