//! Training end to end: flat memory over 1,000 steps, two-spirals to 99%.

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{CrossEntropyOpts, ScopeExt, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext};

/// A minimal Adam over leaf tensors (the optimizer crate has the real ones).
struct Adam {
    params: Vec<Tensor>,
    m: Vec<Vec<f64>>,
    v: Vec<Vec<f64>>,
    t: i32,
    lr: f64,
}

impl Adam {
    fn new(params: Vec<Tensor>, lr: f64) -> Adam {
        let m = params.iter().map(|p| vec![0.0; p.numel()]).collect();
        let v = params.iter().map(|p| vec![0.0; p.numel()]).collect();
        Adam {
            params,
            m,
            v,
            t: 0,
            lr,
        }
    }
    fn step(&mut self) {
        self.t += 1;
        let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8);
        for (i, p) in self.params.iter().enumerate() {
            let g = p.grad_raw().unwrap().to_vec::<f64>().unwrap();
            let (m, v) = (&mut self.m[i], &mut self.v[i]);
            let (t, lr) = (self.t, self.lr);
            p.update_value(|val| {
                let w = val.as_mut_slice::<f64>()?;
                for j in 0..w.len() {
                    m[j] = b1 * m[j] + (1.0 - b1) * g[j];
                    v[j] = b2 * v[j] + (1.0 - b2) * g[j] * g[j];
                    let mh = m[j] / (1.0 - b1.powi(t));
                    let vh = v[j] / (1.0 - b2.powi(t));
                    w[j] -= lr * mh / (vh.sqrt() + eps);
                }
                Ok::<(), fucina_autograd::Error>(())
            })
            .unwrap();
            p.zero_grad();
        }
    }
}

fn init(ctx: &ExecContext, g: &mut SplitMix64, out: usize, inp: usize) -> (Tensor, Tensor) {
    let bound = 1.0 / (inp as f64).sqrt();
    let w: Vec<f64> = g.vec_uniform(out * inp, -bound, bound);
    let b: Vec<f64> = g.vec_uniform(out, -bound, bound);
    (
        Tensor::variable(ctx, &w, &[out, inp]).unwrap(),
        Tensor::variable(ctx, &b, &[out]).unwrap(),
    )
}

struct Mlp {
    layers: Vec<(Tensor, Tensor)>,
}

impl Mlp {
    fn new(ctx: &ExecContext, sizes: &[usize], seed: u64) -> Mlp {
        let mut g = SplitMix64::new(seed);
        Mlp {
            layers: sizes
                .windows(2)
                .map(|w| init(ctx, &mut g, w[1], w[0]))
                .collect(),
        }
    }
    fn forward(&self, x: &Tensor) -> Tensor {
        let mut h = x.clone();
        for (i, (w, b)) in self.layers.iter().enumerate() {
            h = h.linear(w, Some(b)).unwrap();
            if i + 1 < self.layers.len() {
                h = h.tanh().unwrap();
            }
        }
        h
    }
    fn params(&self) -> Vec<Tensor> {
        self.layers
            .iter()
            .flat_map(|(w, b)| [w.clone(), b.clone()])
            .collect()
    }
}

fn spirals(ctx: &ExecContext, per_class: usize) -> (Tensor, Tensor, Vec<i64>) {
    let mut g = SplitMix64::new(3);
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for class in 0..2i64 {
        for i in 0..per_class {
            let r = i as f64 / per_class as f64 * 5.0 + 0.3;
            let th = 1.75 * i as f64 / per_class as f64 * std::f64::consts::TAU
                + class as f64 * std::f64::consts::PI;
            xs.push(r * th.cos() / 5.0 + 0.01 * g.next_normal());
            xs.push(r * th.sin() / 5.0 + 0.01 * g.next_normal());
            ys.push(class);
        }
    }
    let n = ys.len();
    let x = Tensor::constant(ctx, &xs, &[n, 2]).unwrap();
    let y = Tensor::from_raw(ctx, ctx.from_slice(&ys, &[n]).unwrap(), false).unwrap();
    (x, y, ys)
}

#[test]
fn memory_is_flat_over_a_thousand_steps() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let mlp = Mlp::new(&ctx, &[2, 32, 32, 2], 1);
    let (x, y, _) = spirals(&ctx, 32);
    let mut opt = Adam::new(mlp.params(), 1e-3);
    let mut at10 = None;
    for step in 1..=1000 {
        {
            let _s = ctx.scope();
            let loss = mlp
                .forward(&x)
                .cross_entropy(&y, CrossEntropyOpts::default())
                .unwrap();
            loss.backward().unwrap();
        }
        opt.step();
        let st = ctx.stats();
        if step == 10 {
            at10 = Some((st.outstanding, st.cached_bytes));
        }
        if step == 1000 {
            assert_eq!(Some((st.outstanding, st.cached_bytes)), at10);
        }
    }
    drop((mlp, x, y, opt));
}

#[test]
fn mlp_learns_two_spirals_to_99_percent() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let mlp = Mlp::new(&ctx, &[2, 64, 64, 2], 11);
    let (x, y, labels) = spirals(&ctx, 100);
    let mut opt = Adam::new(mlp.params(), 0.01);
    let mut acc = 0.0;
    for step in 0..3000 {
        {
            let _s = ctx.scope();
            let logits = mlp.forward(&x);
            let loss = logits
                .cross_entropy(&y, CrossEntropyOpts::default())
                .unwrap();
            loss.backward().unwrap();
            if step % 100 == 99 {
                let l = logits.to_vec::<f64>().unwrap();
                let correct = labels
                    .iter()
                    .enumerate()
                    .filter(|(i, &c)| (l[2 * i + 1] > l[2 * i]) as i64 == c)
                    .count();
                acc = correct as f64 / labels.len() as f64;
            }
        }
        opt.step();
        if acc >= 0.995 {
            break;
        }
    }
    assert!(acc >= 0.99, "training accuracy {acc}");
    let _ = DType::F64;
}
