//! One error route (ARCHITECTURE.md, "One error route"): a shape error
//! raised in fucina-core reaches a user of the umbrella as
//! `fucina::Error::Core`, with core's `Display`, from a core call, through
//! an autograd op, through fucina-nn's error and through fucina-optim's.

use fucina::Error;
use fucina_autograd::testing::TestCtx;

#[path = "common/error_route.rs"]
mod route;

#[test]
fn a_core_shape_error_has_one_shape_in_the_umbrella() {
    route::routes!(Error, via "fucina-nn" => fucina::nn::Error, "fucina-optim" => fucina::optim::Error);
}

#[test]
fn the_prelude_result_serves_every_layer() {
    // One `Result` name for a whole program: the umbrella's by default, a
    // crate's error where a trait signature fixes it.
    use fucina::prelude::Result as R;
    let core_of = route::core_of!(Error);
    let ctx = TestCtx::with_threads(1).unwrap();
    let expected = route::raised_in_core(&ctx);
    let nn_side: R<(), fucina::nn::Error> = route::through_core(&ctx);
    let user = || -> R<()> {
        nn_side?;
        Ok(())
    };
    route::assert_one_shape("prelude Result", user().unwrap_err(), core_of, &expected);
}
