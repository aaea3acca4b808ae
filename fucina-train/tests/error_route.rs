//! One error route (ARCHITECTURE.md, "One error route"): a shape error
//! raised in fucina-core reaches a fucina-train caller as `Error::Core`,
//! with core's `Display`, from a core call, through an autograd op or
//! through fucina-nn's error.

use fucina_train::Error;

#[path = "../../tests/common/error_route.rs"]
mod route;

#[test]
fn a_core_shape_error_has_one_shape_in_train() {
    route::routes!(Error, via "fucina-nn" => fucina_nn::Error);
}
