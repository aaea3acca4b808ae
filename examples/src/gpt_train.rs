//! The character-level GPT training run behind `cargo run --release
//! --example train_gpt`: command-line knobs, the training loop (AdamW with
//! nanoGPT's decay groups, warmup + cosine, gradient clipping), periodic
//! validation on the text's held-out tail, checkpoints with bit-exact
//! `--resume`, sampling, and the loss curve.
//!
//! Resume is bit-exact because everything a step depends on is either in
//! the checkpoint (weights, AdamW moments and step count, dropout call
//! counters, the loss history) or a pure function of `(seed, step)` (the
//! batches): a run stopped at step k and resumed computes the same loss at
//! every later step as a run that never stopped.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use fucina_autograd::{no_grad, ScopeExt, Tensor};
use fucina_core::{rng, DType, ExecContext};
use fucina_nn::{Gpt, GptConfig, Init, Module};
use fucina_optim::{
    clip_grad_norm, load_latest, save_checkpoint, AdamConfig, AdamW, Optimizer, ParamGroup,
    Schedule, TrainerState,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::chardata::{sample_batch, CharData};
use crate::error::{Error, Result};
use crate::plot::{loss_curve_png, LossCurve};
use crate::sys::rss_mib;

/// Seed stream of the validation batches (fixed: every evaluation sees the same windows).
const VAL_STREAM: u64 = 0xffff_ffff;

/// Train a character-level GPT from scratch on a text file and sample from it.
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
    /// Output directory: loss curve, losses.tsv, sample.txt, checkpoints/
    #[arg(long, default_value = "runs/train_gpt")]
    pub out: PathBuf,
    /// Fraction of the text (its tail) held out for validation
    #[arg(long, default_value_t = 0.1)]
    pub val_frac: f64,

    /// Transformer blocks
    #[arg(long, default_value_t = 4)]
    pub n_layer: usize,
    /// Attention heads per block
    #[arg(long, default_value_t = 4)]
    pub n_head: usize,
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
    /// Write a checkpoint directory every N steps (0: only at the end)
    #[arg(long, default_value_t = 200)]
    pub ckpt_every: u64,
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
}

/// What a run must share with the checkpoint it resumes from for the resume
/// to be bit-exact (threads, output and logging may differ).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RunIdentity {
    vocab: String,
    train_len: usize,
    val_len: usize,
    gpt: GptConfig,
    steps: u64,
    batch_size: usize,
    lr: f64,
    min_lr_frac: f64,
    warmup: u64,
    weight_decay: f64,
    beta2: f64,
    grad_clip: f64,
    seed: u64,
}

/// Pool and process memory at one evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemPoint {
    /// The step after which it was taken.
    pub step: u64,
    /// Pool buffers handed out and not yet returned.
    pub outstanding: usize,
    /// Bytes in those buffers.
    pub live_bytes: usize,
    /// Resident set size in MiB (`NaN` off Linux).
    pub rss_mib: f64,
}

/// The outcome of [`train_gpt`].
#[derive(Debug, Clone)]
pub struct TrainReport {
    /// Training loss of step `i + 1` at index `i` (every step, resumed ones included).
    pub losses: Vec<f32>,
    /// `(step, validation loss)` at every evaluation.
    pub val: Vec<(u64, f64)>,
    /// The unigram baseline: entropy of the training characters, nats.
    pub unigram: f64,
    /// Loss over the whole validation text at the end ([`evaluate_full`];
    /// `None` when the run stopped early).
    pub final_val: Option<f64>,
    /// The last step this run took.
    pub last_step: u64,
    /// Parameters of the model.
    pub num_params: usize,
    /// The generated text (empty when the run stopped early).
    pub sample: String,
    /// Memory at each evaluation of this process.
    pub mem: Vec<MemPoint>,
    /// Training tokens per second of this process (steps it ran).
    pub tokens_per_sec: f64,
    /// Wall time of this process's training steps, seconds.
    pub train_secs: f64,
}

impl TrainGptArgs {
    fn validate(&self) -> Result<()> {
        let pos = |flag: &'static str, v: f64| {
            if v > 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(Error::arg(flag, format!("must be positive, got {v}")))
            }
        };
        pos("--n-layer", self.n_layer as f64)?;
        pos("--n-head", self.n_head as f64)?;
        pos("--n-embd", self.n_embd as f64)?;
        pos("--block-size", self.block_size as f64)?;
        pos("--steps", self.steps as f64)?;
        pos("--batch-size", self.batch_size as f64)?;
        pos("--lr", self.lr)?;
        pos("--temperature", self.temperature)?;
        pos("--eval-every", self.eval_every as f64)?;
        pos("--eval-batches", self.eval_batches as f64)?;
        if (self.n_embd / self.n_head) * self.n_head != self.n_embd {
            return Err(Error::arg(
                "--n-embd",
                format!(
                    "{} is not a multiple of --n-head {}",
                    self.n_embd, self.n_head
                ),
            ));
        }
        if !(self.val_frac > 0.0 && self.val_frac < 1.0) {
            return Err(Error::arg(
                "--val-frac",
                format!("must be in (0, 1), got {}", self.val_frac),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::arg(
                "--dropout",
                format!("must be in [0, 1), got {}", self.dropout),
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
        if !(self.beta2 >= 0.0 && self.beta2 < 1.0) {
            return Err(Error::arg(
                "--beta2",
                format!("must be in [0, 1), got {}", self.beta2),
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

fn gpt_config(args: &TrainGptArgs, vocab_size: usize) -> GptConfig {
    GptConfig {
        vocab_size,
        block_size: args.block_size,
        n_layer: args.n_layer,
        n_head: args.n_head,
        n_embd: args.n_embd,
        dropout: args.dropout,
        ..GptConfig::default()
    }
}

/// Mean validation loss over `args.eval_batches` fixed windows (eval mode, no grad).
fn evaluate(ctx: &ExecContext, gpt: &Gpt, data: &CharData, args: &TrainGptArgs) -> Result<f64> {
    gpt.eval();
    let _ng = no_grad();
    let mut total = 0.0;
    for i in 0..args.eval_batches {
        let _scope = ctx.scope();
        let (x, y) = sample_batch(
            &data.val,
            args.batch_size,
            args.block_size,
            args.seed,
            VAL_STREAM - i as u64,
        )?;
        let shape = [args.batch_size, args.block_size];
        let x = Tensor::constant(ctx, &x, &shape)?;
        let y = Tensor::constant(ctx, &y, &shape)?;
        total += gpt.loss(&x, &y)?.item()?;
    }
    gpt.train();
    Ok(total / args.eval_batches as f64)
}

/// Mean loss over the whole validation text: consecutive non-overlapping
/// windows of `block` predictions (every held-out character after the
/// first is predicted once, from the context inside its window), in batches
/// of `batch`. The number `tools/train_gpt_torch.py` computes too.
pub fn evaluate_full(
    ctx: &ExecContext,
    gpt: &Gpt,
    val: &[u32],
    block: usize,
    batch: usize,
) -> Result<f64> {
    gpt.eval();
    let _ng = no_grad();
    let windows = (val.len() - 1) / block;
    let (mut total, mut count) = (0.0, 0usize);
    for first in (0..windows).step_by(batch) {
        let rows = batch.min(windows - first);
        let _scope = ctx.scope();
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for w in first..first + rows {
            x.extend(val[w * block..(w + 1) * block].iter().map(|&v| v as i64));
            y.extend(
                val[w * block + 1..(w + 1) * block + 1]
                    .iter()
                    .map(|&v| v as i64),
            );
        }
        let x = Tensor::constant(ctx, &x, &[rows, block])?;
        let y = Tensor::constant(ctx, &y, &[rows, block])?;
        total += gpt.loss(&x, &y)?.item()? * rows as f64;
        count += rows;
    }
    gpt.train();
    Ok(total / count.max(1) as f64)
}

/// Samples `n` characters after `prompt` (temperature, top-k), eval mode, no grad.
pub fn generate(
    ctx: &ExecContext,
    gpt: &Gpt,
    prompt: &[u32],
    n: usize,
    temperature: f64,
    top_k: usize,
    seed: u64,
) -> Result<Vec<u32>> {
    gpt.eval();
    let _ng = no_grad();
    let block = gpt.config.block_size;
    let vocab = gpt.config.vocab_size;
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
        let logits = gpt.forward(&x)?.to_vec::<f32>()?;
        let last = &logits[(t - 1) * vocab..t * vocab];
        let mut order: Vec<usize> = (0..vocab).collect();
        order.sort_by(|&a, &b| last[b].total_cmp(&last[a]));
        let keep = if top_k == 0 { vocab } else { top_k.min(vocab) };
        let top = &order[..keep];
        let m = last[top[0]] as f64;
        let w: Vec<f64> = top
            .iter()
            .map(|&j| ((last[j] as f64 - m) / temperature).exp())
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
    gpt.train();
    Ok(ids[start..].to_vec())
}

/// Trains (or resumes) as `args` says, evaluates, checkpoints, samples and
/// plots. With `progress`, shows a progress bar (when stderr is a terminal)
/// and prints evaluations; otherwise runs silently.
pub fn train_gpt(args: &TrainGptArgs, progress: bool) -> Result<TrainReport> {
    args.validate()?;
    let ctx = if args.threads == 0 {
        ExecContext::new()?
    } else {
        ExecContext::with_threads(args.threads)?
    };
    let data_path = args.data_path();
    let data = CharData::load(&data_path, args.val_frac, args.block_size)?;
    let unigram = data.unigram_entropy();
    let gcfg = gpt_config(args, data.vocab_size());
    let gpt = Gpt::new(&mut Init::new(&ctx, DType::F32, args.seed), &gcfg)?;
    // The parameters and the persistent buffers (the dropout counters, so a
    // resumed run draws the masks the uninterrupted one would).
    let named = gpt.state_dict();
    let num_params = gpt.num_parameters();

    let [decay, no_decay] = gpt.decay_groups();
    let schedule = Schedule::WarmupCosine {
        warmup: args.warmup,
        total: args.steps,
        min_factor: args.min_lr_frac,
    };
    let adam = AdamConfig {
        betas: (0.9, args.beta2),
        weight_decay: args.weight_decay,
        ..AdamConfig::adamw(args.lr)
    };
    let mut opt = AdamW::new(vec![
        ParamGroup::new(decay, adam.clone()).with_schedule(schedule),
        ParamGroup::new(
            no_decay,
            AdamConfig {
                weight_decay: 0.0,
                ..adam
            },
        )
        .with_schedule(schedule),
    ])?;

    let identity = RunIdentity {
        vocab: data.chars.iter().collect(),
        train_len: data.train.len(),
        val_len: data.val.len(),
        gpt: gcfg.clone(),
        steps: args.steps,
        batch_size: args.batch_size,
        lr: args.lr,
        min_lr_frac: args.min_lr_frac,
        warmup: args.warmup,
        weight_decay: args.weight_decay,
        beta2: args.beta2,
        grad_clip: args.grad_clip,
        seed: args.seed,
    };
    let ckpt_root = args.out.join("checkpoints");
    std::fs::create_dir_all(&args.out).map_err(|e| Error::io(&args.out, e))?;

    let mut losses: Vec<f32> = Vec::new();
    let mut val: Vec<(u64, f64)> = Vec::new();
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
                "it was made by a different run (data, model or training knobs differ):\n  checkpoint: {saved:?}\n  this run:   {identity:?}"
            )));
        }
        ck.load_model(&named)?;
        ck.load_optimizer(&mut opt)?;
        let get = |key: &str| ck.state.extra[key].clone();
        losses = serde_json::from_value(get("losses"))
            .map_err(|e| resume_err(format!("bad loss history: {e}")))?;
        val = serde_json::from_value(get("val"))
            .map_err(|e| resume_err(format!("bad validation history: {e}")))?;
        if losses.len() as u64 != ck.state.step {
            return Err(resume_err("inconsistent trainer state".into()));
        }
        step0 = ck.state.step;
    }
    let last = args.stop_after.unwrap_or(args.steps).min(args.steps);

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
        "train_gpt: {} ({} chars, vocab {}; train {}, validation {} = last {:.0}%)",
        data_path.display(),
        data.train.len() + data.val.len(),
        data.vocab_size(),
        data.train.len(),
        data.val.len(),
        100.0 * args.val_frac
    ));
    say(format!(
        "model: GPT {} layers, {} heads, width {}, context {} -> {} parameters; {} threads",
        args.n_layer,
        args.n_head,
        args.n_embd,
        args.block_size,
        num_params,
        ctx.num_threads()
    ));
    say(format!(
        "unigram baseline (entropy of the training characters): {unigram:.4} nats"
    ));
    if step0 > 0 {
        say(format!("resumed from step {step0}"));
    }

    let mut mem = Vec::new();
    let shape = [args.batch_size, args.block_size];
    let tokens_per_step = (args.batch_size * args.block_size) as f64;
    let t0 = Instant::now();
    for step in step0 + 1..=last {
        let (x, y) = sample_batch(
            &data.train,
            args.batch_size,
            args.block_size,
            args.seed,
            step,
        )?;
        let loss = {
            let _scope = ctx.scope();
            let x = Tensor::constant(&ctx, &x, &shape)?;
            let y = Tensor::constant(&ctx, &y, &shape)?;
            let loss = gpt.loss(&x, &y)?;
            loss.backward()?;
            loss.item()? as f32
        };
        if args.grad_clip > 0.0 {
            clip_grad_norm(&opt.params(), args.grad_clip)?;
        }
        opt.step()?;
        opt.zero_grad();
        losses.push(loss);

        let done = (step - step0) as f64;
        let tps = done * tokens_per_step / t0.elapsed().as_secs_f64().max(1e-9);
        pb.set_position(step);
        pb.set_message(format!("loss {loss:.4} | {:.1}k tok/s", tps / 1e3));
        if step % args.eval_every == 0 || step == args.steps {
            let v = evaluate(&ctx, &gpt, &data, args)?;
            val.push((step, v));
            let s = ctx.stats();
            mem.push(MemPoint {
                step,
                outstanding: s.outstanding,
                live_bytes: s.live_bytes,
                rss_mib: rss_mib(),
            });
            say(format!(
                "step {step:>5}: train loss {loss:.4}, validation loss {v:.4}  ({:.0} tok/s, pool outstanding {}, RSS {:.0} MiB)",
                tps, s.outstanding, rss_mib()
            ));
        }
        let ckpt_now = (args.ckpt_every > 0 && step % args.ckpt_every == 0) || step == last;
        if ckpt_now {
            let state = TrainerState {
                step,
                seeds: [("seed".to_string(), args.seed)].into(),
                data_position: step,
                lr: opt.lr(0)?,
                extra: serde_json::json!({
                    "run": identity,
                    "losses": losses,
                    "val": val,
                }),
            };
            save_checkpoint(&ckpt_root, &named, &opt, &state)?;
        }
    }
    let train_secs = t0.elapsed().as_secs_f64();
    let ran = last.saturating_sub(step0) as f64;
    pb.finish_and_clear();

    let curve = LossCurve {
        train: &losses,
        val: &val,
        baseline: unigram,
    };
    let png = args.out.join("loss.png");
    loss_curve_png(&png, &curve)?;
    if let Some(dst) = &args.copy_plot_to {
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        std::fs::copy(&png, dst).map_err(|e| Error::io(dst, e))?;
    }
    let mut tsv = String::from("step\ttrain_loss\tval_loss\n");
    for (i, l) in losses.iter().enumerate() {
        let s = i as u64 + 1;
        let v = val
            .iter()
            .find(|(vs, _)| *vs == s)
            .map_or(String::new(), |(_, v)| format!("{v:.6}"));
        tsv += &format!("{s}\t{l:.6}\t{v}\n");
    }
    let tsv_path = args.out.join("losses.tsv");
    std::fs::write(&tsv_path, tsv).map_err(|e| Error::io(&tsv_path, e))?;

    let mut sample = String::new();
    let mut final_val = None;
    if last == args.steps {
        let v = evaluate_full(&ctx, &gpt, &data.val, args.block_size, args.batch_size)?;
        final_val = Some(v);
        let prompt = data.encode(&args.prompt);
        let ids = generate(
            &ctx,
            &gpt,
            &prompt,
            args.sample_len,
            args.temperature,
            args.top_k,
            args.seed ^ 0x5eed,
        )?;
        sample = data.decode(&prompt) + &data.decode(&ids);
        let p = args.out.join("sample.txt");
        std::fs::write(&p, &sample).map_err(|e| Error::io(&p, e))?;
    }
    drop((named, opt, gpt));
    Ok(TrainReport {
        losses,
        val,
        unigram,
        final_val,
        last_step: last,
        num_params,
        sample,
        mem,
        tokens_per_sec: ran * tokens_per_step / train_secs.max(1e-9),
        train_secs,
    })
}
