//! Fixed row chunking shared by the row kernels (softmax, norm, loss): rows per chunk from
//! a fixed element budget, and the parallel loop that hands each chunk its own disjoint rows
//! of every output. Chunking never depends on the thread count, so results are bitwise
//! identical for any number of threads.

use crate::exec::ExecContext;

/// Elements per parallel chunk of rows (a fixed size: chunking never depends on threads).
pub(crate) const ROW_CHUNK_ELEMS: usize = 1 << 14;
/// Problems smaller than this many elements run on the calling thread.
pub(crate) const PAR_MIN_ELEMS: usize = 1 << 15;

/// Rows per chunk for rows of `len` elements (at least `min_rows`).
pub(crate) fn rows_per_chunk(len: usize, min_rows: usize) -> usize {
    (ROW_CHUNK_ELEMS / len.max(1)).max(min_rows).max(1)
}

/// Runs `f(chunk, r0, r1, outs)` over the fixed row chunks `[r0, r1)` of `n_rows` rows of
/// `len` elements, in parallel when the problem is large enough. `outs[i]` is chunk `c`'s
/// disjoint part of output `i`: elements `c·chunk_len[i] ..` of it (pass `rpc · width` for an
/// output of `width` elements per row, `width` for one row of partials per chunk, 0 for an
/// absent output). Returns the number of chunks.
pub(crate) fn par_rows_mut<T: Send, const N: usize>(
    ctx: &ExecContext,
    (n_rows, len, rpc): (usize, usize, usize),
    outs: [&mut [T]; N],
    chunk_len: [usize; N],
    f: impl Fn(usize, usize, usize, [&mut [T]; N]) + Send + Sync,
) -> usize {
    let n_chunks = n_rows.div_ceil(rpc);
    let parallel = n_rows.saturating_mul(len) >= PAR_MIN_ELEMS;
    ctx.par_chunks_mut_n(outs, chunk_len, n_chunks, parallel, |c, o| {
        let r0 = c * rpc;
        let r1 = (r0 + rpc).min(n_rows);
        f(c, r0, r1, o);
    });
    n_chunks
}
