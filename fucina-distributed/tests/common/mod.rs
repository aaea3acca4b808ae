//! Shared by the tests: a small MLP classifier built from autograd ops, a
//! seeded synthetic data set, and a training loop that runs either data
//! parallel (one rank of a transport) or as a plain single process.

#![allow(dead_code)]

use std::path::Path;

use fucina_autograd::{CrossEntropyOpts, ScopeExt, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext};
use fucina_distributed::{
    mean_across_ranks, resume, save_checkpoint, DataParallel, DdpOptions, DistributedSampler,
    Result, Transport,
};
use fucina_optim::{AdamConfig, AdamW, Optimizer, TrainerState};

pub const FEATURES: usize = 4;
pub const HIDDEN: usize = 16;
pub const CLASSES: usize = 3;
pub const DATA_LEN: usize = 96;
pub const DATA_SEED: u64 = 11;

/// `n` samples: features N(0, 1), label = argmax of a fixed random linear map.
pub fn dataset(n: usize) -> (Vec<f64>, Vec<i64>) {
    let mut g = SplitMix64::new(DATA_SEED);
    let map: Vec<f64> = (0..FEATURES * CLASSES).map(|_| g.next_normal()).collect();
    let mut x = Vec::with_capacity(n * FEATURES);
    let mut y = Vec::with_capacity(n);
    for _ in 0..n {
        let row: Vec<f64> = (0..FEATURES).map(|_| g.next_normal()).collect();
        let scores: Vec<f64> = (0..CLASSES)
            .map(|c| (0..FEATURES).map(|f| row[f] * map[c * FEATURES + f]).sum())
            .collect();
        let label = (0..CLASSES)
            .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
            .unwrap_or(0);
        x.extend_from_slice(&row);
        y.push(label as i64);
    }
    (x, y)
}

/// A tensor of `dtype` (f32 or f64) from f64 values.
pub fn tensor(
    ctx: &ExecContext,
    v: &[f64],
    shape: &[usize],
    dtype: DType,
    variable: bool,
) -> Result<Tensor> {
    Ok(match (dtype, variable) {
        (DType::F64, true) => Tensor::variable(ctx, v, shape)?,
        (DType::F64, false) => Tensor::constant(ctx, v, shape)?,
        (_, true) => {
            Tensor::variable(ctx, &v.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape)?
        }
        (_, false) => {
            Tensor::constant(ctx, &v.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape)?
        }
    })
}

/// A 4-16-16-3 tanh MLP, `nn.Linear` init from `seed`.
pub struct Mlp {
    pub layers: Vec<(Tensor, Tensor)>,
}

impl Mlp {
    pub fn new(ctx: &ExecContext, seed: u64, dtype: DType) -> Result<Mlp> {
        let mut g = SplitMix64::new(seed);
        let mut layers = Vec::new();
        for (i, o) in [(FEATURES, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, CLASSES)] {
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

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for (k, (w, b)) in self.layers.iter().enumerate() {
            h = h.linear(w, Some(b))?;
            if k + 1 < self.layers.len() {
                h = h.tanh()?;
            }
        }
        Ok(h)
    }

    pub fn params(&self) -> Vec<Tensor> {
        self.layers
            .iter()
            .flat_map(|(w, b)| [w.clone(), b.clone()])
            .collect()
    }

    pub fn named(&self) -> Vec<(String, Tensor)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(k, (w, b))| {
                [
                    (format!("l{k}.weight"), w.clone()),
                    (format!("l{k}.bias"), b.clone()),
                ]
            })
            .collect()
    }

    pub fn values(&self) -> Result<Vec<Vec<f64>>> {
        self.params().iter().map(|p| Ok(p.to_vec_f64()?)).collect()
    }
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
}

/// What a run produced.
pub struct Outcome {
    /// The global (rank-averaged) loss of each step taken, by step number.
    pub losses: Vec<(u64, f64)>,
    /// The parameter hash after each step (checked equal across ranks).
    pub hashes: Vec<u64>,
    pub params: Vec<Vec<f64>>,
    pub outstanding: usize,
}

/// Trains on rank `t` (data parallel), or as a single process when `t` is
/// `None` (then `plan.batch` is the whole batch).
pub fn train(t: Option<&dyn Transport>, plan: &Plan) -> Result<Outcome> {
    let ctx = ExecContext::with_threads(plan.threads)?;
    let (xs, ys) = dataset(DATA_LEN);
    let (rank, world) = t.map_or((0, 1), |t| (t.rank(), t.size()));
    let sampler = DistributedSampler::new(DATA_LEN, rank, world, 5)?;
    let out = {
        let model = Mlp::new(&ctx, plan.model_seed, plan.dtype)?;
        let ddp = match t {
            Some(t) => Some(DataParallel::new(
                t,
                model.params(),
                DdpOptions {
                    bucket_bytes: plan.bucket_bytes,
                    ..DdpOptions::default()
                },
            )?),
            None => None,
        };
        let mut opt = AdamW::single(model.params(), AdamConfig::adamw(1e-2))?;
        let named = model.named();
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
        for step in start..plan.steps {
            if plan.stop_after.is_some_and(|s| step >= s) {
                break;
            }
            let idx = sampler.batch(step, plan.batch)?;
            let mut bx = Vec::with_capacity(idx.len() * FEATURES);
            let mut by = Vec::with_capacity(idx.len());
            for &i in &idx {
                bx.extend_from_slice(&xs[i * FEATURES..(i + 1) * FEATURES]);
                by.push(ys[i]);
            }
            let loss = {
                let _scope = ctx.scope();
                let x = tensor(&ctx, &bx, &[idx.len(), FEATURES], plan.dtype, false)?;
                let y = Tensor::constant(&ctx, &by, &[idx.len()])?;
                let loss = model
                    .forward(&x)?
                    .cross_entropy(&y, CrossEntropyOpts::default())?;
                loss.backward()?;
                loss.item()?
            };
            let loss = match (&ddp, t) {
                (Some(ddp), Some(t)) => {
                    ddp.average_gradients()?;
                    mean_across_ranks(t, "loss", loss)?
                }
                _ => loss,
            };
            opt.step()?;
            opt.zero_grad();
            losses.push((step + 1, loss));
            hashes.push(match &ddp {
                Some(ddp) => ddp.check_in_sync()?,
                None => fucina_distributed::params_hash(&model.params())?,
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
        let params = model.values()?;
        (losses, hashes, params)
    };
    Ok(Outcome {
        losses: out.0,
        hashes: out.1,
        params: out.2,
        outstanding: ctx.stats().outstanding,
    })
}
