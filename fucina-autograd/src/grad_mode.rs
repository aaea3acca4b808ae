//! Grad mode: a thread-local no-grad depth. While a [`NoGradGuard`] lives, ops
//! run the same forward and record nothing. The depth counters of the
//! thread-local modes (no-grad, higher-order, anomaly) share one guard,
//! `DepthGuard`.

use std::cell::Cell;
use std::thread::LocalKey;

/// Holds one level of a thread-local mode's depth: counts it up when made,
/// down when dropped (so guards nest). Not `Send`: the depth is the
/// creating thread's.
pub(crate) struct DepthGuard {
    depth: &'static LocalKey<Cell<usize>>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl DepthGuard {
    /// Enters one level of `depth` on this thread.
    pub(crate) fn enter(depth: &'static LocalKey<Cell<usize>>) -> Self {
        depth.with(|d| d.set(d.get() + 1));
        DepthGuard {
            depth,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for DepthGuard {
    fn drop(&mut self) {
        self.depth.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

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
    _depth: DepthGuard,
}

/// Opens a no-grad region (see [`NoGradGuard`]).
pub fn no_grad() -> NoGradGuard {
    NoGradGuard {
        _depth: DepthGuard::enter(&NO_GRAD_DEPTH),
    }
}

/// The number of [`NoGradGuard`]s alive on this thread.
#[inline]
pub(crate) fn no_grad_depth() -> usize {
    NO_GRAD_DEPTH.with(|d| d.get())
}

/// Turns grad mode on for this thread until dropped, whatever no-grad guards
/// are alive, and restores their depth after (a checkpoint's recompute must
/// record even when backward itself runs under `no_grad`).
pub(crate) struct EnableGradGuard {
    saved: usize,
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Opens a region with grad mode on (see [`EnableGradGuard`]).
pub(crate) fn enable_grad() -> EnableGradGuard {
    EnableGradGuard {
        saved: NO_GRAD_DEPTH.with(|d| d.replace(0)),
        _not_send: std::marker::PhantomData,
    }
}

impl Drop for EnableGradGuard {
    fn drop(&mut self) {
        NO_GRAD_DEPTH.with(|d| d.set(self.saved));
    }
}

thread_local! {
    static HIGHER_ORDER_DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Records the forward so that its gradient can be differentiated again,
/// until dropped (nests): ops that would keep a derivative in place of their
/// input for a faster first-order backward (`gelu_erf`) keep the input
/// instead. Without it, a backward with `create_graph` through such an op is
/// [`crate::Error::NoDoubleBackward`]. The functional transforms
/// (`functional::hvp`, `hessian`, ...) and `gradgradcheck` open it themselves.
///
/// ```
/// use fucina_autograd::{grad_with, higher_order, GradOpts, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let x = Tensor::variable(&ctx, &[0.5f64], &[1])?;
/// let y = {
///     let _h = higher_order();
///     x.gelu_erf()?.sum_all()?
/// };
/// let g = grad_with(&y, &[&x], &GradOpts::create_graph())?.remove(0).unwrap();
/// let h = grad_with(&g.sum_all()?, &[&x], &GradOpts::default())?.remove(0).unwrap();
/// assert!(h.item()? > 0.0);
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
#[must_use = "the guard keeps inputs for a double backward only while it lives"]
pub struct HigherOrderGuard {
    _depth: DepthGuard,
}

/// Opens a region recorded for higher-order gradients (see [`HigherOrderGuard`]).
pub fn higher_order() -> HigherOrderGuard {
    HigherOrderGuard {
        _depth: DepthGuard::enter(&HIGHER_ORDER_DEPTH),
    }
}

/// True while a [`HigherOrderGuard`] is alive on this thread.
#[inline]
pub fn is_higher_order() -> bool {
    HIGHER_ORDER_DEPTH.with(|d| d.get() > 0)
}
