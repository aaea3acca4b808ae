//! The gradient-accumulation recipe works: k micro-batches, each loss divided
//! by k and backpropagated (gradients accumulate), then one clip + step,
//! give the same update as one big batch (f64, up to summation order).

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{CrossEntropyOpts, ScopeExt, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::ExecContext;
use fucina_optim::*;

struct Model {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
}

fn model(ctx: &ExecContext) -> Model {
    let mut rng = SplitMix64::new(3);
    let mut v = |n: usize| rng.vec_uniform(n, -0.5, 0.5);
    Model {
        w1: Tensor::variable(ctx, &v(16 * 4), &[16, 4]).unwrap(),
        b1: Tensor::variable(ctx, &v(16), &[16]).unwrap(),
        w2: Tensor::variable(ctx, &v(3 * 16), &[3, 16]).unwrap(),
    }
}

fn loss(m: &Model, x: &Tensor, y: &Tensor) -> Tensor {
    let h = x.linear(&m.w1, Some(&m.b1)).unwrap().tanh().unwrap();
    h.linear(&m.w2, None)
        .unwrap()
        .cross_entropy(y, CrossEntropyOpts::default())
        .unwrap()
}

fn params(m: &Model) -> Vec<Tensor> {
    vec![m.w1.clone(), m.b1.clone(), m.w2.clone()]
}

#[test]
fn k_micro_batches_equal_one_big_batch() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let mut rng = SplitMix64::new(11);
    let (batch, k) = (32usize, 4usize);
    let xs: Vec<f64> = (0..batch * 4).map(|_| rng.next_normal()).collect();
    let ys: Vec<i64> = (0..batch).map(|_| rng.below(3) as i64).collect();

    // One big batch.
    let big = model(&ctx);
    let mut opt_big = AdamW::single(params(&big), AdamConfig::adamw(1e-2)).unwrap();
    for _ in 0..3 {
        {
            let _s = ctx.scope();
            let x = Tensor::constant(&ctx, &xs, &[batch, 4]).unwrap();
            let y = Tensor::constant(&ctx, &ys, &[batch]).unwrap();
            loss(&big, &x, &y).backward().unwrap();
        }
        clip_grad_norm(&opt_big.params(), 0.5).unwrap();
        opt_big.step().unwrap();
        opt_big.zero_grad();
    }

    // k micro-batches of batch/k rows, losses scaled by 1/k, one step.
    let acc = model(&ctx);
    let mut opt_acc = AdamW::single(params(&acc), AdamConfig::adamw(1e-2)).unwrap();
    let mb = batch / k;
    for _ in 0..3 {
        for i in 0..k {
            let _s = ctx.scope();
            let x = Tensor::constant(&ctx, &xs[i * mb * 4..(i + 1) * mb * 4], &[mb, 4]).unwrap();
            let y = Tensor::constant(&ctx, &ys[i * mb..(i + 1) * mb], &[mb]).unwrap();
            loss(&acc, &x, &y)
                .div_scalar(k as f64)
                .unwrap()
                .backward()
                .unwrap();
        }
        clip_grad_norm(&opt_acc.params(), 0.5).unwrap();
        opt_acc.step().unwrap();
        opt_acc.zero_grad();
    }

    for (a, b) in params(&big).iter().zip(params(&acc)) {
        for (x, y) in a
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .zip(b.to_vec::<f64>().unwrap())
        {
            assert!((x - y).abs() <= 1e-12 * x.abs().max(1.0), "{x} vs {y}");
        }
    }
    drop((opt_big, opt_acc, big, acc));
}
