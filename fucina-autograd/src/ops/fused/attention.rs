//! Scaled dot-product attention with causal and padding masks, streamed over key blocks
//! (kernels in `fucina-core/src/kernels/fused/attention.rs`), and its gradcheck rows.
//! The node keeps q, k, v, the mask, the output and each row's logsumexp (`[B, H, T]`):
//! no `[T, S]` probability block is saved, the backward recomputes it tile by tile.
//! Grouped-query attention (k, v with fewer heads than q) is the same op: k/v heads are
//! shared by groups of query heads in place, never repeated, and their gradients come back
//! in the k/v shape.

pub use fucina_core::kernels::fused::attention::AttentionOpts;
use fucina_core::{ExecContext, RawTensor};

use super::row;
use crate::error::Result;
use crate::ops::elementwise::not_differentiable;
use crate::suite::case::{f, OpCase};
use crate::tape::graph::{record, Backward, Grads};
use crate::tape::tensor::Tensor;

/// P = softmax(QKᵀ·s + M), O = P·V, saved lse = ln Σ_j e^(QKᵀ·s + M)_ij; P is recomputed
/// as e^(QKᵀ·s + M − lse). With Δ = rowsum(gO ⊙ O) (= rowsum(gP ⊙ P)):
/// gV = Pᵀ·gO; gP = gO·Vᵀ; gS = P ⊙ (gP − Δ); gQ = s·gS·K; gK = s·gSᵀ·Q.
/// With grouped k/v heads, gK and gV of a k/v head sum over its query heads.
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
    /// Scaled dot-product attention: q `[B,H,T,D]`, k `[B,Hkv,S,D]`, v `[B,Hkv,S,Dv]`, with
    /// `Hkv` dividing `H` (grouped-query attention; `Hkv == H` is plain multi-head,
    /// `Hkv == 1` multi-query): query head `h` reads k/v head `h / (H / Hkv)`, as PyTorch's
    /// `scaled_dot_product_attention(enable_gqa=True)`, without repeating k or v. `mask`: an
    /// additive float bias or a U8 keep-mask broadcastable to `[B,H,T,S]` (a constant, e.g.
    /// a `[B,1,1,S]` key-padding mask); `opts`: causal flag (bottom-right aligned when
    /// T < S, as a KV cache) and scale (default 1/√D). Returns `[B,H,T,Dv]`; the gradients of
    /// k and v have their shapes. Memory is linear in T and S: no `[T, S]` block is kept.
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
    /// // Grouped-query: 4 query heads share the 2 k/v heads.
    /// let q4 = Tensor::randn(&ctx, fucina_core::DType::F32, &[1, 4, 4, 8], 3)?;
    /// let kv2 = Tensor::randn(&ctx, fucina_core::DType::F32, &[1, 2, 4, 8], 4)?.requires_grad_(true)?;
    /// let o = Tensor::scaled_dot_product_attention(&q4, &kv2, &kv2, None, opts)?;
    /// assert_eq!(o.shape(), &[1, 4, 4, 8]);
    /// o.sum_all()?.backward()?;
    /// assert_eq!(kv2.grad().unwrap().shape(), &[1, 2, 4, 8]);
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

/// The fucina side of an attention row: `x` = [q, k, v], the given mask and options.
fn sdpa(x: &[Tensor], mask: Option<&Tensor>, causal: bool, scale: Option<f64>) -> Result<Tensor> {
    Tensor::scaled_dot_product_attention(&x[0], &x[1], &x[2], mask, AttentionOpts { causal, scale })
}

/// The gradcheck rows: plain, causal with a scale, a key-padding bias, and grouped-query
/// (2 query heads per k/v head, causal; a decode step, T = 1 < S, causal) and multi-query
/// (one k/v head) rows (the torch side's `sdpa` is the generator's reference attention; it
/// gets k and v repeated per query head, `repeat_interleave` as transformers' `repeat_kv`).
pub(crate) fn cases() -> Vec<OpCase> {
    vec![
        row(
            "scaled_dot_product_attention",
            "lambda x: sdpa(x[0], x[1], x[2])",
            vec![f(&[1, 2, 3, 4]), f(&[1, 2, 5, 4]), f(&[1, 2, 5, 3])],
            |x| sdpa(x, None, false, None),
        ),
        row(
            "sdpa_causal",
            "lambda x: sdpa(x[0], x[1], x[2], causal=True, scale=0.7)",
            vec![f(&[2, 2, 4, 3]), f(&[2, 2, 4, 3]), f(&[2, 2, 4, 3])],
            |x| sdpa(x, None, true, Some(0.7)),
        ),
        row(
            "sdpa_padding_mask",
            "lambda x: sdpa(x[0], x[1], x[2], bias=torch.tensor([0.0 if (i % 5 < 3 or i < 5) \
             else -1e4 for i in range(10)], dtype=x[0].dtype).reshape(2, 1, 1, 5))",
            vec![f(&[2, 2, 3, 4]), f(&[2, 2, 5, 4]), f(&[2, 2, 5, 4])],
            |x| {
                let ctx = x[0].ctx();
                // Batch 0 keeps 5 keys, batch 1 keeps the first 3: an additive bias [B,1,1,S].
                let bias: Vec<f64> = (0..10)
                    .map(|i| if i % 5 < 3 || i < 5 { 0.0 } else { -1e4 })
                    .collect();
                let m = Tensor::leaf(
                    ctx,
                    ctx.to_dtype(&ctx.from_slice(&bias, &[2, 1, 1, 5])?, x[0].dtype())?
                );
                sdpa(x, Some(&m), false, None)
            },
        ),
        row(
            "sdpa_gqa",
            "lambda x: sdpa(x[0], x[1].repeat_interleave(2, dim=1), \
             x[2].repeat_interleave(2, dim=1), causal=True)",
            vec![f(&[2, 4, 5, 3]), f(&[2, 2, 5, 3]), f(&[2, 2, 5, 3])],
            |x| sdpa(x, None, true, None),
        ),
        row(
            "sdpa_mqa",
            "lambda x: sdpa(x[0], x[1].repeat_interleave(3, dim=1), \
             x[2].repeat_interleave(3, dim=1), scale=0.6)",
            vec![f(&[2, 3, 4, 4]), f(&[2, 1, 6, 4]), f(&[2, 1, 6, 2])],
            |x| sdpa(x, None, false, Some(0.6)),
        ),
        row(
            "sdpa_gqa_decode",
            "lambda x: sdpa(x[0], x[1].repeat_interleave(2, dim=1), \
             x[2].repeat_interleave(2, dim=1), causal=True)",
            vec![f(&[1, 4, 1, 3]), f(&[1, 2, 6, 3]), f(&[1, 2, 6, 3])],
            |x| sdpa(x, None, true, None),
        ),
    ]
}
