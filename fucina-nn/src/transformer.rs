//! Transformer blocks: `FeedForward` (`fc` → activation → `fc_proj`) and
//! `TransformerBlock`, pre-LN (GPT-2: `x + attn(ln1(x))`, then
//! `x + mlp(ln2(x))`) or post-LN (original Transformer / BERT:
//! `ln1(x + attn(x))`, then `ln2(x + mlp(x))`), with residual dropout.
//!
//! Parameter names are nanoGPT-style `CharGPT`'s: `ln1`, `qkv`, `proj`,
//! `ln2`, `fc`, `fc_proj` (attention and MLP are flattened into the block).

use fucina_autograd::Tensor;
use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::attention::SelfAttention;
use crate::dropout::Dropout;
use crate::error::{Error, Result};
use crate::init::{Dist, Init};
use crate::linear::Linear;
use crate::module::Forward;
use crate::norm::LayerNorm;

/// The two-layer position-wise MLP of a transformer block.
#[derive(Debug, fucina_nn_derive::Module)]
pub struct FeedForward {
    /// `[d_ff, d_model]`.
    pub fc: Linear,
    /// `[d_model, d_ff]`.
    pub fc_proj: Linear,
    /// Between the two.
    pub activation: Activation,
}

impl FeedForward {
    /// `x [..., d_model] -> [..., d_model]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.fc_proj
            .forward(&self.activation.forward(&self.fc.forward(x)?)?)
    }
}

impl Forward for FeedForward {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        FeedForward::forward(self, x)
    }
}

/// How a [`TransformerBlock`] is built (serde: a model config embeds it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BlockConfig {
    /// Model width.
    pub d_model: usize,
    /// Attention heads (must divide `d_model`).
    pub n_head: usize,
    /// MLP hidden width (GPT: `4·d_model`).
    pub d_ff: usize,
    /// The MLP activation.
    pub activation: Activation,
    /// Pre-LN (`true`, GPT-2) or post-LN (`false`, BERT).
    pub norm_first: bool,
    /// Causal (decoder) or bidirectional (encoder) attention.
    pub causal: bool,
    /// Residual dropout probability.
    pub dropout: f64,
    /// LayerNorm epsilon.
    pub ln_eps: f64,
    /// Biases in the linear layers.
    pub bias: bool,
}

impl Default for BlockConfig {
    /// A GPT-2-style block of width 256 with 4 heads.
    fn default() -> Self {
        BlockConfig {
            d_model: 256,
            n_head: 4,
            d_ff: 1024,
            activation: Activation::GeluTanh,
            norm_first: true,
            causal: true,
            dropout: 0.0,
            ln_eps: 1e-5,
            bias: true,
        }
    }
}

/// Weight distributions of a block's linear layers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockInit {
    /// `qkv` and `fc` weights.
    pub weight: Dist,
    /// `proj` and `fc_proj` weights (the residual projections).
    pub residual_weight: Dist,
    /// Every linear bias.
    pub bias: Dist,
}

impl BlockInit {
    /// nanoGPT: N(0, std) weights, zero biases; with `residual_scaling`, the
    /// residual projections get `std / √(2·n_layer)` (GPT-2).
    pub fn gpt2(std: f64, n_layer: usize, residual_scaling: bool) -> BlockInit {
        let rs = if residual_scaling {
            std / ((2 * n_layer.max(1)) as f64).sqrt()
        } else {
            std
        };
        BlockInit {
            weight: Dist::normal(std),
            residual_weight: Dist::normal(rs),
            bias: Dist::Zeros,
        }
    }
}

/// One transformer layer: attention and MLP sub-blocks with residuals,
/// pre- or post-LN.
///
/// ```
/// use fucina_nn::{BlockConfig, Init, Module, TransformerBlock};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mut init = Init::new(&ctx, fucina_core::DType::F32, 0);
/// let cfg = BlockConfig { d_model: 8, n_head: 2, d_ff: 32, ..BlockConfig::default() };
/// let blk = TransformerBlock::new(&mut init, &cfg, None).unwrap();
/// let names: Vec<String> = blk.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names[..4], ["ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias"]);
/// let x = fucina_autograd::Tensor::constant(&ctx, &[0.1f32; 3 * 8], &[1, 3, 8]).unwrap();
/// assert_eq!(blk.forward(&x, None).unwrap().shape(), &[1, 3, 8]);
/// ```
#[derive(Debug, fucina_nn_derive::Module)]
pub struct TransformerBlock {
    /// Norm before (pre-LN) or after (post-LN) attention.
    pub ln1: LayerNorm,
    /// Self-attention (`qkv`, `proj`).
    #[module(flatten)]
    pub attn: SelfAttention,
    /// Norm before (pre-LN) or after (post-LN) the MLP.
    pub ln2: LayerNorm,
    /// The MLP (`fc`, `fc_proj`).
    #[module(flatten)]
    pub mlp: FeedForward,
    /// Residual dropout (after attention and after the MLP).
    pub dropout: Dropout,
    /// Pre-LN or post-LN.
    #[module(skip)]
    pub norm_first: bool,
}

impl TransformerBlock {
    /// A block from `cfg`; `dists: None` is PyTorch's default init.
    pub fn new(
        init: &mut Init,
        cfg: &BlockConfig,
        dists: Option<BlockInit>,
    ) -> Result<TransformerBlock> {
        let d = cfg.d_model;
        if cfg.d_ff == 0 {
            return Err(Error::config("TransformerBlock", "d_ff must be positive"));
        }
        let ln1 = LayerNorm::new(init, d, cfg.ln_eps)?;
        let (w, rw, b, fw, fb) = match dists {
            Some(di) => (di.weight, di.residual_weight, di.bias, di.weight, di.bias),
            None => {
                let k = Dist::kaiming_uniform(d);
                (k, k, k, k, k)
            }
        };
        let attn = SelfAttention::with_dist(init, d, cfg.n_head, cfg.causal, cfg.bias, w, rw, b)?;
        let ln2 = LayerNorm::new(init, d, cfg.ln_eps)?;
        let fc = Linear::with_dist(init, d, cfg.d_ff, cfg.bias, fw, fb)?;
        let (pw, pb) = match dists {
            Some(di) => (di.residual_weight, di.bias),
            None => {
                let k = Dist::kaiming_uniform(cfg.d_ff);
                (k, k)
            }
        };
        let fc_proj = Linear::with_dist(init, cfg.d_ff, d, cfg.bias, pw, pb)?;
        Ok(TransformerBlock {
            ln1,
            attn,
            ln2,
            mlp: FeedForward {
                fc,
                fc_proj,
                activation: cfg.activation,
            },
            dropout: Dropout::new(init, cfg.dropout)?,
            norm_first: cfg.norm_first,
        })
    }

    /// `x [B, T, D] -> [B, T, D]`; `key_padding_mask`: U8 `[B, T]`.
    pub fn forward(&self, x: &Tensor, key_padding_mask: Option<&Tensor>) -> Result<Tensor> {
        if self.norm_first {
            let a = self.attn.forward(&self.ln1.forward(x)?, key_padding_mask)?;
            let x = x.add(&self.dropout.forward(&a)?)?;
            let m = self.mlp.forward(&self.ln2.forward(&x)?)?;
            Ok(x.add(&self.dropout.forward(&m)?)?)
        } else {
            let a = self.attn.forward(x, key_padding_mask)?;
            let x = self.ln1.forward(&x.add(&self.dropout.forward(&a)?)?)?;
            let m = self.mlp.forward(&x)?;
            self.ln2.forward(&x.add(&self.dropout.forward(&m)?)?)
        }
    }
}

impl Forward for TransformerBlock {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        TransformerBlock::forward(self, x, None)
    }
}
