//! Issue 11 reproducers that reach the core through the differentiable API:
//! oversized or overflowing sizes give a clean `Err`, never an abort or a
//! wrapped shape. Every context ends with nothing outstanding.

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{Reduction, Tensor};
use fucina_core::DType;

#[test]
fn nll_loss_with_a_huge_broadcast_target_is_an_error() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let t1 = ctx.from_slice(&[0i64], &[1]).unwrap();
    let targets = Tensor::from_raw(&ctx, t1.broadcast_to(&[1 << 36]).unwrap(), false).unwrap();
    let x1 = ctx.zeros(DType::F32, &[1, 2]).unwrap();
    let logp = Tensor::from_raw(&ctx, x1.broadcast_to(&[1 << 36, 2]).unwrap(), true).unwrap();
    let r = logp.nll_loss(&targets, None, Reduction::Mean);
    assert!(r.is_err(), "{:?}", r.map(|t| t.shape().to_vec()));
    drop((t1, targets, x1, logp));
}

#[test]
fn pad_and_split_with_overflowing_sizes_are_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = Tensor::variable(&ctx, &[1.0f32; 6], &[2, 3]).unwrap();
    let r = x.pad(&[(usize::MAX, 1), (0, 0)], 0.0);
    assert!(r.is_err());
    let r = x.split(0, &[usize::MAX, 3, 0]);
    assert!(r.is_err());
    let r = x.split(0, &[usize::MAX, 3]);
    assert!(r.is_err());
    drop(x);
}
