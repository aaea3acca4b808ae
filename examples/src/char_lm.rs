//! The character-level language model `train_gpt` trains: nanoGPT's GPT
//! (`--arch gpt`: learned positions, LayerNorm, GELU, tied head) or a small
//! Llama-layout `fucina_nn::CausalLm` (`--arch llama`: RoPE, RMSNorm,
//! SwiGLU, grouped-query attention), behind one type with the operations
//! the training loop needs: the next-character loss, the logits, train/eval
//! mode, the parameters and state dict, and sampling.

use clap::ValueEnum;
use fucina_autograd::{no_grad, CrossEntropyOpts, ScopeExt, Tensor};
use fucina_core::{rng, DType, ExecContext};
use fucina_nn::hf::config::{MlpKind, NormKind, Positions};
use fucina_nn::hf::{DecoderConfig, ModelType};
use fucina_nn::{Activation, CausalLm, Gpt, GptConfig, Init, Module, RopeScaling};
use serde::{Deserialize, Serialize};

use crate::error::{heads_divide, Result};

/// The model family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// nanoGPT's GPT: learned positions, LayerNorm, GELU MLP, head tied to the embedding.
    Gpt,
    /// Llama's layout (`fucina_nn::CausalLm`): RoPE, RMSNorm, SwiGLU, grouped-query attention.
    Llama,
}

/// The shape of a Llama-layout character model.
#[derive(Clone, Copy, Debug)]
pub struct LlamaShape {
    /// Characters in the vocabulary.
    pub vocab: usize,
    /// Model width.
    pub width: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// The SwiGLU's hidden width.
    pub intermediate: usize,
    /// The longest context (RoPE's table).
    pub context: usize,
    /// The head is the embedding's transpose.
    pub tied: bool,
    /// Dropout on the residual branches (training only).
    pub dropout: f64,
}

impl LlamaShape {
    /// SwiGLU's customary hidden width for `width`: 8/3 of it (the two
    /// matrices of a 4× GELU MLP spread over three), rounded up to a multiple of 16.
    pub fn default_intermediate(width: usize) -> usize {
        (8 * width).div_ceil(3).div_ceil(16) * 16
    }

    /// transformers' `LlamaConfig` of this shape (eps 1e-5, theta 10⁴, init std 0.02).
    pub fn config(&self) -> DecoderConfig {
        DecoderConfig {
            model_type: ModelType::Llama,
            vocab_size: self.vocab,
            hidden_size: self.width,
            num_layers: self.layers,
            num_heads: self.heads,
            num_kv_heads: self.kv_heads,
            head_dim: self.width / self.heads.max(1),
            intermediate_size: self.intermediate,
            max_positions: self.context,
            norm: NormKind::RmsNorm,
            norm_eps: 1e-5,
            positions: Positions::Rope {
                theta: 10_000.0,
                scaling: RopeScaling::Default,
            },
            mlp: MlpKind::Gated(Activation::Silu),
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            qk_norm: false,
            tie_word_embeddings: self.tied,
            initializer_range: 0.02,
            dropout: self.dropout,
            bos_token_id: None,
            eos_token_ids: Vec::new(),
            pad_token_id: None,
        }
    }
}

/// A character language model of either family.
#[derive(Debug)]
pub enum CharLm {
    /// nanoGPT's GPT (boxed, as the other: a model is moved, not copied).
    Gpt(Box<Gpt>),
    /// A Llama-layout decoder.
    Llama(Box<CausalLm>),
}

impl CharLm {
    /// A fresh GPT with nanoGPT's init from `seed`.
    pub fn gpt(ctx: &ExecContext, cfg: &GptConfig, seed: u64) -> Result<CharLm> {
        let g = Gpt::new(&mut Init::new(ctx, DType::F32, seed), cfg)?;
        Ok(CharLm::Gpt(Box::new(g)))
    }

    /// A fresh Llama-layout model with transformers' init from `seed`.
    pub fn llama(ctx: &ExecContext, shape: &LlamaShape, seed: u64) -> Result<CharLm> {
        heads_divide(shape.width, shape.heads, Some(shape.kv_heads))?;
        let cfg = shape.config();
        Ok(CharLm::Llama(Box::new(CausalLm::new(
            ctx,
            &cfg,
            DType::F32,
            seed,
        )?)))
    }

    /// The family.
    pub fn arch(&self) -> Arch {
        match self {
            CharLm::Gpt(_) => Arch::Gpt,
            CharLm::Llama(_) => Arch::Llama,
        }
    }

    /// The model as a module (parameters, state dict, mode).
    pub fn module(&self) -> &dyn ModuleView {
        match self {
            CharLm::Gpt(g) => &**g,
            CharLm::Llama(l) => &**l,
        }
    }

    /// The longest context.
    pub fn context(&self) -> usize {
        match self {
            CharLm::Gpt(g) => g.config.block_size,
            CharLm::Llama(l) => l.config.max_positions,
        }
    }

    /// Characters in the vocabulary.
    pub fn vocab(&self) -> usize {
        match self {
            CharLm::Gpt(g) => g.config.vocab_size,
            CharLm::Llama(l) => l.config.vocab_size,
        }
    }

    /// Logits `[B, T, vocab]` of ids `[B, T]`.
    pub fn logits(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(match self {
            CharLm::Gpt(g) => g.forward(ids)?,
            CharLm::Llama(l) => l.forward(ids, None)?,
        })
    }

    /// The mean cross-entropy of the logits at every position against the
    /// next character, `targets [B, T]` (the ids shifted by one).
    pub fn loss(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        match self {
            CharLm::Gpt(g) => Ok(g.loss(ids, targets)?),
            CharLm::Llama(l) => {
                let logits = l.forward(ids, None)?;
                let s = logits.shape().to_vec();
                let (n, v) = ((s[0] * s[1]) as isize, s[2] as isize);
                let x = logits.reshape([n, v])?;
                let y = targets.reshape([n])?;
                Ok(x.cross_entropy(&y, CrossEntropyOpts::default())?)
            }
        }
    }

    /// Samples `n` characters after `prompt` (temperature, top-k over the
    /// last position's logits; the draws from `rng::uniform(seed, i)`), in
    /// eval mode without gradients, the context cropped to the model's.
    pub fn generate(
        &self,
        ctx: &ExecContext,
        prompt: &[u32],
        n: usize,
        temperature: f64,
        top_k: usize,
        seed: u64,
    ) -> Result<Vec<u32>> {
        let m = self.module();
        m.eval_mode();
        let _ng = no_grad();
        let (block, vocab) = (self.context(), self.vocab());
        let mut ids: Vec<u32> = if prompt.is_empty() {
            vec![0]
        } else {
            prompt.to_vec()
        };
        let start = ids.len();
        for i in 0..n {
            let _scope = ctx.scope();
            let ctx_ids: Vec<i64> = ids[ids.len().saturating_sub(block)..]
                .iter()
                .map(|&v| v as i64)
                .collect();
            let t = ctx_ids.len();
            let x = Tensor::constant(ctx, &ctx_ids, &[1, t])?;
            let logits = self.logits(&x)?.to_vec::<f32>()?;
            let last = &logits[(t - 1) * vocab..t * vocab];
            let mut order: Vec<usize> = (0..vocab).collect();
            order.sort_by(|&a, &b| last[b].total_cmp(&last[a]));
            let keep = if top_k == 0 { vocab } else { top_k.min(vocab) };
            let top = &order[..keep];
            let mx = last[top[0]] as f64;
            let w: Vec<f64> = top
                .iter()
                .map(|&j| ((last[j] as f64 - mx) / temperature).exp())
                .collect();
            let u = rng::uniform(seed, i as u64) * w.iter().sum::<f64>();
            let mut acc = 0.0;
            let mut pick = top[keep - 1];
            for (&j, &wj) in top.iter().zip(&w) {
                acc += wj;
                if u < acc {
                    pick = j;
                    break;
                }
            }
            ids.push(pick as u32);
        }
        m.train_mode();
        Ok(ids[start..].to_vec())
    }
}

/// What the loop asks of either model as a module (an object-safe view of
/// `fucina_nn::Module`'s provided methods).
pub trait ModuleView {
    /// Parameters and persistent buffers by name (what a checkpoint holds).
    fn state(&self) -> Vec<(String, Tensor)>;
    /// Parameters by name.
    fn named(&self) -> Vec<(String, Tensor)>;
    /// nanoGPT's `[decayed, not decayed]` groups.
    fn decay(&self) -> [Vec<Tensor>; 2];
    /// Parameter count.
    fn count(&self) -> usize;
    /// Training mode (dropout on).
    fn train_mode(&self);
    /// Eval mode (dropout off).
    fn eval_mode(&self);
}

impl<M: Module> ModuleView for M {
    fn state(&self) -> Vec<(String, Tensor)> {
        self.state_dict()
    }
    fn named(&self) -> Vec<(String, Tensor)> {
        self.named_parameters()
    }
    fn decay(&self) -> [Vec<Tensor>; 2] {
        self.decay_groups()
    }
    fn count(&self) -> usize {
        self.num_parameters()
    }
    fn train_mode(&self) {
        self.train()
    }
    fn eval_mode(&self) {
        self.eval()
    }
}
