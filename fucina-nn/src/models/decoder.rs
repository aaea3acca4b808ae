//! The Hugging Face decoder LLMs — GPT-2, Llama (TinyLlama, SmolLM2,
//! Mistral without a sliding window), Qwen2 and Qwen3 — as one
//! [`CausalLm`] built from a [`DecoderConfig`], with the checkpoint's own
//! parameter names (`names.rs`), one block configurable by the family
//! (`layer.rs`), and loading and saving in the family's layout
//! (`pretrained.rs`). Generation is in [`crate::generation`]. The frozen
//! matrices may be stored in bf16/f16 under an f32/f64 compute dtype
//! (`frozen.rs`: LoRA on a low-precision base).
//!
//! ```text
//! h₀ = embed(ids) (+ wpe(positions) for GPT-2)
//! hₗ = hₗ₋₁ + attn(norm₁(hₗ₋₁)),  hₗ += mlp(norm₂(hₗ))      for each layer
//! logits = head(norm(h_L))        (head = embedᵀ when tied)
//! ```

mod frozen;
pub mod layer;
pub mod names;
mod pretrained;

use std::sync::Arc;

use fucina_autograd::{checkpoint, is_grad_enabled, Block, CrossEntropyOpts, Tensor};
use fucina_core::{DType, ExecContext};

pub use layer::{DecoderAttention, DecoderLayer, DecoderMlp, Norm};
pub use names::Names;

use crate::dropout::Dropout;
use crate::embedding::Embedding;
use crate::error::{Error, Result};
use crate::hf::config::{MlpKind, NormKind, Positions};
use crate::hf::DecoderConfig;
use crate::init::{Dist, Init};
use crate::kv_cache::KvCache;
use crate::linear::Linear;
use crate::module::module_children;
use crate::norm::{LayerNorm, RmsNorm};
use crate::rope::Rope;
use layer::AttnInputs;

/// The label that the loss ignores (transformers' and PyTorch's −100).
pub const IGNORE_INDEX: i64 = -100;

/// A decoder-only causal language model.
#[derive(Debug)]
pub struct CausalLm {
    /// The token embedding `[vocab, hidden]`.
    pub embed_tokens: Embedding,
    /// GPT-2's learned positions `[max_positions, hidden]`.
    pub embed_positions: Option<Embedding>,
    /// Dropout after the embeddings (GPT-2's `embd_pdrop`).
    pub embed_dropout: Dropout,
    /// The blocks.
    pub layers: Vec<DecoderLayer>,
    /// The final norm.
    pub norm: Norm,
    /// The untied head `[vocab, hidden]`; `None` when tied to `embed_tokens`.
    pub lm_head: Option<Linear>,
    /// RoPE's tables (a buffer: recomputed from the config, never saved).
    pub rope: Option<Rope>,
    /// The configuration.
    pub config: DecoderConfig,
    /// The family's names.
    pub names: &'static Names,
    /// The directory `from_pretrained` read (its tokenizer files are copied
    /// by `save_pretrained`).
    pub source: Option<std::path::PathBuf>,
    /// Recompute each layer in backward instead of keeping its activations
    /// (transformers' `gradient_checkpointing`); see
    /// [`CausalLm::gradient_checkpointing_enable`].
    pub gradient_checkpointing: bool,
}

module_children!(CausalLm, |s| [
    s.names.embed => embed_tokens,
    s.names.positions => embed_positions,
    "embed_dropout" => embed_dropout,
    s.names.layers => layers,
    s.names.final_norm => norm,
    s.names.head => lm_head,
    "rotary_emb" => rope,
], output_head = Some(crate::module::OutputHead {
    path: s.names.head.to_string(),
    tied_to: s.lm_head.is_none().then(|| s.names.embed.to_string()),
}));

/// Where a model's parameters come from while it is built: called with
/// each parameter's checkpoint name, its shape (`[out, in]` for every
/// projection) and the init a fresh model draws it from.
pub(crate) type ParamSource<'a> = dyn FnMut(&str, &[usize], Dist) -> Result<Tensor> + 'a;

impl CausalLm {
    /// A fresh model with transformers' init: N(0, `initializer_range`)
    /// weights and embeddings (GPT-2's `c_proj` scaled by 1/√(2·layers)),
    /// zero biases, unit norms; dtype f32 or f64; same seed, same weights.
    pub fn new(
        ctx: &ExecContext,
        config: &DecoderConfig,
        dtype: DType,
        seed: u64,
    ) -> Result<CausalLm> {
        config.validate()?;
        let mut init = Init::new(ctx, dtype, seed);
        let mut src = |_: &str, shape: &[usize], dist: Dist| init.param(shape, dist);
        Self::build(ctx, config, dtype, seed, &mut src)
    }

    /// Builds the model, taking every parameter from `src`.
    pub(crate) fn build(
        ctx: &ExecContext,
        config: &DecoderConfig,
        dtype: DType,
        seed: u64,
        src: &mut ParamSource<'_>,
    ) -> Result<CausalLm> {
        let c = config;
        let names = names::names_of(c.model_type);
        let (hd, h, hkv, d, f) = (
            c.hidden_size,
            c.num_heads,
            c.num_kv_heads,
            c.head_dim,
            c.intermediate_size,
        );
        let std = c.initializer_range;
        let w = Dist::normal(std);
        // GPT-2 scales its residual projections' init by 1/√(2·n_layer).
        let w_res = if c.model_type == crate::hf::ModelType::Gpt2 {
            Dist::normal(std / (2.0 * c.num_layers as f64).sqrt())
        } else {
            w
        };
        let mut seeds = fucina_core::rng::SplitMix64::new(seed ^ 0x000D_20F0_u64);
        let mut dropout = || Dropout::with_seed(ctx, c.dropout, seeds.next_u64());
        let join = crate::module::join;
        let linear = |src: &mut ParamSource<'_>,
                      name: &str,
                      o: usize,
                      i: usize,
                      bias: bool,
                      wd: Dist|
         -> Result<Linear> {
            Ok(Linear {
                weight: src(&join(name, "weight"), &[o, i], wd)?,
                bias: if bias {
                    Some(src(&join(name, "bias"), &[o], Dist::Zeros)?)
                } else {
                    None
                },
                lora: None,
            })
        };
        let norm = |src: &mut ParamSource<'_>, name: &str, dim: usize| -> Result<Norm> {
            let weight = src(&join(name, "weight"), &[dim], Dist::Ones)?;
            Ok(match c.norm {
                NormKind::LayerNorm => Norm::Layer(LayerNorm {
                    weight,
                    bias: Some(src(&join(name, "bias"), &[dim], Dist::Zeros)?),
                    eps: c.norm_eps,
                }),
                NormKind::RmsNorm => Norm::Rms(RmsNorm {
                    weight,
                    eps: c.norm_eps,
                }),
            })
        };
        let embed_tokens =
            Embedding::from_tensor(src(&join(names.embed, "weight"), &[c.vocab_size, hd], w)?)?;
        let embed_positions = match c.positions {
            Positions::Learned => Some(Embedding::from_tensor(src(
                &join(names.positions, "weight"),
                &[c.max_positions, hd],
                w,
            )?)?),
            Positions::Rope { .. } => None,
        };
        let mut layers = Vec::new();
        for l in 0..c.num_layers {
            let p = format!("{}.{l}", names.layers);
            let a = join(&p, names.attn);
            let (qkv, q_proj, k_proj, v_proj) = if c.model_type == crate::hf::ModelType::Gpt2 {
                let qkv = linear(
                    src,
                    &join(&a, names.qkv),
                    (h + 2 * hkv) * d,
                    hd,
                    c.qkv_bias,
                    w,
                )?;
                (Some(qkv), None, None, None)
            } else {
                (
                    None,
                    Some(linear(src, &join(&a, names.q), h * d, hd, c.qkv_bias, w)?),
                    Some(linear(src, &join(&a, names.k), hkv * d, hd, c.qkv_bias, w)?),
                    Some(linear(src, &join(&a, names.v), hkv * d, hd, c.qkv_bias, w)?),
                )
            };
            let o_proj = linear(src, &join(&a, names.o), hd, h * d, c.o_bias, w_res)?;
            let (q_norm, k_norm) = if c.qk_norm {
                let qn = src(&join(&join(&a, names.q_norm), "weight"), &[d], Dist::Ones)?;
                let kn = src(&join(&join(&a, names.k_norm), "weight"), &[d], Dist::Ones)?;
                (
                    Some(RmsNorm {
                        weight: qn,
                        eps: c.norm_eps,
                    }),
                    Some(RmsNorm {
                        weight: kn,
                        eps: c.norm_eps,
                    }),
                )
            } else {
                (None, None)
            };
            let attn_norm = norm(src, &join(&p, names.attn_norm), hd)?;
            let attn = DecoderAttention {
                qkv,
                q_proj,
                k_proj,
                v_proj,
                o_proj,
                q_norm,
                k_norm,
                dropout: dropout()?,
                num_heads: h,
                num_kv_heads: hkv,
                head_dim: d,
                names,
            };
            let mlp_norm = norm(src, &join(&p, names.mlp_norm), hd)?;
            let m = join(&p, names.mlp);
            let (gate, act) = match c.mlp {
                MlpKind::Gated(act) => (
                    Some(linear(src, &join(&m, names.gate), f, hd, c.mlp_bias, w)?),
                    act,
                ),
                MlpKind::Plain(act) => (None, act),
            };
            let up = linear(src, &join(&m, names.up), f, hd, c.mlp_bias, w)?;
            let down = linear(src, &join(&m, names.down), hd, f, c.mlp_bias, w_res)?;
            let mlp = DecoderMlp {
                gate,
                up,
                down,
                act,
                dropout: dropout()?,
                names,
            };
            layers.push(DecoderLayer {
                attn_norm,
                attn,
                mlp_norm,
                mlp,
                names,
            });
        }
        let final_norm = norm(src, names.final_norm, hd)?;
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            Some(linear(src, names.head, c.vocab_size, hd, false, w)?)
        };
        let rope = match &c.positions {
            Positions::Rope { theta, scaling } => {
                Some(Rope::new(ctx, dtype, d, c.max_positions, *theta, scaling)?)
            }
            Positions::Learned => None,
        };
        Ok(CausalLm {
            embed_tokens,
            embed_positions,
            embed_dropout: dropout()?,
            layers,
            norm: final_norm,
            lm_head,
            rope,
            config: c.clone(),
            names,
            source: None,
            gradient_checkpointing: false,
        })
    }

    /// Gives a tied head (`tie_word_embeddings`) its own `lm_head`, a copy
    /// of the input embedding with the embedding's `requires_grad`, and sets
    /// `tie_word_embeddings = false`: the logits are unchanged, and the two
    /// can now train apart (what PEFT's `modules_to_save = ["lm_head"]` does
    /// to a tied model by deep-copying its `lm_head`). Returns whether it
    /// untied anything (`false` when the head was untied already).
    pub fn untie_lm_head(&mut self) -> Result<bool> {
        if self.lm_head.is_some() {
            return Ok(false);
        }
        let w = &self.embed_tokens.weight;
        let copy = w.ctx().copy(&w.raw()?)?;
        let weight = Tensor::from_raw(w.ctx(), copy, w.requires_grad())?;
        self.lm_head = Some(Linear {
            weight,
            bias: None,
            lora: None,
        });
        self.config.tie_word_embeddings = false;
        Ok(true)
    }

    /// The compute dtype (f32 or f64): activations, norms, biases, KV cache
    /// and adapters. The frozen matrices may be stored narrower
    /// ([`CausalLm::storage_dtype`]).
    pub fn dtype(&self) -> DType {
        self.norm.weight().dtype()
    }

    /// The dtype the token embedding (and with it every frozen base matrix
    /// after [`CausalLm::store_frozen_weights`]) is stored in: the compute
    /// dtype, or bf16/f16.
    pub fn storage_dtype(&self) -> DType {
        self.embed_tokens.weight.dtype()
    }

    /// The context the parameters live on.
    pub fn ctx(&self) -> &ExecContext {
        self.embed_tokens.weight.ctx()
    }

    /// Logits `[B, T, vocab]` for integer `input_ids [B, T]` with positions
    /// `0..T`; `attention_mask`: U8 `[B, T]` (1 = token, 0 = padding),
    /// `None` for all tokens.
    pub fn forward(&self, input_ids: &Tensor, attention_mask: Option<&Tensor>) -> Result<Tensor> {
        let h = self.hidden_states(input_ids, attention_mask, None, None)?;
        self.logits(&h)
    }

    /// The final hidden states `[B, T, hidden]` (after the final norm).
    ///
    /// - `attention_mask`: U8 `[B, S]` over every key, cached ones first
    ///   (`S = cache.len() + T`), as transformers' `attention_mask`;
    /// - `position_ids`: I64 `[B, T]`, default `cache.len() + 0..T` for every row;
    /// - `cache`: this step's K/V are appended and attention reads all cached
    ///   positions (its length moves on by `T`).
    pub fn hidden_states(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        position_ids: Option<&Tensor>,
        mut cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        const M: &str = "CausalLm";
        let s = input_ids.shape();
        if input_ids.rank() != 2 || s[0] == 0 || s[1] == 0 || !input_ids.dtype().is_int() {
            return Err(Error::input(
                M,
                "input_ids must be integer [B, T] with B, T >= 1",
                s,
            ));
        }
        let (b, t) = (s[0], s[1]);
        let past = cache.as_ref().map_or(0, |c| c.len());
        if let Some(c) = cache.as_ref() {
            if c.batch() != b || c.layers() != self.layers.len() {
                return Err(Error::input(
                    M,
                    format!(
                        "the cache holds {} sequences of {} layers",
                        c.batch(),
                        c.layers()
                    ),
                    s,
                ));
            }
        }
        let total = past + t;
        if total > self.config.max_positions {
            return Err(Error::input(
                M,
                format!(
                    "{past} cached + {t} new positions exceed max_position_embeddings {}",
                    self.config.max_positions
                ),
                s,
            ));
        }
        let ctx = input_ids.ctx();
        let positions = match position_ids {
            Some(p) => {
                if p.shape() != s || !p.dtype().is_int() {
                    return Err(Error::input(
                        M,
                        format!("position_ids must be integer [{b}, {t}]"),
                        p.shape(),
                    ));
                }
                let p = Tensor::from_raw(ctx, ctx.to_dtype(&p.raw()?, DType::I64)?, false)?;
                let ids = p.to_vec::<i64>()?;
                if ids
                    .iter()
                    .any(|&x| x < 0 || x as u64 >= self.config.max_positions as u64)
                {
                    return Err(Error::input(
                        M,
                        format!("position_ids must lie in 0..{}", self.config.max_positions),
                        p.shape(),
                    ));
                }
                p
            }
            None => {
                let row: Vec<i64> = (past as i64..total as i64).collect();
                Tensor::constant(ctx, &row, &[1, t])?.broadcast_to(&[b, t])?
            }
        };
        let mask = match attention_mask {
            Some(m) => {
                if m.shape() != [b, total] {
                    return Err(Error::input(
                        M,
                        format!("attention_mask must be [{b}, {total}] (cached + new positions)"),
                        m.shape(),
                    ));
                }
                let raw = m.raw()?;
                let raw = if raw.dtype() == DType::U8 {
                    raw
                } else {
                    ctx.to_dtype(&raw, DType::U8)?
                };
                let all = raw.to_vec::<u8>()?.iter().all(|&x| x != 0);
                if all {
                    None
                } else {
                    Some(Tensor::from_raw(ctx, raw, false)?.reshape([
                        b as isize,
                        1,
                        1,
                        total as isize,
                    ])?)
                }
            }
            None => None,
        };
        // Rows come out in the compute dtype (a bf16 table widens only its rows).
        let dtype = self.dtype();
        let mut x = self.embed_tokens.forward_as(input_ids, dtype)?;
        if let Some(wpe) = &self.embed_positions {
            x = x.add(&wpe.forward_as(&positions, dtype)?)?;
        }
        x = self.embed_dropout.forward(&x)?;
        let inputs = AttnInputs {
            positions: &positions,
            mask: mask.as_ref(),
            rope: self.rope.as_ref(),
        };
        let checkpointed = self.gradient_checkpointing && cache.is_none() && is_grad_enabled();
        for (l, layer) in self.layers.iter().enumerate() {
            if checkpointed {
                x = self.checkpointed_layer(layer, &x, &positions, mask.as_ref())?;
                continue;
            }
            let c = cache.as_deref_mut().map(|c| (c, l));
            x = layer.forward(&x, &inputs, c)?;
        }
        if let Some(c) = cache {
            c.advance(t)?;
        }
        self.norm.forward(&x)
    }

    /// Turns on per-layer activation checkpointing for training
    /// (transformers' `gradient_checkpointing_enable`): each layer keeps
    /// only its input and is recomputed in backward, so a step holds one
    /// layer's activations instead of all of them. Gradients are bitwise
    /// those of the unchecked run (dropout replays its masks). Inactive
    /// under no-grad and with a KV cache (generation).
    pub fn gradient_checkpointing_enable(&mut self) {
        self.gradient_checkpointing = true;
    }

    /// Turns per-layer activation checkpointing off.
    pub fn gradient_checkpointing_disable(&mut self) {
        self.gradient_checkpointing = false;
    }

    /// `layer(x)` under `fucina_autograd::checkpoint`: the block owns a
    /// clone of the layer (its tensors are shared handles, so the
    /// parameters it captures are the model's own) and of the positions,
    /// mask and RoPE tables.
    fn checkpointed_layer(
        &self,
        layer: &DecoderLayer,
        x: &Tensor,
        positions: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        // A block is `Send + Sync`, as every module is.
        let layer = Arc::new(layer.clone());
        let (positions, mask, rope) = (positions.clone(), mask.cloned(), self.rope.clone());
        let block: Block = Arc::new(move |xs: &[Tensor]| {
            let as_autograd = |e: Error| match e {
                Error::Autograd(a) => a,
                Error::Core(c) => fucina_autograd::Error::Core(c),
                other => fucina_autograd::Error::Core(fucina_core::Error::InvalidArgument {
                    op: "gradient_checkpointing",
                    msg: other.to_string(),
                }),
            };
            let inputs = AttnInputs {
                positions: &positions,
                mask: mask.as_ref(),
                rope: rope.as_ref(),
            };
            layer.forward(&xs[0], &inputs, None).map_err(as_autograd)
        });
        Ok(checkpoint(block, &[x])?)
    }

    /// The head: `hidden [..., hidden] -> logits [..., vocab]` (tied: the
    /// linear of the embedding table, a mixed GEMM when it is bf16/f16).
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        match &self.lm_head {
            Some(head) => head.forward(hidden),
            None => Ok(hidden.linear(&self.embed_tokens.weight, None)?),
        }
    }

    /// transformers' causal-LM loss: the mean cross-entropy of the logits
    /// at position `t` against `labels` at `t + 1` (`[B, T]`), over every
    /// label that is not [`IGNORE_INDEX`] (prompt and padding tokens).
    pub fn loss(&self, logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
        let s = logits.shape();
        if logits.rank() != 3 || labels.shape() != &s[..2] || s[1] < 2 || !labels.dtype().is_int() {
            return Err(Error::input(
                "CausalLm::loss",
                format!(
                    "logits [B, T, V] with T >= 2 and integer labels [B, T] (labels {:?})",
                    labels.shape()
                ),
                s,
            ));
        }
        let (b, t, v) = (s[0], s[1], s[2]);
        let x = logits
            .narrow(1, 0, t - 1)?
            .reshape([(b * (t - 1)) as isize, v as isize])?;
        let y = labels
            .narrow(1, 1, t - 1)?
            .reshape([(b * (t - 1)) as isize])?;
        let opts = CrossEntropyOpts {
            ignore_index: Some(IGNORE_INDEX),
            ..Default::default()
        };
        Ok(x.cross_entropy(&y, opts)?)
    }

    /// A KV cache for `batch` sequences of up to `capacity` positions, in
    /// this model's dtype.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<KvCache> {
        let c = &self.config;
        KvCache::new(
            self.ctx(),
            self.dtype(),
            c.num_layers,
            batch,
            c.num_kv_heads,
            capacity,
            c.head_dim,
        )
    }
}

impl crate::module::Forward for CausalLm {
    /// Logits of `input_ids` with no padding.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        CausalLm::forward(self, x, None)
    }
}
