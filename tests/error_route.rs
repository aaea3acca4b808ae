//! One error route (ARCHITECTURE.md, "One error route"): a shape error
//! raised in fucina-core reaches a user of the umbrella as
//! `fucina::Error::Core`, with core's `Display`, from a core call, through
//! an autograd op, through fucina-nn's error and through fucina-optim's.

use fucina::Error;
use fucina_autograd::testing::TestCtx;

#[macro_use]
#[path = "common/error_route.rs"]
mod route;

#[test]
fn a_core_shape_error_has_one_shape_in_the_umbrella() {
    let core_of = core_of!(Error);
    let (ctx, expected) = route::core_and_autograd_routes::<Error>(core_of);
    let nn = fucina::nn::Error::from(route::through_autograd(&ctx).unwrap_err());
    route::assert_one_shape("fucina-nn", Error::from(nn), core_of, &expected);
    let optim = fucina::optim::Error::from(route::through_autograd(&ctx).unwrap_err());
    route::assert_one_shape("fucina-optim", Error::from(optim), core_of, &expected);
}

#[test]
fn the_prelude_result_serves_every_layer() {
    // One `Result` name for a whole program: the umbrella's by default, a
    // crate's error where a trait signature fixes it.
    use fucina::prelude::Result as R;
    let core_of = core_of!(Error);
    let ctx = TestCtx::with_threads(1).unwrap();
    let expected = route::raised_in_core(&ctx);
    let nn_side: R<(), fucina::nn::Error> = route::through_core(&ctx);
    let user = || -> R<()> {
        nn_side?;
        Ok(())
    };
    route::assert_one_shape("prelude Result", user().unwrap_err(), core_of, &expected);
}
