//! `ExecContext`: the pool plus the worker team; where tensors are made.
//!
//! One context per thread of the user's program; cloning the handle shares it.
//! Every op acquires its output from the context's pool (kernels never
//! allocate). Kernels parallelise on the context's threads with fixed chunk
//! boundaries, so results are bitwise identical for any thread count.
//!
//! This file is the context itself (threads, pool, chunk dispatch); the
//! disjoint-write primitives and the `par_*` methods are in `exec/parallel.rs`,
//! the creation and readback methods (`empty`, `zeros`, `from_slice`, ...) in
//! `exec/create.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};
use crate::pool::{BufferPool, PoolStats};
use crate::team::Team;

mod create;
mod parallel;

pub use parallel::{MatMut, TileMut, ZipMut};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

struct CtxInner {
    id: u64,
    pool: BufferPool,
    /// Runs the kernels' chunks (the calling thread plus `n_threads - 1` workers).
    team: Team,
    /// A rayon pool of `n_threads`, built on the first [`ExecContext::install`]
    /// (`None` if the system refused the threads).
    rayon: OnceLock<Option<rayon::ThreadPool>>,
    n_threads: usize,
}

impl Drop for CtxInner {
    fn drop(&mut self) {
        let n = self.pool.outstanding();
        if n != 0 && !std::thread::panicking() {
            eprintln!(
                "fucina: ExecContext dropped with {n} pool buffer(s) still outstanding (leak)"
            );
        }
    }
}

/// The execution context: owns the buffer pool and the worker threads.
///
/// ```
/// use fucina_core::ExecContext;
/// let ctx = ExecContext::with_threads(1).unwrap();
/// let t = ctx.from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
/// assert_eq!(ctx.to_vec::<f32>(&t.transpose(0, 1).unwrap()).unwrap(), vec![1.0, 3.0, 2.0, 4.0]);
/// drop(t);
/// assert_eq!(ctx.stats().outstanding, 0);
/// ```
#[derive(Clone)]
pub struct ExecContext {
    inner: Arc<CtxInner>,
}

impl std::fmt::Debug for ExecContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecContext")
            .field("id", &self.inner.id)
            .field("threads", &self.inner.n_threads)
            .finish()
    }
}

/// The most threads a context may have. Far above any CPU's core count, far
/// below what would exhaust memory for thread stacks and bookkeeping.
pub const MAX_THREADS: usize = 4096;

/// Thread count from `FUCINA_NUM_THREADS`, else the machine's available parallelism.
pub fn default_num_threads() -> usize {
    std::env::var("FUCINA_NUM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .map(|n| n.min(MAX_THREADS))
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
}

impl ExecContext {
    /// A context with [`default_num_threads`] threads and a fresh pool.
    pub fn new() -> Result<ExecContext> {
        Self::with_threads(default_num_threads())
    }

    /// A context with exactly `n` worker threads (at least 1, at most
    /// [`MAX_THREADS`]: a larger count is an [`Error::InvalidArgument`], not an
    /// attempt to start that many threads).
    pub fn with_threads(n: usize) -> Result<ExecContext> {
        Self::with_pool(n, BufferPool::new())
    }

    /// A context over an existing pool (`n` threads as in [`ExecContext::with_threads`]).
    pub fn with_pool(n: usize, pool: BufferPool) -> Result<ExecContext> {
        if n > MAX_THREADS {
            return Err(Error::InvalidArgument {
                op: "ExecContext::with_threads",
                msg: format!("{n} threads requested; at most {MAX_THREADS} are supported"),
            });
        }
        let n = n.max(1);
        let team = Team::new(n).map_err(|e| Error::InvalidArgument {
            op: "ExecContext::with_threads",
            msg: format!("cannot start {n} worker threads: {e}"),
        })?;
        Ok(ExecContext {
            inner: Arc::new(CtxInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                pool,
                team,
                rayon: OnceLock::new(),
                n_threads: n,
            }),
        })
    }

    /// A process-unique id of this context.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The buffer pool.
    #[inline]
    pub fn pool(&self) -> &BufferPool {
        &self.inner.pool
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        self.inner.pool.stats()
    }

    /// `Ok` when no pool buffer is outstanding, else [`Error::Leak`].
    pub fn check_leaks(&self) -> Result<()> {
        self.inner.pool.check_leaks()
    }

    /// Number of worker threads.
    #[inline]
    pub fn num_threads(&self) -> usize {
        self.inner.n_threads
    }

    /// Runs `f` inside a rayon pool with the context's thread count, so rayon calls
    /// in `f` (your own parallel code) use that many threads. The pool is built on
    /// first use; kernels do not use it (they run on the context's own team, see
    /// [`ExecContext::for_chunks`]). If the system refuses the threads, `f` runs on
    /// the calling thread with rayon's global pool.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        if self.inner.n_threads == 1 {
            return f();
        }
        let pool = self.inner.rayon.get_or_init(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(self.inner.n_threads)
                .thread_name(|i| format!("fucina-rayon-{i}"))
                .build()
                .ok()
        });
        match pool {
            Some(p) => p.install(f),
            None => f(),
        }
    }

    /// Runs `f(i)` for every chunk `i` in `0..n_chunks`, in parallel on the
    /// context's threads when `parallel` is true (the calling thread takes chunks
    /// too). Chunk boundaries are the caller's, never derived from the thread
    /// count. A call made from inside a chunk runs its chunks on that thread. A
    /// panic in a chunk is resumed on the caller after the other chunks finish.
    pub fn for_chunks(&self, n_chunks: usize, parallel: bool, f: impl Fn(usize) + Send + Sync) {
        if !parallel || n_chunks <= 1 || self.inner.n_threads == 1 {
            for i in 0..n_chunks {
                f(i);
            }
            return;
        }
        self.inner.team.run(n_chunks, &f);
    }
}
