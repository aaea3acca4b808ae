//! `train_gpt`'s command line: every knob of the run, with its checks
//! (each bad value an error naming its flag) and the default data file.

use std::ops::Bound;
use std::path::{Path, PathBuf};

use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::char_lm::Arch;
use crate::error::{
    decay_and_clip_non_negative, heads_divide, positive, warmup_below_steps, within, Error, Result,
};

/// Train a character-level GPT (or a Llama-layout decoder) from scratch on a text file and sample from it.
///
/// The default run trains on the Shakespeare text shipped in `data/`,
/// holding out its last 10% for validation, and writes its loss curve,
/// a text sample and checkpoints to `--out`.
#[derive(Parser, Debug, Clone, Serialize, Deserialize)]
#[command(name = "train_gpt", version, args_override_self = true)]
pub struct TrainGptArgs {
    /// Training text: any UTF-8 file (default: this repository's data/shakespeare.txt)
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Output directory: loss curve, losses.tsv, metrics.jsonl, TensorBoard events, sample.txt, checkpoints/
    #[arg(long, default_value = "runs/train_gpt")]
    pub out: PathBuf,
    /// Fraction of the text (its tail) held out for validation
    #[arg(long, default_value_t = 0.1)]
    pub val_frac: f64,

    /// The model: nanoGPT's GPT, or Llama's layout (RoPE, RMSNorm, SwiGLU, grouped-query attention)
    #[arg(long, value_enum, default_value_t = Arch::Gpt)]
    pub arch: Arch,
    /// Transformer blocks
    #[arg(long, default_value_t = 4)]
    pub n_layer: usize,
    /// Attention heads per block
    #[arg(long, default_value_t = 4)]
    pub n_head: usize,
    /// Key/value heads per block (--arch llama; divides --n-head)
    #[arg(long, default_value_t = 2)]
    pub n_kv_head: usize,
    /// SwiGLU hidden width (--arch llama; 0: 8/3 of --n-embd rounded up to a multiple of 16)
    #[arg(long, default_value_t = 0)]
    pub intermediate: usize,
    /// Tie the output head to the token embedding (--arch llama; the GPT's is always tied)
    #[arg(long)]
    pub tied_head: bool,
    /// Model width (a multiple of --n-head)
    #[arg(long, default_value_t = 128)]
    pub n_embd: usize,
    /// Context length in characters
    #[arg(long, default_value_t = 64)]
    pub block_size: usize,
    /// Dropout after the embeddings and on each residual branch
    #[arg(long, default_value_t = 0.0)]
    pub dropout: f64,

    /// Optimizer steps
    #[arg(long, default_value_t = 800)]
    pub steps: u64,
    /// Sequences per batch
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Peak learning rate (AdamW)
    #[arg(long, default_value_t = 3e-3)]
    pub lr: f64,
    /// The cosine's floor as a fraction of --lr
    #[arg(long, default_value_t = 0.1)]
    pub min_lr_frac: f64,
    /// Linear warmup steps before the cosine decay
    #[arg(long, default_value_t = 50)]
    pub warmup: u64,
    /// AdamW decoupled weight decay (matrices and embeddings only; none on biases and norms)
    #[arg(long, default_value_t = 0.1)]
    pub weight_decay: f64,
    /// AdamW beta2
    #[arg(long, default_value_t = 0.99)]
    pub beta2: f64,
    /// Clip the global gradient norm to this (0: no clipping)
    #[arg(long, default_value_t = 1.0)]
    pub grad_clip: f64,
    /// Seed of the init, the batches and the sampling
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Worker threads (0: FUCINA_NUM_THREADS or every core); results are identical for any count
    #[arg(long, default_value_t = 0)]
    pub threads: usize,

    /// Evaluate the validation loss every N steps (and at the end)
    #[arg(long, default_value_t = 100)]
    pub eval_every: u64,
    /// Validation batches per evaluation (fixed windows of the held-out tail)
    #[arg(long, default_value_t = 16)]
    pub eval_batches: usize,
    /// Write a checkpoint directory every N steps (0: only at the end); one is also written at each new best validation loss
    #[arg(long, default_value_t = 200)]
    pub ckpt_every: u64,
    /// Keep the newest N checkpoints (and the best validation loss's), deleting older ones
    #[arg(long, default_value_t = 3)]
    pub keep_last: usize,
    /// Continue from the newest complete checkpoint in OUT/checkpoints
    #[arg(long)]
    pub resume: bool,
    /// Stop after this step, leaving a checkpoint there (then continue with --resume)
    #[arg(long)]
    pub stop_after: Option<u64>,

    /// Characters to generate at the end
    #[arg(long, default_value_t = 600)]
    pub sample_len: usize,
    /// Sampling temperature (> 0)
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f64,
    /// Sample only among the k most likely characters (0: all)
    #[arg(long, default_value_t = 20)]
    pub top_k: usize,
    /// Text to start the sample with (characters outside the vocabulary are skipped)
    #[arg(long, default_value = "\n")]
    pub prompt: String,

    /// Also copy the loss curve to this path (the README's picture: docs/img/train_gpt_loss.png)
    #[arg(long)]
    pub copy_plot_to: Option<PathBuf>,
    /// Plain log lines instead of the progress bar
    #[arg(long)]
    pub no_progress: bool,
    /// Log TensorBoard histograms of the weights and gradients every N steps (0: never)
    #[arg(long, default_value_t = 0)]
    pub histograms_every: u64,
    /// At the end, write the model as a Hugging Face directory (weights, config, char tokenizer) here
    #[arg(long)]
    pub save_hf: Option<PathBuf>,
}

impl TrainGptArgs {
    /// Checks every knob; the error names the flag.
    pub fn validate(&self) -> Result<()> {
        positive("--n-layer", self.n_layer as f64)?;
        positive("--n-head", self.n_head as f64)?;
        positive("--n-embd", self.n_embd as f64)?;
        positive("--block-size", self.block_size as f64)?;
        positive("--steps", self.steps as f64)?;
        positive("--batch-size", self.batch_size as f64)?;
        positive("--lr", self.lr)?;
        positive("--temperature", self.temperature)?;
        positive("--eval-every", self.eval_every as f64)?;
        positive("--eval-batches", self.eval_batches as f64)?;
        let llama = self.arch == Arch::Llama;
        heads_divide(self.n_embd, self.n_head, llama.then_some(self.n_kv_head))?;
        if llama && !(self.n_embd / self.n_head).is_multiple_of(2) {
            return Err(Error::arg(
                "--n-embd",
                format!(
                    "RoPE needs an even head width: {} / {} heads is odd",
                    self.n_embd, self.n_head
                ),
            ));
        }
        if self.keep_last == 0 {
            return Err(Error::arg("--keep-last", "must keep at least 1 checkpoint"));
        }
        let open = (Bound::Excluded(0.0), Bound::Excluded(1.0));
        within("--val-frac", self.val_frac, open, "(0, 1)")?;
        within("--dropout", self.dropout, 0.0..1.0, "[0, 1)")?;
        within("--min-lr-frac", self.min_lr_frac, 0.0..=1.0, "[0, 1]")?;
        warmup_below_steps(self.warmup, self.steps)?;
        if !(self.beta2 >= 0.0 && self.beta2 < 1.0) {
            return Err(Error::arg(
                "--beta2",
                format!("must be in [0, 1), got {}", self.beta2),
            ));
        }
        decay_and_clip_non_negative(self.weight_decay, self.grad_clip)
    }

    /// The data file: `--data`, or the repository's Shakespeare text (found
    /// from the working directory, else from this crate's source directory).
    pub fn data_path(&self) -> PathBuf {
        if let Some(p) = &self.data {
            return p.clone();
        }
        let local = PathBuf::from("data/shakespeare.txt");
        if local.exists() {
            local
        } else {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/shakespeare.txt")
        }
    }
}
