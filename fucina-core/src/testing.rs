//! The test-context fixture: an [`ExecContext`] that fails the test if pool
//! buffers are still outstanding when it drops.
//!
//! Every test of fucina-core, fucina-autograd and fucina-optim builds its
//! context through [`TestCtx`] (or autograd's `testing::TestCtx`, which adds
//! the graph-node check), so the leak contract "a test ends with no buffer
//! outstanding" is enforced by the fixture instead of a hand-written assert
//! at the end of each test. `checks/tests/architecture.rs` fails on a
//! test file that builds an `ExecContext` without it.
//!
//! Invariants: the check runs when the fixture drops, which is after every
//! local declared after it (Rust drops locals in reverse order; but a
//! temporary in a function's tail expression outlives its locals, so bind
//! such a value with `let` first); it never
//! panics while the thread is already panicking (a failing test reports its
//! own failure, not a second panic that would abort); a test that
//! deliberately keeps buffers past its end says so with
//! [`TestCtx::allow_outstanding`].

use std::ops::Deref;

use crate::error::Result;
use crate::exec::ExecContext;
use crate::pool::BufferPool;

/// An [`ExecContext`] (it derefs to one) that panics on drop if pool buffers
/// are outstanding, unless [`TestCtx::allow_outstanding`] was called.
///
/// ```
/// use fucina_core::testing::TestCtx;
/// let ctx = TestCtx::with_threads(1)?;
/// let t = ctx.zeros(fucina_core::DType::F32, &[4])?;
/// assert_eq!(t.numel(), 4);
/// // `t` drops before `ctx`: nothing is outstanding when the fixture checks.
/// # Ok::<(), fucina_core::Error>(())
/// ```
#[derive(Debug)]
pub struct TestCtx {
    ctx: ExecContext,
    allow_outstanding: bool,
}

impl TestCtx {
    /// Wraps an existing context (the check covers its pool).
    pub fn wrap(ctx: ExecContext) -> TestCtx {
        TestCtx {
            ctx,
            allow_outstanding: false,
        }
    }

    /// A fixture over [`ExecContext::with_threads`]`(n)`.
    pub fn with_threads(n: usize) -> Result<TestCtx> {
        ExecContext::with_threads(n).map(TestCtx::wrap)
    }

    /// A fixture over [`ExecContext::new`] (the default thread count).
    pub fn new() -> Result<TestCtx> {
        ExecContext::new().map(TestCtx::wrap)
    }

    /// A fixture over [`ExecContext::with_pool`]`(n, pool)`.
    pub fn with_pool(n: usize, pool: BufferPool) -> Result<TestCtx> {
        ExecContext::with_pool(n, pool).map(TestCtx::wrap)
    }

    /// Opts this test out of the check: it keeps buffers past its end on
    /// purpose (say why at the call).
    pub fn allow_outstanding(mut self) -> TestCtx {
        self.disarm();
        self
    }

    /// Turns the check off in place (for a fixture that wraps this one and
    /// has already reported, or opts out itself).
    pub fn disarm(&mut self) {
        self.allow_outstanding = true;
    }

    /// The wrapped context.
    pub fn ctx(&self) -> &ExecContext {
        &self.ctx
    }

    /// `Err` naming the count when buffers are outstanding (what the drop
    /// check asserts), for fixtures that wrap this one.
    pub fn check(&self) -> std::result::Result<(), String> {
        let n = self.ctx.stats().outstanding;
        if n == 0 || self.allow_outstanding {
            Ok(())
        } else {
            Err(format!(
                "test context dropped with {n} pool buffer(s) outstanding: a leak, or a \
                 tensor that outlives the test (opt out with TestCtx::allow_outstanding)"
            ))
        }
    }
}

impl Deref for TestCtx {
    type Target = ExecContext;

    fn deref(&self) -> &ExecContext {
        &self.ctx
    }
}

impl AsRef<ExecContext> for TestCtx {
    fn as_ref(&self) -> &ExecContext {
        &self.ctx
    }
}

impl Drop for TestCtx {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Err(msg) = self.check() {
            panic!("{msg}");
        }
    }
}
