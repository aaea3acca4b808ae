//! One decoder block for every family, configured by its
//! [`DecoderConfig`](crate::hf::DecoderConfig): pre-norm attention and MLP
//! sublayers with residuals, `x + attn(norm₁(x))`, then `+ mlp(norm₂(·))`.
//!
//! - attention: a fused `c_attn` (GPT-2) or separate q/k/v projections,
//!   optional per-head q/k RMSNorm (Qwen3), RoPE on q and k (Llama, Qwen),
//!   grouped-query attention through the streaming kernel with K/V heads
//!   read in place (never repeated), an optional KV cache, then `o`;
//! - MLP: `down(act(up(x)))` (GPT-2) or SwiGLU `down(act(gate(x)) ⊙ up(x))`;
//! - norms: LayerNorm (GPT-2) or RMSNorm.

use fucina_autograd::Tensor;

use super::names::Names;
use crate::activation::Activation;
use crate::attention::{merge_heads, AttentionOpts};
use crate::dropout::Dropout;
use crate::error::{Error, Result};
use crate::kv_cache::KvCache;
use crate::linear::Linear;
use crate::module::module_children;
use crate::norm::{LayerNorm, RmsNorm};
use crate::rope::Rope;

/// LayerNorm or RMSNorm (transparent in the module tree: its parameters
/// are `weight` and, for LayerNorm, `bias`).
#[derive(Clone, Debug)]
pub enum Norm {
    /// GPT-2's LayerNorm.
    Layer(LayerNorm),
    /// Llama's and Qwen's RMSNorm.
    Rms(RmsNorm),
}

impl Norm {
    /// The scale (`[dim]`, in the compute dtype).
    pub fn weight(&self) -> &Tensor {
        match self {
            Norm::Layer(n) => &n.weight,
            Norm::Rms(n) => &n.weight,
        }
    }

    /// Normalises over the last axis.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Norm::Layer(n) => n.forward(x),
            Norm::Rms(n) => n.forward(x),
        }
    }
}

impl crate::module::Module for Norm {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        match self {
            Norm::Layer(n) => n.visit_params(prefix, f),
            Norm::Rms(n) => n.visit_params(prefix, f),
        }
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor)) {
        match self {
            Norm::Layer(n) => n.visit_params_mut(prefix, f),
            Norm::Rms(n) => n.visit_params_mut(prefix, f),
        }
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &crate::buffer::Buffer)) {
        match self {
            Norm::Layer(n) => n.visit_buffers(prefix, f),
            Norm::Rms(n) => n.visit_buffers(prefix, f),
        }
    }
    fn visit_modules(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn std::any::Any)) {
        match self {
            Norm::Layer(n) => n.visit_modules(prefix, f),
            Norm::Rms(n) => n.visit_modules(prefix, f),
        }
    }
    fn visit_modules_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn std::any::Any)) {
        match self {
            Norm::Layer(n) => n.visit_modules_mut(prefix, f),
            Norm::Rms(n) => n.visit_modules_mut(prefix, f),
        }
    }
    fn set_training(&self, _training: bool) {}
}

/// A layer's attention sublayer.
#[derive(Clone, Debug)]
pub struct DecoderAttention {
    /// GPT-2's fused `[q; k; v]` projection, `[(H + 2·Hkv)·D, hidden]`.
    pub qkv: Option<Linear>,
    /// Query projection `[H·D, hidden]` (when not fused).
    pub q_proj: Option<Linear>,
    /// Key projection `[Hkv·D, hidden]`.
    pub k_proj: Option<Linear>,
    /// Value projection `[Hkv·D, hidden]`.
    pub v_proj: Option<Linear>,
    /// Output projection `[hidden, H·D]`.
    pub o_proj: Linear,
    /// Qwen3's RMSNorm of each query head `[D]`.
    pub q_norm: Option<RmsNorm>,
    /// Qwen3's RMSNorm of each key head `[D]`.
    pub k_norm: Option<RmsNorm>,
    /// Dropout on the output (GPT-2's `resid_pdrop`).
    pub dropout: Dropout,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads.
    pub num_kv_heads: usize,
    /// Head width.
    pub head_dim: usize,
    /// The family's names.
    pub names: &'static Names,
}

module_children!(DecoderAttention, |s| [
    s.names.qkv => qkv,
    s.names.q => q_proj,
    s.names.k => k_proj,
    s.names.v => v_proj,
    s.names.o => o_proj,
    s.names.q_norm => q_norm,
    s.names.k_norm => k_norm,
    "dropout" => dropout,
]);

/// What the attention of every layer shares in one forward.
pub struct AttnInputs<'a> {
    /// Position of every token, I64 `[B, T]`.
    pub positions: &'a Tensor,
    /// U8 keep-mask `[B, 1, 1, S]` over keys, `None` when every key is a token.
    pub mask: Option<&'a Tensor>,
    /// The rotary tables (RoPE families).
    pub rope: Option<&'a Rope>,
}

impl DecoderAttention {
    /// `x [B, T, hidden] -> [B, T, hidden]`; with a cache, this layer's K/V
    /// are appended to `cache` (layer `layer`) and attention reads all of its
    /// filled prefix.
    pub fn forward(
        &self,
        x: &Tensor,
        inputs: &AttnInputs<'_>,
        cache: Option<(&mut KvCache, usize)>,
    ) -> Result<Tensor> {
        let s = x.shape();
        let (b, t) = (s[0] as isize, s[1] as isize);
        let (h, hkv, d) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let (q, k, v) = match (&self.qkv, &self.q_proj, &self.k_proj, &self.v_proj) {
            (Some(qkv), _, _, _) => {
                let y = qkv
                    .forward(x)?
                    .reshape([b, t, (h + 2 * hkv) as isize, d as isize])?;
                (
                    y.narrow(2, 0, h)?,
                    y.narrow(2, h, hkv)?,
                    y.narrow(2, h + hkv, hkv)?,
                )
            }
            (None, Some(qp), Some(kp), Some(vp)) => (
                qp.forward(x)?.reshape([b, t, h as isize, d as isize])?,
                kp.forward(x)?.reshape([b, t, hkv as isize, d as isize])?,
                vp.forward(x)?.reshape([b, t, hkv as isize, d as isize])?,
            ),
            _ => {
                return Err(Error::config(
                    "DecoderAttention",
                    "needs either the fused qkv projection or all of q, k and v",
                ))
            }
        };
        let (mut q, mut k) = (q, k);
        if let Some(n) = &self.q_norm {
            q = n.forward(&q)?;
        }
        if let Some(n) = &self.k_norm {
            k = n.forward(&k)?;
        }
        if let Some(rope) = inputs.rope {
            q = rope.apply(&q, inputs.positions)?;
            k = rope.apply(&k, inputs.positions)?;
        }
        // [B, T, heads, D] -> [B, heads, T, D]: views the kernel reads in place.
        let q = q.permute(&[0, 2, 1, 3])?;
        let (k, v) = match cache {
            Some((cache, layer)) => {
                let (kc, vc) = cache.append(layer, &k.raw()?, &v.raw()?)?;
                let ctx = x.ctx();
                (
                    Tensor::from_raw(ctx, kc, false)?,
                    Tensor::from_raw(ctx, vc, false)?,
                )
            }
            None => (k.permute(&[0, 2, 1, 3])?, v.permute(&[0, 2, 1, 3])?),
        };
        let opts = AttentionOpts {
            causal: true,
            scale: None,
        };
        let o = Tensor::scaled_dot_product_attention(&q, &k, &v, inputs.mask, opts)?;
        self.dropout
            .forward(&self.o_proj.forward(&merge_heads(&o)?)?)
    }
}

/// A layer's feed-forward sublayer.
#[derive(Clone, Debug)]
pub struct DecoderMlp {
    /// The gate of a gated MLP `[inter, hidden]`.
    pub gate: Option<Linear>,
    /// The up-projection `[inter, hidden]`.
    pub up: Linear,
    /// The down-projection `[hidden, inter]`.
    pub down: Linear,
    /// The activation (on the gate when gated).
    pub act: Activation,
    /// Dropout on the output (GPT-2's `resid_pdrop`).
    pub dropout: Dropout,
    /// The family's names.
    pub names: &'static Names,
}

module_children!(DecoderMlp, |s| [
    s.names.gate => gate,
    s.names.up => up,
    s.names.down => down,
    "dropout" => dropout,
]);

impl DecoderMlp {
    /// `down(act(up(x)))`, or `down(act(gate(x)) ⊙ up(x))` when gated.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let hidden = match &self.gate {
            Some(g) => self
                .act
                .forward(&g.forward(x)?)?
                .mul(&self.up.forward(x)?)?,
            None => self.act.forward(&self.up.forward(x)?)?,
        };
        self.dropout.forward(&self.down.forward(&hidden)?)
    }
}

/// One decoder block.
#[derive(Clone, Debug)]
pub struct DecoderLayer {
    /// The norm before attention.
    pub attn_norm: Norm,
    /// Attention.
    pub attn: DecoderAttention,
    /// The norm before the MLP.
    pub mlp_norm: Norm,
    /// The MLP.
    pub mlp: DecoderMlp,
    /// The family's names.
    pub names: &'static Names,
}

module_children!(DecoderLayer, |s| [
    s.names.attn_norm => attn_norm,
    s.names.attn => attn,
    s.names.mlp_norm => mlp_norm,
    s.names.mlp => mlp,
]);

impl DecoderLayer {
    /// `x + attn(norm₁(x))`, then `+ mlp(norm₂(·))`.
    pub fn forward(
        &self,
        x: &Tensor,
        inputs: &AttnInputs<'_>,
        cache: Option<(&mut KvCache, usize)>,
    ) -> Result<Tensor> {
        let a = self
            .attn
            .forward(&self.attn_norm.forward(x)?, inputs, cache)?;
        let x = x.add(&a)?;
        let m = self.mlp.forward(&self.mlp_norm.forward(&x)?)?;
        Ok(x.add(&m)?)
    }
}
