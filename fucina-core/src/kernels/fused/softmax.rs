//! Softmax, log-softmax and logsumexp along an axis, with their backward kernels,
//! and the causal (attention) variants over the last axis.
//!
//! Invariants: inputs may have any strides (a strided view, or a reduced axis
//! that is not the last, is first copied so every row is contiguous); rows run
//! in fixed chunks of rows and each row's reduction order is fixed, so results
//! are bitwise identical for any thread count. The row max is subtracted before
//! `exp`, so no finite input overflows. The row chunking lives in `rows`, the exp,
//! lane sums and SIMD dispatch in `simd`; the scalar spec is `reference` below.

use crate::dtype::Float;
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::kernels::elementwise::{same_dtype, same_shape};
use crate::kernels::rows::{par_rows_mut, rows_per_chunk};
use crate::kernels::simd::{dot, max, simd_dispatch, sum, sum_exp_impl};
use crate::shape;
use crate::tensor::RawTensor;

pub use crate::kernels::simd::{exp_f32, exp_f64, RowFloat};

// ------------------------------------------------------------ row kernels

/// y = exp(x − max) / Σ exp(x − max) over one contiguous row.
#[inline(always)]
fn softmax_row_impl<T: RowFloat>(x: &[T], y: &mut [T]) {
    let m = max(x);
    for (o, &v) in y.iter_mut().zip(x) {
        *o = (v - m).vexp();
    }
    let inv = T::ONE / sum(y);
    for o in y.iter_mut() {
        *o *= inv;
    }
}

/// y = x − max − ln Σ exp(x − max) over one contiguous row.
#[inline(always)]
fn log_softmax_row_impl<T: RowFloat>(x: &[T], y: &mut [T]) {
    let m = max(x);
    let shift = m + sum_exp_impl(x, m).ln();
    for (o, &v) in y.iter_mut().zip(x) {
        *o = v - shift;
    }
}

/// ln Σ exp(x): m + ln Σ exp(x − m); −∞ for an empty or all −∞ row, +∞ if any +∞.
#[inline(always)]
fn logsumexp_row_impl<T: RowFloat>(x: &[T]) -> T {
    let m = max(x);
    if m == T::NEG_INFINITY || m == T::INFINITY {
        return m;
    }
    m + sum_exp_impl(x, m).ln()
}

/// Softmax backward: y = softmax(x), so ∂y_j/∂x_i = y_j(δ_ij − y_i) and
/// gx_i = Σ_j gy_j y_j (δ_ij − y_i) = y_i (gy_i − Σ_j gy_j y_j).
#[inline(always)]
fn softmax_backward_row_impl<T: RowFloat>(y: &[T], gy: &[T], gx: &mut [T]) {
    let d = dot(gy, y);
    for ((o, &yv), &g) in gx.iter_mut().zip(y).zip(gy) {
        *o = yv * (g - d);
    }
}

/// Log-softmax backward: y = x − lse(x), ∂y_j/∂x_i = δ_ij − softmax_i = δ_ij − exp(y_i),
/// so gx_i = gy_i − exp(y_i) Σ_j gy_j.
#[inline(always)]
fn log_softmax_backward_row_impl<T: RowFloat>(y: &[T], gy: &[T], gx: &mut [T]) {
    let s = sum(gy);
    for ((o, &yv), &g) in gx.iter_mut().zip(y).zip(gy) {
        *o = g - yv.vexp() * s;
    }
}

simd_dispatch! { fn softmax_row => softmax_row_impl(x: &[T], y: &mut [T]) }
simd_dispatch! { fn log_softmax_row => log_softmax_row_impl(x: &[T], y: &mut [T]) }
simd_dispatch! { fn logsumexp_row => logsumexp_row_impl(x: &[T]) -> T }
simd_dispatch! { fn softmax_backward_row => softmax_backward_row_impl(y: &[T], gy: &[T], gx: &mut [T]) }
simd_dispatch! { fn log_softmax_backward_row => log_softmax_backward_row_impl(y: &[T], gy: &[T], gx: &mut [T]) }

/// Number of unmasked leading columns of row `i` of a causal `[rows, cols]`
/// block: column j is kept when j ≤ i + (cols − rows).
#[inline]
pub fn causal_allowed(i: usize, rows: usize, cols: usize) -> usize {
    let limit = i as i64 + cols as i64 - rows as i64 + 1;
    limit.clamp(0, cols as i64) as usize
}

// ------------------------------------------------------------ drivers

fn check_pair(op: &'static str, a: &RawTensor, b: &RawTensor) -> Result<()> {
    same_dtype(op, a, b)?;
    same_shape(op, a, b)
}

/// The permutation moving `axis` to the last place, the others keeping their order.
fn axis_to_last(rank: usize, axis: usize) -> Vec<usize> {
    (0..rank).filter(|&a| a != axis).chain([axis]).collect()
}

/// The inverse of [`axis_to_last`]: moves the last axis back to `axis`.
fn last_to_axis(rank: usize, axis: usize) -> Vec<usize> {
    (0..rank - 1)
        .take(axis)
        .chain([rank - 1])
        .chain(axis..rank - 1)
        .collect()
}

/// `t` with `axis` moved to the last place (the others in order), made contiguous.
fn axis_last_contiguous(ctx: &ExecContext, t: &RawTensor, axis: usize) -> Result<RawTensor> {
    if axis == t.rank() - 1 {
        ctx.contiguous(t)
    } else {
        ctx.copy(&t.permute(&axis_to_last(t.rank(), axis))?)
    }
}

/// [`map_rows`] along the last axis of `a` `[.., rows, cols]` under the causal mask: `f(a_row,
/// b_row, out_row)` on each row's unmasked prefix (`b_row` empty without `b`), `fill` on the
/// masked rest of the output row.
fn map_causal_rows<T: RowFloat>(
    ctx: &ExecContext,
    a: &RawTensor,
    b: Option<&RawTensor>,
    (rows, cols): (usize, usize),
    fill: T,
    f: impl Fn(&[T], &[T], &mut [T]) + Send + Sync,
) -> Result<RawTensor> {
    map_rows::<T>(ctx, a, b, a.rank() - 1, |r, x, g, y| {
        let n = causal_allowed(r % rows, rows, cols);
        f(&x[..n], &g[..n.min(g.len())], &mut y[..n]);
        y[n..].fill(fill);
    })
}

/// Maps every row along `axis` of `a` (and the matching row of `b`, if any)
/// through `f(row_index, a_row, b_row, out_row)`; the output has `a`'s shape.
fn map_rows<T: RowFloat>(
    ctx: &ExecContext,
    a: &RawTensor,
    b: Option<&RawTensor>,
    axis: usize,
    f: impl Fn(usize, &[T], &[T], &mut [T]) + Send + Sync,
) -> Result<RawTensor> {
    let last = a.rank() - 1;
    let ac = axis_last_contiguous(ctx, a, axis)?;
    let bc = match b {
        Some(b) => Some(axis_last_contiguous(ctx, b, axis)?),
        None => None,
    };
    let mut out = ctx.empty(a.dtype(), ac.shape())?;
    let len = ac.shape()[last];
    let n = ac.numel();
    if n > 0 {
        let n_rows = n / len;
        let xs = ac.as_slice::<T>()?;
        let bs: &[T] = match &bc {
            Some(t) => t.as_slice::<T>()?,
            None => &[],
        };
        let o = out.as_mut_slice::<T>()?;
        let rpc = rows_per_chunk(len, 1);
        par_rows_mut(
            ctx,
            (n_rows, len, rpc),
            [o],
            [rpc * len],
            |_, r0, _, [o]| {
                for (k, orow) in o.chunks_exact_mut(len).enumerate() {
                    let r = r0 + k;
                    let arow = &xs[r * len..(r + 1) * len];
                    let brow = if bs.is_empty() {
                        &[][..]
                    } else {
                        &bs[r * len..(r + 1) * len]
                    };
                    f(r, arow, brow, orow);
                }
            },
        );
    }
    drop(ac);
    drop(bc);
    if axis == last {
        Ok(out)
    } else {
        ctx.copy(&out.permute(&last_to_axis(a.rank(), axis))?)
    }
}

fn causal_rows(op: &'static str, x: &RawTensor) -> Result<(usize, usize)> {
    if x.rank() < 2 {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "needs rank >= 2 ([.., rows, cols]), got shape {:?}",
                x.shape()
            ),
        });
    }
    let r = x.rank();
    Ok((x.shape()[r - 2], x.shape()[r - 1]))
}

/// Declares a public backward `$name(y, gy, axis)` from the forward output `y`: the shared
/// `softmax_rows` as `$name`, `log` picking the log-softmax form. The two backwards are one
/// function but for that flag and their names.
macro_rules! softmax_backward {
    ($(#[$doc:meta])* $name:ident, log: $log:literal) => {
        $(#[$doc])*
        pub fn $name(&self, y: &RawTensor, gy: &RawTensor, axis: usize) -> Result<RawTensor> {
            self.softmax_rows(stringify!($name), $log, y, Some(gy), axis)
        }
    };
}

impl ExecContext {
    /// Softmax along `axis`: `exp(x − max) / Σ exp(x − max)`. A row that is all
    /// −∞ gives NaN (as PyTorch). The output is contiguous, of `x`'s shape.
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(1)?;
    /// let x = ctx.from_slice(&[0.0f64, 0.0, 1.0, 1.0], &[2, 2])?;
    /// assert_eq!(ctx.softmax(&x, 1)?.to_vec::<f64>()?, vec![0.5; 4]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn softmax(&self, x: &RawTensor, axis: usize) -> Result<RawTensor> {
        self.softmax_rows("softmax", false, x, None, axis)
    }

    /// Log-softmax along `axis`: `x − max − ln Σ exp(x − max)`.
    pub fn log_softmax(&self, x: &RawTensor, axis: usize) -> Result<RawTensor> {
        self.softmax_rows("log_softmax", true, x, None, axis)
    }

    softmax_backward! {
        /// Softmax backward from the forward output `y`: `gx = y * (gy − Σ_axis gy·y)`.
        softmax_backward, log: false
    }

    softmax_backward! {
        /// Log-softmax backward from the forward output `y`: `gx = gy − exp(y) * Σ_axis gy`.
        log_softmax_backward, log: true
    }

    /// The four row maps above, as `op`: (log-)softmax of `x` along `axis`, or with `gy`
    /// its backward from the forward output `x` (checked to match `gy`).
    fn softmax_rows(
        &self,
        op: &'static str,
        log: bool,
        x: &RawTensor,
        gy: Option<&RawTensor>,
        axis: usize,
    ) -> Result<RawTensor> {
        shape::check_axis(op, axis, x.shape())?;
        if let Some(gy) = gy {
            check_pair(op, x, gy)?;
        }
        crate::dispatch_float!(x.dtype(), op, T => match (log, gy.is_some()) {
            (false, false) => map_rows::<T>(self, x, None, axis, |_, x, _, y| softmax_row(x, y)),
            (true, false) => map_rows::<T>(self, x, None, axis, |_, x, _, y| log_softmax_row(x, y)),
            (false, true) => {
                map_rows::<T>(self, x, gy, axis, |_, y, gy, gx| softmax_backward_row(y, gy, gx))
            }
            (true, true) => {
                map_rows::<T>(self, x, gy, axis, |_, y, gy, gx| log_softmax_backward_row(y, gy, gx))
            }
        })
    }

    /// `ln Σ_axis exp(x)`, computed as `max + ln Σ exp(x − max)`; the axis is
    /// removed, or kept with size 1 when `keepdim`. An all −∞ (or empty) row
    /// gives −∞; a row holding +∞ gives +∞.
    pub fn logsumexp(&self, x: &RawTensor, axis: usize, keepdim: bool) -> Result<RawTensor> {
        shape::check_axis("logsumexp", axis, x.shape())?;
        crate::dispatch_float!(x.dtype(), "logsumexp", T => self.logsumexp_t::<T>(x, axis, keepdim))
    }

    fn logsumexp_t<T: RowFloat>(
        &self,
        x: &RawTensor,
        axis: usize,
        keepdim: bool,
    ) -> Result<RawTensor> {
        let xc = axis_last_contiguous(self, x, axis)?;
        let len = x.shape()[axis];
        let mut out_shape = x.shape().to_vec();
        if keepdim {
            out_shape[axis] = 1;
        } else {
            out_shape.remove(axis);
        }
        let mut out = self.empty(x.dtype(), &out_shape)?;
        // Rows of `xc` are in the order of x's shape with `axis` moved last:
        // that is x's remaining axes in order, so the output is written row-major.
        let n_rows = out.numel();
        let o = out.as_mut_slice::<T>()?;
        if len == 0 {
            o.fill(T::NEG_INFINITY);
            return Ok(out);
        }
        let xs = xc.as_slice::<T>()?;
        let rpc = rows_per_chunk(len, 1);
        par_rows_mut(self, (n_rows, len, rpc), [o], [rpc], |_, r0, _, [o]| {
            for (k, v) in o.iter_mut().enumerate() {
                let r = r0 + k;
                *v = logsumexp_row(&xs[r * len..(r + 1) * len]);
            }
        });
        Ok(out)
    }

    /// Causal softmax over the last axis of `x` `[.., rows, cols]`: element
    /// `(.., i, j)` with `j > i + (cols − rows)` is masked (probability 0).
    /// A fully masked row (only when rows > cols) is all zeros, not NaN.
    pub fn softmax_causal(&self, x: &RawTensor) -> Result<RawTensor> {
        let rc = causal_rows("softmax_causal", x)?;
        crate::dispatch_float!(x.dtype(), "softmax_causal", T => {
            map_causal_rows::<T>(self, x, None, rc, T::ZERO, |x, _, y| softmax_row(x, y))
        })
    }

    /// Causal log-softmax over the last axis (mask as [`ExecContext::softmax_causal`]):
    /// masked elements are −∞ (log 0); a fully masked row is all −∞, never NaN.
    /// Use [`ExecContext::log_softmax_causal_backward`] for its gradient, which
    /// sends nothing to masked positions.
    pub fn log_softmax_causal(&self, x: &RawTensor) -> Result<RawTensor> {
        let rc = causal_rows("log_softmax_causal", x)?;
        crate::dispatch_float!(x.dtype(), "log_softmax_causal", T => {
            map_causal_rows::<T>(self, x, None, rc, T::NEG_INFINITY, |x, _, y| log_softmax_row(x, y))
        })
    }

    /// Backward of [`ExecContext::log_softmax_causal`] from its output `y`:
    /// on unmasked columns `gx = gy − exp(y) * Σ_unmasked gy`, and 0 on masked ones
    /// (masked inputs do not reach the output). [`ExecContext::softmax_backward`]
    /// on the output of `softmax_causal` is already exact (y = 0 there).
    pub fn log_softmax_causal_backward(&self, y: &RawTensor, gy: &RawTensor) -> Result<RawTensor> {
        let rc = causal_rows("log_softmax_causal_backward", y)?;
        check_pair("log_softmax_causal_backward", y, gy)?;
        crate::dispatch_float!(y.dtype(), "log_softmax_causal_backward", T => {
            map_causal_rows::<T>(self, y, Some(gy), rc, T::ZERO, |y, gy, gx| {
                log_softmax_backward_row(y, gy, gx)
            })
        })
    }
}

/// Plain scalar implementations: the spec of the kernels above. Inputs are
/// contiguous row-major element vectors with their shape.
pub mod reference {
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
    pub fn log_softmax_backward<T: Float>(
        y: &[T],
        gy: &[T],
        shape: &[usize],
        axis: usize,
    ) -> Vec<T> {
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
    fn causal_map<T: Float>(
        x: &[T],
        shape: &[usize],
        masked: T,
        f: impl Fn(T, T, T) -> T,
    ) -> Vec<T> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runtime-dispatched (AVX2/AVX-512) rows give the same bits as the
    /// baseline build of the same kernel.
    #[test]
    fn dispatched_rows_match_baseline_bitwise() {
        let mut g = crate::rng::SplitMix64::new(5);
        for len in [1usize, 7, 16, 33, 257, 1000] {
            let x: Vec<f32> = (0..len).map(|_| 20.0 * g.next_normal() as f32).collect();
            let gy: Vec<f32> = (0..len).map(|_| g.next_normal() as f32).collect();
            let (mut a, mut b) = (vec![0f32; len], vec![0f32; len]);
            softmax_row(&x, &mut a);
            softmax_row_impl(&x, &mut b);
            assert_eq!(a, b);
            log_softmax_row(&x, &mut a);
            log_softmax_row_impl(&x, &mut b);
            assert_eq!(a, b);
            log_softmax_backward_row(&x, &gy, &mut a);
            log_softmax_backward_row_impl(&x, &gy, &mut b);
            assert_eq!(a, b);
            let xd: Vec<f64> = x.iter().map(|&v| v as f64 * 30.0).collect();
            assert_eq!(
                logsumexp_row(&xd).to_bits(),
                logsumexp_row_impl(&xd).to_bits()
            );
            let (mut c, mut d) = (vec![0f64; len], vec![0f64; len]);
            softmax_row(&xd, &mut c);
            softmax_row_impl(&xd, &mut d);
            assert_eq!(c, d);
        }
    }
}
