//! `finetune_llm`'s command line: the model, the data, LoRA or full
//! fine-tuning, the schedule, checkpoints and the sample, with the checks
//! that turn a value that cannot work into an error naming its flag.

use std::ops::Bound;
use std::path::{Path, PathBuf};

use clap::Parser;
use fucina_nn::linear::lora::TargetModules;
use fucina_nn::LoraConfig;
use serde::{Deserialize, Serialize};

use crate::error::{
    decay_and_clip_non_negative, positive, warmup_below_steps, within, Error, Result,
};

/// Fine-tune a Hugging Face decoder LLM with LoRA (PEFT format) or fully.
#[derive(Parser, Debug, Clone, Serialize, Deserialize)]
#[command(name = "finetune_llm", version, args_override_self = true)]
pub struct FinetuneArgs {
    /// The model directory (config.json, model.safetensors, tokenizer.json); default: the
    /// project's own small Llama pre-trained on data/shakespeare.txt, in --base (made by
    /// `train_gpt --arch llama --save-hf` the first time)
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Where the default base model is pre-trained and kept (without --model)
    #[arg(long, default_value = "runs/finetune_llm_base")]
    pub base: PathBuf,
    /// Pre-training steps of the default base model
    #[arg(long, default_value_t = 800)]
    pub pretrain_steps: u64,
    /// Training data: a text file, or a .jsonl of {"prompt", "completion"} or {"text"} lines
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Output directory: metrics, loss curve, checkpoints/, adapter/, merged/, sample.txt
    #[arg(long, default_value = "runs/finetune_llm")]
    pub out: PathBuf,
    /// Fraction of the data (its tail) held out for validation
    #[arg(long, default_value_t = 0.1)]
    pub val_frac: f64,

    /// Train every weight instead of LoRA adapters
    #[arg(long)]
    pub full: bool,
    /// LoRA rank
    #[arg(long, default_value_t = 8)]
    pub lora_r: usize,
    /// LoRA alpha (scale = alpha / r)
    #[arg(long, default_value_t = 16.0)]
    pub lora_alpha: f64,
    /// Dropout on the adapters' input
    #[arg(long, default_value_t = 0.0)]
    pub lora_dropout: f64,
    /// The linear layers to adapt (PEFT's target_modules): names, comma-separated, or
    /// `all-linear` (every linear layer but the output head)
    #[arg(long, value_delimiter = ',', default_value = "all-linear")]
    pub target_modules: Vec<String>,
    /// Scale the adapters by alpha / √r instead of alpha / r (rsLoRA)
    #[arg(long)]
    pub use_rslora: bool,
    /// Modules that train in full beside the adapters (PEFT's modules_to_save), comma-separated
    #[arg(long, value_delimiter = ',')]
    pub modules_to_save: Vec<String>,
    /// Recompute each layer in backward instead of keeping its activations
    #[arg(long)]
    pub gradient_checkpointing: bool,
    /// Keep the frozen base matrices in bf16 (LoRA only): half the weights' memory, widened
    /// inside the GEMM, never copied to f32
    #[arg(long)]
    pub bf16_base: bool,

    /// Tokens per packed training sequence (at most the model's context)
    #[arg(long, default_value_t = 128)]
    pub block_size: usize,
    /// Sequences per batch
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Optimizer steps
    #[arg(long, default_value_t = 150)]
    pub steps: u64,
    /// Peak learning rate (default: 2e-3 with LoRA, 5e-4 with --full)
    #[arg(long)]
    pub lr: Option<f64>,
    /// Linear warmup steps before the cosine decay
    #[arg(long, default_value_t = 10)]
    pub warmup: u64,
    /// The cosine's floor as a fraction of the peak rate
    #[arg(long, default_value_t = 0.1)]
    pub min_lr_frac: f64,
    /// AdamW decoupled weight decay (matrices only)
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f64,
    /// Clip the global gradient norm to this (0: no clipping)
    #[arg(long, default_value_t = 1.0)]
    pub grad_clip: f64,
    /// Seed of the adapters' init, the batch order, dropout and sampling
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Worker threads (0: FUCINA_NUM_THREADS or every core); results are identical for any count
    #[arg(long, default_value_t = 0)]
    pub threads: usize,

    /// Evaluate the validation loss every N steps (and at the end)
    #[arg(long, default_value_t = 25)]
    pub eval_every: u64,
    /// Write a checkpoint every N steps (and at the end)
    #[arg(long, default_value_t = 50)]
    pub ckpt_every: u64,
    /// Checkpoints to keep
    #[arg(long, default_value_t = 2)]
    pub keep_last: usize,
    /// Continue from the newest complete checkpoint in OUT/checkpoints
    #[arg(long)]
    pub resume: bool,
    /// Stop after this step, leaving a checkpoint there (then continue with --resume)
    #[arg(long)]
    pub stop_after: Option<u64>,
    /// Also write the merged model (base + adapters) to OUT/merged with save_pretrained
    #[arg(long)]
    pub merge: bool,

    /// Tokens to generate at the end (0: no sample)
    #[arg(long, default_value_t = 300)]
    pub sample_len: usize,
    /// Text the sample starts with
    #[arg(long, default_value = "KING HENRY V:\n")]
    pub prompt: String,
    /// Sampling temperature (> 0)
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f64,
    /// Sample among the k most likely tokens (0: all)
    #[arg(long, default_value_t = 20)]
    pub top_k: usize,
    /// Plain log lines instead of the progress bar
    #[arg(long)]
    pub no_progress: bool,
    /// Write the run for the PyTorch + peft twin to DIR: the initial adapter,
    /// every batch, the schedule and fucina's losses (`python3
    /// tools/finetune_llm_torch.py replay --model MODEL --run DIR`)
    #[arg(long)]
    pub export_twin: Option<PathBuf>,
}

impl FinetuneArgs {
    /// The peak learning rate: `--lr`, or 2e-3 (LoRA) / 5e-4 (`--full`).
    pub fn lr(&self) -> f64 {
        self.lr.unwrap_or(if self.full { 5e-4 } else { 2e-3 })
    }

    pub(crate) fn validate(&self) -> Result<()> {
        positive("--block-size", self.block_size as f64)?;
        positive("--batch-size", self.batch_size as f64)?;
        positive("--steps", self.steps as f64)?;
        positive("--lr", self.lr())?;
        positive("--eval-every", self.eval_every as f64)?;
        positive("--ckpt-every", self.ckpt_every as f64)?;
        positive("--keep-last", self.keep_last as f64)?;
        positive("--temperature", self.temperature)?;
        if !self.full {
            positive("--lora-r", self.lora_r as f64)?;
        }
        let open = (Bound::Excluded(0.0), Bound::Excluded(1.0));
        within("--val-frac", self.val_frac, open, "(0, 1)")?;
        within("--min-lr-frac", self.min_lr_frac, 0.0..=1.0, "[0, 1]")?;
        warmup_below_steps(self.warmup, self.steps)?;
        if self.bf16_base && self.full {
            return Err(Error::arg(
                "--bf16-base",
                "a bf16 base is frozen: it goes with LoRA, not --full",
            ));
        }
        if self.export_twin.is_some() && (self.full || self.lora_dropout > 0.0 || self.resume) {
            return Err(Error::arg(
                "--export-twin",
                "needs a fresh LoRA run without dropout (torch cannot draw fucina's masks)",
            ));
        }
        decay_and_clip_non_negative(self.weight_decay, self.grad_clip)
    }

    /// The data file: `--data`, or the repository's *Henry V*.
    pub fn data_path(&self) -> PathBuf {
        self.data
            .clone()
            .unwrap_or_else(|| repo_path("data/finetune/henry-v.txt"))
    }

    /// The LoRA configuration these flags describe.
    pub fn lora_config(&self) -> LoraConfig {
        let targets = match self.target_modules.as_slice() {
            [one] if one.eq_ignore_ascii_case("all-linear") => TargetModules::Pattern(one.clone()),
            names => TargetModules::Names(names.to_vec()),
        };
        let mut c = LoraConfig::with_targets(self.lora_r, self.lora_alpha, targets)
            .with_dropout(self.lora_dropout)
            .with_rslora(self.use_rslora);
        if !self.modules_to_save.is_empty() {
            let names: Vec<&str> = self.modules_to_save.iter().map(String::as_str).collect();
            c = c.with_modules_to_save(&names);
        }
        c
    }
}

/// `rel` under the working directory when it exists there, else under the
/// repository (found from this crate's source directory).
pub fn repo_path(rel: &str) -> PathBuf {
    let local = PathBuf::from(rel);
    if local.exists() {
        local
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
    }
}
