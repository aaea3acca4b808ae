//! all-MiniLM-L6-v2 fine-tuned to tell a line of a Shakespeare comedy from
//! a line of a tragedy, three ways, on lines of plays it never sees in
//! training (`data/comedy_tragedy/`, split by play):
//!
//! 1. a linear probe: the encoder frozen, a logistic regression on its
//!    mean-pooled sentence vectors;
//! 2. full fine-tuning: every encoder weight and the head train;
//! 3. LoRA: low-rank adapters on the attention and MLP projections (PEFT's
//!    layout) and the head train, the encoder stays frozen.
//!
//! Each reports held-out accuracy, wall time and trainable parameters.
//! Text goes through the model's own WordPiece tokenizer (`tokenizer.json`).
//! The fine-tuning loops run on fucina-train: the tokenised lines are an
//! `InMemory` dataset, a seeded `DataLoader` shuffles them each epoch and
//! collates each batch with `pad_sequences` (right padding and the
//! attention mask) on a prefetch thread, a `MetricsLogger` writes the
//! losses to `--out/<method>/metrics.jsonl` and TensorBoard, and
//! `progress.rs` shows the progress.
//!
//! ```sh
//! bash scripts/fetch-minilm.sh     # once: the model into $FUCINA_CACHE
//! cargo run --release --example finetune_minilm
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use fucina_autograd::{no_grad, CrossEntropyOpts, ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_examples::minilm::{check_model_dir, load_tokenizer, model_dir, pooled, tokenize};
use fucina_examples::{exit_on_error, Error, Result};
use fucina_nn::{apply_lora, BertModel, Init, Linear, LoraConfig, Module};
use fucina_optim::{clip_grad_norm, AdamConfig, AdamW, Optimizer, ParamGroup, Schedule};
use fucina_train::collate::{pad_sequences, Padded};
use fucina_train::progress::{Progress, ProgressMode};
use fucina_train::{DataLoader, InMemory, LoaderOptions, MetricsLogger};
use tokenizers::Tokenizer;

/// Fine-tune all-MiniLM-L6-v2 for comedy-vs-tragedy: linear probe vs full fine-tuning vs LoRA.
#[derive(Parser, Debug, Clone)]
#[command(name = "finetune_minilm", version)]
struct Args {
    /// Directory with train.tsv and test.tsv (label<TAB>text; 0 = comedy, 1 = tragedy)
    #[arg(long)]
    data: Option<PathBuf>,
    /// The model directory (default: $FUCINA_CACHE/all-MiniLM-L6-v2)
    #[arg(long)]
    model: Option<PathBuf>,
    /// Training lines used (the first N of train.tsv, which is shuffled)
    #[arg(long, default_value_t = 640)]
    train_lines: usize,
    /// Held-out lines used (the first N of test.tsv)
    #[arg(long, default_value_t = 500)]
    test_lines: usize,
    /// Tokens per line at most (longer lines are truncated)
    #[arg(long, default_value_t = 32)]
    max_len: usize,
    /// Lines per training batch
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Epochs of full and LoRA fine-tuning
    #[arg(long, default_value_t = 2)]
    epochs: usize,
    /// Learning rate of the encoder in full fine-tuning
    #[arg(long, default_value_t = 5e-5)]
    full_lr: f64,
    /// Learning rate of the LoRA adapters
    #[arg(long, default_value_t = 1e-3)]
    lora_lr: f64,
    /// Learning rate of the classification head (every method)
    #[arg(long, default_value_t = 2e-3)]
    head_lr: f64,
    /// LoRA rank
    #[arg(long, default_value_t = 8)]
    lora_r: usize,
    /// LoRA alpha (scale alpha / r)
    #[arg(long, default_value_t = 16.0)]
    lora_alpha: f64,
    /// Full-batch steps of the linear probe
    #[arg(long, default_value_t = 300)]
    probe_steps: u64,
    /// Seed of the head init and the batch order
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Worker threads (0: FUCINA_NUM_THREADS or every core)
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Output directory: metrics.jsonl and TensorBoard events of each method in OUT/<method>
    #[arg(long, default_value = "runs/finetune_minilm")]
    out: PathBuf,
}

/// A training batch: the padded token ids with their attention mask, and the labels.
struct LabelledBatch {
    tokens: Padded,
    labels: Tensor,
}

/// A tokenised line and its label.
type Line = (Vec<i64>, i64);

/// The training lines, tokenised once (`[CLS] ... [SEP]`, truncated to
/// `--max-len`), in a seeded, shuffling loader whose collate pads each
/// batch to its longest line with the tokenizer's pad id.
fn train_loader(
    ctx: &ExecContext,
    args: &Args,
    tok: &Tokenizer,
    train: &Split,
) -> Result<DataLoader<InMemory<Line>, LabelledBatch>> {
    let mut items = Vec::with_capacity(train.text.len());
    for (text, &label) in train.text.iter().zip(&train.label) {
        let enc = tok
            .encode(text.as_str(), true)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        items.push((enc.get_ids().iter().map(|&i| i as i64).collect(), label));
    }
    let pad_id = tok.get_padding().map_or(0, |p| p.pad_id) as i64;
    let ctx = ctx.clone();
    let opts = LoaderOptions::new(args.batch_size).seed(args.seed ^ 0x0b5e);
    Ok(DataLoader::new(
        InMemory::new(items),
        opts,
        move |rows: Vec<Line>| {
            let (seqs, labels): (Vec<Vec<i64>>, Vec<i64>) = rows.into_iter().unzip();
            Ok(LabelledBatch {
                tokens: pad_sequences(&ctx, &seqs, pad_id)?,
                labels: Tensor::constant(&ctx, &labels, &[labels.len()])?,
            })
        },
    )?)
}

/// Labelled lines.
struct Split {
    text: Vec<String>,
    label: Vec<i64>,
}

fn read_tsv(path: &Path, limit: usize) -> Result<Split> {
    let s = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut out = Split {
        text: Vec::new(),
        label: Vec::new(),
    };
    for (i, line) in s.lines().enumerate().take(limit) {
        let bad = |msg: &str| Error::Data {
            path: path.to_path_buf(),
            msg: format!("line {}: {msg}", i + 1),
        };
        let (lab, text) = line
            .split_once('\t')
            .ok_or_else(|| bad("expected label<TAB>text"))?;
        let lab = match lab {
            "0" => 0,
            "1" => 1,
            _ => return Err(bad("the label must be 0 (comedy) or 1 (tragedy)")),
        };
        out.text.push(text.to_string());
        out.label.push(lab);
    }
    if out.text.is_empty() {
        return Err(Error::Data {
            path: path.to_path_buf(),
            msg: "no labelled lines".into(),
        });
    }
    Ok(out)
}

/// What one method reached.
struct Outcome {
    name: &'static str,
    accuracy: f64,
    secs: f64,
    trainable: usize,
}

/// The classifier head over the 384-wide mean-pooled vector.
fn head(ctx: &ExecContext, seed: u64, hidden: usize) -> Result<Linear> {
    Ok(Linear::new(
        &mut Init::new(ctx, DType::F32, seed),
        hidden,
        2,
        true,
    )?)
}

/// Mean-pooled vectors `[n, hidden]` of `texts` (no grad, eval mode).
fn features(
    ctx: &ExecContext,
    tok: &Tokenizer,
    model: &BertModel,
    texts: &[String],
) -> Result<Vec<f32>> {
    model.eval();
    let _ng = no_grad();
    let mut out = Vec::new();
    for chunk in texts.chunks(32) {
        let _scope = ctx.scope();
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let (ids, mask) = tokenize(tok, &refs)?.tensors(ctx)?;
        out.extend(pooled(model, &ids, &mask)?.to_vec::<f32>()?);
    }
    Ok(out)
}

/// Held-out accuracy of encoder + head.
fn accuracy(
    ctx: &ExecContext,
    tok: &Tokenizer,
    model: &BertModel,
    head: &Linear,
    test: &Split,
) -> Result<f64> {
    let h = model.config.hidden_size;
    let f = features(ctx, tok, model, &test.text)?;
    let _ng = no_grad();
    let x = Tensor::constant(ctx, &f, &[test.text.len(), h])?;
    let pred = head.forward(&x)?.argmax(1, false)?.to_vec::<i64>()?;
    Ok(hits(&pred, &test.label))
}

fn hits(pred: &[i64], label: &[i64]) -> f64 {
    pred.iter().zip(label).filter(|(p, l)| p == l).count() as f64 / label.len() as f64
}

fn linear_probe(
    ctx: &ExecContext,
    args: &Args,
    tok: &Tokenizer,
    dir: &Path,
    train: &Split,
    test: &Split,
) -> Result<Outcome> {
    let t0 = Instant::now();
    let model = BertModel::from_pretrained(ctx, dir, DType::F32)?;
    model.freeze("*");
    let h = model.config.hidden_size;
    let ftrain = features(ctx, tok, &model, &train.text)?;
    let lin = head(ctx, args.seed, h)?;
    let mut opt = AdamW::single(lin.parameters(), AdamConfig::adamw(args.head_lr * 5.0))?;
    let x = Tensor::constant(ctx, &ftrain, &[train.text.len(), h])?;
    let y = Tensor::constant(ctx, &train.label, &[train.text.len()])?;
    for _ in 0..args.probe_steps {
        {
            let _scope = ctx.scope();
            let loss = lin
                .forward(&x)?
                .cross_entropy(&y, CrossEntropyOpts::default())?;
            loss.backward()?;
        }
        opt.step()?;
        opt.zero_grad();
    }
    let acc = accuracy(ctx, tok, &model, &lin, test)?;
    Ok(Outcome {
        name: "linear probe (encoder frozen)",
        accuracy: acc,
        secs: t0.elapsed().as_secs_f64(),
        trainable: lin.num_parameters(),
    })
}

/// Trains encoder + head on minibatches (the encoder's trainable parameters
/// at `enc_lr`, the head at `args.head_lr`; warmup then cosine), logging to
/// `args.out/<run>`, then measures held-out accuracy.
#[allow(clippy::too_many_arguments)]
fn fine_tune(
    ctx: &ExecContext,
    args: &Args,
    tok: &Tokenizer,
    model: &BertModel,
    enc_lr: f64,
    train: &Split,
    test: &Split,
    label: &str,
    run: &str,
) -> Result<(f64, usize)> {
    let h = model.config.hidden_size;
    let lin = head(ctx, args.seed, h)?;
    let loader = train_loader(ctx, args, tok, train)?;
    let steps_per_epoch = loader.batches_per_epoch() as u64;
    let total = steps_per_epoch * args.epochs as u64;
    let schedule = Schedule::WarmupCosine {
        warmup: (total / 10).max(1),
        total: total.max(2),
        min_factor: 0.0,
    };
    let enc_params = model.trainable_parameters();
    let trainable = enc_params.iter().map(|t| t.numel()).sum::<usize>() + lin.num_parameters();
    let mut opt = AdamW::new(vec![
        ParamGroup::new(enc_params, AdamConfig::adamw(enc_lr)).with_schedule(schedule),
        ParamGroup::new(lin.parameters(), AdamConfig::adamw(args.head_lr)).with_schedule(schedule),
    ])?;
    model.train();
    let mut log = MetricsLogger::create(&args.out.join(run))?;
    let mut pb = Progress::for_loader(&loader, args.epochs as u64, ProgressMode::auto(10));
    let mut step = 0u64;
    for epoch in 0..args.epochs {
        let mut sum = 0.0;
        for batch in loader.epoch(epoch as u64)? {
            let b = batch?;
            step += 1;
            let loss = {
                let _scope = ctx.scope();
                let loss = lin
                    .forward(&pooled(model, &b.tokens.ids, &b.tokens.mask)?)?
                    .cross_entropy(&b.labels, CrossEntropyOpts::default())?;
                loss.backward()?;
                loss.item()?
            };
            clip_grad_norm(&opt.params(), 1.0)?;
            log.scalar("train/lr", step, opt.lr(0)?)?;
            opt.step()?;
            opt.zero_grad();
            log.scalar("train/loss", step, loss)?;
            pb.step(&format!("{label} loss {loss:.4}"));
            sum += loss;
        }
        let mean = sum / steps_per_epoch as f64;
        log.scalar("train/epoch_loss", epoch as u64 + 1, mean)?;
        pb.println(&format!(
            "  {label}: epoch {} mean training loss {mean:.4}",
            epoch + 1
        ));
    }
    pb.finish();
    let acc = accuracy(ctx, tok, model, &lin, test)?;
    log.scalar("test/accuracy", step, acc)?;
    log.flush()?;
    Ok((acc, trainable))
}

fn run() -> Result<()> {
    let args = Args::parse();
    if args.batch_size == 0 || args.max_len < 3 || args.epochs == 0 {
        return Err(Error::arg(
            "--batch-size/--max-len/--epochs",
            "need a positive batch size and epoch count and --max-len of at least 3 ([CLS] x [SEP])",
        ));
    }
    let ctx = if args.threads == 0 {
        ExecContext::new()?
    } else {
        ExecContext::with_threads(args.threads)?
    };
    let data = args.data.clone().unwrap_or_else(|| {
        let local = PathBuf::from("data/comedy_tragedy");
        if local.exists() {
            local
        } else {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/comedy_tragedy")
        }
    });
    let train = read_tsv(&data.join("train.tsv"), args.train_lines)?;
    let test = read_tsv(&data.join("test.tsv"), args.test_lines)?;
    let dir = args.model.clone().unwrap_or_else(model_dir);
    check_model_dir(&dir)?;
    let tok = load_tokenizer(&dir, args.max_len)?;
    let share = |s: &Split| 100.0 * s.label.iter().sum::<i64>() as f64 / s.label.len() as f64;
    println!(
        "comedy vs tragedy: {} training lines, {} held-out lines from unseen plays ({:.0}% / {:.0}% tragedy); {} threads",
        train.text.len(),
        test.text.len(),
        share(&train),
        share(&test),
        ctx.num_threads()
    );

    let mut results = vec![linear_probe(&ctx, &args, &tok, &dir, &train, &test)?];
    println!("  linear probe: {:.1}%", 100.0 * results[0].accuracy);

    let t0 = Instant::now();
    let model = BertModel::from_pretrained(&ctx, &dir, DType::F32)?;
    let (acc, trainable) = fine_tune(
        &ctx,
        &args,
        &tok,
        &model,
        args.full_lr,
        &train,
        &test,
        "full",
        "full",
    )?;
    results.push(Outcome {
        name: "full fine-tuning",
        accuracy: acc,
        secs: t0.elapsed().as_secs_f64(),
        trainable,
    });
    drop(model);

    let t0 = Instant::now();
    let mut model = BertModel::from_pretrained(&ctx, &dir, DType::F32)?;
    let cfg = LoraConfig::new(
        args.lora_r,
        args.lora_alpha,
        &[
            "query",
            "key",
            "value",
            "intermediate.dense",
            "output.dense",
        ],
    );
    let adapted = apply_lora(
        &mut model,
        &cfg,
        &mut Init::new(&ctx, DType::F32, args.seed ^ 0x104a),
    )?;
    println!("  LoRA r={} on {} linears", args.lora_r, adapted.len());
    let (acc, trainable) = fine_tune(
        &ctx,
        &args,
        &tok,
        &model,
        args.lora_lr,
        &train,
        &test,
        "LoRA",
        "lora",
    )?;
    results.push(Outcome {
        name: "LoRA",
        accuracy: acc,
        secs: t0.elapsed().as_secs_f64(),
        trainable,
    });

    println!("\nheld-out accuracy (plays unseen in training):");
    println!(
        "  {:<32} {:>9} {:>9} {:>12}",
        "method", "accuracy", "wall (s)", "trainable"
    );
    for r in &results {
        println!(
            "  {:<32} {:>8.1}% {:>9.1} {:>12}",
            r.name,
            100.0 * r.accuracy,
            r.secs,
            r.trainable
        );
    }
    Ok(())
}

fn main() {
    exit_on_error(run());
}
