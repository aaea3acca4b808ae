//! One route per failure: a core error reaches fucina-optim's caller as
//! `Error::Core` whether it came from a core call or through an autograd op,
//! never as `Error::Autograd(fucina_autograd::Error::Core(..))`; autograd's
//! own errors stay `Error::Autograd`.

use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;
use fucina_optim::{Error, Optimizer, Result, Sgd, SgdConfig};

/// A shape mismatch raised by the matmul kernel, propagated through an
/// autograd op with `?` into fucina-optim's `Result`.
fn through_autograd(ctx: &TestCtx) -> Result<()> {
    let a = Tensor::variable(ctx, &[1.0f32; 6], &[2, 3])?;
    let b = Tensor::constant(ctx, &[1.0f32; 4], &[2, 2])?;
    a.matmul(&b)?;
    Ok(())
}

/// The same kind of failure from a direct core call.
fn through_core(ctx: &TestCtx) -> Result<()> {
    ctx.from_slice(&[1.0f32; 3], &[2, 2])?;
    Ok(())
}

#[test]
fn a_core_error_is_error_core_on_every_route() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let e = through_autograd(&ctx).unwrap_err();
    assert!(
        matches!(e, Error::Core(fucina_core::Error::ShapeMismatch { .. })),
        "through autograd: {e:?}"
    );
    let e = through_core(&ctx).unwrap_err();
    assert!(
        matches!(e, Error::Core(fucina_core::Error::ShapeMismatch { .. })),
        "through core: {e:?}"
    );
    // The conversion itself: autograd's Core variant is unwrapped, never kept.
    let wrapped = fucina_autograd::Error::Core(fucina_core::Error::InvalidArgument {
        op: "probe",
        msg: "x".into(),
    });
    assert!(matches!(Error::from(wrapped), Error::Core(_)));
}

#[test]
fn a_core_error_inside_backward_step_is_error_core() {
    // A memory limit that leaves no room for the gradients: backward fails in
    // the pool (core) inside the autograd engine, reached through the optimizer.
    let ctx = TestCtx::with_threads(1).unwrap();
    let w = Tensor::variable(&ctx, &vec![1.0f32; 4096], &[4096]).unwrap();
    let mut opt = Sgd::single(vec![w.clone()], SgdConfig::new(0.1)).unwrap();
    let loss = w.square().unwrap().sum_all().unwrap();
    ctx.pool().trim();
    ctx.pool().set_memory_limit(Some(ctx.stats().live_bytes));
    let e = opt.backward_step(&loss).unwrap_err();
    ctx.pool().set_memory_limit(None);
    assert!(
        matches!(e, Error::Core(fucina_core::Error::OutOfMemory { .. })),
        "{e:?}"
    );
}

#[test]
fn an_autograd_error_stays_error_autograd() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let w = Tensor::variable(&ctx, &[1.0f32, 2.0], &[2]).unwrap();
    let mut opt = Sgd::single(vec![w.clone()], SgdConfig::new(0.1)).unwrap();
    // backward from a non-scalar loss is autograd's error, not core's.
    let e = opt.backward_step(&w.mul_scalar(2.0).unwrap()).unwrap_err();
    assert!(
        matches!(&e, Error::Autograd(a) if !matches!(a, fucina_autograd::Error::Core(_))),
        "{e:?}"
    );
}
