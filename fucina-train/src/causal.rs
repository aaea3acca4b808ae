//! Causal-LM data: token sequences with their labels, as transformers'
//! data collators make them. A label is the token itself where the loss
//! learns it and [`IGNORE_INDEX`] where it must not (prompt and padding
//! tokens); the model shifts the labels itself (`CausalLm::loss` compares
//! the logits at `t` with the label at `t + 1`).
//!
//! - [`CausalExample::text`] labels every token; [`CausalExample::prompt_completion`]
//!   masks the prompt's (TRL's "completion only" loss).
//! - [`pack`] concatenates examples, with a separator token between them,
//!   into blocks of exactly `block` tokens (transformers' `group_texts` in
//!   `run_clm.py`), labels travelling with their tokens; the short tail is
//!   dropped.
//! - [`read_records`] reads the JSONL fine-tuning formats, one object per
//!   line: `{"prompt": …, "completion": …}` or `{"text": …}`.
//! - [`collate_causal`] pads a batch: ids with the pad id, labels with
//!   [`IGNORE_INDEX`], and the attention mask.
//!
//! ```
//! use fucina_train::causal::{collate_causal, pack, CausalExample};
//! let ex = CausalExample::prompt_completion(&[1, 2], &[3, 4]);
//! assert_eq!(ex.labels, [-100, -100, 3, 4]);
//! let blocks = pack(vec![ex, CausalExample::text(vec![5, 6, 7])], 4, Some(0))?;
//! assert_eq!(blocks[0].input_ids, [1, 2, 3, 4]);
//! assert_eq!(blocks[1].input_ids, [0, 5, 6, 7]);
//! let ctx = fucina_core::ExecContext::with_threads(1)?;
//! let b = collate_causal(&ctx, &[CausalExample::text(vec![8, 9, 10]), CausalExample::text(vec![11])], 0)?;
//! assert_eq!(b.labels.to_vec::<i64>()?, [8, 9, 10, 11, -100, -100]);
//! # Ok::<(), fucina_train::Error>(())
//! ```

use std::path::Path;

use fucina_autograd::Tensor;
use fucina_core::ExecContext;

use crate::collate::{pad_labels, pad_sequences, IGNORE_INDEX};
use crate::data::{Dataset, JsonlDataset};
use crate::error::{Error, Result};

/// One training sequence: `input_ids` and `labels` of one length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CausalExample {
    /// The tokens.
    pub input_ids: Vec<i64>,
    /// The token where the loss learns it, [`IGNORE_INDEX`] where not.
    pub labels: Vec<i64>,
}

impl CausalExample {
    /// Plain text: every token is learnt.
    pub fn text(ids: Vec<i64>) -> CausalExample {
        CausalExample {
            labels: ids.clone(),
            input_ids: ids,
        }
    }

    /// A prompt and its completion: only the completion's tokens are learnt.
    pub fn prompt_completion(prompt: &[i64], completion: &[i64]) -> CausalExample {
        let mut input_ids = Vec::with_capacity(prompt.len() + completion.len());
        input_ids.extend_from_slice(prompt);
        input_ids.extend_from_slice(completion);
        let mut labels = vec![IGNORE_INDEX; prompt.len()];
        labels.extend_from_slice(completion);
        CausalExample { input_ids, labels }
    }

    /// The number of tokens.
    pub fn len(&self) -> usize {
        self.input_ids.len()
    }

    /// Whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.input_ids.is_empty()
    }

    /// How many tokens the loss learns.
    pub fn learnt(&self) -> usize {
        self.labels.iter().filter(|&&l| l != IGNORE_INDEX).count()
    }

    /// Keeps the first `max_len` tokens (transformers' `truncation=True`).
    pub fn truncate(&mut self, max_len: usize) {
        self.input_ids.truncate(max_len);
        self.labels.truncate(max_len);
    }

    /// `Ok` when the labels and the ids have one length, else an error of
    /// `op` naming this example's index `i` in its batch.
    fn check_lengths(&self, op: &'static str, i: usize) -> Result<()> {
        if self.labels.len() == self.input_ids.len() {
            return Ok(());
        }
        Err(Error::config(
            op,
            format!(
                "example {i} has {} tokens but {} labels",
                self.input_ids.len(),
                self.labels.len()
            ),
        ))
    }
}

/// Concatenates `examples` (with `separator`, e.g. the EOS token, learnt,
/// between consecutive ones) and cuts the stream into blocks of exactly
/// `block` tokens; the tail shorter than a block is dropped. An error when
/// `block` is 0, an example's labels and ids differ in length, or the
/// stream is shorter than one block.
pub fn pack(
    examples: impl IntoIterator<Item = CausalExample>,
    block: usize,
    separator: Option<i64>,
) -> Result<Vec<CausalExample>> {
    if block == 0 {
        return Err(Error::config("pack", "block must be positive"));
    }
    let (mut ids, mut labels) = (Vec::new(), Vec::new());
    for (i, ex) in examples.into_iter().enumerate() {
        ex.check_lengths("pack", i)?;
        if let (Some(sep), true) = (separator, i > 0) {
            ids.push(sep);
            labels.push(sep);
        }
        ids.extend_from_slice(&ex.input_ids);
        labels.extend_from_slice(&ex.labels);
    }
    if ids.len() < block {
        return Err(Error::config(
            "pack",
            format!(
                "the examples hold {} tokens, fewer than one block of {block}",
                ids.len()
            ),
        ));
    }
    Ok(ids
        .chunks_exact(block)
        .zip(labels.chunks_exact(block))
        .map(|(i, l)| CausalExample {
            input_ids: i.to_vec(),
            labels: l.to_vec(),
        })
        .collect())
}

/// One record of a fine-tuning file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// `{"text": …}`: every token learnt.
    Text(String),
    /// `{"prompt": …, "completion": …}`: only the completion learnt.
    PromptCompletion {
        /// The prompt.
        prompt: String,
        /// What the model learns to answer.
        completion: String,
    },
}

/// Reads a JSONL fine-tuning file: every line `{"prompt", "completion"}`
/// (strings) or every line `{"text"}`. A line without the expected fields,
/// or a file mixing the two forms, is an error naming the file and the line.
pub fn read_records(path: &Path) -> Result<Vec<Record>> {
    let d = JsonlDataset::open(path)?;
    let first = d.get(0)?;
    let prompt_form = first.get("prompt").is_some() || first.get("completion").is_some();
    (0..d.len())
        .map(|i| {
            if prompt_form {
                Ok(Record::PromptCompletion {
                    prompt: d.string(i, "prompt")?.to_string(),
                    completion: d.string(i, "completion")?.to_string(),
                })
            } else {
                Ok(Record::Text(d.string(i, "text")?.to_string()))
            }
        })
        .collect()
}

/// A padded causal-LM batch, every tensor `[B, T]`.
#[derive(Debug)]
pub struct CausalBatch {
    /// I64 token ids, right-padded with the pad id.
    pub input_ids: Tensor,
    /// I64 labels, right-padded with [`IGNORE_INDEX`].
    pub labels: Tensor,
    /// U8, 1 for a token and 0 for padding.
    pub attention_mask: Tensor,
}

/// Pads `batch` to its longest example.
pub fn collate_causal(
    ctx: &ExecContext,
    batch: &[CausalExample],
    pad_id: i64,
) -> Result<CausalBatch> {
    for (i, ex) in batch.iter().enumerate() {
        ex.check_lengths("collate_causal", i)?;
    }
    let ids: Vec<Vec<i64>> = batch.iter().map(|e| e.input_ids.clone()).collect();
    let labels: Vec<Vec<i64>> = batch.iter().map(|e| e.labels.clone()).collect();
    let padded = pad_sequences(ctx, &ids, pad_id)?;
    Ok(CausalBatch {
        input_ids: padded.ids,
        labels: pad_labels(ctx, &labels)?,
        attention_mask: padded.mask,
    })
}
