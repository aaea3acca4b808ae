//! The disjoint parallel writes: the kernels' only way to write one output
//! from several threads.
//!
//! The output is split into disjoint `&mut` pieces *before* the dispatch (with
//! safe `split_at_mut`/`chunks_mut`), each chunk takes its own piece out of a
//! slot, and the borrow checker proves no two chunks alias. Chunk boundaries
//! are the caller's, never derived from the thread count, so results stay
//! bitwise identical for any number of threads. The slices need no `unsafe`;
//! the strided matrix view ([`MatMut`], for GEMM) holds one audited pointer.
//! Here: [`TileMut`], [`MatMut`], [`ZipMut`] and the `ExecContext::par_*`
//! methods built on [`ExecContext::for_chunks`].

use crate::exec::ExecContext;
use crate::shape;

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
