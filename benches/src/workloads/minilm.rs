//! The `minilm` training workload of `reference/torch_workloads.py`: a fine-tune
//! step of a MiniLM-L6 classifier, on fucina-nn's [`BertModel`] (Hugging Face's
//! layout: word + position + token-type embeddings and LayerNorm, 6 post-LN layers
//! of width 384 with 12 heads, feed-forward 1536, exact GELU, LayerNorm eps 1e-12),
//! then sentence-transformers' [`mean_pool`] over the attention mask and a
//! [`Linear`] head to 2 classes; cross-entropy, AdamW(lr 2e-5, weight decay 0.01) over every
//! parameter, and the shared step (see [`super::train`]).
//!
//! Data: batch 16 of 64 token ids uniform in `[1000, vocab)`, attention mask 1 on
//! positions `0..48` and 0 on `48..64` (the reference adds −1e4 to masked scores,
//! which after the f32 softmax weighs them exactly 0, as fucina's keep-mask does),
//! labels uniform in `{0, 1}`, from a seeded SplitMix64.
//!
//! Weights: the real all-MiniLM-L6-v2 checkpoint when its directory has
//! `config.json` and `model.safetensors` (`--minilm-dir DIR`, else
//! `$FUCINA_CACHE/all-MiniLM-L6-v2`, default `~/.cache/fucina/...`; fetched by
//! `scripts/fetch-minilm.sh`), loaded strictly; its pooler (which the reference
//! model does not have) is dropped. Otherwise the reference's own random init:
//! PyTorch's defaults, N(0, 1) embeddings and kaiming-uniform linear layers
//! (built with fucina-nn's `Embedding::new` / `Linear::new`), unit norms. The
//! shapes, and so the work per step, are the same either way. The reference
//! model has no dropout: the encoder runs with dropout off (eval mode).

use std::path::{Path, PathBuf};

use fucina::Result;
use fucina_autograd::{CrossEntropyOpts, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext};
use fucina_nn::module::for_each_mut;
use fucina_nn::{mean_pool, BertConfig, BertModel, Embedding, Init, Linear, Module};
use fucina_optim::AdamW;

use crate::mfu::TransformerShape;

use super::train::{adamw, train_step};

/// The workload's AdamW learning rate.
pub const LR: f64 = 2e-5;
/// The workload's AdamW weight decay.
pub const WEIGHT_DECAY: f64 = 0.01;
/// Sequences per batch.
pub const BATCH: usize = 16;
/// Tokens per sequence.
pub const SEQ: usize = 64;
/// Positions `LEN..SEQ` are padding (mask 0).
pub const LEN: usize = 48;
/// Output classes of the head.
pub const CLASSES: usize = 2;

/// MiniLM-L6's shape (`MINILM_CFG` of the reference).
pub fn minilm_config() -> BertConfig {
    BertConfig {
        vocab_size: 30522,
        hidden_size: 384,
        num_hidden_layers: 6,
        num_attention_heads: 12,
        intermediate_size: 1536,
        hidden_act: fucina_nn::Activation::Gelu,
        hidden_dropout_prob: 0.0,
        attention_probs_dropout_prob: 0.0,
        max_position_embeddings: 512,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        position_embedding_type: "absolute".into(),
        initializer_range: 0.02,
    }
}

/// `$FUCINA_CACHE/all-MiniLM-L6-v2` (default `~/.cache/fucina/all-MiniLM-L6-v2`).
pub fn default_dir() -> PathBuf {
    let cache = match std::env::var_os("FUCINA_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/fucina"),
    };
    cache.join("all-MiniLM-L6-v2")
}

fn has_checkpoint(dir: &Path) -> bool {
    ["config.json", "model.safetensors"]
        .iter()
        .all(|f| dir.join(f).is_file())
}

/// The BERT encoder, mean pooling and the classification head.
#[derive(Debug, fucina_nn::Module)]
pub struct MiniLmClassifier {
    /// The encoder (no pooler).
    pub bert: BertModel,
    /// `[classes, hidden]`.
    pub head: Linear,
}

impl MiniLmClassifier {
    /// A fresh model with PyTorch's default init from `init`.
    pub fn new(init: &mut Init, config: &BertConfig, classes: usize) -> Result<Self> {
        let mut bert = BertModel::new(init, config, false)?;
        // BertModel::new uses HF's N(0, 0.02) init; the reference uses PyTorch's defaults.
        let mut err = None;
        for_each_mut::<Embedding, _>(&mut bert, |_, e| {
            match Embedding::new(init, e.num_embeddings(), e.dim()) {
                Ok(n) => *e = n,
                Err(x) => err = err.take().or(Some(x)),
            }
        });
        for_each_mut::<Linear, _>(&mut bert, |_, l| {
            match Linear::new(init, l.in_features(), l.out_features(), true) {
                Ok(n) => *l = n,
                Err(x) => err = err.take().or(Some(x)),
            }
        });
        if let Some(e) = err {
            return Err(e.into());
        }
        let head = Linear::new(init, config.hidden_size, classes, true)?;
        bert.eval();
        Ok(MiniLmClassifier { bert, head })
    }

    /// The checkpoint in `dir` (strict load, pooler dropped) and a fresh head.
    pub fn from_pretrained(ctx: &ExecContext, dir: &Path, classes: usize) -> Result<Self> {
        let mut bert = BertModel::from_pretrained(ctx, dir, DType::F32)?;
        bert.pooler = None;
        bert.eval();
        let mut init = Init::new(ctx, DType::F32, 0);
        let head = Linear::new(&mut init, bert.config.hidden_size, classes, true)?;
        Ok(MiniLmClassifier { bert, head })
    }

    /// Logits `[B, classes]` for ids `[B, T]` and a U8 mask `[B, T]` (1 = token).
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let h = self.bert.forward(ids, Some(mask), None)?;
        Ok(self.head.forward(&mean_pool(&h, mask)?)?)
    }
}

/// A MiniLM classifier train step with its data and AdamW optimizer.
pub struct MiniLmTrain {
    ctx: ExecContext,
    /// The model.
    pub model: MiniLmClassifier,
    /// True when the real checkpoint was loaded.
    pub pretrained: bool,
    ids: Tensor,
    mask: Tensor,
    y: Tensor,
    opt: AdamW,
    /// The loss of the last step (before its update).
    pub last_loss: f64,
}

impl MiniLmTrain {
    /// The `minilm` workload: the checkpoint of `dir` (or of [`default_dir`]) when
    /// present, else PyTorch's init from seed 0. An explicit `dir` without a
    /// checkpoint is an error.
    pub fn workload(ctx: &ExecContext, dir: Option<&Path>) -> Result<MiniLmTrain> {
        let (model, pretrained) = match dir {
            Some(d) if !has_checkpoint(d) => {
                return Err(fucina_nn::Error::File {
                    file: d.to_path_buf(),
                    msg: "--minilm-dir has no config.json + model.safetensors".into(),
                }
                .into())
            }
            Some(d) => (MiniLmClassifier::from_pretrained(ctx, d, CLASSES)?, true),
            None if has_checkpoint(&default_dir()) => (
                MiniLmClassifier::from_pretrained(ctx, &default_dir(), CLASSES)?,
                true,
            ),
            None => (
                MiniLmClassifier::new(
                    &mut Init::new(ctx, DType::F32, 0),
                    &minilm_config(),
                    CLASSES,
                )?,
                false,
            ),
        };
        let vocab = model.bert.config.vocab_size as u64;
        let mut rng = SplitMix64::new(0);
        let ids: Vec<i64> = (0..BATCH * SEQ)
            .map(|_| 1000 + rng.below(vocab.saturating_sub(1000).max(1)) as i64)
            .collect();
        let mask: Vec<u8> = (0..BATCH * SEQ).map(|i| u8::from(i % SEQ < LEN)).collect();
        let y: Vec<i64> = (0..BATCH)
            .map(|_| rng.below(CLASSES as u64) as i64)
            .collect();
        let opt = adamw(model.parameters(), LR, WEIGHT_DECAY)?;
        Ok(MiniLmTrain {
            ctx: ctx.clone(),
            model,
            pretrained,
            ids: Tensor::constant(ctx, &ids, &[BATCH, SEQ])?,
            mask: Tensor::constant(ctx, &mask, &[BATCH, SEQ])?,
            y: Tensor::constant(ctx, &y, &[BATCH])?,
            opt,
            last_loss: f64::NAN,
        })
    }

    /// One step: zero_grad + forward + cross-entropy + backward + AdamW step;
    /// returns the loss (computed before the update).
    pub fn train_step(&mut self) -> Result<f64> {
        let (model, ids, mask, y) = (&self.model, &self.ids, &self.mask, &self.y);
        self.last_loss = train_step(&self.ctx, &mut self.opt, || {
            Ok(model
                .forward(ids, mask)?
                .cross_entropy(y, CrossEntropyOpts::default())?)
        })?;
        Ok(self.last_loss)
    }
}

impl crate::Workload for MiniLmTrain {
    fn step(&mut self) -> Result<()> {
        self.train_step().map(|_| ())
    }
    fn shape(&self) -> Option<TransformerShape> {
        let c = &self.model.bert.config;
        // Every position is computed (padding included); the 2-class head is not counted.
        Some(TransformerShape::multi_head(
            BATCH,
            SEQ,
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.intermediate_size,
        ))
    }
}
