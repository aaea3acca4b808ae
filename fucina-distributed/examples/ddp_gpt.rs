//! Data-parallel training of the `gpt` workload under `mpirun`: the throughput
//! measurement of docs/DISTRIBUTED.md.
//!
//! The model is the one of `reference/torch_workloads.py`'s `gpt` workload and
//! `fucina-bench gpt` (fucina-nn's [`Gpt`] with [`GptConfig::default`]: vocab
//! 65, 128 positions, 4 layers, 4 heads, width 256, nanoGPT init from seed 0),
//! trained with AdamW(lr 3e-4, weight decay 0.1) on 128-character windows of
//! the Shakespeare text the repo ships (`data/shakespeare.txt`). Every rank
//! builds its own `ExecContext` (`--threads` workers), draws its shard of
//! the windows from a [`DistributedSampler`], and averages gradients after
//! each backward; rank 0 alone prints.
//!
//! Run: `cargo build --release -p fucina-distributed --features mpi --example ddp_gpt`
//! then `mpirun -np 2 target/release/examples/ddp_gpt --batch 8 --threads 1`
//! (as root add `--allow-run-as-root`; on fewer cores than ranks, `--oversubscribe`).
//!
//! Flags (all optional): `--steps N` (30), `--warmup W` (3: steps not
//! timed), `--batch B` sequences per rank (16), `--threads T` per rank (1),
//! `--seed S` (1, the data order), `--bucket-kb K` (25600), `--log-every K`
//! (10), `--check-sync` (after every step all ranks compare parameter hashes
//! and fail unless identical), `--data FILE` (`data/shakespeare.txt`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fucina_autograd::{ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_distributed::mpi::{init, Mpi};
use fucina_distributed::{
    mean_across_ranks, DataParallel, DdpOptions, DistributedSampler, Error, Result, Transport,
};
use fucina_nn::{Gpt, GptConfig, Init, Module};
use fucina_optim::{AdamConfig, AdamW, Optimizer};

#[derive(Debug, Clone)]
struct Args {
    steps: u64,
    warmup: u64,
    batch: usize,
    threads: usize,
    seed: u64,
    bucket_kb: usize,
    log_every: u64,
    check_sync: bool,
    data: PathBuf,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut a = Args {
        steps: 30,
        warmup: 3,
        batch: 16,
        threads: 1,
        seed: 1,
        bucket_kb: 25 * 1024,
        log_every: 10,
        check_sync: false,
        data: PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../data/shakespeare.txt"
        )),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|e| format!("{flag} {s}: {e}"));
        match flag.as_str() {
            "--steps" => a.steps = num(val()?)?,
            "--warmup" => a.warmup = num(val()?)?,
            "--batch" => a.batch = num(val()?)? as usize,
            "--threads" => a.threads = num(val()?)? as usize,
            "--seed" => a.seed = num(val()?)?,
            "--bucket-kb" => a.bucket_kb = num(val()?)? as usize,
            "--log-every" => a.log_every = num(val()?)?.max(1),
            "--check-sync" => a.check_sync = true,
            "--data" => a.data = PathBuf::from(val()?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.batch == 0 || a.steps <= a.warmup {
        return Err("--batch must be positive and --steps greater than --warmup".into());
    }
    Ok(a)
}

/// The text as token ids over its sorted character set, which must fit the
/// workload's vocabulary of 65.
fn tokens(path: &PathBuf, vocab: usize) -> Result<Vec<i64>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::InvalidConfig(format!("{}: {e}", path.display())))?;
    let mut chars: Vec<char> = text.chars().collect();
    chars.sort_unstable();
    chars.dedup();
    if chars.len() > vocab {
        return Err(Error::InvalidConfig(format!(
            "{}: {} distinct characters, more than the workload's vocabulary of {vocab}",
            path.display(),
            chars.len()
        )));
    }
    Ok(text
        .chars()
        .map(|c| chars.binary_search(&c).unwrap_or(0) as i64)
        .collect())
}

/// fucina-nn's errors, as this crate's (the example's one foreign error).
fn nn_err(e: fucina_nn::Error) -> Error {
    Error::InvalidConfig(format!("gpt model: {e}"))
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn train(mpi: &Mpi, args: &Args) -> Result<()> {
    let (rank, world) = (mpi.rank(), mpi.size());
    let cfg = GptConfig::default();
    let seq = cfg.block_size;
    let ids = tokens(&args.data, cfg.vocab_size)?;
    // Non-overlapping windows of seq + 1 characters (input and shifted target).
    let windows = (ids.len() - 1) / seq;
    let sampler = DistributedSampler::new(windows, rank, world, args.seed)?;
    let ctx = ExecContext::with_threads(args.threads)?;
    let model = Gpt::new(&mut Init::new(&ctx, DType::F32, 0), &cfg).map_err(nn_err)?;
    let opts = DdpOptions {
        bucket_bytes: args.bucket_kb * 1024,
        ..DdpOptions::default()
    };
    let ddp = DataParallel::new(mpi, model.parameters(), opts)?;
    let mut opt = AdamW::single(
        model.parameters(),
        AdamConfig {
            weight_decay: 0.1,
            ..AdamConfig::adamw(3e-4)
        },
    )?;
    if rank == 0 {
        let n: usize = model.parameters().iter().map(|p| p.numel()).sum();
        println!(
            "ddp_gpt: {world} ranks x {} threads, {n} parameters in {} bucket(s), batch {} x {seq} per rank ({} global), {windows} windows",
            ctx.num_threads(),
            ddp.plan().buckets.len(),
            args.batch,
            args.batch * world
        );
    }
    let (mut compute, mut averaging, mut step_t) = (Vec::new(), Vec::new(), Vec::new());
    let mut timed_from = Instant::now();
    for step in 0..args.steps {
        if step == args.warmup {
            timed_from = Instant::now();
        }
        let t0 = Instant::now();
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for w in sampler.batch(step, args.batch)? {
            x.extend_from_slice(&ids[w * seq..(w + 1) * seq]);
            y.extend_from_slice(&ids[w * seq + 1..(w + 1) * seq + 1]);
        }
        opt.zero_grad();
        let loss = {
            let _scope = ctx.scope();
            let x = Tensor::constant(&ctx, &x, &[args.batch, seq])?;
            let y = Tensor::constant(&ctx, &y, &[args.batch, seq])?;
            let loss = model.loss(&x, &y).map_err(nn_err)?;
            loss.backward()?;
            loss.item()?
        };
        let t1 = Instant::now();
        ddp.average_gradients()?;
        let t2 = Instant::now();
        opt.step()?;
        let t3 = Instant::now();
        if step >= args.warmup {
            compute.push((t1 - t0 + (t3 - t2)).as_secs_f64());
            averaging.push((t2 - t1).as_secs_f64());
            step_t.push((t3 - t0).as_secs_f64());
        }
        let global = mean_across_ranks(mpi, "loss", loss)?;
        if args.check_sync {
            ddp.check_in_sync()?;
        }
        if rank == 0 && ((step + 1) % args.log_every == 0 || step + 1 == args.steps) {
            println!("step {:>5} loss {global:.4}", step + 1);
        }
    }
    let wall = timed_from.elapsed().as_secs_f64();
    if rank == 0 {
        let timed = args.steps - args.warmup;
        let tokens = (timed as usize * args.batch * world * seq) as f64;
        let (ms, ma, mc) = (
            median(&mut step_t),
            median(&mut averaging),
            median(&mut compute),
        );
        println!(
            "timing: {timed} steps in {wall:.2} s, {:.0} tokens/s; median step {:.3} ms = compute {:.3} ms + gradient averaging {:.3} ms ({:.1}% of the step)",
            tokens / wall,
            ms * 1e3,
            mc * 1e3,
            ma * 1e3,
            100.0 * ma / ms
        );
        println!(
            "timing minima: step {:.3} ms, compute {:.3} ms, gradient averaging {:.3} ms",
            step_t[0] * 1e3,
            compute[0] * 1e3,
            averaging[0] * 1e3
        );
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ddp_gpt: {e}");
            std::process::exit(2);
        }
    };
    let mpi = match init() {
        Ok(m) => m.with_timeout(Duration::from_secs(300)),
        Err(e) => {
            eprintln!("ddp_gpt: {e}");
            std::process::exit(2);
        }
    };
    let r = train(&mpi, &args);
    mpi.exit_on_error(r);
}
