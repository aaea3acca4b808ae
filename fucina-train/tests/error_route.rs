//! One error route (ARCHITECTURE.md, "One error route"): a shape error
//! raised in fucina-core reaches a fucina-train caller as `Error::Core`,
//! with core's `Display`, from a core call, through an autograd op or
//! through fucina-nn's error.

use fucina_train::Error;

#[macro_use]
#[path = "../../tests/common/error_route.rs"]
mod route;

#[test]
fn a_core_shape_error_has_one_shape_in_train() {
    let core_of = core_of!(Error);
    let (ctx, expected) = route::core_and_autograd_routes::<Error>(core_of);
    let nn = fucina_nn::Error::from(route::through_autograd(&ctx).unwrap_err());
    route::assert_one_shape("fucina-nn", Error::from(nn), core_of, &expected);
}
