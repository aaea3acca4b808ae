//! A GPT decoder with nanoGPT's layout and init: token and learned position
//! embeddings (`wte`, `wpe`), pre-LN blocks (`blocks.N.{ln1, qkv, proj, ln2,
//! fc, fc_proj}`), a final `ln_f`, and a head tied to `wte` (or an untied
//! `lm_head`). Init: N(0, 0.02) for every linear weight and embedding, zero
//! biases, ones/zeros for norms; optionally GPT-2's residual scaling.
//!
//! With the default config it is `CharGPT` of the torch workloads,
//! `tools/torch_chargpt.py` in this repository, parameter for parameter (the
//! golden test `fucina-nn/tests/gpt_golden.rs` checks logits, loss and every
//! gradient against it, from `tools/gen_nn_goldens.py`).

use fucina_autograd::{CrossEntropyOpts, Tensor};
use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::dropout::Dropout;
use crate::embedding::Embedding;
use crate::error::{Error, Result};
use crate::init::{Dist, Init};
use crate::linear::Linear;
use crate::norm::LayerNorm;
use crate::transformer::{BlockConfig, BlockInit, TransformerBlock};

/// A GPT's shape and init (serde; missing fields take `CharGPT`'s values).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GptConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Maximum sequence length (rows of `wpe`).
    pub block_size: usize,
    /// Number of blocks.
    pub n_layer: usize,
    /// Attention heads per block.
    pub n_head: usize,
    /// Model width.
    pub n_embd: usize,
    /// Dropout after the embeddings and on each residual branch.
    pub dropout: f64,
    /// Biases in the linear layers and norms.
    pub bias: bool,
    /// The output head is `wte`'s transpose (no `lm_head` parameter).
    pub tied_head: bool,
    /// LayerNorm epsilon.
    pub ln_eps: f64,
    /// Standard deviation of the N(0, std) weight init.
    pub init_std: f64,
    /// GPT-2's `std / √(2·n_layer)` for the residual projections.
    pub residual_scaling: bool,
}

impl Default for GptConfig {
    /// `CharGPT`: vocab 65, block 128, 4 layers, 4 heads, width 256, tied.
    fn default() -> Self {
        GptConfig {
            vocab_size: 65,
            block_size: 128,
            n_layer: 4,
            n_head: 4,
            n_embd: 256,
            dropout: 0.0,
            bias: true,
            tied_head: true,
            ln_eps: 1e-5,
            init_std: 0.02,
            residual_scaling: false,
        }
    }
}

impl GptConfig {
    /// The block config this GPT's blocks use.
    pub fn block(&self) -> BlockConfig {
        BlockConfig {
            d_model: self.n_embd,
            n_head: self.n_head,
            d_ff: 4 * self.n_embd,
            activation: Activation::GeluTanh,
            norm_first: true,
            causal: true,
            dropout: self.dropout,
            ln_eps: self.ln_eps,
            bias: self.bias,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::config("GptConfig", msg));
        Error::require_positive(
            "GptConfig",
            &[
                ("vocab_size", self.vocab_size),
                ("block_size", self.block_size),
                ("n_layer", self.n_layer),
            ],
        )?;
        if self.n_head == 0 || self.n_embd == 0 || !self.n_embd.is_multiple_of(self.n_head) {
            return bad(format!(
                "n_embd ({}) must be a positive multiple of n_head ({})",
                self.n_embd, self.n_head
            ));
        }
        if !(self.init_std.is_finite() && self.init_std >= 0.0) {
            return bad(format!(
                "init_std ({}) must be finite and ≥ 0",
                self.init_std
            ));
        }
        Ok(())
    }
}

/// A GPT decoder.
///
/// ```
/// use fucina_nn::{Gpt, GptConfig, Init, Module};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let cfg = GptConfig { vocab_size: 11, block_size: 8, n_layer: 2, n_head: 2, n_embd: 8, ..GptConfig::default() };
/// let gpt = Gpt::new(&mut Init::new(&ctx, fucina_core::DType::F32, 0), &cfg).unwrap();
/// assert_eq!(gpt.named_parameters()[2].0, "blocks.0.ln1.weight");
/// let idx = fucina_autograd::Tensor::constant(&ctx, &[1i64, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
/// assert_eq!(gpt.forward(&idx).unwrap().shape(), &[2, 3, 11]);
/// let loss = gpt.loss(&idx, &idx).unwrap();
/// assert!((loss.item().unwrap() - (11f64).ln()).abs() < 0.1);
/// ```
#[derive(Debug, fucina_nn_derive::Module)]
pub struct Gpt {
    /// Token embeddings `[vocab, d]` (also the tied head).
    pub wte: Embedding,
    /// Position embeddings `[block_size, d]`.
    pub wpe: Embedding,
    /// Dropout after the embeddings.
    pub drop: Dropout,
    /// The blocks.
    pub blocks: Vec<TransformerBlock>,
    /// Final norm.
    pub ln_f: LayerNorm,
    /// The untied head `[vocab, d]` (no bias), when `tied_head` is false.
    pub lm_head: Option<Linear>,
    /// The config it was built from.
    #[module(skip)]
    pub config: GptConfig,
}

impl Gpt {
    /// A GPT with nanoGPT's init from `init`'s seed.
    pub fn new(init: &mut Init, cfg: &GptConfig) -> Result<Gpt> {
        cfg.validate()?;
        let w = Dist::normal(cfg.init_std);
        let wte = Embedding::with_dist(init, cfg.vocab_size, cfg.n_embd, w)?;
        let wpe = Embedding::with_dist(init, cfg.block_size, cfg.n_embd, w)?;
        let drop = Dropout::new(init, cfg.dropout)?;
        let bi = BlockInit::gpt2(cfg.init_std, cfg.n_layer, cfg.residual_scaling);
        let bc = cfg.block();
        let blocks = (0..cfg.n_layer)
            .map(|_| TransformerBlock::new(init, &bc, Some(bi)))
            .collect::<Result<Vec<_>>>()?;
        let ln_f = LayerNorm::with_bias(init, cfg.n_embd, cfg.ln_eps, cfg.bias)?;
        let lm_head = if cfg.tied_head {
            None
        } else {
            Some(Linear::with_dist(
                init,
                cfg.n_embd,
                cfg.vocab_size,
                false,
                w,
                Dist::Zeros,
            )?)
        };
        Ok(Gpt {
            wte,
            wpe,
            drop,
            blocks,
            ln_f,
            lm_head,
            config: cfg.clone(),
        })
    }

    /// Token ids `idx [B, T]` (I64 or I32, `T ≤ block_size`) → logits `[B, T, vocab]`.
    pub fn forward(&self, idx: &Tensor) -> Result<Tensor> {
        if idx.rank() != 2 || idx.shape()[1] == 0 || idx.shape()[1] > self.config.block_size {
            return Err(Error::input(
                "Gpt",
                format!(
                    "expected ids [B, T] with 1 ≤ T ≤ {}",
                    self.config.block_size
                ),
                idx.shape(),
            ));
        }
        let t = idx.shape()[1];
        let pos: Vec<i64> = (0..t as i64).collect();
        let pos = Tensor::constant(idx.ctx(), &pos, &[t])?;
        let x = self.wte.forward(idx)?.add(&self.wpe.forward(&pos)?)?;
        let mut x = self.drop.forward(&x)?;
        for blk in &self.blocks {
            x = blk.forward(&x, None)?;
        }
        let x = self.ln_f.forward(&x)?;
        match &self.lm_head {
            Some(h) => h.forward(&x),
            None => Ok(x.linear(&self.wte.weight, None)?),
        }
    }

    /// Mean cross-entropy of the next-token logits against `targets [B, T]`.
    pub fn loss(&self, idx: &Tensor, targets: &Tensor) -> Result<Tensor> {
        if targets.shape() != idx.shape() {
            return Err(Error::input(
                "Gpt::loss",
                format!("targets must have the ids' shape {:?}", idx.shape()),
                targets.shape(),
            ));
        }
        let logits = self.forward(idx)?;
        let v = self.config.vocab_size as isize;
        Ok(logits
            .reshape([-1, v])?
            .cross_entropy(&targets.reshape([-1])?, CrossEntropyOpts::default())?)
    }
}
