//! Two spirals, learned from scratch by a small MLP with every optimizer.
//!
//! The data are synthetic and deterministic (two interleaved Archimedean
//! spirals with seeded jitter); the model is 2 → 64 → 64 → 2 with tanh,
//! built from fucina-nn's `Linear` (PyTorch's `nn.Linear` init,
//! kaiming-uniform, bound 1/√fan_in). Each optimizer trains the same
//! initial model full-batch under warmup + cosine, printing loss and
//! accuracy as it goes; the decision boundary of the AdamW model is written
//! as a PNG (`--out`, default `runs/spirals/boundary.png`).
//!
//! Run: `cargo run --release --example spirals`

use std::path::PathBuf;

use clap::Parser;
use fucina_autograd::{no_grad, CrossEntropyOpts, ScopeExt, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext};
use fucina_examples::plot::decision_boundary_png;
use fucina_examples::{exit_on_error, Error, Result};
use fucina_nn::{Init, Linear, Module};
use fucina_optim::{
    clip_grad_norm, AdamConfig, AdamW, Algorithm, Lion, LionConfig, Muon, MuonConfig, Optimizer,
    ParamGroup, RmsProp, RmsPropConfig, Schedule, Sgd, SgdConfig,
};

/// Two spirals learned by an MLP with each optimizer; writes the decision boundary as a PNG.
#[derive(Parser, Debug)]
#[command(name = "spirals", version)]
struct Args {
    /// Where to write the decision-boundary picture
    #[arg(long, default_value = "runs/spirals/boundary.png")]
    out: PathBuf,
    /// Worker threads (0: FUCINA_NUM_THREADS or every core)
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

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

/// The classifier: 2 → 64 → 64 → 2 with tanh; fucina-nn's `Linear` (PyTorch's
/// `nn.Linear` init), parameters named `l1.weight`, `l1.bias`, ... by the derive.
#[derive(Module)]
struct Mlp {
    l1: Linear,
    l2: Linear,
    l3: Linear,
}

impl Mlp {
    fn new(ctx: &ExecContext, seed: u64) -> Result<Mlp> {
        let mut init = Init::new(ctx, DType::F32, seed);
        Ok(Mlp {
            l1: Linear::new(&mut init, 2, HIDDEN, true)?,
            l2: Linear::new(&mut init, HIDDEN, HIDDEN, true)?,
            l3: Linear::new(&mut init, HIDDEN, 2, true)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.l1.forward(x)?.tanh()?;
        let h = self.l2.forward(&h)?.tanh()?;
        Ok(self.l3.forward(&h)?)
    }

    fn weights(&self) -> Vec<Tensor> {
        self.decay_groups()[0].clone()
    }

    fn biases(&self) -> Vec<Tensor> {
        self.decay_groups()[1].clone()
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
        "adam" => Box::new(AdamW::new(groups(
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
        other => {
            return Err(Error::arg(
                "optimizer",
                format!("unknown optimizer {other}"),
            ))
        }
    })
}

fn accuracy(logits: &Tensor, y: &[i64]) -> Result<f64> {
    let pred = logits.argmax(1, false)?.to_vec::<i64>()?;
    Ok(pred.iter().zip(y).filter(|(p, t)| p == t).count() as f64 / y.len() as f64)
}

/// P(class 1) at each point, under no-grad.
fn class1_prob(ctx: &ExecContext, model: &Mlp, pts: &[(f64, f64)]) -> Result<Vec<f64>> {
    let _ng = no_grad();
    let _scope = ctx.scope();
    let flat: Vec<f32> = pts
        .iter()
        .flat_map(|&(x, y)| [x as f32, y as f32])
        .collect();
    let x = Tensor::constant(ctx, &flat, &[pts.len(), 2])?;
    let p = model.forward(&x)?.softmax(1)?.to_vec::<f32>()?;
    Ok(p.chunks(2).map(|r| r[1] as f64).collect())
}

fn run() -> Result<()> {
    let args = Args::parse();
    let ctx = if args.threads == 0 {
        ExecContext::new()?
    } else {
        ExecContext::with_threads(args.threads)?
    };
    let (xs, ys) = two_spirals(POINTS_PER_ARM, 7);
    let n = ys.len();
    let x = Tensor::constant(&ctx, &xs, &[n, 2])?;
    let y = Tensor::constant(&ctx, &ys, &[n])?;
    println!("two spirals: {n} points, MLP 2-{HIDDEN}-{HIDDEN}-2 (tanh), {STEPS} full-batch steps, warmup+cosine");
    let t_all = std::time::Instant::now();
    let mut summary = Vec::new();
    let mut drawn = None;
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
        if name == "adamw" {
            drawn = Some(model);
        }
    }
    println!("final accuracy:");
    for (name, acc) in summary {
        println!("  {name:>13}: {:.1}%", 100.0 * acc);
    }
    println!("total {:.1} s", t_all.elapsed().as_secs_f64());
    if let Some(model) = drawn {
        if let Some(dir) = args.out.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let points: Vec<(f64, f64, usize)> = xs
            .chunks(2)
            .zip(&ys)
            .map(|(p, &c)| (p[0] as f64, p[1] as f64, c as usize))
            .collect();
        decision_boundary_png(
            &args.out,
            "two spirals: AdamW MLP decision boundary",
            1.25,
            &points,
            &mut |pts| class1_prob(&ctx, &model, pts),
        )?;
        println!("wrote {}", args.out.display());
    }
    Ok(())
}

fn main() {
    exit_on_error(run());
}
