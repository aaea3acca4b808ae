//! The probe the `error_route.rs` tests of every crate share (included by
//! `#[path]`): one shape error raised in fucina-core, reached by each
//! route, and the check that it arrives in one shape, the crate's
//! `Error::Core` holding core's error unchanged, with core's `Display`.

#![allow(dead_code)]

use std::fmt::{Debug, Display};

use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;

/// `core_of!(Error)`: the function that finds a crate's `Error::Core`
/// (`Error` in scope as the crate's error type).
macro_rules! core_of {
    ($E:ident) => {{
        fn core_of(e: &$E) -> Option<&fucina_core::Error> {
            match e {
                $E::Core(c) => Some(c),
                _ => None,
            }
        }
        core_of
    }};
}

/// The operands: `[2, 3]` and `[2, 2]`, which no matmul takes.
fn operands(ctx: &TestCtx) -> (fucina_core::RawTensor, fucina_core::RawTensor) {
    (
        ctx.from_slice(&[1.0f32; 6], &[2, 3]).unwrap(),
        ctx.from_slice(&[1.0f32; 4], &[2, 2]).unwrap(),
    )
}

/// The core error itself, as the kernel raises it.
pub fn raised_in_core(ctx: &TestCtx) -> fucina_core::Error {
    let (a, b) = operands(ctx);
    ctx.matmul(&a, &b).unwrap_err()
}

/// The failure from a direct core call, met by `?` in a function of the
/// crate's own `Result`.
pub fn through_core<E: From<fucina_core::Error>>(ctx: &TestCtx) -> Result<(), E> {
    let (a, b) = operands(ctx);
    ctx.matmul(&a, &b)?;
    Ok(())
}

/// The same failure through an autograd op.
pub fn through_autograd(ctx: &TestCtx) -> fucina_autograd::Result<Tensor> {
    let a = Tensor::variable(ctx, &[1.0f32; 6], &[2, 3])?;
    let b = Tensor::constant(ctx, &[1.0f32; 4], &[2, 2])?;
    a.matmul(&b)
}

/// One variant path (`core_of` finds the crate's `Error::Core`, holding
/// exactly the shape error) and one `Display` (core's message), whatever the
/// route.
pub fn assert_one_shape<E: Display + Debug>(
    route: &str,
    e: E,
    core_of: fn(&E) -> Option<&fucina_core::Error>,
    expected: &fucina_core::Error,
) {
    assert_eq!(e.to_string(), expected.to_string(), "{route}: Display");
    match core_of(&e) {
        Some(c @ fucina_core::Error::ShapeMismatch { .. }) => {
            assert_eq!(c, expected, "{route}: the core error itself")
        }
        _ => panic!("{route}: a core shape error arrived as {e:?}"),
    }
}

/// The two routes every crate has: a core call met by `?` in a function of
/// the crate's `Result`, and an autograd op's error converted by `From`.
/// Returns the context and the core error, for the crate's own routes.
pub fn core_and_autograd_routes<E>(
    core_of: fn(&E) -> Option<&fucina_core::Error>,
) -> (TestCtx, fucina_core::Error)
where
    E: From<fucina_core::Error> + From<fucina_autograd::Error> + Display + Debug,
{
    let ctx = TestCtx::with_threads(1).unwrap();
    let expected = raised_in_core(&ctx);
    let e = through_core::<E>(&ctx).unwrap_err();
    assert_one_shape("core call", e, core_of, &expected);
    let e = E::from(through_autograd(&ctx).unwrap_err());
    assert_one_shape("autograd op", e, core_of, &expected);
    (ctx, expected)
}

/// The route through a lower crate's error `L`: an autograd op's error
/// converted into `L`, then into the crate's `E`.
pub fn assert_through<L, E>(
    route: &str,
    ctx: &TestCtx,
    core_of: fn(&E) -> Option<&fucina_core::Error>,
    expected: &fucina_core::Error,
) where
    L: From<fucina_autograd::Error>,
    E: From<L> + Display + Debug,
{
    let lower = L::from(through_autograd(ctx).unwrap_err());
    assert_one_shape(route, E::from(lower), core_of, expected);
}

/// `routes!(Error)`: [`core_and_autograd_routes`] for the crate's `Error`,
/// returning `(ctx, core_of, expected)` for the crate's own routes;
/// `routes!(Error, via "fucina-nn" => fucina_nn::Error, ..)` also checks
/// the route through each lower crate's error ([`assert_through`]).
#[allow(unused_macros)] // a crate's test uses `core_of!` alone
macro_rules! routes {
    ($E:ident $(, via $($name:literal => $L:ty),+)?) => {{
        let core_of = $crate::route::core_of!($E);
        let (ctx, expected) = $crate::route::core_and_autograd_routes::<$E>(core_of);
        $($($crate::route::assert_through::<$L, $E>($name, &ctx, core_of, &expected);)+)?
        (ctx, core_of, expected)
    }};
}

#[allow(unused_imports)] // a crate's test uses one or both by path
pub(crate) use {core_of, routes};
