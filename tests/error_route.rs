//! One error route (ARCHITECTURE.md, "One error route"): a shape error
//! raised in fucina-core reaches a user of the umbrella as
//! `fucina::Error::Core`, with core's `Display`, from a core call, through
//! an autograd op, through fucina-nn's error and through fucina-optim's.

use fucina::{Error, Result};

use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;

/// The core error itself: a matmul of `[2, 3]` by `[2, 2]` in the kernel.
fn raised_in_core(ctx: &TestCtx) -> fucina_core::Error {
    let a = ctx.from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
    let b = ctx.from_slice(&[1.0f32; 4], &[2, 2]).unwrap();
    ctx.matmul(&a, &b).unwrap_err()
}

/// The same failure through an autograd op.
fn through_autograd(ctx: &TestCtx) -> fucina_autograd::Result<Tensor> {
    let a = Tensor::variable(ctx, &[1.0f32; 6], &[2, 3])?;
    let b = Tensor::constant(ctx, &[1.0f32; 4], &[2, 2])?;
    a.matmul(&b)
}

/// One variant path (`Error::Core(ShapeMismatch)`, the same value) and one
/// `Display` (core's own message), whatever the route.
fn assert_one_shape(route: &str, e: Error, expected: &fucina_core::Error) {
    assert_eq!(e.to_string(), expected.to_string(), "{route}: Display");
    match &e {
        Error::Core(c @ fucina_core::Error::ShapeMismatch { .. }) => {
            assert_eq!(c, expected, "{route}: the core error itself")
        }
        other => panic!("{route}: a core shape error arrived as {other:?}"),
    }
}

#[test]
fn a_core_shape_error_has_one_shape_in_the_umbrella() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let expected = raised_in_core(&ctx);
    let direct = || -> Result<()> {
        let a = ctx.from_slice(&[1.0f32; 6], &[2, 3])?;
        let b = ctx.from_slice(&[1.0f32; 4], &[2, 2])?;
        ctx.matmul(&a, &b)?;
        Ok(())
    };
    assert_one_shape("core call", direct().unwrap_err(), &expected);
    let via = || -> Result<()> {
        through_autograd(&ctx)?;
        Ok(())
    };
    assert_one_shape("autograd op", via().unwrap_err(), &expected);
    let via_nn = || -> Result<()> {
        let r: fucina::nn::Result<Tensor> = through_autograd(&ctx).map_err(Into::into);
        r?;
        Ok(())
    };
    assert_one_shape("fucina-nn", via_nn().unwrap_err(), &expected);
    let via_optim = || -> Result<()> {
        let r: fucina::optim::Result<Tensor> = through_autograd(&ctx).map_err(Into::into);
        r?;
        Ok(())
    };
    assert_one_shape("fucina-optim", via_optim().unwrap_err(), &expected);
}

#[test]
fn the_prelude_result_serves_every_layer() {
    // One `Result` name for a whole program: the umbrella's by default, a
    // crate's error where a trait signature fixes it.
    use fucina::prelude::Result as R;
    let ctx = TestCtx::with_threads(1).unwrap();
    let expected = raised_in_core(&ctx);
    let nn_side: R<Tensor, fucina::nn::Error> = through_autograd(&ctx).map_err(Into::into);
    let user = || -> R<()> {
        nn_side?;
        Ok(())
    };
    assert_one_shape("prelude Result", user().unwrap_err(), &expected);
}
