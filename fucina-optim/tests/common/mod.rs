//! Shared helpers of fucina-optim's integration tests: the golden problem's
//! parameters and gradients, and builders for every optimizer case.

#![allow(dead_code)]

pub mod mutate;

use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_optim::*;

/// Names and shapes of the test parameters (matrix, vector, tall matrix).
pub const SHAPES: [(&str, &[usize]); 3] = [("w1", &[6, 8]), ("b", &[7]), ("w2", &[8, 5])];

/// Deterministic f32 parameters.
pub fn init_values(k: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((0.7 * i as f64 + k as f64).cos() * 0.5 + 0.1 * (k + 1) as f64) as f32)
        .collect()
}

/// Deterministic f32 gradient of parameter `k` at `step` (the golden script's formula).
pub fn grad_values(step: usize, k: usize, n: usize) -> Vec<f32> {
    let scale = if k == 2 { 2.0 } else { 1.0 };
    (0..n)
        .map(|i| {
            let (i, s) = (i as f64, step as f64);
            ((0.37 * i + 1.3 * s + k as f64).sin() * (1.0 + 0.5 * (0.11 * i * s).cos()) * scale)
                as f32
        })
        .collect()
}

/// Fresh named f32 parameters on `ctx`.
pub fn params(ctx: &ExecContext) -> Vec<(String, Tensor)> {
    params_of(ctx, DType::F32)
}

/// Fresh named parameters of `dtype` (f32 or f64; the same f32 values) on `ctx`.
pub fn params_of(ctx: &ExecContext, dtype: DType) -> Vec<(String, Tensor)> {
    SHAPES
        .iter()
        .enumerate()
        .map(|(k, (name, shape))| {
            let n: usize = shape.iter().product();
            let v = init_values(k, n);
            let t = match dtype {
                DType::F64 => {
                    Tensor::variable(ctx, &v.iter().map(|&x| x as f64).collect::<Vec<_>>(), shape)
                }
                _ => Tensor::variable(ctx, &v, shape),
            };
            (name.to_string(), t.unwrap())
        })
        .collect()
}

/// Sets the step's gradients (in each parameter's dtype).
pub fn set_grads(ctx: &ExecContext, ps: &[(String, Tensor)], step: usize) {
    for (k, (_, p)) in ps.iter().enumerate() {
        let g = grad_values(step, k, p.numel());
        let raw = match p.dtype() {
            DType::F64 => {
                ctx.from_slice(&g.iter().map(|&x| x as f64).collect::<Vec<_>>(), p.shape())
            }
            _ => ctx.from_slice(&g, p.shape()),
        };
        p.set_grad(Some(raw.unwrap())).unwrap();
    }
}

/// Clipping applied before each step of a case.
#[derive(Clone, Copy, Debug)]
pub enum Clip {
    None,
    Norm(f64),
    Value(f64),
}

/// Every golden case's name.
pub const CASES: [&str; 18] = [
    "sgd",
    "sgd_momentum",
    "sgd_nesterov",
    "adam",
    "adam_l2",
    "adamw",
    "adamw_small_beta1",
    "adamw_groups",
    "rmsprop",
    "rmsprop_centered_momentum",
    "lion",
    "muon",
    "sched_warmup",
    "sched_cosine",
    "sched_step",
    "sched_linear",
    "clip_norm",
    "clip_value",
];

/// The parameters a single-group case optimizes.
struct One(Vec<Tensor>);

impl One {
    /// One group of every parameter under `c`, at a constant learning rate.
    fn of<A: Algorithm>(&self, c: A) -> Box<dyn Optimizer> {
        self.scheduled(c, Schedule::Constant)
    }

    /// One group of every parameter under `c` and schedule `s`.
    fn scheduled<A: Algorithm>(&self, c: A, s: Schedule) -> Box<dyn Optimizer> {
        Box::new(Optim::new(vec![ParamGroup::new(self.0.clone(), c).with_schedule(s)]).unwrap())
    }
}

/// The optimizer (and clipping) of a case, over `ps`, with the moments stored as `bf16` when asked.
pub fn build(case: &str, ps: &[(String, Tensor)]) -> (Box<dyn Optimizer>, Clip) {
    let one = One(ps.iter().map(|(_, t)| t.clone()).collect());
    let opt = match case {
        "sgd" | "clip_value" => one.of(SgdConfig::new(0.1)),
        "sgd_momentum" => one.of(SgdConfig {
            momentum: 0.9,
            dampening: 0.1,
            weight_decay: 0.01,
            ..SgdConfig::new(0.05)
        }),
        "sgd_nesterov" => one.of(SgdConfig {
            momentum: 0.9,
            nesterov: true,
            weight_decay: 0.01,
            ..SgdConfig::new(0.05)
        }),
        "adam" => one.of(AdamConfig::adam(0.01)),
        "adam_l2" => one.of(AdamConfig {
            weight_decay: 0.1,
            ..AdamConfig::adam(0.01)
        }),
        "adamw" => one.of(AdamConfig {
            betas: (0.8, 0.99),
            weight_decay: 0.1,
            ..AdamConfig::adamw(0.01)
        }),
        "adamw_small_beta1" => one.of(AdamConfig {
            betas: (0.3, 0.9),
            weight_decay: 0.1,
            eps: 1e-6,
            ..AdamConfig::adamw(0.01)
        }),
        "adamw_groups" => {
            let cfg = AdamConfig {
                weight_decay: 0.1,
                ..AdamConfig::adamw(0.01)
            };
            Box::new(
                AdamW::new(vec![
                    ParamGroup::new(vec![ps[0].1.clone(), ps[2].1.clone()], cfg.clone()),
                    ParamGroup::new(
                        vec![ps[1].1.clone()],
                        AdamConfig {
                            weight_decay: 0.0,
                            lr: 0.02,
                            ..cfg
                        },
                    ),
                ])
                .unwrap(),
            )
        }
        "rmsprop" => one.of(RmsPropConfig::new(0.01)),
        "rmsprop_centered_momentum" => one.of(RmsPropConfig {
            centered: true,
            momentum: 0.9,
            weight_decay: 0.01,
            ..RmsPropConfig::new(0.01)
        }),
        "lion" => one.of(LionConfig {
            weight_decay: 0.1,
            ..LionConfig::new(0.01)
        }),
        "muon" => one.of(MuonConfig {
            lr: 0.02,
            weight_decay: 0.1,
            adamw: AdamConfig {
                weight_decay: 0.01,
                ..AdamConfig::adamw(0.01)
            },
            ..MuonConfig::default()
        }),
        "sched_warmup" => one.scheduled(
            AdamConfig::adamw(0.01),
            Schedule::LinearWarmup { warmup: 5 },
        ),
        "sched_cosine" => one.scheduled(
            AdamConfig::adamw(0.01),
            Schedule::WarmupCosine {
                warmup: 2,
                total: 8,
                min_factor: 0.1,
            },
        ),
        "sched_step" => one.scheduled(
            SgdConfig {
                momentum: 0.9,
                ..SgdConfig::new(0.05)
            },
            Schedule::StepDecay {
                step_size: 3,
                gamma: 0.5,
            },
        ),
        "sched_linear" => one.scheduled(
            SgdConfig::new(0.1),
            Schedule::LinearDecay {
                start_factor: 1.0,
                end_factor: 0.1,
                total: 6,
            },
        ),
        "clip_norm" => one.of(AdamConfig::adamw(0.01)),
        other => panic!("unknown case {other}"),
    };
    let clip = match case {
        "clip_norm" => Clip::Norm(1.0),
        "clip_value" => Clip::Value(0.05),
        _ => Clip::None,
    };
    (opt, clip)
}

/// One training step of a case: gradients of `step`, clip, step, zero_grad.
pub fn train_step(
    ctx: &ExecContext,
    ps: &[(String, Tensor)],
    opt: &mut dyn Optimizer,
    clip: Clip,
    step: usize,
) {
    set_grads(ctx, ps, step);
    let all: Vec<Tensor> = ps.iter().map(|(_, t)| t.clone()).collect();
    match clip {
        Clip::None => {}
        Clip::Norm(m) => {
            clip_grad_norm(&all, m).unwrap();
        }
        Clip::Value(v) => clip_grad_value(&all, v).unwrap(),
    }
    opt.step().unwrap();
    opt.zero_grad();
}

/// The bit patterns of an f32 tensor's elements (for bitwise comparisons).
pub fn tensor_bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// The bit patterns of every parameter.
pub fn bits(ps: &[(String, Tensor)]) -> Vec<Vec<u32>> {
    ps.iter().map(|(_, t)| tensor_bits(t)).collect()
}
