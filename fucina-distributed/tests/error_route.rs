//! One error route (ARCHITECTURE.md, "One error route"): a shape error
//! raised in fucina-core reaches a fucina-distributed caller as
//! `Error::Core`, with core's `Display`, from a core call, through an
//! autograd op or through fucina-optim's error; optim's and autograd's own
//! errors keep their one variant each.

use fucina_distributed::Error;

#[macro_use]
#[path = "../../tests/common/error_route.rs"]
mod route;

#[test]
fn a_core_shape_error_has_one_shape_in_distributed() {
    let core_of = core_of!(Error);
    let (ctx, expected) = route::core_and_autograd_routes::<Error>(core_of);
    let optim = fucina_optim::Error::from(route::through_autograd(&ctx).unwrap_err());
    route::assert_one_shape("fucina-optim", Error::from(optim), core_of, &expected);
    let wrapped = fucina_optim::Error::Autograd(fucina_autograd::Error::Core(expected.clone()));
    route::assert_one_shape(
        "From<optim::Error>",
        Error::from(wrapped),
        core_of,
        &expected,
    );
}

#[test]
fn lower_errors_keep_one_variant_each_in_distributed() {
    let released = fucina_optim::Error::Autograd(fucina_autograd::Error::TensorReleased);
    let e = Error::from(released);
    assert!(
        matches!(e, Error::Autograd(fucina_autograd::Error::TensorReleased)),
        "{e:?}"
    );
    let e = Error::from(fucina_optim::Error::StateMismatch("x".into()));
    assert!(
        matches!(e, Error::Optim(fucina_optim::Error::StateMismatch(_))),
        "{e:?}"
    );
}
