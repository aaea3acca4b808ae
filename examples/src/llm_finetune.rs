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
//! The command line is `llm_args.rs`; the data, the validation loss and
//! one step are `llm_step.rs` (the PyTorch twin's test replays those).
//!
//! Resume is bit-exact because every input of a step is in the checkpoint
//! (trainable weights, AdamW moments and step count, dropout call
//! counters, the loss history) or a pure function of the seed and the step
//! (the loader's epoch order).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use fucina_autograd::{ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::hf::Tokenizer;
use fucina_nn::linear::lora::{merge_and_unload, save_adapter};
use fucina_nn::{apply_lora, CausalLm, GenerateOptions, Init, Module, Sampling};
use fucina_optim::{AdamConfig, Optimizer};
use fucina_train::causal::{collate_causal, CausalExample};
use fucina_train::{DataLoader, Dataset, InMemory, KeepLast, LoaderOptions, MetricsLogger};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::gpt_args::TrainGptArgs;
use crate::gpt_train::train_gpt;
use crate::llm_args::FinetuneArgs;
use crate::llm_step::{evaluate, load_blocks, optimizer, train_step};
use crate::plot::{loss_curve_png, LossCurve};
use crate::resume::{Resumed, RunCheckpoints};
use crate::run::{context, RunOutcome, RunProgress};
use crate::sys::{peak_rss_mib, rss_mib};

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
    /// The histories (validation at step 0: before training), the last
    /// step, the training time and the sample.
    pub run: RunOutcome,
    /// The validation loss of the model as loaded.
    pub val_before: f64,
    /// The validation loss at the end (`None` when the run stopped early).
    pub val_after: Option<f64>,
    /// Parameters that train.
    pub trainable: usize,
    /// Every parameter (adapters included).
    pub total: usize,
    /// Peak resident set size of the process, MiB (`NaN` off Linux).
    pub peak_rss_mib: f64,
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
    let model_dir = match &args.model {
        Some(dir) => dir.clone(),
        None => default_base(args, progress)?,
    };
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
    let ctx = context(args.threads)?;
    let tok = Tokenizer::from_file(&tok_path)?;
    let mut lm = if args.bf16_base {
        CausalLm::from_pretrained_frozen(&ctx, &model_dir, DType::F32, DType::BF16)?
    } else {
        CausalLm::from_pretrained(&ctx, &model_dir, DType::F32)?
    };
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

    let ckpts = RunCheckpoints::create(&args.out, &named, &identity, args.seed)?;
    let keep = KeepLast::new(args.keep_last)?;
    let Resumed {
        step: step0,
        mut losses,
        val: mut val_hist,
    } = ckpts.start(args.resume, &mut opt)?;
    let last = args.stop_after.unwrap_or(args.steps).min(args.steps);
    let mut log = MetricsLogger::create(&args.out)?;

    let mut pb = RunProgress::new(progress, args.no_progress, args.eval_every, args.steps);
    pb.bar.start_at(step0);
    pb.say(&format!(
        "finetune_llm: {} ({:?}, {} layers, width {}) on {}: {} training and {} validation blocks of {block} tokens",
        model_dir.display(),
        lm.config.model_type,
        lm.config.num_layers,
        lm.config.hidden_size,
        data_path.display(),
        loader.dataset().len(),
        val.len()
    ));
    pb.say(&format!(
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
    pb.say(&format!(
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
            pb.bar.step(&format!("loss {loss:.4}"));
            if step.is_multiple_of(args.eval_every) || step == args.steps {
                pb.bar.pause_clock();
                let v = evaluate(&lm, &val, args.batch_size, pad)?;
                val_hist.push((step, v));
                log.scalar("val/loss", step, v)?;
                let st = ctx.stats();
                pb.say(&format!(
                    "step {step:>5}: train loss {loss:.4}, validation loss {v:.4}  (pool outstanding {}, peak live {:.0} MiB, cached {:.0} MiB, RSS {:.0} MiB)",
                    st.outstanding,
                    st.peak_live_bytes as f64 / 1048576.0,
                    st.cached_bytes as f64 / 1048576.0,
                    rss_mib()
                ));
            }
            if step.is_multiple_of(args.ckpt_every) || step == last {
                pb.bar.pause_clock();
                ckpts.save(&opt, step, &losses, &val_hist)?;
                keep.prune(&ckpts.root, None)?;
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
        pb.say(&format!(
            "twin run: {} (replay with tools/finetune_llm_torch.py)",
            dir.display()
        ));
    }
    pb.bar.finish();

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
        pb.say(&format!(
            "validation loss after fine-tuning: {v:.4} (before: {val_before:.4})"
        ));
        if let Some(cfg) = &lora {
            let dir = args.out.join("adapter");
            save_adapter(&lm, cfg, &dir)?;
            pb.say(&format!("adapter (PEFT format): {}", dir.display()));
            if args.merge {
                // The adapters folded into the base weights and dropped, so
                // the directory holds the family's own keys only.
                merge_and_unload(&mut lm)?;
                let dir = args.out.join("merged");
                lm.save_pretrained(&dir)?;
                pb.say(&format!("merged model: {}", dir.display()));
            }
        } else {
            let dir = args.out.join("model");
            lm.save_pretrained(&dir)?;
            pb.say(&format!("model: {}", dir.display()));
        }
        if args.sample_len > 0 {
            sample = generate_sample(&lm, &tok, args)?;
            let p = args.out.join("sample.txt");
            std::fs::write(&p, &sample).map_err(|e| Error::io(&p, e))?;
        }
    }
    Ok(FinetuneReport {
        run: RunOutcome {
            losses,
            val: val_hist,
            last_step: last,
            train_secs,
            sample,
        },
        val_before,
        val_after,
        trainable,
        total,
        peak_rss_mib: peak_rss_mib(),
    })
}

/// The project's own base model: a Llama-layout character model
/// pre-trained on `data/shakespeare.txt` by `train_gpt --arch llama
/// --block-size 128 --batch-size 16 --save-hf BASE/hf`, made the first time
/// and reused after (a directory with `config.json` is taken as it is).
pub fn default_base(args: &FinetuneArgs, progress: bool) -> Result<PathBuf> {
    let hf = args.base.join("hf");
    if hf.join("config.json").is_file() {
        return Ok(hf);
    }
    let argv: Vec<String> = [
        "train_gpt",
        "--arch",
        "llama",
        "--block-size",
        "128",
        "--batch-size",
        "16",
        "--sample-len",
        "200",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        "--steps".to_string(),
        args.pretrain_steps.to_string(),
        "--warmup".to_string(),
        (args.pretrain_steps / 16).to_string(),
        "--eval-every".to_string(),
        (args.pretrain_steps / 4).max(1).to_string(),
        "--threads".to_string(),
        args.threads.to_string(),
        "--out".to_string(),
        args.base.display().to_string(),
        "--save-hf".to_string(),
        hf.display().to_string(),
    ])
    .chain(args.no_progress.then(|| "--no-progress".to_string()))
    .collect();
    let pre = TrainGptArgs::try_parse_from(&argv)
        .map_err(|e| Error::arg("--pretrain-steps", e.to_string()))?;
    if progress {
        println!(
            "finetune_llm: no --model; pre-training the base model first ({} steps of train_gpt --arch llama on {}, into {})",
            args.pretrain_steps,
            pre.data_path().display(),
            hf.display()
        );
    }
    let r = train_gpt(&pre, progress)?;
    if progress {
        println!(
            "pre-trained in {:.0} s: validation loss {:.4} on Shakespeare",
            r.run.train_secs,
            r.final_val.unwrap_or(f64::NAN)
        );
    }
    Ok(hf)
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
