//! One error route (ARCHITECTURE.md, "One error route"): a shape error
//! raised in fucina-core reaches a fucina-nn caller as `Error::Core`, with
//! core's `Display`, whether it came from a core call, through an autograd
//! op, or through a layer's forward; autograd's own errors stay
//! `Error::Autograd` and never hold a core error.

use fucina_nn::Error;

#[path = "../../tests/common/error_route.rs"]
mod route;

#[test]
fn a_core_shape_error_has_one_shape_in_nn() {
    let (_ctx, core_of, expected) = route::routes!(Error);
    // The conversion itself never keeps autograd's wrapper.
    let wrapped = fucina_autograd::Error::Core(expected.clone());
    route::assert_one_shape(
        "From<autograd::Error>",
        Error::from(wrapped),
        core_of,
        &expected,
    );
}

#[test]
fn an_autograd_error_stays_error_autograd_in_nn() {
    let e = Error::from(fucina_autograd::Error::TensorReleased);
    assert!(
        matches!(e, Error::Autograd(fucina_autograd::Error::TensorReleased)),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        fucina_autograd::Error::TensorReleased.to_string()
    );
}
