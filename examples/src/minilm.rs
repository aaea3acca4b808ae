//! all-MiniLM-L6-v2 for the `embed` and `finetune_minilm` examples: the
//! model directory (`$FUCINA_CACHE/all-MiniLM-L6-v2`, filled by
//! `scripts/fetch-minilm.sh`), the model's own WordPiece tokenizer (the
//! `tokenizers` crate reading `tokenizer.json`), fucina-nn's `BertModel`,
//! and sentence-transformers' pooling: the mean of the last hidden state
//! over the attention mask, then L2 normalisation.
//!
//! Missing files are an [`Error::MissingModel`] that tells the user to run
//! the fetch script, never a panic.

use std::path::{Path, PathBuf};

use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_nn::{mean_pool, BertModel};
use tokenizers::{PaddingParams, Tokenizer, TruncationParams};

use crate::error::{Error, Result};

/// sentence-transformers' `max_seq_length` for this model (its tokenizer
/// file says 128; sentence-transformers overrides it with 256).
pub const MAX_SEQ: usize = 256;

/// The files the examples read from the model directory.
const FILES: [(&str, &str); 3] = [
    ("config.json", "the model config"),
    ("model.safetensors", "the weights"),
    ("tokenizer.json", "the tokenizer"),
];

/// `$FUCINA_CACHE/all-MiniLM-L6-v2` (default cache `~/.cache/fucina`), as
/// `scripts/fetch-minilm.sh` fills it.
pub fn model_dir() -> PathBuf {
    let cache = std::env::var_os("FUCINA_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/fucina")))
        .unwrap_or_else(|| PathBuf::from(".cache/fucina"));
    cache.join("all-MiniLM-L6-v2")
}

/// `Ok` when every file the examples need is in `dir`; otherwise the first
/// missing one, with the fetch command in the message.
pub fn check_model_dir(dir: &Path) -> Result<()> {
    for (file, what) in FILES {
        let p = dir.join(file);
        if !p.is_file() {
            return Err(Error::MissingModel { path: p, what });
        }
    }
    Ok(())
}

/// The model's WordPiece tokenizer, truncating at `max_len` tokens and
/// padding each batch to its longest sequence.
pub fn load_tokenizer(dir: &Path, max_len: usize) -> Result<Tokenizer> {
    let path = dir.join("tokenizer.json");
    let mut tok = Tokenizer::from_file(&path).map_err(|e| Error::Data {
        path: path.clone(),
        msg: format!("not a tokenizer file the `tokenizers` crate reads: {e}"),
    })?;
    tok.with_truncation(Some(TruncationParams {
        max_length: max_len,
        ..TruncationParams::default()
    }))
    .map_err(|e| Error::Tokenizer(e.to_string()))?;
    tok.with_padding(Some(PaddingParams::default()));
    Ok(tok)
}

/// A tokenised batch: ids and attention mask `[batch, len]`, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// Token ids.
    pub ids: Vec<i64>,
    /// 1 for a token, 0 for padding.
    pub mask: Vec<u8>,
    /// Sequences.
    pub batch: usize,
    /// Tokens per (padded) sequence.
    pub len: usize,
}

impl Batch {
    /// The ids and mask as tensors (I64 and U8 `[batch, len]`).
    pub fn tensors(&self, ctx: &ExecContext) -> Result<(Tensor, Tensor)> {
        let shape = [self.batch, self.len];
        Ok((
            Tensor::constant(ctx, &self.ids, &shape)?,
            Tensor::from_raw(ctx, ctx.from_slice(&self.mask, &shape)?, false)?,
        ))
    }
}

/// Tokenises `texts` as one padded batch (`[CLS] ... [SEP]`).
pub fn tokenize(tok: &Tokenizer, texts: &[&str]) -> Result<Batch> {
    let enc = tok
        .encode_batch(texts.to_vec(), true)
        .map_err(|e| Error::Tokenizer(e.to_string()))?;
    let len = enc.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(texts.len() * len);
    let mut mask = Vec::with_capacity(texts.len() * len);
    for e in &enc {
        if e.get_ids().len() != len {
            return Err(Error::Tokenizer(format!(
                "padding left a sequence of {} tokens in a batch of {len}",
                e.get_ids().len()
            )));
        }
        ids.extend(e.get_ids().iter().map(|&i| i as i64));
        mask.extend(e.get_attention_mask().iter().map(|&m| u8::from(m != 0)));
    }
    Ok(Batch {
        ids,
        mask,
        batch: texts.len(),
        len,
    })
}

/// Mean-pooled sentence vectors `[B, 384]` of a batch (differentiable:
/// the fine-tuning example trains through it).
pub fn pooled(model: &BertModel, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let h = model.forward(ids, Some(mask), None)?;
    Ok(mean_pool(&h, mask)?)
}

/// L2-normalises each row of `[rows, dim]` values (a zero row stays zero).
pub fn normalize_rows(v: &[f32], dim: usize) -> Vec<Vec<f32>> {
    v.chunks(dim)
        .map(|r| {
            let n = r.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            let n = n.max(1e-12);
            r.iter().map(|&x| (x as f64 / n) as f32).collect()
        })
        .collect()
}

/// all-MiniLM-L6-v2 as sentence-transformers runs it: tokenizer, encoder,
/// mean pooling, normalisation.
pub struct SentenceEncoder {
    /// The tokenizer (truncation at [`MAX_SEQ`], padding to the longest).
    pub tokenizer: Tokenizer,
    /// The encoder, in eval mode.
    pub model: BertModel,
    ctx: ExecContext,
}

impl SentenceEncoder {
    /// Loads the model from `dir` in f32 (a clear error naming the fetch
    /// script when files are missing).
    pub fn load(ctx: &ExecContext, dir: &Path) -> Result<SentenceEncoder> {
        check_model_dir(dir)?;
        let tokenizer = load_tokenizer(dir, MAX_SEQ)?;
        let model = BertModel::from_pretrained(ctx, dir, DType::F32)?;
        Ok(SentenceEncoder {
            tokenizer,
            model,
            ctx: ctx.clone(),
        })
    }

    /// Normalised embeddings of `texts`, `batch_size` sentences per forward
    /// (no grad).
    pub fn embed(&self, texts: &[&str], batch_size: usize) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        let _ng = fucina_autograd::no_grad();
        for chunk in texts.chunks(batch_size.max(1)) {
            let b = tokenize(&self.tokenizer, chunk)?;
            let (ids, mask) = b.tensors(&self.ctx)?;
            let p = pooled(&self.model, &ids, &mask)?;
            let dim = p.shape()[1];
            out.extend(normalize_rows(&p.to_vec::<f32>()?, dim));
        }
        Ok(out)
    }
}

/// Cosine similarity of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na = a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let nb = b.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-12)
}
