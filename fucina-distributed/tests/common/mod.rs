//! Shared by the tests: a small MLP classifier (the `ddp_mlp` example's
//! model and data set, `examples/common/mlp.rs`, at the tests' sizes), a training loop that runs either data
//! parallel (one rank of a transport) or as a plain single process, and the
//! runner of a local group of ranks as threads.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use fucina_autograd::ScopeExt;
use fucina_core::{DType, ExecContext};
use fucina_distributed::{
    mean_across_ranks, resume, save_checkpoint, DataParallel, DdpOptions, DistributedSampler,
    LocalTransport, Result, Transport, DEFAULT_BUCKET_BYTES,
};
use fucina_nn::Mlp;
use fucina_optim::{AdamConfig, AdamW, Optimizer, TrainerState};

pub const FEATURES: usize = 4;
pub const HIDDEN: usize = 16;
pub const CLASSES: usize = 3;
pub const DATA_LEN: usize = 96;
pub const DATA_SEED: u64 = 11;

#[path = "../../examples/common/mlp.rs"]
pub mod mlp;

/// `n` samples of the tests' data set (4 features, 3 classes, seed 11).
pub fn dataset(n: usize) -> (Vec<f64>, Vec<i64>) {
    mlp::dataset(n, FEATURES, CLASSES, DATA_SEED)
}

/// The 4-16-16-3 tanh MLP of `seed`.
pub fn model(ctx: &ExecContext, seed: u64, dtype: DType) -> Result<Mlp> {
    mlp::mlp(ctx, &[FEATURES, HIDDEN, HIDDEN, CLASSES], seed, dtype)
}

/// Every parameter's values, in order.
pub fn values(m: &Mlp) -> Result<Vec<Vec<f64>>> {
    mlp::params(m).iter().map(|p| Ok(p.to_vec_f64()?)).collect()
}

/// How a run goes.
pub struct Plan<'a> {
    pub steps: u64,
    /// Per-rank batch.
    pub batch: usize,
    pub model_seed: u64,
    pub bucket_bytes: usize,
    /// `(dir, every)`: save a checkpoint every `every` steps.
    pub ckpt: Option<(&'a Path, u64)>,
    /// Resume from the newest checkpoint in `ckpt`'s dir first.
    pub resume: bool,
    /// Stop (return) after this many steps in total.
    pub stop_after: Option<u64>,
    pub threads: usize,
    /// The parameters' dtype (f32 or f64).
    pub dtype: DType,
    /// Average while backward runs (`DataParallel::backward_overlapped`)
    /// instead of after it.
    pub overlap: bool,
}

/// What a run produced.
pub struct Outcome {
    /// The global (rank-averaged) loss of each step taken, by step number.
    pub losses: Vec<(u64, f64)>,
    /// The parameter hash after each step (checked equal across ranks).
    pub hashes: Vec<u64>,
    pub params: Vec<Vec<f64>>,
    pub outstanding: usize,
    /// Buckets in the plan, and of those, how many the overlapped runs sent
    /// before backward ended (summed over steps).
    pub buckets: usize,
    pub sent_early: usize,
}

/// Runs `f` on each rank of a local group of `n`, one thread each; returns
/// the ranks' results in rank order.
pub fn on_ranks<T: Send + 'static>(
    n: usize,
    timeout: Duration,
    f: impl Fn(LocalTransport) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let group = LocalTransport::group(n, timeout).unwrap();
    let handles: Vec<_> = group
        .into_iter()
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || f(t))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

pub fn plan(steps: u64, batch: usize) -> Plan<'static> {
    Plan {
        steps,
        batch,
        model_seed: 3,
        bucket_bytes: DEFAULT_BUCKET_BYTES,
        ckpt: None,
        resume: false,
        stop_after: None,
        threads: 1,
        dtype: DType::F64,
        overlap: false,
    }
}

/// Trains on rank `t` (data parallel), or as a single process when `t` is
/// `None` (then `plan.batch` is the whole batch).
pub fn train(t: Option<&dyn Transport>, plan: &Plan) -> Result<Outcome> {
    let ctx = ExecContext::with_threads(plan.threads)?;
    let data = dataset(DATA_LEN);
    let (rank, world) = t.map_or((0, 1), |t| (t.rank(), t.size()));
    let sampler = DistributedSampler::new(DATA_LEN, rank, world, 5)?;
    let out = {
        let model = model(&ctx, plan.model_seed, plan.dtype)?;
        let params = mlp::params(&model);
        let ddp = match t {
            Some(t) => Some(DataParallel::new(
                t,
                params.clone(),
                DdpOptions {
                    bucket_bytes: plan.bucket_bytes,
                    ..DdpOptions::default()
                },
            )?),
            None => None,
        };
        let mut opt = AdamW::single(params.clone(), AdamConfig::adamw(1e-2))?;
        let named = mlp::named(&model);
        let mut start = 0;
        if plan.resume {
            if let (Some(t), Some((dir, _))) = (t, plan.ckpt) {
                if let Some(st) = resume(t, dir, &named, &mut opt)? {
                    start = st.step;
                }
            }
        }
        let mut losses = Vec::new();
        let mut hashes = Vec::new();
        let mut sent_early = 0;
        for step in start..plan.steps {
            if plan.stop_after.is_some_and(|s| step >= s) {
                break;
            }
            let idx = sampler.batch(step, plan.batch)?;
            let loss = {
                let _scope = ctx.scope();
                let loss = mlp::loss(&ctx, &model, &data, &idx, plan.dtype)?;
                match (&ddp, plan.overlap) {
                    (Some(ddp), true) => {
                        ddp.backward_overlapped(&loss)?;
                        sent_early += ddp.overlapped_buckets().0;
                    }
                    _ => loss.backward()?,
                }
                loss.item()?
            };
            let loss = match (&ddp, t) {
                (Some(ddp), Some(t)) => {
                    if !plan.overlap {
                        ddp.average_gradients()?;
                    }
                    mean_across_ranks(t, "loss", loss)?
                }
                _ => loss,
            };
            opt.step()?;
            opt.zero_grad();
            losses.push((step + 1, loss));
            hashes.push(match &ddp {
                Some(ddp) => ddp.check_in_sync()?,
                None => fucina_distributed::params_hash(&params)?,
            });
            if let (Some(t), Some((dir, every))) = (t, plan.ckpt) {
                if (step + 1) % every == 0 {
                    let state = TrainerState {
                        step: step + 1,
                        data_position: step + 1,
                        ..Default::default()
                    };
                    save_checkpoint(t, dir, &named, &opt, &state)?;
                }
            }
        }
        let params = values(&model)?;
        let buckets = ddp.as_ref().map_or(0, |d| d.plan().buckets.len());
        (losses, hashes, params, buckets, sent_early)
    };
    Ok(Outcome {
        losses: out.0,
        hashes: out.1,
        params: out.2,
        outstanding: ctx.stats().outstanding,
        buckets: out.3,
        sent_early: out.4,
    })
}
