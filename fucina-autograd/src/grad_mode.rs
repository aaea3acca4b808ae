//! Grad mode: a thread-local no-grad depth. While a [`NoGradGuard`] lives, ops
//! run the same forward and record nothing.

use std::cell::Cell;

thread_local! {
    static NO_GRAD_DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// True unless a [`NoGradGuard`] is alive on this thread.
#[inline]
pub fn is_grad_enabled() -> bool {
    NO_GRAD_DEPTH.with(|d| d.get() == 0)
}

/// Disables recording on this thread until dropped (nests).
///
/// ```
/// use fucina_autograd::{no_grad, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let w = Tensor::variable(&ctx, &[1.0f64, 2.0], &[2]).unwrap();
/// let y = {
///     let _g = no_grad();
///     w.exp().unwrap()
/// };
/// assert!(!y.requires_grad());
/// ```
#[must_use = "the guard disables grad mode only while it lives"]
pub struct NoGradGuard {
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Opens a no-grad region (see [`NoGradGuard`]).
pub fn no_grad() -> NoGradGuard {
    NO_GRAD_DEPTH.with(|d| d.set(d.get() + 1));
    NoGradGuard {
        _not_send: std::marker::PhantomData,
    }
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        NO_GRAD_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}
