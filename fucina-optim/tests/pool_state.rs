//! Optimizer state lives in the context's pool: moments are counted in
//! `ctx.stats()` and bounded by the pool's memory limit (issue 11), a failed
//! allocation is a clean `OutOfMemory`, and loading a state file allocates
//! from the pool too. Every context ends with nothing outstanding.

use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_optim::*;

fn param(ctx: &ExecContext, n: usize) -> Tensor {
    let p = Tensor::variable(ctx, &vec![0.5f32; n], &[n]).unwrap();
    p.set_grad(Some(ctx.full::<f32>(&[n], 0.25).unwrap()))
        .unwrap();
    p
}

#[test]
fn adam_moments_are_pool_buffers() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let n = 10_000;
    let p = param(&ctx, n);
    let mut opt = AdamW::single(vec![p.clone()], AdamConfig::adamw(1e-2)).unwrap();
    let before = ctx.stats();
    opt.step().unwrap();
    let after = ctx.stats();
    // m and v: two more buffers of n f32 each.
    assert_eq!(after.outstanding, before.outstanding + 2);
    assert!(after.live_bytes >= before.live_bytes + 2 * 4 * n);
    let st = opt.param_state(0, 0).unwrap();
    assert_eq!(st.bufs.len(), 2);
    assert_eq!(st.bufs[0].dtype(), DType::F32);
    assert_eq!(st.bufs[0].len(), n);
    // Round trip through a state file: the loaded moments come from the pool.
    let bytes = opt.state_bytes().unwrap();
    let mut opt2 = AdamW::single(vec![p.clone()], AdamConfig::adamw(1e-2)).unwrap();
    let live = ctx.stats().outstanding;
    opt2.load_state_bytes(&bytes).unwrap();
    assert_eq!(ctx.stats().outstanding, live + 2);
    assert_eq!(opt2.param_state(0, 0), opt.param_state(0, 0));
    drop((opt, opt2, p));
}

#[test]
fn moments_respect_the_memory_limit() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let n = 1 << 16;
    let p = param(&ctx, n);
    let mut opt = AdamW::single(vec![p.clone()], AdamConfig::adamw(1e-2)).unwrap();
    // Room for the parameter and its gradient, not for the moments.
    ctx.pool().trim();
    ctx.pool()
        .set_memory_limit(Some(ctx.stats().live_bytes + 4 * n));
    let r = opt.step();
    assert!(
        matches!(r, Err(Error::Core(fucina_core::Error::OutOfMemory { .. }))),
        "{r:?}"
    );
    // Nothing half-made: the parameter is untouched and no moment leaked.
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![0.5; n]);
    assert!(opt.param_state(0, 0).unwrap().bufs.is_empty());
    ctx.pool().set_memory_limit(None);
    opt.step().unwrap();
    assert_eq!(opt.param_state(0, 0).unwrap().bufs.len(), 2);
    drop((opt, p));
}

#[test]
fn a_cloned_state_is_copied_on_write() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let p = param(&ctx, 100);
    let mut opt = Sgd::single(
        vec![p.clone()],
        SgdConfig {
            momentum: 0.9,
            ..SgdConfig::new(0.1)
        },
    )
    .unwrap();
    opt.step().unwrap();
    let snapshot = opt.param_state(0, 0).unwrap().clone();
    opt.step().unwrap();
    // The snapshot kept the first step's momentum; the optimizer moved on.
    assert_ne!(&snapshot, opt.param_state(0, 0).unwrap());
    assert_eq!(snapshot.bufs[0].to_f64(), vec![0.25; 100]);
    drop((snapshot, opt, p));
}
