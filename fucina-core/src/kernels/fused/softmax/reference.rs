//! Plain scalar implementations: the spec of the softmax kernels. Inputs are contiguous
//! row-major element vectors with their shape.

use crate::dtype::Float;

/// (outer, len, inner) of `shape` split at `axis`.
fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// Calls `f(indices of one row along axis)` for every row.
/// An empty shape has no rows (and its other extents may be huge: the
/// fuzzer found `[0, 1 << 62]` overflowing the row buffer here).
fn for_each_row(shape: &[usize], axis: usize, mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let (outer, len, inner) = split(shape, axis);
    let mut idx = vec![0; len];
    for o in 0..outer {
        for i in 0..inner {
            for (k, v) in idx.iter_mut().enumerate() {
                *v = (o * len + k) * inner + i;
            }
            f(&idx);
        }
    }
}

/// The row max and Σ exp(x − max) over the entries `idx`, serially.
fn max_sumexp<T: Float>(x: &[T], idx: &[usize]) -> (T, T) {
    let mut m = T::NEG_INFINITY;
    for &i in idx {
        m = m.max(x[i]);
    }
    let mut s = T::ZERO;
    for &i in idx {
        s += (x[i] - m).exp();
    }
    (m, s)
}

/// Softmax along `axis`.
pub fn softmax<T: Float>(x: &[T], shape: &[usize], axis: usize) -> Vec<T> {
    let mut y = vec![T::ZERO; x.len()];
    for_each_row(shape, axis, |idx| {
        let (m, s) = max_sumexp(x, idx);
        for &i in idx {
            y[i] = (x[i] - m).exp() / s;
        }
    });
    y
}

/// Log-softmax along `axis`.
pub fn log_softmax<T: Float>(x: &[T], shape: &[usize], axis: usize) -> Vec<T> {
    let mut y = vec![T::ZERO; x.len()];
    for_each_row(shape, axis, |idx| {
        let (m, s) = max_sumexp(x, idx);
        for &i in idx {
            y[i] = x[i] - m - s.ln();
        }
    });
    y
}

/// `y * (gy − Σ gy·y)` along `axis`.
pub fn softmax_backward<T: Float>(y: &[T], gy: &[T], shape: &[usize], axis: usize) -> Vec<T> {
    let mut gx = vec![T::ZERO; y.len()];
    for_each_row(shape, axis, |idx| {
        let mut d = T::ZERO;
        for &i in idx {
            d += gy[i] * y[i];
        }
        for &i in idx {
            gx[i] = y[i] * (gy[i] - d);
        }
    });
    gx
}

/// `gy − exp(y) Σ gy` along `axis`.
pub fn log_softmax_backward<T: Float>(y: &[T], gy: &[T], shape: &[usize], axis: usize) -> Vec<T> {
    let mut gx = vec![T::ZERO; y.len()];
    for_each_row(shape, axis, |idx| {
        let mut s = T::ZERO;
        for &i in idx {
            s += gy[i];
        }
        for &i in idx {
            gx[i] = gy[i] - y[i].exp() * s;
        }
    });
    gx
}

/// `ln Σ exp(x)` along `axis` (the axis removed; row-major over the rest).
pub fn logsumexp<T: Float>(x: &[T], shape: &[usize], axis: usize) -> Vec<T> {
    let mut out = Vec::new();
    for_each_row(shape, axis, |idx| {
        let mut m = T::NEG_INFINITY;
        for &i in idx {
            m = m.max(x[i]);
        }
        if m == T::NEG_INFINITY || m == T::INFINITY {
            out.push(m);
            return;
        }
        let mut s = T::ZERO;
        for &i in idx {
            s += (x[i] - m).exp();
        }
        out.push(m + s.ln());
    });
    out
}

/// One causal row pass over the last axis: entry (i, j) is kept iff
/// `j ≤ i + cols − rows`; kept entries get `f(x, row max, Σ exp(x − max))`
/// over the kept entries, masked ones get `masked`.
fn causal_map<T: Float>(x: &[T], shape: &[usize], masked: T, f: impl Fn(T, T, T) -> T) -> Vec<T> {
    let r = shape.len();
    let (rows, cols) = (shape[r - 2], shape[r - 1]);
    let mut y = vec![T::ZERO; x.len()];
    for (row, (xr, yr)) in x.chunks(cols).zip(y.chunks_mut(cols)).enumerate() {
        let i = (row % rows) as i64;
        let keep = |j: usize| j as i64 <= i + cols as i64 - rows as i64;
        let mut m = T::NEG_INFINITY;
        for j in (0..cols).filter(|&j| keep(j)) {
            m = m.max(xr[j]);
        }
        let mut s = T::ZERO;
        for j in (0..cols).filter(|&j| keep(j)) {
            s += (xr[j] - m).exp();
        }
        for j in 0..cols {
            yr[j] = if keep(j) { f(xr[j], m, s) } else { masked };
        }
    }
    y
}

/// Causal softmax over the last axis (`j > i + cols − rows` masked; fully masked rows are 0).
pub fn softmax_causal<T: Float>(x: &[T], shape: &[usize]) -> Vec<T> {
    causal_map(x, shape, T::ZERO, |v, m, s| (v - m).exp() / s)
}

/// Causal log-softmax over the last axis (masked entries −∞).
pub fn log_softmax_causal<T: Float>(x: &[T], shape: &[usize]) -> Vec<T> {
    causal_map(x, shape, T::NEG_INFINITY, |v, m, s| v - m - s.ln())
}

/// Backward of the causal log-softmax (0 on masked entries).
pub fn log_softmax_causal_backward<T: Float>(y: &[T], gy: &[T], shape: &[usize]) -> Vec<T> {
    let r = shape.len();
    let (rows, cols) = (shape[r - 2], shape[r - 1]);
    let mut gx = vec![T::ZERO; y.len()];
    for (row, ((yr, gr), xr)) in y
        .chunks(cols)
        .zip(gy.chunks(cols))
        .zip(gx.chunks_mut(cols))
        .enumerate()
    {
        let i = (row % rows) as i64;
        let keep = |j: usize| j as i64 <= i + cols as i64 - rows as i64;
        let mut s = T::ZERO;
        for j in (0..cols).filter(|&j| keep(j)) {
            s += gr[j];
        }
        for j in (0..cols).filter(|&j| keep(j)) {
            xr[j] = gr[j] - yr[j].exp() * s;
        }
    }
    gx
}
