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
//!   `--log-every K` (10), `--timeout-s S` (120: the exchange deadline);
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

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fucina_autograd::{CrossEntropyOpts, ScopeExt, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext};
use fucina_distributed::mpi::{init, Mpi};
use fucina_distributed::{
    mean_across_ranks, resume, save_checkpoint, DataParallel, DdpOptions, DistributedSampler,
    Error, Result, Transport,
};
use fucina_optim::{AdamConfig, AdamW, Optimizer, TrainerState};

const FEATURES: usize = 16;
const CLASSES: usize = 8;
const DATA_LEN: usize = 8192;

#[derive(Debug, Clone)]
struct Args {
    steps: u64,
    batch: usize,
    hidden: usize,
    threads: usize,
    seed: u64,
    bucket_kb: usize,
    log_every: u64,
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
        steps: 100,
        batch: 32,
        hidden: 256,
        threads: 1,
        seed: 1,
        bucket_kb: 25 * 1024,
        log_every: 10,
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
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|e| format!("{flag} {s}: {e}"));
        match flag.as_str() {
            "--steps" => a.steps = num(val()?)?,
            "--batch" => a.batch = num(val()?)? as usize,
            "--hidden" => a.hidden = num(val()?)? as usize,
            "--threads" => a.threads = num(val()?)? as usize,
            "--seed" => a.seed = num(val()?)?,
            "--bucket-kb" => a.bucket_kb = num(val()?)? as usize,
            "--log-every" => a.log_every = num(val()?)?.max(1),
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
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if let (Some(r), Some(s)) = (fail_rank, fail_at) {
        a.fail = Some((r, s));
    }
    Ok(a)
}

/// `DATA_LEN` samples: features N(0, 1), label = argmax of a fixed random map
/// of the features (a learnable task).
fn dataset() -> (Vec<f64>, Vec<i64>) {
    let mut g = SplitMix64::new(2024);
    let map: Vec<f64> = (0..FEATURES * CLASSES).map(|_| g.next_normal()).collect();
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for _ in 0..DATA_LEN {
        let row: Vec<f64> = (0..FEATURES).map(|_| g.next_normal()).collect();
        let score =
            |c: usize| -> f64 { (0..FEATURES).map(|f| row[f] * map[c * FEATURES + f]).sum() };
        let label = (0..CLASSES)
            .max_by(|&a, &b| score(a).total_cmp(&score(b)))
            .unwrap_or(0);
        x.extend_from_slice(&row);
        y.push(label as i64);
    }
    (x, y)
}

/// A tensor of `dtype` (f32 or f64) from f64 values.
fn tensor(
    ctx: &ExecContext,
    v: &[f64],
    shape: &[usize],
    dtype: DType,
    variable: bool,
) -> Result<Tensor> {
    let t = if dtype == DType::F64 {
        Tensor::constant(ctx, v, shape)?
    } else {
        Tensor::constant(ctx, &v.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape)?
    };
    t.set_requires_grad(variable)?;
    Ok(t)
}

/// A FEATURES-H-H-CLASSES tanh MLP with `nn.Linear` init.
struct Mlp {
    layers: Vec<(Tensor, Tensor)>,
}

impl Mlp {
    fn new(ctx: &ExecContext, hidden: usize, seed: u64, dtype: DType) -> Result<Mlp> {
        let mut g = SplitMix64::new(seed);
        let mut layers = Vec::new();
        for (i, o) in [(FEATURES, hidden), (hidden, hidden), (hidden, CLASSES)] {
            let bound = 1.0 / (i as f64).sqrt();
            let w = g.vec_uniform(i * o, -bound, bound);
            let b = g.vec_uniform(o, -bound, bound);
            layers.push((
                tensor(ctx, &w, &[o, i], dtype, true)?,
                tensor(ctx, &b, &[o], dtype, true)?,
            ));
        }
        Ok(Mlp { layers })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for (k, (w, b)) in self.layers.iter().enumerate() {
            h = h.linear(w, Some(b))?;
            if k + 1 < self.layers.len() {
                h = h.tanh()?;
            }
        }
        Ok(h)
    }

    fn params(&self) -> Vec<Tensor> {
        self.layers
            .iter()
            .flat_map(|(w, b)| [w.clone(), b.clone()])
            .collect()
    }

    fn named(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (k, (w, b)) in self.layers.iter().enumerate() {
            out.push((format!("l{k}.weight"), w.clone()));
            out.push((format!("l{k}.bias"), b.clone()));
        }
        out
    }
}

/// The loss of one batch, with backward run (gradients accumulate in the leaves).
fn forward_backward(
    ctx: &ExecContext,
    model: &Mlp,
    data: &(Vec<f64>, Vec<i64>),
    idx: &[usize],
    dtype: DType,
) -> Result<f64> {
    let mut bx = Vec::with_capacity(idx.len() * FEATURES);
    let mut by = Vec::with_capacity(idx.len());
    for &i in idx {
        bx.extend_from_slice(&data.0[i * FEATURES..(i + 1) * FEATURES]);
        by.push(data.1[i]);
    }
    let _scope = ctx.scope();
    let x = tensor(ctx, &bx, &[idx.len(), FEATURES], dtype, false)?;
    let y = Tensor::constant(ctx, &by, &[idx.len()])?;
    let loss = model
        .forward(&x)?
        .cross_entropy(&y, CrossEntropyOpts::default())?;
    loss.backward()?;
    Ok(loss.item()?)
}

fn optimizer(model: &Mlp) -> Result<AdamW> {
    Ok(AdamW::single(model.params(), AdamConfig::adamw(1e-3))?)
}

/// Step timings of rank 0, for the measurements in docs/DISTRIBUTED.md.
#[derive(Default)]
struct Timing {
    compute: Vec<f64>,
    allreduce: Vec<f64>,
    step: Vec<f64>,
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
    if let Some(dir) = &args.pid_dir {
        let path = dir.join(format!("rank-{rank}.pid"));
        std::fs::write(&path, std::process::id().to_string())
            .map_err(|e| Error::InvalidConfig(format!("{}: {e}", path.display())))?;
    }
    let ctx = ExecContext::with_threads(args.threads)?;
    let data = dataset();
    let sampler = DistributedSampler::new(DATA_LEN, rank, world, args.seed)?;
    let per_epoch = sampler.batches_per_epoch(args.batch)?;
    let model = Mlp::new(&ctx, args.hidden, args.seed, args.dtype)?;
    let named = model.named();
    let opts = DdpOptions {
        bucket_bytes: args.bucket_kb * 1024,
        ..DdpOptions::default()
    };
    let ddp = DataParallel::new(mpi, model.params(), opts)?;
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
        let n: usize = model.params().iter().map(|p| p.numel()).sum();
        println!(
            "ddp_mlp: {world} ranks x {} threads, {n} parameters in {} bucket(s), batch {} per rank ({} global), {per_epoch} steps per epoch, from step {start}",
            ctx.num_threads(),
            ddp.plan().buckets.len(),
            args.batch,
            args.batch * world
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
    for step in start..args.steps {
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
        let idx = sampler.batch(step, args.batch)?;
        let loss = forward_backward(&ctx, &model, &data, &idx, args.dtype)?;
        let t1 = Instant::now();
        ddp.average_gradients()?;
        let t2 = Instant::now();
        opt.step()?;
        opt.zero_grad();
        let t3 = Instant::now();
        timing.compute.push((t1 - t0 + (t3 - t2)).as_secs_f64());
        timing.allreduce.push((t2 - t1).as_secs_f64());
        timing.step.push((t3 - t0).as_secs_f64());
        taken += 1;
        let global = mean_across_ranks(mpi, "loss", loss)?;
        if args.check_single {
            ddp.check_in_sync()?;
        }
        if let Some(f) = losses_out.as_mut() {
            writeln!(f, "{} {:e}", step + 1, global)
                .map_err(|e| Error::InvalidConfig(format!("losses file: {e}")))?;
        }
        if rank == 0 && ((step + 1) % args.log_every == 0 || step + 1 == args.steps) {
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
        let samples = (taken as usize * args.batch * world) as f64;
        let (mut s, mut a, mut c) = (
            timing.step.clone(),
            timing.allreduce.clone(),
            timing.compute.clone(),
        );
        let (ms, ma, mc) = (median(&mut s), median(&mut a), median(&mut c));
        println!(
            "timing: {taken} steps in {wall:.2} s, {:.0} samples/s; median step {:.3} ms = compute {:.3} ms + gradient averaging {:.3} ms ({:.1}% of the step)",
            samples / wall,
            ms * 1e3,
            mc * 1e3,
            ma * 1e3,
            100.0 * ma / ms
        );
        // On a loaded machine the medians include preemption; the minima
        // estimate the uncontended costs (sorted above, so element 0).
        println!(
            "timing minima: step {:.3} ms, compute {:.3} ms, gradient averaging {:.3} ms",
            s[0] * 1e3,
            c[0] * 1e3,
            a[0] * 1e3
        );
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
    let ctx = ExecContext::with_threads(args.threads)?;
    let data = dataset();
    let sampler = DistributedSampler::new(DATA_LEN, 0, 1, args.seed)?;
    let model = Mlp::new(&ctx, args.hidden, args.seed, args.dtype)?;
    let mut opt = optimizer(&model)?;
    if start != 0 {
        return Err(Error::InvalidConfig(
            "--check-single needs a run from step 0".into(),
        ));
    }
    for step in 0..args.steps.min(args.stop_after.unwrap_or(u64::MAX)) {
        let idx = sampler.batch(step, args.batch * world)?;
        forward_backward(&ctx, &model, &data, &idx, args.dtype)?;
        opt.step()?;
        opt.zero_grad();
    }
    // Elementwise relative difference, and per tensor ||a - b|| / ||b||.
    let (mut elem, mut norm) = (0f64, 0f64);
    for (a, b) in trained.params().iter().zip(model.params()) {
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
        args.batch,
        args.batch * world,
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
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ddp_mlp: {e}");
            std::process::exit(2);
        }
    };
    let mpi = match init() {
        Ok(m) => m.with_timeout(Duration::from_secs_f64(args.timeout_s)),
        Err(e) => {
            eprintln!("ddp_mlp: {e}");
            std::process::exit(2);
        }
    };
    let r = train(&mpi, &args);
    mpi.exit_on_error(r);
}
