//! `ExecContext`: the pool plus the worker team; where tensors are made.
//!
//! One context per thread of the user's program; cloning the handle shares it.
//! Every op acquires its output from the context's pool (kernels never
//! allocate). Kernels parallelise on the context's threads with fixed chunk
//! boundaries, so results are bitwise identical for any thread count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::pool::{BufferPool, PoolStats};
use crate::shape;
use crate::team::Team;
use crate::tensor::RawTensor;

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

    /// `Ok` when no pool buffer is outstanding, else [`Error::Leak`].
    pub fn check_leaks(&self) -> Result<()> {
        self.inner.pool.check_leaks()
    }

    // ------------------------------------------------------------ creation

    /// An uninitialised contiguous tensor (NaN-poisoned in debug builds).
    pub fn empty(&self, dtype: DType, shape: &[usize]) -> Result<RawTensor> {
        let n = shape::checked_numel(shape).ok_or_else(|| Error::InvalidArgument {
            op: "empty",
            msg: format!("shape {shape:?} has more elements than usize can count"),
        })?;
        let buf = self.inner.pool.acquire(dtype, n)?;
        RawTensor::from_buffer(buf, dtype, shape)
    }

    /// A tensor of `shape` filled with `value`.
    pub fn full<T: Element>(&self, shape: &[usize], value: T) -> Result<RawTensor> {
        let mut t = self.empty(T::DTYPE, shape)?;
        t.as_mut_slice::<T>()?.fill(value);
        Ok(t)
    }

    /// A tensor of zeros of any dtype.
    pub fn zeros(&self, dtype: DType, shape: &[usize]) -> Result<RawTensor> {
        let mut t = self.empty(dtype, shape)?;
        let n = t.numel() * dtype.size_of();
        t.as_mut_bytes()?[..n].fill(0);
        Ok(t)
    }

    /// A tensor of ones of a float dtype.
    pub fn ones(&self, dtype: DType, shape: &[usize]) -> Result<RawTensor> {
        self.full_f64(dtype, shape, 1.0)
    }

    /// A tensor of `shape` filled with `value` converted to `dtype`.
    pub fn full_f64(&self, dtype: DType, shape: &[usize], value: f64) -> Result<RawTensor> {
        crate::dispatch_any!(dtype, T => self.full::<T>(shape, T::from_f64(value)))
    }

    /// A tensor holding a copy of `data` with `shape`.
    pub fn from_slice<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<RawTensor> {
        if shape::checked_numel(shape) != Some(data.len()) {
            return Err(Error::ShapeMismatch {
                op: "from_slice",
                lhs: vec![data.len()],
                rhs: shape.to_vec(),
            });
        }
        let mut t = self.empty(T::DTYPE, shape)?;
        t.as_mut_slice::<T>()?.copy_from_slice(data);
        Ok(t)
    }

    /// A tensor from an owned vector (copied into a pool buffer, so it is pooled and aligned).
    pub fn from_vec<T: Element>(&self, data: Vec<T>, shape: &[usize]) -> Result<RawTensor> {
        self.from_slice(&data, shape)
    }

    /// A scalar (rank 0) tensor.
    pub fn scalar<T: Element>(&self, v: T) -> Result<RawTensor> {
        self.from_slice(&[v], &[])
    }

    /// `[start, start + step, ...)` below `end`, as a 1-D tensor.
    pub fn arange<T: Element>(&self, start: f64, end: f64, step: f64) -> Result<RawTensor> {
        if step == 0.0 || !((end - start) / step).is_finite() {
            return Err(Error::InvalidArgument {
                op: "arange",
                msg: format!("bad range {start}..{end} step {step}"),
            });
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        let mut t = self.empty(T::DTYPE, &[n])?;
        for (i, v) in t.as_mut_slice::<T>()?.iter_mut().enumerate() {
            *v = T::from_f64(start + i as f64 * step);
        }
        Ok(t)
    }

    /// The elements in row-major logical order.
    pub fn to_vec<T: Element>(&self, t: &RawTensor) -> Result<Vec<T>> {
        t.to_vec::<T>()
    }
}
