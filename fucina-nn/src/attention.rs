//! Multi-head attention: head split/merge helpers, a functional
//! `multi_head_attention` over projected `q, k, v` (reusable by any layout,
//! e.g. BERT's separate query/key/value), and `SelfAttention` with a fused
//! `qkv` projection and an output `proj` (GPT's layout).
//!
//! The core is autograd's `scaled_dot_product_attention` (softmax(QKᵀ/√d)V,
//! causal and keep-masks, its own backward), which reads heads transposed
//! out of `[B, T, H, D]` in place. A key-padding mask is a U8 `[B, S]`
//! keep-mask (1 = a real token, 0 = padding); fully masked rows give zeros.

use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};

use crate::error::{Error, Result};
use crate::init::{Dist, Init};
use crate::linear::Linear;
pub use fucina_core::kernels::fused::attention::AttentionOpts;

/// `[B, T, D] -> [B, H, T, D/H]` (a view whenever the strides allow).
pub fn split_heads(x: &Tensor, n_head: usize) -> Result<Tensor> {
    let s = x.shape();
    if x.rank() != 3 || n_head == 0 || !s[2].is_multiple_of(n_head) {
        return Err(Error::input(
            "split_heads",
            format!("expected [B, T, D] with D divisible by {n_head} heads"),
            s,
        ));
    }
    let (b, t, d) = (s[0] as isize, s[1] as isize, s[2]);
    Ok(x.reshape([b, t, n_head as isize, (d / n_head) as isize])?
        .transpose(1, 2)?)
}

/// `[B, H, T, Dh] -> [B, T, H·Dh]` (one copy).
pub fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let s = x.shape();
    if x.rank() != 4 {
        return Err(Error::input("merge_heads", "expected [B, H, T, Dh]", s));
    }
    let (b, h, t, dh) = (s[0], s[1], s[2], s[3]);
    Ok(x.transpose(1, 2)?
        .reshape([b as isize, t as isize, (h * dh) as isize])?)
}

/// A U8 key-padding keep-mask `[B, S]` from each sequence's length
/// (`1` for positions `< len`, `0` after).
///
/// ```
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let m = fucina_nn::attention::padding_mask(&ctx, &[2, 3], 3).unwrap();
/// assert_eq!(m.to_vec::<u8>().unwrap(), vec![1, 1, 0, 1, 1, 1]);
/// ```
pub fn padding_mask(ctx: &ExecContext, lengths: &[usize], s: usize) -> Result<Tensor> {
    if let Some(&l) = lengths.iter().find(|&&l| l > s) {
        return Err(Error::config(
            "padding_mask",
            format!("length {l} exceeds the sequence length {s}"),
        ));
    }
    // In the pool (a clean error for a size that cannot be allocated).
    let mut m = ctx.zeros(fucina_core::DType::U8, &[lengths.len(), s])?;
    if s > 0 {
        for (row, &l) in m.as_mut_slice::<u8>()?.chunks_mut(s).zip(lengths) {
            for (j, x) in row.iter_mut().enumerate() {
                *x = u8::from(j < l);
            }
        }
    }
    Ok(Tensor::from_raw(ctx, m, false)?)
}

/// Attention over projected `q [B, T, D]`, `k [B, S, D]`, `v [B, S, Dv]`
/// split into `n_head` heads: `softmax(QKᵀ/√(D/H) + mask)·V`, heads merged
/// back to `[B, T, Dv]`. `key_padding_mask`: U8 `[B, S]` (1 = attend).
pub fn multi_head_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    n_head: usize,
    key_padding_mask: Option<&Tensor>,
    causal: bool,
) -> Result<Tensor> {
    let (qh, kh, vh) = (
        split_heads(q, n_head)?,
        split_heads(k, n_head)?,
        split_heads(v, n_head)?,
    );
    let mask = match key_padding_mask {
        None => None,
        Some(m) => {
            let (b, s) = (k.shape()[0], k.shape()[1]);
            if m.dtype() != DType::U8 || m.shape() != [b, s] {
                return Err(Error::input(
                    "multi_head_attention",
                    format!("key_padding_mask must be U8 [{b}, {s}] (1 = attend)"),
                    m.shape(),
                ));
            }
            Some(m.reshape([b as isize, 1, 1, s as isize])?)
        }
    };
    let opts = AttentionOpts {
        causal,
        scale: None,
    };
    let y = Tensor::scaled_dot_product_attention(&qh, &kh, &vh, mask.as_ref(), opts)?;
    merge_heads(&y)
}

/// Self-attention with a fused input projection `qkv [3D, D]` (rows: query,
/// key, value) and an output projection `proj [D, D]` — GPT-2's
/// `c_attn`/`c_proj`, named `qkv`/`proj` as nanoGPT-style `CharGPT`.
///
/// ```
/// use fucina_nn::{Init, SelfAttention};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mut init = Init::new(&ctx, fucina_core::DType::F32, 0);
/// let attn = SelfAttention::new(&mut init, 8, 2, true).unwrap();
/// let x = fucina_autograd::Tensor::constant(&ctx, &[0.1f32; 2 * 5 * 8], &[2, 5, 8]).unwrap();
/// assert_eq!(attn.forward(&x, None).unwrap().shape(), &[2, 5, 8]);
/// ```
#[derive(Debug, fucina_nn_derive::Module)]
pub struct SelfAttention {
    /// Fused query/key/value projection `[3D, D]`.
    pub qkv: Linear,
    /// Output projection `[D, D]`.
    pub proj: Linear,
    /// Number of heads.
    #[module(skip)]
    pub n_head: usize,
    /// Mask future positions (decoder) or not (encoder).
    #[module(skip)]
    pub causal: bool,
}

impl SelfAttention {
    /// PyTorch's default `Linear` init for both projections, with biases.
    pub fn new(
        init: &mut Init,
        d_model: usize,
        n_head: usize,
        causal: bool,
    ) -> Result<SelfAttention> {
        let d = Dist::kaiming_uniform(d_model);
        Self::with_dist(init, d_model, n_head, causal, true, d, d, d)
    }

    /// Explicit distributions: `weight` for `qkv`, `proj_weight` for `proj`
    /// (GPT-2's residual scaling), `bias` for both biases.
    pub fn with_dist(
        init: &mut Init,
        d_model: usize,
        n_head: usize,
        causal: bool,
        bias: bool,
        weight: Dist,
        proj_weight: Dist,
        bias_dist: Dist,
    ) -> Result<SelfAttention> {
        if n_head == 0 || !d_model.is_multiple_of(n_head) {
            return Err(Error::config(
                "SelfAttention",
                format!("d_model ({d_model}) must be a positive multiple of n_head ({n_head})"),
            ));
        }
        Ok(SelfAttention {
            qkv: Linear::with_dist(init, d_model, 3 * d_model, bias, weight, bias_dist)?,
            proj: Linear::with_dist(init, d_model, d_model, bias, proj_weight, bias_dist)?,
            n_head,
            causal,
        })
    }

    /// The model width.
    pub fn d_model(&self) -> usize {
        self.proj.out_features()
    }

    /// `x [B, T, D] -> [B, T, D]`; `key_padding_mask`: U8 `[B, T]`.
    pub fn forward(&self, x: &Tensor, key_padding_mask: Option<&Tensor>) -> Result<Tensor> {
        let d = self.d_model();
        if x.rank() != 3 || x.shape()[2] != d {
            return Err(Error::input(
                "SelfAttention",
                format!("expected [B, T, {d}]"),
                x.shape(),
            ));
        }
        let qkv = self.qkv.forward(x)?.split(2, &[d, d, d])?;
        let y = multi_head_attention(
            &qkv[0],
            &qkv[1],
            &qkv[2],
            self.n_head,
            key_padding_mask,
            self.causal,
        )?;
        self.proj.forward(&y)
    }
}
