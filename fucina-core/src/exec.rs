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
}

// ------------------------------------------------------------ disjoint parallel writes
//
// The kernels' only way to write one output from several threads: the output is split into
// disjoint `&mut` pieces *before* the dispatch (with safe `split_at_mut`/`chunks_mut`), each
// chunk takes its own piece out of a slot, and the borrow checker proves no two chunks alias.
// Chunk boundaries are the caller's, never derived from the thread count, so results stay
// bitwise identical for any number of threads. The slices need no `unsafe`; the strided
// matrix view (`MatMut`, for GEMM) holds one audited pointer.

/// A row-group × column-window tile of a row-major buffer, as handed out by
/// [`ExecContext::par_tiles_mut`]: `row(i)` is row `i` of the group restricted to the window.
pub struct TileMut<'a, T> {
    rows: Vec<&'a mut [T]>,
}

impl<T> TileMut<'_, T> {
    /// Row `i` of the tile (relative to its first row), restricted to the tile's columns.
    #[inline]
    pub fn row(&mut self, i: usize) -> &mut [T] {
        self.rows[i]
    }

    /// Rows in the tile.
    #[inline]
    pub fn n_rows(&self) -> usize {
        self.rows.len()
    }
}

/// An exclusively borrowed strided matrix: `rows × cols` elements at `origin + i·rs + j·cs`
/// of one buffer, disjoint from every other `MatMut` made from the same borrow. The strided
/// variant of the disjoint writes, for GEMM: C may have any non-overlapping strides, and its
/// parallel jobs are 2-D tiles, which no `&mut [T]` can describe. Made only by
/// [`MatMut::batch`] (which checks the whole view is in bounds and does not overlap itself)
/// and split only by [`MatMut::split_grid`] (monotone cuts), so disjointness is by
/// construction; its raw pointer is for the SIMD and `matrixmultiply` kernels that take one.
pub struct MatMut<'a, T> {
    /// Element (0, 0), derived from the whole buffer's pointer.
    ptr: *mut T,
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
    _borrow: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: a `MatMut` is an exclusive borrow of exactly the elements it addresses (in bounds
// of a `&'a mut [T]`, disjoint from every other `MatMut` of that borrow), so sending one to
// another thread is sending a `&mut` to those elements, which `T: Send` allows.
unsafe impl<T: Send> Send for MatMut<'_, T> {}

impl<'a, T> MatMut<'a, T> {
    /// The matrices `[m, n]` with strides `(rs, cs)` at `offset + offset_of(batch, bs, i)` for
    /// each batch index `i` in row-major order; none when the matrices are empty (there is
    /// nothing to write, however many there are). An error saying why when the whole view is
    /// not inside `data`, two of its positions coincide ([`shape::non_overlapping`]) or the
    /// list of matrices cannot be allocated.
    pub fn batch(
        data: &'a mut [T],
        offset: usize,
        (batch, bs): (&[usize], &[usize]),
        (m, n): (usize, usize),
        (rs, cs): (usize, usize),
    ) -> std::result::Result<Vec<MatMut<'a, T>>, &'static str> {
        let mut dims: Vec<usize> = batch.to_vec();
        let mut strides: Vec<usize> = bs.to_vec();
        dims.extend([m, n]);
        strides.extend([rs, cs]);
        if batch.len() != bs.len() || !shape::non_overlapping(&dims, &strides) {
            return Err("overlaps itself");
        }
        let items = shape::checked_numel(batch).ok_or("has more items than usize holds")?;
        if items == 0 || m == 0 || n == 0 {
            return Ok(Vec::new());
        }
        let last = dims
            .iter()
            .zip(&strides)
            .try_fold(offset, |acc, (&d, &s)| {
                acc.checked_add((d - 1).checked_mul(s)?)
            })
            .ok_or("leaves its buffer")?;
        if last >= data.len() {
            return Err("leaves its buffer");
        }
        let mut out = Vec::new();
        out.try_reserve_exact(items)
            .map_err(|_| "has too many items to list")?;
        let base = data.as_mut_ptr();
        out.extend((0..items).map(|i| MatMut {
            // In bounds: the matrices are non-empty and the whole view is inside `data`
            // (checked above).
            ptr: base.wrapping_add(offset + shape::offset_of(batch, bs, i)),
            rows: m,
            cols: n,
            rs,
            cs,
            _borrow: std::marker::PhantomData,
        }));
        Ok(out)
    }

    /// The disjoint tiles `row_cuts[g]..row_cuts[g+1]` × `col_cuts[w]..col_cuts[w+1]`, row-group
    /// major.
    ///
    /// # Panics
    /// If the cuts decrease or leave the matrix (a kernel bug, not a user error).
    pub fn split_grid(self, row_cuts: &[usize], col_cuts: &[usize]) -> Vec<MatMut<'a, T>> {
        let monotone = |c: &[usize], end: usize| {
            c.windows(2).all(|w| w[0] <= w[1]) && c.last().is_none_or(|&l| l <= end)
        };
        assert!(
            monotone(row_cuts, self.rows) && monotone(col_cuts, self.cols),
            "MatMut::split_grid: cuts must be non-decreasing and inside the matrix"
        );
        let mut out = Vec::new();
        for r in row_cuts.windows(2) {
            for c in col_cuts.windows(2) {
                out.push(MatMut {
                    ptr: self.ptr.wrapping_add(r[0] * self.rs + c[0] * self.cs),
                    rows: r[1] - r[0],
                    cols: c[1] - c[0],
                    rs: self.rs,
                    cs: self.cs,
                    _borrow: std::marker::PhantomData,
                });
            }
        }
        out
    }

    /// Rows.
    #[inline]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    #[inline]
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row stride (elements).
    #[inline]
    pub fn rs(&self) -> usize {
        self.rs
    }

    /// Column stride (elements).
    #[inline]
    pub fn cs(&self) -> usize {
        self.cs
    }

    /// Element `(i, j)`.
    ///
    /// # Panics
    /// If `(i, j)` is outside the matrix.
    #[inline]
    pub fn at(&mut self, i: usize, j: usize) -> &mut T {
        assert!(i < self.rows && j < self.cols, "MatMut::at out of bounds");
        // SAFETY: (i, j) is inside this matrix, which is in bounds of its buffer and borrowed
        // exclusively by `self` (see the type's docs).
        unsafe { &mut *self.ptr.add(i * self.rs + j * self.cs) }
    }

    /// Element (0, 0) as a raw pointer, for kernels that take a pointer and strides (the
    /// GEMM micro-kernels, `matrixmultiply`). Writing through it is the caller's `unsafe`,
    /// inside `rows × cols` with this matrix's strides.
    #[inline]
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }
}

/// Mutable slices cut together at the same element index, for
/// [`ExecContext::par_zip_chunks_mut`]: a `&mut [T]`, an `Option` of a `ZipMut` (absent
/// stays absent) or a tuple of two to four, of any element types. The split is safe
/// (`split_at_mut`), so the pieces are disjoint by construction.
pub trait ZipMut: Sized + Send {
    /// Splits every slice at `at` (clipped to its length) into (head, tail).
    fn zip_split_at(self, at: usize) -> (Self, Self);
}

impl<T: Send> ZipMut for &mut [T] {
    #[inline]
    fn zip_split_at(self, at: usize) -> (Self, Self) {
        let at = at.min(self.len());
        self.split_at_mut(at)
    }
}

impl<Z: ZipMut> ZipMut for Option<Z> {
    #[inline]
    fn zip_split_at(self, at: usize) -> (Self, Self) {
        match self {
            Some(z) => {
                let (h, t) = z.zip_split_at(at);
                (Some(h), Some(t))
            }
            None => (None, None),
        }
    }
}

macro_rules! zip_mut_tuple {
    ($($Z:ident $z:ident $h:ident $t:ident),+) => {
        impl<$($Z: ZipMut),+> ZipMut for ($($Z,)+) {
            #[inline]
            fn zip_split_at(self, at: usize) -> (Self, Self) {
                let ($($z,)+) = self;
                $( let ($h, $t) = $z.zip_split_at(at); )+
                (($($h,)+), ($($t,)+))
            }
        }
    };
}
zip_mut_tuple!(A a ha ta, B b hb tb);
zip_mut_tuple!(A a ha ta, B b hb tb, C c hc tc);
zip_mut_tuple!(A a ha ta, B b hb tb, C c hc tc, D d hd td);

impl ExecContext {
    /// Runs `f(i, piece_i)` for each of `n` pieces (each an owned disjoint part of an output,
    /// such as a [`MatMut`] tile), in parallel when `parallel` (as [`Self::for_chunks`]). Each
    /// piece is moved to exactly one chunk through its own slot.
    pub fn par_pieces<P: Send>(
        &self,
        n: usize,
        pieces: impl Iterator<Item = P>,
        parallel: bool,
        f: impl Fn(usize, P) + Send + Sync,
    ) {
        if !parallel || n <= 1 || self.inner.n_threads == 1 {
            pieces.enumerate().for_each(|(i, p)| f(i, p));
            return;
        }
        let slots: Vec<std::sync::Mutex<Option<P>>> =
            pieces.map(|p| std::sync::Mutex::new(Some(p))).collect();
        self.for_chunks(slots.len(), true, |i| {
            let piece = slots[i]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(p) = piece {
                f(i, p);
            }
        });
    }

    /// Splits `data` into consecutive chunks of `chunk_len` elements (the last may be shorter)
    /// and runs `f(chunk_index, chunk)` for each, in parallel on the context's threads when
    /// `parallel`. Each chunk is a disjoint `&mut` slice, so kernels write their part of an
    /// output without raw pointers. A `chunk_len` of 0 is treated as 1.
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(2)?;
    /// let mut v = vec![0usize; 10];
    /// ctx.par_chunks_mut(&mut v, 4, true, |c, d| d.iter_mut().for_each(|x| *x = c));
    /// assert_eq!(v, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn par_chunks_mut<T: Send>(
        &self,
        data: &mut [T],
        chunk_len: usize,
        parallel: bool,
        f: impl Fn(usize, &mut [T]) + Send + Sync,
    ) {
        let len = chunk_len.max(1);
        let n = data.len().div_ceil(len);
        self.par_pieces(n, data.chunks_mut(len), parallel, f);
    }

    /// [`Self::par_chunks_mut`] over `N` outputs at once: chunk `c` gets elements
    /// `c·chunk_len[i] .. (c+1)·chunk_len[i]` of output `i` (clipped to its length, empty past
    /// its end), for `c` in `0..n_chunks`. For kernels that write several outputs per row
    /// (a norm's `y`, `mean` and `rstd`; attention's output and probabilities).
    pub fn par_chunks_mut_n<T: Send, const N: usize>(
        &self,
        data: [&mut [T]; N],
        chunk_len: [usize; N],
        n_chunks: usize,
        parallel: bool,
        f: impl Fn(usize, [&mut [T]; N]) + Send + Sync,
    ) {
        let mut rest = data;
        let pieces = (0..n_chunks).map(move |_| {
            std::array::from_fn(|i| {
                let r = std::mem::take(&mut rest[i]);
                let (head, tail) = r.split_at_mut(chunk_len[i].min(r.len()));
                rest[i] = tail;
                head
            })
        });
        self.par_pieces(n_chunks, pieces, parallel, f);
    }

    /// [`Self::par_chunks_mut_n`] over buffers of different element types: `data` is a
    /// [`ZipMut`] (a `&mut [T]`, an `Option` of one, or a tuple of up to four), and chunk `c`
    /// gets elements `c·chunk_len .. (c+1)·chunk_len` of every buffer (clipped to its length,
    /// empty past its end; an absent buffer stays `None`), for `c` in `0..n_chunks`. For
    /// updates that read and write several aligned buffers per element (an optimizer's
    /// parameter and its moments).
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(2)?;
    /// let (mut p, mut m) = (vec![1.0f32; 5], vec![0.0f64; 5]);
    /// ctx.par_zip_chunks_mut((&mut p[..], Some(&mut m[..])), 2, 3, true, |c, (p, m)| {
    ///     for (pi, mi) in p.iter_mut().zip(m.into_iter().flatten()) {
    ///         *mi = c as f64;
    ///         *pi += 1.0;
    ///     }
    /// });
    /// assert_eq!((p, m), (vec![2.0; 5], vec![0.0, 0.0, 1.0, 1.0, 2.0]));
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn par_zip_chunks_mut<Z: ZipMut>(
        &self,
        data: Z,
        chunk_len: usize,
        n_chunks: usize,
        parallel: bool,
        f: impl Fn(usize, Z) + Send + Sync,
    ) {
        let pieces = (0..n_chunks).scan(Some(data), move |rest, _| {
            let (head, tail) = rest.take()?.zip_split_at(chunk_len);
            *rest = Some(tail);
            Some(head)
        });
        self.par_pieces(n_chunks, pieces, parallel, f);
    }

    /// Splits `data` at the cut points `start(1) .. start(n_chunks - 1)` (non-decreasing, at
    /// most `data.len()`; chunk `c` is `start(c) .. start(c + 1)`, the first starts at 0 and the
    /// last ends at `data.len()`) and runs `f(c, chunk)` as [`Self::par_chunks_mut`] does. For
    /// kernels whose chunks are runs of unequal length.
    ///
    /// # Panics
    /// If the cuts decrease or pass the end (a kernel bug, not a user error).
    pub fn par_split_mut<T: Send>(
        &self,
        data: &mut [T],
        n_chunks: usize,
        parallel: bool,
        start: impl Fn(usize) -> usize,
        f: impl Fn(usize, &mut [T]) + Send + Sync,
    ) {
        self.par_split_mut_n([data], [1], n_chunks, parallel, start, |c, [d]| f(c, d));
    }

    /// [`Self::par_split_mut`] over `N` outputs whose chunks are the same runs of units (rows):
    /// chunk `c` of output `i` is elements `start(c)·unit[i] .. start(c + 1)·unit[i]`, the last
    /// running to the output's end.
    ///
    /// # Panics
    /// If the cuts decrease or pass an output's end (a kernel bug, not a user error).
    pub fn par_split_mut_n<T: Send, const N: usize>(
        &self,
        data: [&mut [T]; N],
        unit: [usize; N],
        n_chunks: usize,
        parallel: bool,
        start: impl Fn(usize) -> usize,
        f: impl Fn(usize, [&mut [T]; N]) + Send + Sync,
    ) {
        let mut rest = data;
        let mut at = 0usize;
        let pieces = (0..n_chunks).map(move |c| {
            let end = if c + 1 == n_chunks {
                usize::MAX
            } else {
                start(c + 1)
            };
            let piece = std::array::from_fn(|i| {
                let r = std::mem::take(&mut rest[i]);
                let take = if end == usize::MAX {
                    r.len()
                } else {
                    (end - at) * unit[i]
                };
                let (head, tail) = r.split_at_mut(take);
                rest[i] = tail;
                head
            });
            at = end;
            piece
        });
        self.par_pieces(n_chunks, pieces, parallel, f);
    }

    /// The strided variant: views `data` as rows of `row_len` and cuts it into tiles of
    /// row groups `row_cuts[g] .. row_cuts[g+1]` × column windows `col_cuts[w] .. col_cuts[w+1]`
    /// (both non-decreasing; `col_cuts` within `0..=row_len`). Tile `g·n_windows + w` goes to
    /// chunk `(g·n_windows + w) / tiles_per_chunk`, which runs `f(tile_index, tile)` for its
    /// tiles in order. For kernels whose parallel tasks own columns of a block of rows (a scan
    /// along a non-contiguous axis, a scatter along one).
    ///
    /// # Panics
    /// If the cuts decrease or pass the data (a kernel bug, not a user error).
    #[allow(clippy::too_many_arguments)]
    pub fn par_tiles_mut<T: Send>(
        &self,
        data: &mut [T],
        row_len: usize,
        row_cuts: &[usize],
        col_cuts: &[usize],
        tiles_per_chunk: usize,
        parallel: bool,
        f: impl Fn(usize, &mut TileMut<'_, T>) + Send + Sync,
    ) {
        let n_groups = row_cuts.len().saturating_sub(1);
        let n_windows = col_cuts.len().saturating_sub(1);
        let n_tiles = n_groups * n_windows;
        let per = tiles_per_chunk.max(1);
        let mut tiles: Vec<TileMut<'_, T>> = Vec::with_capacity(n_tiles);
        let first_row = row_cuts.first().copied().unwrap_or(0);
        let mut rest = &mut data[first_row * row_len..];
        for g in 0..n_groups {
            let base = tiles.len();
            tiles.extend((0..n_windows).map(|_| TileMut { rows: Vec::new() }));
            for _ in row_cuts[g]..row_cuts[g + 1] {
                let r = std::mem::take(&mut rest);
                let (mut row, tail) = r.split_at_mut(row_len);
                rest = tail;
                let mut done = 0usize;
                for w in 0..n_windows {
                    let (lo, hi) = (col_cuts[w], col_cuts[w + 1]);
                    let (_, after) = std::mem::take(&mut row).split_at_mut(lo - done);
                    let (win, after) = after.split_at_mut(hi - lo);
                    row = after;
                    done = hi;
                    tiles[base + w].rows.push(win);
                }
            }
        }
        let n_chunks = n_tiles.div_ceil(per);
        let mut it = tiles.into_iter();
        let pieces = (0..n_chunks).map(move |_| it.by_ref().take(per).collect::<Vec<_>>());
        self.par_pieces(
            n_chunks,
            pieces,
            parallel,
            |c, mut group: Vec<TileMut<'_, T>>| {
                for (i, t) in group.iter_mut().enumerate() {
                    f(c * per + i, t);
                }
            },
        );
    }
}

impl ExecContext {
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
