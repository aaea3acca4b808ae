//! Exec scopes: RAII regions that own a training step's intermediates.
//!
//! While a scope is open, every op result (value and backward node) is
//! adopted by the innermost scope of this thread. The scope holds it weakly:
//! a result whose last handle is dropped inside the scope is freed at once,
//! as without a scope (what its backward needs, its node keeps), so a step's
//! working set is what the step still uses, not every temporary it made.
//! Closing the scope releases the results still held, newest first, straight
//! back into the pool, even if handles to them survive: using such a handle
//! afterwards is [`crate::Error::TensorReleased`], never undefined
//! behaviour. Nested scopes release only their own suffix.
//! Not adopted: explicit constructors (variables, constants), gradients.
//! Scopes are per thread (one `ExecContext` per thread of the program).
//!
//! Crossing threads: a scope is a frame of *this* thread and an
//! [`ExecScope`] is not `Send`. A tensor adopted by a scope may still be sent
//! to another thread (tensors are `Send + Sync`); the scope keeps owning it,
//! so when the scope closes on its thread, the other thread's handle reads
//! [`crate::Error::TensorReleased`] from then on (the value slot sits behind
//! a lock: a release racing a read is one or the other, never undefined
//! behaviour). A tensor that must outlive the scope is made outside it, or
//! copied out with `Tensor::from_raw(ctx, t.value()?, false)` before
//! closing. Results of ops run on the other thread are adopted by that
//! thread's own innermost scope, if any.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Weak;

use fucina_core::ExecContext;

use crate::tape::tensor::{Tensor, TensorInner};

thread_local! {
    static FRAMES: RefCell<Vec<Vec<Weak<TensorInner>>>> = const { RefCell::new(Vec::new()) };
}

/// An open exec scope; closes (releasing its results) when dropped.
///
/// ```
/// use fucina_autograd::{ScopeExt, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let w = Tensor::variable(&ctx, &[0.5f64, -1.0], &[2]).unwrap();
/// for _ in 0..3 {
///     let _scope = ctx.scope();
///     let loss = w.mul(&w).unwrap().sum_all().unwrap();
///     loss.backward().unwrap();
/// } // every intermediate is back in the pool here
/// assert_eq!(w.grad().unwrap().to_vec::<f64>().unwrap(), vec![3.0, -6.0]);
/// ```
#[must_use = "a scope releases its results when dropped"]
pub struct ExecScope {
    depth: usize,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl ExecScope {
    /// Opens a scope on this thread.
    pub fn open() -> ExecScope {
        let depth = FRAMES.with(|f| {
            let mut f = f.borrow_mut();
            f.push(Vec::new());
            f.len() - 1
        });
        ExecScope {
            depth,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Number of results this scope has adopted so far.
    pub fn len(&self) -> usize {
        FRAMES.with(|f| f.borrow().get(self.depth).map(|v| v.len()).unwrap_or(0))
    }

    /// True when nothing has been adopted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the scope now (same as dropping it).
    pub fn close(self) {}
}

impl Drop for ExecScope {
    fn drop(&mut self) {
        loop {
            // Take one frame at a time out of the stack, then release outside the borrow.
            let frame = FRAMES.try_with(|f| {
                let mut f = f.borrow_mut();
                if f.len() > self.depth {
                    f.pop()
                } else {
                    None
                }
            });
            let Ok(Some(frame)) = frame else { break };
            // A result whose every handle is gone was freed then; the
            // ones still held are released here.
            for t in frame.into_iter().rev().filter_map(|w| w.upgrade()) {
                t.release();
            }
        }
    }
}

/// Opening scopes from the context, as DESIGN.md spells it: `let scope = ctx.scope();`.
pub trait ScopeExt {
    /// Opens an exec scope on this thread.
    fn scope(&self) -> ExecScope;
}

impl ScopeExt for ExecContext {
    fn scope(&self) -> ExecScope {
        ExecScope::open()
    }
}

/// Number of scopes open on this thread.
pub fn scope_depth() -> usize {
    FRAMES.with(|f| f.borrow().len())
}

/// Lets the innermost open scope adopt an op result.
#[inline]
pub(crate) fn adopt(t: &Tensor) {
    // `try_with`: during thread teardown (no frames left) nothing is adopted.
    let _ = FRAMES.try_with(|f| {
        if let Some(top) = f.borrow_mut().last_mut() {
            t.0.scoped.store(true, Ordering::Relaxed);
            top.push(std::sync::Arc::downgrade(&t.0));
        }
    });
}
