//! Activation checkpointing: bitwise-equal gradients, fewer retained buffers.

use std::sync::Arc;

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{checkpoint, Block, Error, ScopeExt, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::ExecContext;

fn block() -> Block {
    Arc::new(|xs: &[Tensor]| {
        let h = xs[0].matmul(&xs[1])?.tanh()?;
        let h = h.mul(&h)?.add(&xs[0])?;
        h.exp()?.mul_scalar(0.1)
    })
}

fn run(ctx: &ExecContext, use_checkpoint: bool) -> (Vec<u64>, Vec<u64>, usize) {
    let mut g = SplitMix64::new(7);
    let xv: Vec<f32> = g
        .vec_uniform(16 * 16, -1.0, 1.0)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let wv: Vec<f32> = g
        .vec_uniform(16 * 16, -0.5, 0.5)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let x = Tensor::variable(ctx, &xv, &[16, 16]).unwrap();
    let w = Tensor::variable(ctx, &wv, &[16, 16]).unwrap();
    let retained;
    {
        let _s = ctx.scope();
        let mut h = x.clone();
        for _ in 0..4 {
            h = if use_checkpoint {
                checkpoint(block(), &[&h, &w]).unwrap()
            } else {
                block()(&[h.clone(), w.clone()]).unwrap()
            };
        }
        let loss = h.sum_all().unwrap();
        retained = ctx.stats().outstanding;
        loss.backward().unwrap();
    }
    let bits = |t: &Tensor| {
        t.grad()
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits() as u64)
            .collect()
    };
    (bits(&x), bits(&w), retained)
}

#[test]
fn checkpoint_gradients_are_bitwise_equal_and_retain_fewer_buffers() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let (gx_plain, gw_plain, kept_plain) = run(&ctx, false);
    let (gx_ck, gw_ck, kept_ck) = run(&ctx, true);
    assert_eq!(gx_plain, gx_ck);
    assert_eq!(gw_plain, gw_ck);
    assert!(
        kept_ck < kept_plain,
        "checkpoint kept {kept_ck}, plain {kept_plain}"
    );
}

#[test]
fn nested_checkpoint_recompute_is_an_error() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = Tensor::variable(&ctx, &[0.5f64, 1.0], &[2]).unwrap();
    let inner: Block = Arc::new(|xs: &[Tensor]| xs[0].exp());
    let outer: Block = Arc::new(move |xs: &[Tensor]| checkpoint(inner.clone(), &[&xs[0]]));
    let y = checkpoint(outer, &[&x]).unwrap();
    // Bound first: a temporary in the tail expression would outlive `ctx`.
    let r = y.sum_all().unwrap().backward();
    match r {
        Err(Error::NestedCheckpointRecompute) => {}
        other => panic!("expected NestedCheckpointRecompute, got {other:?}"),
    }
}
