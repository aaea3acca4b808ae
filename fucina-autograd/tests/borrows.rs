//! No borrow conflict is reachable from the public API: `value()` is a view
//! (nothing is borrowed), `set_value` swaps, and `update_value` answers
//! `ValueBusy` to re-entrant use instead of panicking. Each case below
//! panicked with "already borrowed" (or inside `ExecScope::drop`) before.

mod common;

use common::ctx;
use std::panic::{catch_unwind, AssertUnwindSafe};

use fucina_autograd::{Error, ExecScope, ScopeExt, Tensor};
use fucina_core::ExecContext;

/// The `[1, 2]` f32 variable every case starts from.
fn one_two(ctx: &ExecContext) -> Tensor {
    Tensor::variable(ctx, &[1.0f32, 2.0], &[2]).unwrap()
}

/// The `[1, 2]` variable x, a scope opened after it, and y = 2x recorded in
/// that scope (so closing the scope releases y, not x).
fn doubled_in_scope(ctx: &ExecContext) -> (Tensor, ExecScope, Tensor) {
    let x = one_two(ctx);
    let scope = ctx.scope();
    let y = x.mul_scalar(2.0).unwrap();
    (x, scope, y)
}

#[test]
fn closing_a_scope_while_a_value_is_held_does_not_panic() {
    let ctx = ctx();
    let (x, scope, y) = doubled_in_scope(&ctx);
    let held = y.value().unwrap();
    drop(scope);
    assert_eq!(y.value().err(), Some(Error::TensorReleased));
    // The view keeps its own buffer alive and readable.
    assert_eq!(held.to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
    drop((held, y, x));
}

/// Writes the `[1, 2]` variable with `write` while a view of its value is
/// held: the view still reads `[1, 2]`, the variable reads `after`.
fn write_while_held(write: impl FnOnce(&ExecContext, &Tensor), after: [f32; 2]) {
    let ctx = ctx();
    let w = one_two(&ctx);
    let held = w.value().unwrap();
    write(&ctx, &w);
    assert_eq!(held.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    assert_eq!(w.to_vec::<f32>().unwrap(), after);
    drop((held, w));
}

#[test]
fn set_value_while_a_value_is_held_swaps() {
    write_while_held(
        |ctx, w| {
            w.set_value(ctx.from_slice(&[5.0f32, 6.0], &[2]).unwrap())
                .unwrap()
        },
        [5.0, 6.0],
    );
}

#[test]
fn update_value_while_a_value_is_held_copies_on_write() {
    write_while_held(
        |_, w| {
            w.update_value(|v| {
                v.as_mut_slice::<f32>()?[0] = 9.0;
                Ok::<(), Error>(())
            })
            .unwrap()
        },
        [9.0, 2.0],
    );
}

#[test]
fn using_a_tensor_inside_its_own_update_is_value_busy() {
    let ctx = ctx();
    let w = one_two(&ctx);
    let seen = w
        .update_value(|_| {
            Ok::<_, Error>((
                w.value().err(),
                w.exp().err(),
                w.set_value(ctx.zeros(fucina_core::DType::F32, &[2])?).err(),
                w.update_value(|_| Ok::<(), Error>(())).err(),
                w.mul(&w).and_then(|y| y.sum_all()).err(),
            ))
        })
        .unwrap();
    let busy = Some(Error::ValueBusy);
    assert_eq!(
        seen,
        (busy.clone(), busy.clone(), busy.clone(), busy.clone(), busy)
    );
    // Usable again afterwards.
    assert_eq!(w.exp().unwrap().to_vec::<f32>().unwrap().len(), 2);
    drop(w);
}

#[test]
fn a_panicking_update_puts_the_value_back() {
    let ctx = ctx();
    let w = one_two(&ctx);
    let r = catch_unwind(AssertUnwindSafe(|| {
        w.update_value(|v| {
            v.as_mut_slice::<f32>()?[1] = 7.0;
            if v.numel() == 2 {
                panic!("user code panicked mid-update");
            }
            Ok::<(), Error>(())
        })
    }));
    assert!(r.is_err());
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![1.0, 7.0]);
    drop(w);
}

#[test]
fn a_scope_closed_inside_an_update_releases_cleanly() {
    let ctx = ctx();
    let (x, scope, y) = doubled_in_scope(&ctx);
    y.update_value(move |_| {
        drop(scope);
        Ok::<(), Error>(())
    })
    .unwrap();
    assert_eq!(y.value().err(), Some(Error::TensorReleased));
    drop((x, y));
}

#[test]
fn set_value_and_set_grad_on_a_released_tensor_are_errors() {
    let ctx = ctx();
    let x = one_two(&ctx);
    let y = common::released(&ctx, || x.mul_scalar(2.0));
    let fresh = ctx.from_slice(&[0.0f32, 0.0], &[2]).unwrap();
    assert_eq!(y.set_value(fresh.clone()), Err(Error::TensorReleased));
    assert_eq!(y.set_grad(Some(fresh.clone())), Err(Error::TensorReleased));
    assert_eq!(
        y.update_value(|_| Ok::<(), Error>(())),
        Err(Error::TensorReleased)
    );
    assert!(y.is_released());
    drop((fresh, x, y));
}
