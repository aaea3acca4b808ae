//! Data-parallel training of a small MLP classifier under `mpirun`.
//!
//! Every rank builds its own `ExecContext` (`--threads` workers), the same
//! model (rank 0's initial values are broadcast), and draws its shard of a
//! seeded synthetic data set; gradients are averaged across ranks after
//! each backward, AdamW steps on every rank, and rank 0 alone prints
//! progress and writes checkpoints. It is also the program the MPI tests
//! (`tools/test-distributed.sh`) drive through its flags.
//!
//! Run: `cargo build --release -p fucina-distributed --features mpi --example ddp_mlp`
//! then `mpirun -np 2 target/release/examples/ddp_mlp --steps 200`
//! (as root add `--allow-run-as-root`; on fewer cores than ranks, `--oversubscribe`).
//!
//! Flags (all optional):
//! - `--steps N` (100), `--batch B` per rank (32), `--hidden H` (256),
//!   `--threads T` per rank (1), `--seed S` (1), `--bucket-kb K` (25600),
//!   `--log-every K` (10), `--timeout-s S` (120: the exchange deadline),
//!   `--sync after|overlap|none` (after: average after backward; overlap:
//!   while backward runs; none: no averaging, the no-exchange baseline);
//! - `--ckpt DIR --ckpt-every K`: rank 0 saves every K steps; `--resume`
//!   continues from the newest checkpoint in DIR; `--stop-after N` ends after
//!   step N (a stopped job, to resume);
//! - `--losses FILE`: rank 0 writes `step loss` lines (the global mean loss,
//!   exact bits as `{:e}`); `--pid-dir DIR`: each rank writes `rank-R.pid`;
//! - `--check-single`: after training, rank 0 retrains the same steps as one
//!   process with batch `world·B` and fails unless the parameters match
//!   within 1e-5 relative (elementwise in f64, by tensor norm in f32); after every step all ranks compare parameter
//!   hashes and fail unless they are identical;
//! - `--f64`: f64 parameters and data (default f32);
//! - `--fail-rank R --fail-at N`: rank R returns an error at step N (a test
//!   of failure handling); `--stall` makes it hang there instead.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::mlp::{dataset, loss, mlp, named, params};
use common::{Common, Timing};
use fucina_autograd::ScopeExt;
use fucina_core::{DType, ExecContext};
use fucina_distributed::mpi::Mpi;
use fucina_distributed::{
    mean_across_ranks, resume, save_checkpoint, DataParallel, DdpOptions, DistributedSampler,
    Error, Result, Transport,
};
use fucina_nn::Mlp;
use fucina_optim::{AdamConfig, AdamW, Optimizer, TrainerState};

const FEATURES: usize = 16;
const CLASSES: usize = 8;
const DATA_LEN: usize = 8192;
const DATA_SEED: u64 = 2024;

#[derive(Debug, Clone)]
struct Args {
    common: Common,
    hidden: usize,
    timeout_s: f64,
    ckpt: Option<PathBuf>,
    ckpt_every: u64,
    resume: bool,
    stop_after: Option<u64>,
    losses: Option<PathBuf>,
    pid_dir: Option<PathBuf>,
    check_single: bool,
    fail: Option<(usize, u64)>,
    stall: bool,
    dtype: DType,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut a = Args {
        common: Common::new(100, 32),
        hidden: 256,
        timeout_s: 120.0,
        ckpt: None,
        ckpt_every: 0,
        resume: false,
        stop_after: None,
        losses: None,
        pid_dir: None,
        check_single: false,
        fail: None,
        stall: false,
        dtype: DType::F32,
    };
    let mut fail_rank = None;
    let mut fail_at = None;
    let mut common = a.common.clone();
    common::parse(&mut common, |flag, val| {
        let num = |s| common::num(flag, s);
        match flag {
            "--hidden" => a.hidden = num(val()?)? as usize,
            "--timeout-s" => {
                let s = val()?;
                a.timeout_s = s.parse().map_err(|e| format!("--timeout-s {s}: {e}"))?
            }
            "--ckpt" => a.ckpt = Some(PathBuf::from(val()?)),
            "--ckpt-every" => a.ckpt_every = num(val()?)?,
            "--resume" => a.resume = true,
            "--stop-after" => a.stop_after = Some(num(val()?)?),
            "--losses" => a.losses = Some(PathBuf::from(val()?)),
            "--pid-dir" => a.pid_dir = Some(PathBuf::from(val()?)),
            "--check-single" => a.check_single = true,
            "--fail-rank" => fail_rank = Some(num(val()?)? as usize),
            "--fail-at" => fail_at = Some(num(val()?)?),
            "--stall" => a.stall = true,
            "--f64" => a.dtype = DType::F64,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    a.common = common;
    if let (Some(r), Some(s)) = (fail_rank, fail_at) {
        a.fail = Some((r, s));
    }
    Ok(a)
}

/// The FEATURES-H-H-CLASSES model of seed `seed`.
fn model(ctx: &ExecContext, args: &Args) -> Result<Mlp> {
    let h = args.hidden;
    mlp(
        ctx,
        &[FEATURES, h, h, CLASSES],
        args.common.seed,
        args.dtype,
    )
}

fn optimizer(model: &Mlp) -> Result<AdamW> {
    Ok(AdamW::single(params(model), AdamConfig::adamw(1e-3))?)
}

fn train(mpi: &Mpi, args: &Args) -> Result<()> {
    let (rank, world) = (mpi.rank(), mpi.size());
    if let Some(dir) = &args.pid_dir {
        let path = dir.join(format!("rank-{rank}.pid"));
        std::fs::write(&path, std::process::id().to_string())
            .map_err(|e| Error::InvalidConfig(format!("{}: {e}", path.display())))?;
    }
    let c = &args.common;
    let ctx = ExecContext::with_threads(c.threads)?;
    let data = dataset(DATA_LEN, FEATURES, CLASSES, DATA_SEED);
    let sampler = DistributedSampler::new(DATA_LEN, rank, world, c.seed)?;
    let per_epoch = sampler.batches_per_epoch(c.batch)?;
    let model = model(&ctx, args)?;
    let named = named(&model);
    let opts = DdpOptions {
        bucket_bytes: c.bucket_kb * 1024,
        ..DdpOptions::default()
    };
    let ddp = DataParallel::new(mpi, params(&model), opts)?;
    let mut opt = optimizer(&model)?;
    let mut start = 0;
    if args.resume {
        if let Some(dir) = &args.ckpt {
            if let Some(st) = resume(mpi, dir, &named, &mut opt)? {
                start = st.step;
            }
        }
    }
    if rank == 0 {
        let n: usize = params(&model).iter().map(|p| p.numel()).sum();
        println!(
            "ddp_mlp: {world} ranks x {} threads, {n} parameters in {} bucket(s), batch {} per rank ({} global), {per_epoch} steps per epoch, from step {start}",
            ctx.num_threads(),
            ddp.plan().buckets.len(),
            c.batch,
            c.batch * world
        );
    }
    let mut losses_out = match (&args.losses, rank) {
        (Some(p), 0) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| Error::InvalidConfig(format!("{}: {e}", p.display())))?,
        ),
        _ => None,
    };
    let mut timing = Timing::default();
    let t_all = Instant::now();
    let mut taken = 0u64;
    for step in start..c.steps {
        if args.stop_after.is_some_and(|s| step >= s) {
            break;
        }
        if args.fail.is_some_and(|(r, s)| r == rank && s == step) {
            if args.stall {
                eprintln!("rank {rank}: stalling at step {step} (test)");
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            return Err(Error::InvalidConfig(format!(
                "injected failure at step {step} (test)"
            )));
        }
        let t0 = Instant::now();
        let idx = sampler.batch(step, c.batch)?;
        let (loss, t1) = {
            let _scope = ctx.scope();
            let loss = loss(&ctx, &model, &data, &idx, args.dtype)?;
            let t1 = common::backward(&ddp, c.sync, &loss)?;
            (loss.item()?, t1)
        };
        common::average_after(&ddp, c.sync)?;
        let t2 = Instant::now();
        opt.step()?;
        opt.zero_grad();
        let t3 = Instant::now();
        timing.push(t0, t1, t2, t3);
        taken += 1;
        let global = mean_across_ranks(mpi, "loss", loss)?;
        if args.check_single {
            ddp.check_in_sync()?;
        }
        if let Some(f) = losses_out.as_mut() {
            writeln!(f, "{} {:e}", step + 1, global)
                .map_err(|e| Error::InvalidConfig(format!("losses file: {e}")))?;
        }
        if rank == 0 && ((step + 1) % c.log_every == 0 || step + 1 == c.steps) {
            println!("step {:>5} loss {global:.4}", step + 1);
        }
        if let Some(dir) = &args.ckpt {
            if args.ckpt_every > 0 && (step + 1) % args.ckpt_every == 0 {
                let state = TrainerState {
                    step: step + 1,
                    data_position: step + 1,
                    lr: opt.lr(0)?,
                    ..Default::default()
                };
                save_checkpoint(mpi, dir, &named, &opt, &state)?;
            }
        }
    }
    let wall = t_all.elapsed().as_secs_f64();
    if rank == 0 && taken > 0 {
        timing.print("samples", (taken as usize * c.batch * world) as f64, wall);
    }
    if args.check_single {
        let hash = ddp.check_in_sync()?;
        if rank == 0 {
            check_single(args, world, &model, start)?;
            println!("check: ranks bitwise identical after every step (final hash {hash:016x})");
        }
    }
    Ok(())
}

/// Rank 0 retrains as one process with batch `world·batch` (same data, same
/// initial model) and compares parameters.
fn check_single(args: &Args, world: usize, trained: &Mlp, start: u64) -> Result<()> {
    let c = &args.common;
    let ctx = ExecContext::with_threads(c.threads)?;
    let data = dataset(DATA_LEN, FEATURES, CLASSES, DATA_SEED);
    let sampler = DistributedSampler::new(DATA_LEN, 0, 1, c.seed)?;
    let model = model(&ctx, args)?;
    let mut opt = optimizer(&model)?;
    if start != 0 {
        return Err(Error::InvalidConfig(
            "--check-single needs a run from step 0".into(),
        ));
    }
    for step in 0..c.steps.min(args.stop_after.unwrap_or(u64::MAX)) {
        let idx = sampler.batch(step, c.batch * world)?;
        {
            let _scope = ctx.scope();
            loss(&ctx, &model, &data, &idx, args.dtype)?.backward()?;
        }
        opt.step()?;
        opt.zero_grad();
    }
    // Elementwise relative difference, and per tensor ||a - b|| / ||b||.
    let (mut elem, mut norm) = (0f64, 0f64);
    for (a, b) in params(trained).iter().zip(params(&model)) {
        let (a, b) = (a.to_vec_f64()?, b.to_vec_f64()?);
        let (mut d2, mut n2) = (0f64, 0f64);
        for (x, y) in a.iter().zip(&b) {
            elem = elem.max((x - y).abs() / y.abs().max(1e-6));
            d2 += (x - y) * (x - y);
            n2 += y * y;
        }
        norm = norm.max((d2 / n2).sqrt());
    }
    println!(
        "check: {world} ranks x batch {} vs 1 process x batch {} ({}): max relative parameter difference {elem:.3e} elementwise, {norm:.3e} by tensor norm",
        c.batch,
        c.batch * world,
        args.dtype
    );
    // f32: the two runs round their gradient sums differently and AdamW
    // amplifies that where a gradient is near zero, so f32 is held to the
    // norm bound, f64 to the elementwise one.
    let worst = if args.dtype == DType::F64 { elem } else { norm };
    if worst > 1e-5 {
        return Err(Error::InvalidConfig(format!(
            "parameters differ from the single process by {worst:e} relative (> 1e-5)"
        )));
    }
    Ok(())
}

fn main() {
    common::main(
        "ddp_mlp",
        parse_args,
        |a| Duration::from_secs_f64(a.timeout_s),
        train,
    );
}
