//! One error route (ARCHITECTURE.md, "One error route"): a shape error
//! raised in fucina-core reaches a fucina-optim caller as `Error::Core` with
//! core's own `Display` (`error_route.rs` checks the variant on more routes).

use fucina_optim::Error;

#[macro_use]
#[path = "../../tests/common/error_route.rs"]
mod route;

#[test]
fn a_core_shape_error_has_one_shape_in_optim() {
    route::core_and_autograd_routes::<Error>(core_of!(Error));
}
