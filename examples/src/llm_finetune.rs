//! The decoder-LLM fine-tuning run behind `cargo run --release --example
//! finetune_llm`: a Hugging Face model directory (GPT-2, Llama, Qwen2,
//! Qwen3) fine-tuned on a text or a JSONL prompt/completion file, with LoRA
//! in PEFT's format (the default) or every weight (`--full`).
//!
//! The data goes through the model's own `tokenizer.json` and the kit's
//! causal-LM pieces (`fucina_train::causal`): prompts are masked out of the
//! loss, examples are packed into blocks of `--block-size` tokens, the
//! batches come from the kit's seeded loader. The loop is AdamW with warmup
//! and cosine decay and gradient clipping; it evaluates the held-out tail,
//! logs to `OUT/metrics.jsonl` and TensorBoard, keeps the last checkpoints,
//! resumes bit-exactly (`--resume`), writes the adapter (PEFT format), with
//! `--merge` a merged model, the loss curve, and ends with a sample.
//!
//! Resume is bit-exact because every input of a step is in the checkpoint
//! (trainable weights, AdamW moments and step count, dropout call
//! counters, the loss history) or a pure function of the seed and the step
//! (the loader's epoch order).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use fucina_autograd::{no_grad, ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::hf::Tokenizer;
use fucina_nn::lora::{merge_and_unload, save_adapter, TargetModules};
use fucina_nn::{apply_lora, CausalLm, GenerateOptions, Init, LoraConfig, Module, Sampling};
use fucina_optim::{
    clip_grad_norm, load_latest, save_checkpoint, AdamConfig, AdamW, Optimizer, ParamGroup,
    Schedule, TrainerState,
};
use fucina_train::causal::{
    collate_causal, pack, read_records, CausalBatch, CausalExample, Record,
};
use fucina_train::{DataLoader, Dataset, InMemory, KeepLast, LoaderOptions, MetricsLogger};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::plot::{loss_curve_png, LossCurve};
use crate::sys::{peak_rss_mib, rss_mib};

/// The linear layers LoRA adapts by default: every projection of the
/// Llama/Qwen layout and GPT-2's (PEFT's `all-linear` on these families).
pub const DEFAULT_TARGETS: &str =
    "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,c_attn,c_proj,c_fc";

/// Fine-tune a Hugging Face decoder LLM with LoRA (PEFT format) or fully.
#[derive(Parser, Debug, Clone, Serialize, Deserialize)]
#[command(name = "finetune_llm", version, args_override_self = true)]
pub struct FinetuneArgs {
    /// The model directory (config.json, model.safetensors, tokenizer.json)
    #[arg(long)]
    pub model: Option<PathBuf>,
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

/// What a run shares with the checkpoint it resumes (threads, output and
/// logging may differ).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RunIdentity {
    model_config: serde_json::Value,
    train_tokens: usize,
    val_tokens: usize,
    full: bool,
    lora: Option<serde_json::Value>,
    block_size: usize,
    batch_size: usize,
    steps: u64,
    lr: f64,
    warmup: u64,
    min_lr_frac: f64,
    weight_decay: f64,
    grad_clip: f64,
    seed: u64,
}

/// The outcome of [`finetune_llm`].
#[derive(Debug, Clone)]
pub struct FinetuneReport {
    /// Training loss of step `i + 1` at index `i` (resumed steps included).
    pub losses: Vec<f32>,
    /// `(step, validation loss)` at each evaluation (step 0: before training).
    pub val: Vec<(u64, f64)>,
    /// The validation loss of the model as loaded.
    pub val_before: f64,
    /// The validation loss at the end (`None` when the run stopped early).
    pub val_after: Option<f64>,
    /// The last step this run took.
    pub last_step: u64,
    /// Parameters that train.
    pub trainable: usize,
    /// Every parameter (adapters included).
    pub total: usize,
    /// Wall time of this process's training steps, seconds.
    pub train_secs: f64,
    /// Peak resident set size of the process, MiB (`NaN` off Linux).
    pub peak_rss_mib: f64,
    /// The generated text (empty when the run stopped early).
    pub sample: String,
}

impl FinetuneArgs {
    /// The peak learning rate: `--lr`, or 2e-3 (LoRA) / 5e-4 (`--full`).
    pub fn lr(&self) -> f64 {
        self.lr.unwrap_or(if self.full { 5e-4 } else { 2e-3 })
    }

    fn validate(&self) -> Result<()> {
        let pos = |flag: &'static str, v: f64| {
            if v > 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(Error::arg(flag, format!("must be positive, got {v}")))
            }
        };
        pos("--block-size", self.block_size as f64)?;
        pos("--batch-size", self.batch_size as f64)?;
        pos("--steps", self.steps as f64)?;
        pos("--lr", self.lr())?;
        pos("--eval-every", self.eval_every as f64)?;
        pos("--ckpt-every", self.ckpt_every as f64)?;
        pos("--keep-last", self.keep_last as f64)?;
        pos("--temperature", self.temperature)?;
        if !self.full {
            pos("--lora-r", self.lora_r as f64)?;
        }
        if !(self.val_frac > 0.0 && self.val_frac < 1.0) {
            return Err(Error::arg(
                "--val-frac",
                format!("must be in (0, 1), got {}", self.val_frac),
            ));
        }
        if !(0.0..=1.0).contains(&self.min_lr_frac) {
            return Err(Error::arg(
                "--min-lr-frac",
                format!("must be in [0, 1], got {}", self.min_lr_frac),
            ));
        }
        if self.warmup >= self.steps {
            return Err(Error::arg(
                "--warmup",
                format!("{} must be below --steps {}", self.warmup, self.steps),
            ));
        }
        if self.export_twin.is_some() && (self.full || self.lora_dropout > 0.0 || self.resume) {
            return Err(Error::arg(
                "--export-twin",
                "needs a fresh LoRA run without dropout (torch cannot draw fucina's masks)",
            ));
        }
        if !(self.weight_decay >= 0.0 && self.grad_clip >= 0.0) {
            return Err(Error::arg(
                "--weight-decay/--grad-clip",
                "must be non-negative",
            ));
        }
        Ok(())
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

/// The training and validation blocks of `path`: a JSONL file's records
/// (its last `val_frac` held out), or a text's tail from the first
/// paragraph break after `1 − val_frac` of it, tokenized and packed into
/// blocks of `block` tokens (the separator: the model's first EOS token).
pub fn load_blocks(
    path: &Path,
    tok: &Tokenizer,
    block: usize,
    val_frac: f64,
    eos: Option<i64>,
) -> Result<(Vec<CausalExample>, Vec<CausalExample>)> {
    let encode = |s: &str| -> Result<Vec<i64>> {
        Ok(tok.encode(s, false)?.into_iter().map(i64::from).collect())
    };
    let is_jsonl = path.extension().is_some_and(|e| e == "jsonl");
    let (train, val): (Vec<CausalExample>, Vec<CausalExample>) = if is_jsonl {
        let records = read_records(path)?;
        let n_val = ((records.len() as f64 * val_frac).round() as usize).max(1);
        if n_val >= records.len() {
            return Err(Error::Data {
                path: path.to_path_buf(),
                msg: format!(
                    "{} records leave none for training after holding out {n_val}",
                    records.len()
                ),
            });
        }
        let mut exs = Vec::with_capacity(records.len());
        for r in &records {
            exs.push(match r {
                Record::Text(t) => CausalExample::text(encode(t)?),
                Record::PromptCompletion { prompt, completion } => {
                    CausalExample::prompt_completion(&encode(prompt)?, &encode(completion)?)
                }
            });
        }
        let val = exs.split_off(records.len() - n_val);
        (exs, val)
    } else {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let mut cut = ((text.len() as f64) * (1.0 - val_frac)) as usize;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        let cut = text[cut..].find("\n\n").map_or(cut, |i| cut + i + 2);
        (
            vec![CausalExample::text(encode(&text[..cut])?)],
            vec![CausalExample::text(encode(&text[cut..])?)],
        )
    };
    let blocks = |exs: Vec<CausalExample>, which: &str| {
        pack(exs, block, eos).map_err(|e| Error::Data {
            path: path.to_path_buf(),
            msg: format!("{which} split: {e}"),
        })
    };
    Ok((blocks(train, "training")?, blocks(val, "validation")?))
}

/// The mean loss over every learnt label of `blocks` (eval mode, no grad):
/// each batch's mean weighted by its learnt labels, so the result is the
/// mean over the whole split whatever the batch size.
pub fn evaluate(lm: &CausalLm, blocks: &[CausalExample], batch: usize, pad: i64) -> Result<f64> {
    lm.eval();
    let _ng = no_grad();
    let ctx = lm.ctx();
    let (mut total, mut count) = (0.0, 0usize);
    for chunk in blocks.chunks(batch) {
        let _scope = ctx.scope();
        // The labels the shifted loss uses: every position but the first.
        let n: usize = chunk
            .iter()
            .map(|e| e.labels[1..].iter().filter(|&&l| l != -100).count())
            .sum();
        if n == 0 {
            continue;
        }
        let b = collate_causal(ctx, chunk, pad)?;
        let logits = lm.forward(&b.input_ids, Some(&b.attention_mask))?;
        total += lm.loss(&logits, &b.labels)?.item()? * n as f64;
        count += n;
    }
    lm.train();
    Ok(total / count.max(1) as f64)
}

/// One training step on a padded batch: forward, loss, backward, clip,
/// AdamW step; returns the loss. The gradients are cleared for the next
/// step. The batch's tensors are the caller's (make them inside a scope).
pub fn train_step(
    lm: &CausalLm,
    opt: &mut AdamW,
    batch: &CausalBatch,
    grad_clip: f64,
) -> Result<f32> {
    let loss = {
        let _scope = lm.ctx().scope();
        let logits = lm.forward(&batch.input_ids, Some(&batch.attention_mask))?;
        let loss = lm.loss(&logits, &batch.labels)?;
        loss.backward()?;
        loss.item()? as f32
    };
    if grad_clip > 0.0 {
        clip_grad_norm(&opt.params(), grad_clip)?;
    }
    opt.step()?;
    opt.zero_grad();
    Ok(loss)
}

/// AdamW over the trainable parameters of `lm`: decay on matrices only,
/// warmup then cosine to `min_lr_frac`.
pub fn optimizer(
    lm: &CausalLm,
    lr: f64,
    weight_decay: f64,
    warmup: u64,
    total: u64,
    min_lr_frac: f64,
) -> Result<AdamW> {
    let [decay, no_decay] = lm.decay_groups();
    let schedule = Schedule::WarmupCosine {
        warmup,
        total,
        min_factor: min_lr_frac,
    };
    let adam = AdamConfig {
        weight_decay,
        ..AdamConfig::adamw(lr)
    };
    let mut groups = vec![ParamGroup::new(decay, adam.clone()).with_schedule(schedule)];
    if !no_decay.is_empty() {
        groups.push(
            ParamGroup::new(
                no_decay,
                AdamConfig {
                    weight_decay: 0.0,
                    ..adam
                },
            )
            .with_schedule(schedule),
        );
    }
    Ok(AdamW::new(groups)?)
}

/// What a checkpoint holds: the trainable parameters and every persistent
/// buffer (the dropout counters); the frozen base is the model directory's.
fn checkpoint_tensors(lm: &CausalLm) -> Vec<(String, Tensor)> {
    let mut named: Vec<(String, Tensor)> = lm
        .named_parameters()
        .into_iter()
        .filter(|(_, t)| t.requires_grad())
        .collect();
    named.extend(lm.named_buffers());
    named
}

/// The model's first EOS token and its pad token (the EOS when it has none,
/// else 0; padding is masked out of attention and loss either way).
fn special_tokens(lm: &CausalLm) -> (Option<i64>, i64) {
    let eos = lm.config.eos_token_ids.first().copied();
    (eos, lm.config.pad_token_id.or(eos).unwrap_or(0))
}

/// Fine-tunes (or resumes) as `args` says. With `progress`, shows a progress
/// bar (when stderr is a terminal) and prints evaluations.
pub fn finetune_llm(args: &FinetuneArgs, progress: bool) -> Result<FinetuneReport> {
    args.validate()?;
    let model_dir = args
        .model
        .clone()
        .ok_or_else(|| Error::arg("--model", "no model directory given"))?;
    if !model_dir.join("config.json").is_file() {
        return Err(Error::arg(
            "--model",
            format!("{} has no config.json", model_dir.display()),
        ));
    }
    let tok_path = model_dir.join("tokenizer.json");
    if !tok_path.is_file() {
        return Err(Error::arg(
            "--model",
            format!("{} has no tokenizer.json", model_dir.display()),
        ));
    }
    let ctx = if args.threads == 0 {
        ExecContext::new()?
    } else {
        ExecContext::with_threads(args.threads)?
    };
    let tok = Tokenizer::from_file(&tok_path)?;
    let mut lm = CausalLm::from_pretrained(&ctx, &model_dir, DType::F32)?;
    let block = args.block_size;
    if block > lm.config.max_positions {
        return Err(Error::arg(
            "--block-size",
            format!(
                "{block} exceeds the model's context of {} positions",
                lm.config.max_positions
            ),
        ));
    }
    let (eos, pad) = special_tokens(&lm);
    let data_path = args.data_path();
    let (train, val) = load_blocks(&data_path, &tok, block, args.val_frac, eos)?;
    let lora = if args.full {
        None
    } else {
        let cfg = args.lora_config();
        apply_lora(&mut lm, &cfg, &mut Init::new(&ctx, DType::F32, args.seed))?;
        Some(cfg)
    };
    if args.gradient_checkpointing {
        lm.gradient_checkpointing_enable();
    }
    let trainable: usize = lm.trainable_parameters().iter().map(|t| t.numel()).sum();
    let total = lm.num_parameters();
    let lr = args.lr();
    let mut opt = optimizer(
        &lm,
        lr,
        args.weight_decay,
        args.warmup,
        args.steps,
        args.min_lr_frac,
    )?;
    let named = checkpoint_tensors(&lm);

    let identity = RunIdentity {
        model_config: lm.config.to_hf_json(),
        train_tokens: train.len() * block,
        val_tokens: val.len() * block,
        full: args.full,
        lora: lora.as_ref().and_then(|c| serde_json::to_value(c).ok()),
        block_size: block,
        batch_size: args.batch_size,
        steps: args.steps,
        lr,
        warmup: args.warmup,
        min_lr_frac: args.min_lr_frac,
        weight_decay: args.weight_decay,
        grad_clip: args.grad_clip,
        seed: args.seed,
    };
    let loader = DataLoader::new(
        InMemory::new(train),
        LoaderOptions::new(args.batch_size)
            .seed(args.seed)
            .drop_last(true)
            .prefetch(2),
        Ok,
    )?;
    let per_epoch = loader.batches_per_epoch() as u64;
    if per_epoch == 0 {
        return Err(Error::Data {
            path: data_path.clone(),
            msg: format!(
                "{} training blocks of {block} tokens make no batch of {}",
                loader.dataset().len(),
                args.batch_size
            ),
        });
    }

    let ckpt_root = args.out.join("checkpoints");
    std::fs::create_dir_all(&args.out).map_err(|e| Error::io(&args.out, e))?;
    let keep = KeepLast::new(args.keep_last)?;
    let mut losses: Vec<f32> = Vec::new();
    let mut val_hist: Vec<(u64, f64)> = Vec::new();
    let mut step0 = 0u64;
    if args.resume {
        let ck = load_latest(&ckpt_root)?.ok_or_else(|| Error::Resume {
            dir: ckpt_root.clone(),
            msg: "no complete checkpoint there (run without --resume first)".into(),
        })?;
        let resume_err = |msg: String| Error::Resume {
            dir: ck.dir.clone(),
            msg,
        };
        let saved: RunIdentity =
            serde_json::from_value(ck.state.extra["run"].clone()).map_err(|e| {
                resume_err(format!("trainer_state.json has no valid run identity: {e}"))
            })?;
        if saved != identity {
            return Err(resume_err(format!(
                "it was made by a different run (model, data or training knobs differ):\n  checkpoint: {saved:?}\n  this run:   {identity:?}"
            )));
        }
        ck.load_model(&named)?;
        ck.load_optimizer(&mut opt)?;
        losses = serde_json::from_value(ck.state.extra["losses"].clone())
            .map_err(|e| resume_err(format!("bad loss history: {e}")))?;
        val_hist = serde_json::from_value(ck.state.extra["val"].clone())
            .map_err(|e| resume_err(format!("bad validation history: {e}")))?;
        if losses.len() as u64 != ck.state.step {
            return Err(resume_err("inconsistent trainer state".into()));
        }
        step0 = ck.state.step;
    }
    let last = args.stop_after.unwrap_or(args.steps).min(args.steps);
    let mut log = MetricsLogger::create(&args.out)?;

    let pb = if progress && !args.no_progress {
        ProgressBar::with_draw_target(Some(args.steps), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template(
            "{bar:32.cyan/blue} step {pos}/{len} {msg} [{elapsed} < {eta}]",
        )
        .map_err(|e| Error::arg("progress", e.to_string()))?,
    );
    pb.set_position(step0);
    pb.reset_eta();
    let say = |line: String| {
        if progress {
            pb.suspend(|| println!("{line}"));
        }
    };
    say(format!(
        "finetune_llm: {} ({:?}, {} layers, width {}) on {}: {} training and {} validation blocks of {block} tokens",
        model_dir.display(),
        lm.config.model_type,
        lm.config.num_layers,
        lm.config.hidden_size,
        data_path.display(),
        loader.dataset().len(),
        val.len()
    ));
    say(format!(
        "{}: {trainable} of {total} parameters train ({:.2}%); {} threads",
        if args.full {
            "full fine-tuning".to_string()
        } else {
            format!("LoRA r={} alpha={}", args.lora_r, args.lora_alpha)
        },
        100.0 * trainable as f64 / total.max(1) as f64,
        ctx.num_threads()
    ));
    let val_before = match val_hist.first() {
        Some(&(0, v)) => v,
        _ => {
            let v = evaluate(&lm, &val, args.batch_size, pad)?;
            val_hist.insert(0, (0, v));
            log.scalar("val/loss", 0, v)?;
            v
        }
    };
    say(format!(
        "validation loss before fine-tuning: {val_before:.4}"
    ));

    let mut twin = match (&args.export_twin, &lora) {
        (Some(dir), Some(cfg)) => {
            save_adapter(&lm, cfg, &dir.join("adapter_init"))?;
            Some(TwinExport::default())
        }
        _ => None,
    };
    let t0 = Instant::now();
    let mut step = step0;
    'epochs: while step < last {
        let epoch = step / per_epoch;
        let start = (step % per_epoch) as usize;
        for batch in loader.epoch_from(epoch, start)? {
            let batch = batch?;
            step += 1;
            if let Some(t) = &mut twin {
                t.push(&batch);
            }
            let loss = {
                let _scope = ctx.scope();
                let b = collate_causal(&ctx, &batch, pad)?;
                train_step(&lm, &mut opt, &b, args.grad_clip)?
            };
            losses.push(loss);
            log.scalar("train/loss", step, loss as f64)?;
            log.scalar("train/lr", step, opt.lr(0)?)?;
            pb.set_position(step);
            pb.set_message(format!("loss {loss:.4}"));
            if step % args.eval_every == 0 || step == args.steps {
                let v = evaluate(&lm, &val, args.batch_size, pad)?;
                val_hist.push((step, v));
                log.scalar("val/loss", step, v)?;
                say(format!(
                    "step {step:>5}: train loss {loss:.4}, validation loss {v:.4}  (pool outstanding {}, RSS {:.0} MiB)",
                    ctx.stats().outstanding,
                    rss_mib()
                ));
            }
            if step % args.ckpt_every == 0 || step == last {
                let state = TrainerState {
                    step,
                    seeds: [("seed".to_string(), args.seed)].into(),
                    data_position: step,
                    lr: opt.lr(0)?,
                    extra: serde_json::json!({"run": identity, "losses": losses, "val": val_hist}),
                };
                save_checkpoint(&ckpt_root, &named, &opt, &state)?;
                keep.prune(&ckpt_root, None)?;
            }
            if step == last {
                break 'epochs;
            }
        }
    }
    log.flush()?;
    let train_secs = t0.elapsed().as_secs_f64();
    if let (Some(t), Some(dir)) = (&twin, &args.export_twin) {
        t.write(&ctx, dir, args, &losses)?;
        say(format!(
            "twin run: {} (replay with tools/finetune_llm_torch.py)",
            dir.display()
        ));
    }
    pb.finish_and_clear();

    let png = args.out.join("loss.png");
    loss_curve_png(
        &png,
        &LossCurve {
            train: &losses,
            val: &val_hist,
            baseline: val_before,
        },
    )?;

    let mut sample = String::new();
    let mut val_after = None;
    if last == args.steps {
        let v = val_hist.last().map(|&(_, v)| v).unwrap_or(val_before);
        val_after = Some(v);
        say(format!(
            "validation loss after fine-tuning: {v:.4} (before: {val_before:.4})"
        ));
        if let Some(cfg) = &lora {
            let dir = args.out.join("adapter");
            save_adapter(&lm, cfg, &dir)?;
            say(format!("adapter (PEFT format): {}", dir.display()));
            if args.merge {
                // The adapters folded into the base weights and dropped, so
                // the directory holds the family's own keys only.
                merge_and_unload(&mut lm)?;
                let dir = args.out.join("merged");
                lm.save_pretrained(&dir)?;
                say(format!("merged model: {}", dir.display()));
            }
        } else {
            let dir = args.out.join("model");
            lm.save_pretrained(&dir)?;
            say(format!("model: {}", dir.display()));
        }
        if args.sample_len > 0 {
            sample = generate_sample(&lm, &tok, args)?;
            let p = args.out.join("sample.txt");
            std::fs::write(&p, &sample).map_err(|e| Error::io(&p, e))?;
        }
    }
    Ok(FinetuneReport {
        losses,
        val: val_hist,
        val_before,
        val_after,
        last_step: last,
        trainable,
        total,
        train_secs,
        peak_rss_mib: peak_rss_mib(),
        sample,
    })
}

/// The batches of a run, for the PyTorch twin (all of one shape: packed
/// blocks in full batches).
#[derive(Default)]
struct TwinExport {
    ids: Vec<i64>,
    labels: Vec<i64>,
    steps: usize,
    shape: (usize, usize),
}

impl TwinExport {
    fn push(&mut self, batch: &[CausalExample]) {
        self.shape = (batch.len(), batch.first().map_or(0, CausalExample::len));
        for e in batch {
            self.ids.extend_from_slice(&e.input_ids);
            self.labels.extend_from_slice(&e.labels);
        }
        self.steps += 1;
    }

    /// `dir/batches.safetensors` and `dir/run.json` (the twin's format).
    fn write(
        &self,
        ctx: &ExecContext,
        dir: &Path,
        args: &FinetuneArgs,
        losses: &[f32],
    ) -> Result<()> {
        let (b, t) = self.shape;
        let shape = [self.steps, b, t];
        let mask = vec![1i64; self.ids.len()];
        let tensors = vec![
            (
                "input_ids".to_string(),
                Tensor::constant(ctx, &self.ids, &shape)?,
            ),
            (
                "labels".to_string(),
                Tensor::constant(ctx, &self.labels, &shape)?,
            ),
            (
                "attention_mask".to_string(),
                Tensor::constant(ctx, &mask, &shape)?,
            ),
        ];
        fucina_autograd::io::save_state_dict(
            &dir.join("batches.safetensors"),
            &tensors,
            &Default::default(),
        )?;
        let adam = AdamConfig::adamw(args.lr());
        let run = serde_json::json!({
            "lr": args.lr(),
            "warmup": args.warmup,
            "total": args.steps,
            "min_lr_frac": args.min_lr_frac,
            "weight_decay": args.weight_decay,
            "grad_clip": args.grad_clip,
            "betas": [adam.betas.0, adam.betas.1],
            "eps": adam.eps,
            "losses": losses,
        });
        let p = dir.join("run.json");
        std::fs::write(&p, format!("{run:#}\n")).map_err(|e| Error::io(&p, e))?;
        Ok(())
    }
}

/// `args.sample_len` tokens after `args.prompt`, sampled (temperature,
/// top-k) with the run's seed; the prompt included.
fn generate_sample(lm: &CausalLm, tok: &Tokenizer, args: &FinetuneArgs) -> Result<String> {
    let prompt: Vec<i64> = tok
        .encode(&args.prompt, false)?
        .into_iter()
        .map(i64::from)
        .collect();
    if prompt.is_empty() {
        return Err(Error::arg("--prompt", "the prompt has no tokens"));
    }
    let (_, pad) = special_tokens(lm);
    let opts = GenerateOptions {
        max_new_tokens: args
            .sample_len
            .min(lm.config.max_positions.saturating_sub(prompt.len())),
        sampling: Sampling::Sample {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: 1.0,
            seed: args.seed ^ 0x5eed,
        },
        eos_token_ids: lm.config.eos_token_ids.clone(),
        pad_token_id: pad,
    };
    lm.eval();
    let out = lm.generate(std::slice::from_ref(&prompt), &opts)?;
    lm.train();
    let ids: Vec<u32> = prompt
        .iter()
        .chain(&out.tokens[0])
        .map(|&i| i as u32)
        .collect();
    Ok(tok.decode(&ids, true)?)
}
