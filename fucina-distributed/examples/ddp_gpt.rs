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
//! (10), `--sync after|overlap|none` (after: average after backward;
//! overlap: while backward runs; none: no averaging, the no-exchange
//! baseline of the overlap measurement), `--check-sync` (after every step all
//! ranks compare parameter hashes and fail unless identical), `--data FILE`
//! (`data/shakespeare.txt`).

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::mlp::nn_err;
use common::{Common, Timing};
use fucina_autograd::{ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_distributed::mpi::Mpi;
use fucina_distributed::{
    mean_across_ranks, DataParallel, DdpOptions, DistributedSampler, Error, Result, Transport,
};
use fucina_nn::{Gpt, GptConfig, Init, Module};
use fucina_optim::{AdamConfig, AdamW, Optimizer};

#[derive(Debug, Clone)]
struct Args {
    common: Common,
    warmup: u64,
    check_sync: bool,
    data: PathBuf,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut common = Common::new(30, 16);
    let (mut warmup, mut check_sync) = (3, false);
    let mut data = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/shakespeare.txt"
    ));
    common::parse(&mut common, |flag, val| {
        match flag {
            "--warmup" => warmup = common::num(flag, val()?)?,
            "--check-sync" => check_sync = true,
            "--data" => data = PathBuf::from(val()?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if common.batch == 0 || common.steps <= warmup {
        return Err("--batch must be positive and --steps greater than --warmup".into());
    }
    Ok(Args {
        common,
        warmup,
        check_sync,
        data,
    })
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

fn train(mpi: &Mpi, args: &Args) -> Result<()> {
    let (rank, world) = (mpi.rank(), mpi.size());
    let cfg = GptConfig::default();
    let seq = cfg.block_size;
    let ids = tokens(&args.data, cfg.vocab_size)?;
    // Non-overlapping windows of seq + 1 characters (input and shifted target).
    let windows = (ids.len() - 1) / seq;
    let c = &args.common;
    let sampler = DistributedSampler::new(windows, rank, world, c.seed)?;
    let ctx = ExecContext::with_threads(c.threads)?;
    let model = Gpt::new(&mut Init::new(&ctx, DType::F32, 0), &cfg).map_err(nn_err)?;
    let opts = DdpOptions {
        bucket_bytes: c.bucket_kb * 1024,
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
            c.batch,
            c.batch * world
        );
    }
    let mut timing = Timing::default();
    let mut timed_from = Instant::now();
    for step in 0..c.steps {
        if step == args.warmup {
            timed_from = Instant::now();
        }
        let t0 = Instant::now();
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for w in sampler.batch(step, c.batch)? {
            x.extend_from_slice(&ids[w * seq..(w + 1) * seq]);
            y.extend_from_slice(&ids[w * seq + 1..(w + 1) * seq + 1]);
        }
        opt.zero_grad();
        let (loss, t1) = {
            let _scope = ctx.scope();
            let x = Tensor::constant(&ctx, &x, &[c.batch, seq])?;
            let y = Tensor::constant(&ctx, &y, &[c.batch, seq])?;
            let loss = model.loss(&x, &y).map_err(nn_err)?;
            let t1 = common::backward(&ddp, c.sync, &loss)?;
            (loss.item()?, t1)
        };
        common::average_after(&ddp, c.sync)?;
        let t2 = Instant::now();
        opt.step()?;
        let t3 = Instant::now();
        if step >= args.warmup {
            timing.push(t0, t1, t2, t3);
        }
        let global = mean_across_ranks(mpi, "loss", loss)?;
        if args.check_sync {
            ddp.check_in_sync()?;
        }
        if rank == 0 && ((step + 1) % c.log_every == 0 || step + 1 == c.steps) {
            println!("step {:>5} loss {global:.4}", step + 1);
        }
    }
    let wall = timed_from.elapsed().as_secs_f64();
    if rank == 0 {
        let tokens = ((c.steps - args.warmup) as usize * c.batch * world * seq) as f64;
        timing.print("tokens", tokens, wall);
    }
    Ok(())
}

fn main() {
    common::main("ddp_gpt", parse_args, |_| Duration::from_secs(300), train);
}
