//! The character-level training run behind `cargo run --release --example
//! train_gpt`: command-line knobs, the model (`--arch gpt`, nanoGPT's GPT,
//! or `--arch llama`, a Llama-layout decoder: `char_lm.rs`), the training
//! loop (AdamW with nanoGPT's decay groups, warmup + cosine, gradient
//! clipping), periodic validation on the text's held-out tail, checkpoints
//! with bit-exact `--resume`, sampling, the loss curve and `--save-hf`.
//!
//! The plumbing is fucina-train's: the batches come from a `DataLoader`
//! over `TextWindows` (step `s` takes batch `s - 1` of one long epoch of
//! windows at seeded random starts), the metrics go through a
//! `MetricsLogger` (`metrics.jsonl` and a TensorBoard event file in
//! `--out`), the checkpoints are pruned by `KeepLast` with the best
//! validation loss's (`KeepBest`) kept, and the progress is `progress.rs`'s.
//!
//! Resume is bit-exact because everything a step depends on is either in
//! the checkpoint (weights, AdamW moments and step count, dropout call
//! counters, the loss history) or a pure function of the seed and the step
//! (the loader resumes its epoch at the step's batch): a run stopped at
//! step k and resumed computes the same loss at every later step as a run
//! that never stopped.

use std::time::Instant;

use fucina_autograd::{no_grad, ScopeExt, Tensor};
use fucina_core::ExecContext;
use fucina_nn::GptConfig;
use fucina_optim::{clip_grad_norm, AdamConfig, Optimizer, Schedule};
use fucina_train::{
    DataLoader, KeepBest, KeepLast, LoaderOptions, MetricMode, MetricsLogger, TextWindows,
};
use serde::{Deserialize, Serialize};

use crate::char_lm::{Arch, CharLm, LlamaShape};
use crate::chardata::CharData;
use crate::error::{Error, Result};
pub use crate::gpt_args::TrainGptArgs;
use crate::hf_export::save_hf;
use crate::llm_step::adamw_decay_split;
use crate::plot::{loss_curve_png, LossCurve};
use crate::resume::{Resumed, RunCheckpoints};
use crate::run::{context, RunOutcome, RunProgress};
use crate::sys::rss_mib;

/// Seed of the validation windows' starts (fixed: every evaluation sees the same windows).
const VAL_SEED: u64 = 0xffff_ffff;

/// A batch as the loader hands it over: inputs and targets, `[B·T]` each.
type Batch = (Vec<i64>, Vec<i64>);

/// A loader of (input, target) batches of text windows.
type Windows = DataLoader<TextWindows, Batch>;

/// Concatenates the windows of a batch row-major.
fn collate(items: Vec<(Vec<i64>, Vec<i64>)>) -> fucina_train::Result<Batch> {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for (a, b) in items {
        x.extend(a);
        y.extend(b);
    }
    Ok((x, y))
}

/// Batches of `batch` windows of `ids` in the order of `windows` (no
/// shuffle: random windows are already in a random order), built ahead on
/// a worker thread when `prefetch`.
fn loader(windows: TextWindows, batch: usize, prefetch: bool) -> Result<Windows> {
    let opts = LoaderOptions::new(batch)
        .shuffle(false)
        .prefetch(if prefetch { 2 } else { 0 });
    Ok(DataLoader::new(windows, opts, collate)?)
}

/// What a run must share with the checkpoint it resumes from for the resume
/// to be bit-exact (threads, output and logging may differ).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RunIdentity {
    vocab: String,
    train_len: usize,
    val_len: usize,
    arch: Arch,
    /// The model's config (`GptConfig`, or the Llama's `config.json`).
    model: serde_json::Value,
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
    /// The histories, the last step, the training time and the sample.
    pub run: RunOutcome,
    /// The unigram baseline: entropy of the training characters, nats.
    pub unigram: f64,
    /// Loss over the whole validation text at the end ([`evaluate_full`];
    /// `None` when the run stopped early).
    pub final_val: Option<f64>,
    /// Parameters of the model.
    pub num_params: usize,
    /// Memory at each evaluation of this process.
    pub mem: Vec<MemPoint>,
    /// Training tokens per second of this process (steps it ran).
    pub tokens_per_sec: f64,
}

/// The model `args` describe, fresh from the seed.
fn build_model(ctx: &ExecContext, args: &TrainGptArgs, vocab: usize) -> Result<CharLm> {
    match args.arch {
        Arch::Gpt => CharLm::gpt(ctx, &gpt_config(args, vocab), args.seed),
        Arch::Llama => CharLm::llama(ctx, &llama_shape(args, vocab), args.seed),
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

fn llama_shape(args: &TrainGptArgs, vocab: usize) -> LlamaShape {
    LlamaShape {
        vocab,
        width: args.n_embd,
        layers: args.n_layer,
        heads: args.n_head,
        kv_heads: args.n_kv_head,
        intermediate: if args.intermediate == 0 {
            LlamaShape::default_intermediate(args.n_embd)
        } else {
            args.intermediate
        },
        context: args.block_size,
        tied: args.tied_head,
        dropout: args.dropout,
    }
}

/// The model's config as the run identity records it.
fn model_identity(model: &CharLm) -> serde_json::Value {
    match model {
        CharLm::Gpt(g) => serde_json::to_value(&g.config).unwrap_or_default(),
        CharLm::Llama(l) => l.config.to_hf_json(),
    }
}

/// The mean loss over every batch of `batches` (eval mode, no grad).
fn mean_loss(ctx: &ExecContext, model: &CharLm, batches: &Windows) -> Result<f64> {
    let m = model.module();
    m.eval_mode();
    let _ng = no_grad();
    let (mut total, mut count) = (0.0, 0usize);
    for b in batches.epoch(0)? {
        let (x, y) = b?;
        let _scope = ctx.scope();
        let rows = x.len() / model.context().max(1);
        let shape = [rows, x.len() / rows.max(1)];
        let x = Tensor::constant(ctx, &x, &shape)?;
        let y = Tensor::constant(ctx, &y, &shape)?;
        total += model.loss(&x, &y)?.item()? * rows as f64;
        count += rows;
    }
    m.train_mode();
    Ok(total / count.max(1) as f64)
}

/// Mean loss over the whole validation text: consecutive non-overlapping
/// windows of `block` predictions (every held-out character after the
/// first is predicted once, from the context inside its window), in batches
/// of `batch`. The number `tools/train_gpt_torch.py` computes too.
pub fn evaluate_full(
    ctx: &ExecContext,
    model: &CharLm,
    val: &[u32],
    block: usize,
    batch: usize,
) -> Result<f64> {
    let windows = TextWindows::sequential(val.to_vec(), block)?;
    let opts = LoaderOptions::new(batch).shuffle(false).prefetch(0);
    mean_loss(ctx, model, &DataLoader::new(windows, opts, collate)?)
}

/// Trains (or resumes) as `args` says, evaluates, checkpoints, samples and
/// plots. With `progress`, shows a progress bar (when stderr is a terminal;
/// plain lines otherwise) and prints evaluations; otherwise runs silently.
pub fn train_gpt(args: &TrainGptArgs, progress: bool) -> Result<TrainReport> {
    Ok(train_gpt_model(args, progress)?.0)
}

/// [`train_gpt`], also returning the trained model.
pub fn train_gpt_model(args: &TrainGptArgs, progress: bool) -> Result<(TrainReport, CharLm)> {
    args.validate()?;
    let ctx = context(args.threads)?;
    let data_path = args.data_path();
    let data = CharData::load(&data_path, args.val_frac, args.block_size)?;
    let unigram = data.unigram_entropy();
    let model = build_model(&ctx, args, data.vocab_size())?;
    let module = model.module();
    // The parameters and the persistent buffers (the dropout counters, so a
    // resumed run draws the masks the uninterrupted one would).
    let named = module.state();
    let params = module.named();
    let num_params = module.count();

    let [decay, no_decay] = module.decay();
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
    // A GPT and a Llama always have norm weights, so the no-decay group is never empty.
    let mut opt = adamw_decay_split(decay, no_decay, adam, schedule)?;

    // Step s trains on batch s - 1 of one epoch of steps x batch windows at
    // random starts (start of window i: rng::at(seed, i)).
    let count = (args.steps as usize)
        .checked_mul(args.batch_size)
        .ok_or_else(|| Error::arg("--steps", "--steps x --batch-size windows overflow"))?;
    let train_batches = loader(
        TextWindows::random(data.train.clone(), args.block_size, count, args.seed)?,
        args.batch_size,
        true,
    )?;
    let val_windows = args
        .eval_batches
        .checked_mul(args.batch_size)
        .ok_or_else(|| Error::arg("--eval-batches", "too many validation windows"))?;
    let val_batches = loader(
        TextWindows::random(
            data.val.clone(),
            args.block_size,
            val_windows,
            args.seed ^ VAL_SEED,
        )?,
        args.batch_size,
        false,
    )?;

    let identity = RunIdentity {
        vocab: data.chars.iter().collect(),
        train_len: data.train.len(),
        val_len: data.val.len(),
        arch: args.arch,
        model: model_identity(&model),
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
    let ckpts = RunCheckpoints::create(&args.out, &named, &identity, args.seed)?;
    let Resumed {
        step: step0,
        mut losses,
        mut val,
    } = ckpts.start(args.resume, &mut opt)?;
    let last = args.stop_after.unwrap_or(args.steps).min(args.steps);
    // The best validation loss so far (the resumed history replayed).
    let mut best = KeepBest::new(MetricMode::Min);
    for &(s, v) in &val {
        best.observe(s, v);
    }
    let keep = KeepLast::new(args.keep_last)?;
    let mut log = MetricsLogger::create(&args.out)?.histograms_every(args.histograms_every);

    let mut pb = RunProgress::new(progress, args.no_progress, args.eval_every, args.steps);
    pb.bar.start_at(step0);
    pb.say(&format!(
        "train_gpt: {} ({} chars, vocab {}; train {}, validation {} = last {:.0}%)",
        data_path.display(),
        data.train.len() + data.val.len(),
        data.vocab_size(),
        data.train.len(),
        data.val.len(),
        100.0 * args.val_frac
    ));
    let shape_line = match &model {
        CharLm::Gpt(_) => format!("GPT {} layers, {} heads", args.n_layer, args.n_head),
        CharLm::Llama(l) => format!(
            "Llama {} layers, {} heads / {} kv heads, SwiGLU {}, {} head",
            l.config.num_layers,
            l.config.num_heads,
            l.config.num_kv_heads,
            l.config.intermediate_size,
            if l.config.tie_word_embeddings {
                "tied"
            } else {
                "untied"
            }
        ),
    };
    pb.say(&format!(
        "model: {shape_line}, width {}, context {} -> {} parameters; {} threads",
        args.n_embd,
        args.block_size,
        num_params,
        ctx.num_threads()
    ));
    pb.say(&format!(
        "unigram baseline (entropy of the training characters): {unigram:.4} nats"
    ));
    if step0 > 0 {
        pb.say(&format!("resumed from step {step0}"));
    }

    let mut mem = Vec::new();
    let shape = [args.batch_size, args.block_size];
    let tokens_per_step = (args.batch_size * args.block_size) as f64;
    let t0 = Instant::now();
    let mut batches = train_batches.epoch_from(0, step0 as usize)?;
    for step in step0 + 1..=last {
        let (x, y) = batches.next().ok_or_else(|| {
            Error::arg(
                "--steps",
                format!("the loader ran out of batches at step {step}"),
            )
        })??;
        let loss = {
            let _scope = ctx.scope();
            let x = Tensor::constant(&ctx, &x, &shape)?;
            let y = Tensor::constant(&ctx, &y, &shape)?;
            let loss = model.loss(&x, &y)?;
            loss.backward()?;
            loss.item()? as f32
        };
        if args.grad_clip > 0.0 {
            clip_grad_norm(&opt.params(), args.grad_clip)?;
        }
        log.parameter_histograms(step, &params)?;
        let lr = opt.lr(0)?;
        opt.step()?;
        opt.zero_grad();
        losses.push(loss);
        log.scalar("train/loss", step, loss as f64)?;
        log.scalar("train/lr", step, lr)?;

        let done = (step - step0) as f64;
        let tps = done * tokens_per_step / t0.elapsed().as_secs_f64().max(1e-9);
        pb.bar
            .step(&format!("loss {loss:.4} | {:.1}k tok/s", tps / 1e3));
        let mut new_best = false;
        if step % args.eval_every == 0 || step == args.steps {
            let v = mean_loss(&ctx, &model, &val_batches)?;
            val.push((step, v));
            new_best = best.observe(step, v);
            log.scalar("val/loss", step, v)?;
            let s = ctx.stats();
            mem.push(MemPoint {
                step,
                outstanding: s.outstanding,
                live_bytes: s.live_bytes,
                rss_mib: rss_mib(),
            });
            pb.say(&format!(
                "step {step:>5}: train loss {loss:.4}, validation loss {v:.4}  ({:.0} tok/s, pool outstanding {}, RSS {:.0} MiB)",
                tps, s.outstanding, rss_mib()
            ));
        }
        let ckpt_now =
            (args.ckpt_every > 0 && step % args.ckpt_every == 0) || step == last || new_best;
        if ckpt_now {
            ckpts.save(&opt, step, &losses, &val)?;
            keep.prune(&ckpts.root, best.best().map(|(s, _)| s))?;
            log.flush()?;
        }
        // Evaluations and saves are not part of a step's time.
        pb.bar.pause_clock();
    }
    drop(batches);
    let train_secs = t0.elapsed().as_secs_f64();
    let ran = last.saturating_sub(step0) as f64;
    pb.bar.finish();

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
        let v = evaluate_full(&ctx, &model, &data.val, args.block_size, args.batch_size)?;
        final_val = Some(v);
        log.scalar("val/full_loss", last, v)?;
        let prompt = data.encode(&args.prompt);
        let ids = model.generate(
            &ctx,
            &prompt,
            args.sample_len,
            args.temperature,
            args.top_k,
            args.seed ^ 0x5eed,
        )?;
        sample = data.decode(&prompt) + &data.decode(&ids);
        let p = args.out.join("sample.txt");
        std::fs::write(&p, &sample).map_err(|e| Error::io(&p, e))?;
        if let Some(dir) = &args.save_hf {
            save_hf(&model, &data, dir)?;
            pb.say(&format!(
                "wrote the Hugging Face model directory {}",
                dir.display()
            ));
        }
    }
    log.flush()?;
    drop((named, params, opt));
    let report = TrainReport {
        run: RunOutcome {
            losses,
            val,
            last_step: last,
            train_secs,
            sample,
        },
        unigram,
        final_val,
        num_params,
        mem,
        tokens_per_sec: ran * tokens_per_step / train_secs.max(1e-9),
    };
    Ok((report, model))
}
