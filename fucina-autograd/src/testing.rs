//! The autograd test-context fixture: core's
//! [`TestCtx`](fucina_core::testing::TestCtx) (no pool buffer outstanding
//! when it drops) plus the graph check: no backward node recorded on this
//! thread since the fixture was made is still alive when it drops.
//!
//! Every test of fucina-autograd and fucina-optim builds its context through
//! this [`TestCtx`]; it derefs to [`ExecContext`]. Invariants as core's: the
//! checks run after every local declared after the fixture has dropped, never
//! while the thread is already panicking, and a test opts out explicitly
//! ([`TestCtx::allow_outstanding`], [`TestCtx::allow_live_nodes`]). Nodes are
//! counted per recording thread ([`crate::live_nodes`]), so tests running in
//! parallel do not see each other's graphs.

use std::ops::Deref;

use fucina_core::pool::BufferPool;
use fucina_core::ExecContext;

use crate::tape::graph::live_nodes;

/// An [`ExecContext`] (it derefs to one) that panics on drop if pool buffers
/// are outstanding or graph nodes recorded during the test are alive.
///
/// ```
/// use fucina_autograd::{testing::TestCtx, Tensor};
/// let ctx = TestCtx::with_threads(1)?;
/// let w = Tensor::variable(&ctx, &[1.0f64, 2.0], &[2])?;
/// w.square()?.sum_all()?.backward()?;
/// assert_eq!(w.grad().map(|g| g.to_vec::<f64>()).transpose()?, Some(vec![2.0, 4.0]));
/// // `w` (and its gradient) drop before `ctx`, which then finds nothing alive.
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
#[derive(Debug)]
pub struct TestCtx {
    core: fucina_core::testing::TestCtx,
    nodes_at_start: usize,
    allow_live_nodes: bool,
}

impl TestCtx {
    /// Wraps an existing context.
    pub fn wrap(ctx: ExecContext) -> TestCtx {
        TestCtx {
            core: fucina_core::testing::TestCtx::wrap(ctx),
            nodes_at_start: live_nodes(),
            allow_live_nodes: false,
        }
    }

    /// A fixture over [`ExecContext::with_threads`]`(n)`.
    pub fn with_threads(n: usize) -> fucina_core::Result<TestCtx> {
        ExecContext::with_threads(n).map(TestCtx::wrap)
    }

    /// A fixture over [`ExecContext::new`] (the default thread count).
    pub fn new() -> fucina_core::Result<TestCtx> {
        ExecContext::new().map(TestCtx::wrap)
    }

    /// A fixture over [`ExecContext::with_pool`]`(n, pool)`.
    pub fn with_pool(n: usize, pool: BufferPool) -> fucina_core::Result<TestCtx> {
        ExecContext::with_pool(n, pool).map(TestCtx::wrap)
    }

    /// Opts out of the buffer check (the test keeps buffers past its end on purpose).
    pub fn allow_outstanding(mut self) -> TestCtx {
        self.core.disarm();
        self
    }

    /// Opts out of the graph-node check (the test keeps a graph past its end on purpose).
    pub fn allow_live_nodes(mut self) -> TestCtx {
        self.allow_live_nodes = true;
        self
    }

    /// The wrapped context.
    pub fn ctx(&self) -> &ExecContext {
        self.core.ctx()
    }

    /// `Err` naming what is still alive (what the drop check asserts).
    pub fn check(&self) -> Result<(), String> {
        self.check_nodes()?;
        self.core.check()
    }

    fn check_nodes(&self) -> Result<(), String> {
        let nodes = live_nodes().saturating_sub(self.nodes_at_start);
        if nodes != 0 && !self.allow_live_nodes {
            return Err(format!(
                "test context dropped with {nodes} graph node(s) recorded by this test still \
                 alive (opt out with TestCtx::allow_live_nodes)"
            ));
        }
        Ok(())
    }
}

impl Deref for TestCtx {
    type Target = ExecContext;

    fn deref(&self) -> &ExecContext {
        self.core.ctx()
    }
}

impl AsRef<ExecContext> for TestCtx {
    fn as_ref(&self) -> &ExecContext {
        self.core.ctx()
    }
}

impl Drop for TestCtx {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Err(msg) = self.check_nodes() {
            // Disarm the core check so one failure reports once.
            self.core.disarm();
            panic!("{msg}");
        }
        // The core fixture (a field) checks the buffers when it drops next.
    }
}
