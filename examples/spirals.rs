//! Two spirals, learned from scratch by a small MLP with every optimizer.
//!
//! The data are synthetic and deterministic (two interleaved Archimedean
//! spirals with seeded jitter); the model is 2 → 64 → 64 → 2 with tanh,
//! PyTorch's `nn.Linear` init (kaiming-uniform, bound 1/√fan_in). Each
//! optimizer trains the same initial model full-batch under warmup + cosine,
//! printing loss and accuracy as it goes.
//!
//! Run: `cargo run --release --example spirals`

use fucina_autograd::{CrossEntropyOpts, ScopeExt, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::ExecContext;
use fucina_optim::*;

const POINTS_PER_ARM: usize = 256;
const STEPS: u64 = 600;
const HIDDEN: usize = 64;

/// `n` points per spiral arm: (features `[2n, 2]`, labels `[2n]`).
fn two_spirals(n: usize, seed: u64) -> (Vec<f32>, Vec<i64>) {
    let mut rng = SplitMix64::new(seed);
    let (mut x, mut y) = (Vec::with_capacity(4 * n), Vec::with_capacity(2 * n));
    for i in 0..n {
        let t = 0.25 + 3.0 * std::f64::consts::PI * i as f64 / n as f64; // 1.5 turns
        let r = t / (3.0 * std::f64::consts::PI);
        for (arm, sign) in [(0i64, 1.0), (1, -1.0)] {
            let jx = 0.02 * rng.next_normal();
            let jy = 0.02 * rng.next_normal();
            x.push((sign * r * t.cos() + jx) as f32);
            x.push((sign * r * t.sin() + jy) as f32);
            y.push(arm);
        }
    }
    (x, y)
}

/// One `nn.Linear(fan_in, fan_out)`: weight `[out, in]` and bias, U(−1/√in, 1/√in).
fn linear(
    ctx: &ExecContext,
    rng: &mut SplitMix64,
    fan_in: usize,
    fan_out: usize,
) -> Result<(Tensor, Tensor)> {
    let bound = 1.0 / (fan_in as f64).sqrt();
    let w: Vec<f32> = rng
        .vec_uniform(fan_in * fan_out, -bound, bound)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let b: Vec<f32> = rng
        .vec_uniform(fan_out, -bound, bound)
        .iter()
        .map(|&v| v as f32)
        .collect();
    Ok((
        Tensor::variable(ctx, &w, &[fan_out, fan_in])?,
        Tensor::variable(ctx, &b, &[fan_out])?,
    ))
}

struct Mlp {
    layers: Vec<(Tensor, Tensor)>,
}

impl Mlp {
    fn new(ctx: &ExecContext, seed: u64) -> Result<Mlp> {
        let mut rng = SplitMix64::new(seed);
        Ok(Mlp {
            layers: vec![
                linear(ctx, &mut rng, 2, HIDDEN)?,
                linear(ctx, &mut rng, HIDDEN, HIDDEN)?,
                linear(ctx, &mut rng, HIDDEN, 2)?,
            ],
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for (i, (w, b)) in self.layers.iter().enumerate() {
            h = h.linear(w, Some(b))?;
            if i + 1 < self.layers.len() {
                h = h.tanh()?;
            }
        }
        Ok(h)
    }

    fn weights(&self) -> Vec<Tensor> {
        self.layers.iter().map(|(w, _)| w.clone()).collect()
    }

    fn biases(&self) -> Vec<Tensor> {
        self.layers.iter().map(|(_, b)| b.clone()).collect()
    }
}

/// Weights with decay, biases without: two param groups sharing a schedule.
fn groups<C: Algorithm>(m: &Mlp, with_decay: C, no_decay: C, s: Schedule) -> Vec<ParamGroup<C>> {
    vec![
        ParamGroup::new(m.weights(), with_decay).with_schedule(s),
        ParamGroup::new(m.biases(), no_decay).with_schedule(s),
    ]
}

fn make_optimizer(name: &str, m: &Mlp) -> Result<Box<dyn Optimizer>> {
    let s = Schedule::WarmupCosine {
        warmup: 30,
        total: STEPS,
        min_factor: 0.05,
    };
    Ok(match name {
        "sgd+nesterov" => {
            let c = SgdConfig {
                momentum: 0.9,
                nesterov: true,
                ..SgdConfig::new(0.3)
            };
            Box::new(Sgd::new(groups(
                m,
                SgdConfig {
                    weight_decay: 1e-4,
                    ..c.clone()
                },
                c,
                s,
            ))?)
        }
        "adam" => Box::new(Adam::new(groups(
            m,
            AdamConfig::adam(0.01),
            AdamConfig::adam(0.01),
            s,
        ))?),
        "adamw" => {
            let c = AdamConfig::adamw(0.01);
            Box::new(AdamW::new(groups(
                m,
                c.clone(),
                AdamConfig {
                    weight_decay: 0.0,
                    ..c
                },
                s,
            ))?)
        }
        "rmsprop" => Box::new(RmsProp::new(groups(
            m,
            RmsPropConfig::new(1e-2),
            RmsPropConfig::new(1e-2),
            s,
        ))?),
        "lion" => {
            let c = LionConfig::new(2e-3);
            Box::new(Lion::new(groups(
                m,
                LionConfig {
                    weight_decay: 0.1,
                    ..c.clone()
                },
                c,
                s,
            ))?)
        }
        "muon" => {
            // Hidden matrices take Muon; the input and output layers and the biases take AdamW.
            let adam = MuonConfig {
                use_muon: false,
                adamw: AdamConfig::adamw(0.01),
                ..MuonConfig::default()
            };
            let muon = MuonConfig {
                lr: 0.02,
                ..MuonConfig::default()
            };
            let w = m.weights();
            let mut other = vec![w[0].clone(), w[2].clone()];
            other.extend(m.biases());
            Box::new(Muon::new(vec![
                ParamGroup::new(vec![w[1].clone()], muon).with_schedule(s),
                ParamGroup::new(other, adam).with_schedule(s),
            ])?)
        }
        other => unreachable!("unknown optimizer {other}"),
    })
}

fn accuracy(logits: &Tensor, y: &[i64]) -> Result<f64> {
    let pred = logits.argmax(1, false)?.to_vec::<i64>()?;
    Ok(pred.iter().zip(y).filter(|(p, t)| p == t).count() as f64 / y.len() as f64)
}

fn main() -> Result<()> {
    let ctx = ExecContext::new()?;
    let (xs, ys) = two_spirals(POINTS_PER_ARM, 7);
    let n = ys.len();
    let x = Tensor::constant(&ctx, &xs, &[n, 2])?;
    let y = Tensor::constant(&ctx, &ys, &[n])?;
    println!("two spirals: {n} points, MLP 2-{HIDDEN}-{HIDDEN}-2 (tanh), {STEPS} full-batch steps, warmup+cosine");
    let t_all = std::time::Instant::now();
    let mut summary = Vec::new();
    for name in ["sgd+nesterov", "adam", "adamw", "rmsprop", "lion", "muon"] {
        let model = Mlp::new(&ctx, 1234)?;
        let mut opt = make_optimizer(name, &model)?;
        let t0 = std::time::Instant::now();
        let mut line = format!("{name:>13}:");
        for step in 0..STEPS {
            opt.zero_grad();
            let report = step % 150 == 149;
            let (loss, acc) = {
                let _scope = ctx.scope();
                let logits = model.forward(&x)?;
                let loss = logits.cross_entropy(&y, CrossEntropyOpts::default())?;
                loss.backward()?;
                if report {
                    (loss.item()?, accuracy(&logits, &ys)?)
                } else {
                    (0.0, 0.0)
                }
            };
            clip_grad_norm(&opt.params(), 5.0)?;
            opt.step()?;
            if report {
                line += &format!(
                    "  step {:>3} loss {loss:.3} acc {:>5.1}%",
                    step + 1,
                    100.0 * acc
                );
                if step + 1 == STEPS {
                    summary.push((name, acc));
                }
            }
        }
        println!("{line}  ({:.2} s)", t0.elapsed().as_secs_f64());
    }
    println!("final accuracy:");
    for (name, acc) in summary {
        println!("  {name:>13}: {:.1}%", 100.0 * acc);
    }
    println!("total {:.1} s", t_all.elapsed().as_secs_f64());
    Ok(())
}
