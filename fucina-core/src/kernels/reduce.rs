//! Reductions along any set of axes (sum, mean, max, min, argmax, argmin,
//! variance, cumsum) and sum-to-shape.
//!
//! Determinism: every result is a fixed function of the input's shape and
//! layout. A contiguous run is folded in 16 lanes, lanes combined as a fixed
//! tree, runs longer than [`BLOCK`] folded block by block and the block partials
//! combined in order; column reductions fold row blocks of [`ROW_BLOCK`] rows.
//! Parallel paths compute exactly those partials, so any thread count gives the
//! same bits. Sums accumulate in the element type.

use crate::dtype::{Element, Float};
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::kernels::map::{map2, Plan, CHUNK, PAR_THRESHOLD};
use crate::shape;
use crate::tensor::RawTensor;

/// Elements per block of a contiguous fold (the unit of parallel partial sums).
pub const BLOCK: usize = 4096;
/// Rows per block of a column fold.
pub const ROW_BLOCK: usize = 256;
/// Columns per task of a column fold or a scan.
const COLS: usize = 256;
/// Lanes of a contiguous fold.
const LANES: usize = 16;

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Σ (0 over an empty axis)
    Sum,
    /// Σ / n (NaN over an empty axis)
    Mean,
    /// The largest value, NaN-propagating (Err over an empty axis)
    Max,
    /// The smallest value, NaN-propagating (Err over an empty axis)
    Min,
}

impl ReduceOp {
    /// A short lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

/// An associative combine with an identity (the fold of a reduction).
trait Monoid<T: Float>: Copy + Send + Sync {
    fn identity() -> T;
    fn combine(a: T, b: T) -> T;
}

/// `struct Name;` with `impl Monoid<T>`, for each `Name: identity, |a, b| combine;` row.
macro_rules! monoids {
    ($($m:ident: $id:expr, |$a:ident, $b:ident| $combine:expr;)*) => {$(
        #[derive(Clone, Copy)]
        struct $m;
        impl<T: Float> Monoid<T> for $m {
            #[inline(always)]
            fn identity() -> T {
                $id
            }
            #[inline(always)]
            #[allow(clippy::eq_op)]
            fn combine($a: T, $b: T) -> T {
                $combine
            }
        }
    )*};
}
monoids! {
    SumM: T::ZERO, |a, b| a + b;
    // Max and min are NaN-propagating: a NaN accumulator stays; a NaN element replaces.
    MaxM: T::NEG_INFINITY, |a, b| if a >= b || a != a { a } else { b };
    MinM: T::INFINITY, |a, b| if a <= b || a != a { a } else { b };
}

/// Folds a slice of at most [`BLOCK`] elements: 16 lanes, then a fixed tree.
#[inline]
fn fold_lanes<T: Float, M: Monoid<T>>(s: &[T]) -> T {
    let mut acc = [M::identity(); LANES];
    let chunks = s.chunks_exact(LANES);
    let rem = chunks.remainder();
    for ch in chunks {
        for k in 0..LANES {
            acc[k] = M::combine(acc[k], ch[k]);
        }
    }
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for k in 0..w {
            acc[k] = M::combine(acc[k], acc[k + w]);
        }
    }
    let mut r = acc[0];
    for &v in rem {
        r = M::combine(r, v);
    }
    r
}

/// Folds a contiguous run: blocks of [`BLOCK`] folded by lanes, combined in order.
fn fold_contig<T: Float, M: Monoid<T>>(s: &[T]) -> T {
    let mut blocks = s.chunks(BLOCK);
    let mut acc = match blocks.next() {
        Some(b) => fold_lanes::<T, M>(b),
        None => return M::identity(),
    };
    for b in blocks {
        acc = M::combine(acc, fold_lanes::<T, M>(b));
    }
    acc
}

/// [`fold_contig`] with the block partials computed in parallel (same bits).
fn fold_contig_par<T: Float, M: Monoid<T>>(ctx: &ExecContext, s: &[T]) -> T {
    let nb = s.len().div_ceil(BLOCK);
    if nb <= 1 {
        return fold_contig::<T, M>(s);
    }
    const GROUP: usize = 8;
    let mut partials = vec![M::identity(); nb];
    ctx.par_chunks_mut(&mut partials, GROUP, true, |g, part| {
        for (b, p) in (g * GROUP..).zip(part.iter_mut()) {
            let blk = &s[b * BLOCK..((b + 1) * BLOCK).min(s.len())];
            *p = fold_lanes::<T, M>(blk);
        }
    });
    let mut acc = partials[0];
    for &v in &partials[1..] {
        acc = M::combine(acc, v);
    }
    acc
}

/// The reduced-axis mask of `axes` against `shape` (empty = all axes).
fn reduce_mask(op: &'static str, shape: &[usize], axes: &[usize]) -> Result<Vec<bool>> {
    let rank = shape.len();
    if axes.is_empty() {
        return Ok(vec![true; rank]);
    }
    let mut red = vec![false; rank];
    for &a in axes {
        if a >= rank {
            return Err(Error::axis(op, a, rank, shape));
        }
        if red[a] {
            return Err(Error::InvalidArgument {
                op,
                msg: format!("axis {a} repeated in {axes:?}"),
            });
        }
        red[a] = true;
    }
    Ok(red)
}

fn reduced_shape(shape: &[usize], red: &[bool], keepdim: bool) -> Vec<usize> {
    shape
        .iter()
        .zip(red)
        .filter_map(|(&d, &r)| match (r, keepdim) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// Writes `post(fold(x over the reduced axes))` into the fresh `out`.
fn fold_axes<T: Float, M: Monoid<T>>(
    ctx: &ExecContext,
    x: &RawTensor,
    red: &[bool],
    out: &mut RawTensor,
    post: impl Fn(T) -> T + Send + Sync,
) -> Result<()> {
    let (mut ks, mut kst, mut rs, mut rst) = (vec![], vec![], vec![], vec![]);
    for d in 0..x.rank() {
        let n = x.shape()[d];
        if n == 1 {
            continue;
        }
        if red[d] {
            rs.push(n);
            rst.push(x.strides()[d]);
        } else {
            ks.push(n);
            kst.push(x.strides()[d]);
        }
    }
    let r = shape::numel(&rs);
    if out.numel() == 0 {
        return Ok(());
    }
    // Case A: the reduced axes form one contiguous run of memory.
    if shape::is_contiguous(&rs, &rst) {
        let xs = x.storage::<T>()?;
        return fold_runs::<T, M>(ctx, xs, x.offset(), &ks, &kst, r, out, post);
    }
    // Case B: contiguous x, reduced axes one run of axes with kept axes after it.
    if x.is_contiguous() {
        let sq: Vec<(usize, bool)> = (0..x.rank())
            .filter(|&d| x.shape()[d] != 1)
            .map(|d| (x.shape()[d], red[d]))
            .collect();
        let first = sq.iter().position(|&(_, r)| r);
        let last = sq.iter().rposition(|&(_, r)| r);
        if let (Some(i), Some(j)) = (first, last) {
            if sq[i..=j].iter().all(|&(_, r)| r) {
                let p: usize = sq[..i].iter().map(|s| s.0).product();
                let q: usize = sq[j + 1..].iter().map(|s| s.0).product();
                let xs = x.as_slice::<T>()?;
                return fold_cols::<T, M>(ctx, xs, p, r, q, out, post);
            }
        }
    }
    // General: move the reduced axes last, copy to contiguous, then case A.
    let perm: Vec<usize> = (0..x.rank())
        .filter(|&d| !red[d])
        .chain((0..x.rank()).filter(|&d| red[d]))
        .collect();
    let xc = ctx.copy(&x.permute(&perm)?)?;
    let o = out.numel();
    fold_runs::<T, M>(ctx, xc.as_slice::<T>()?, 0, &[o], &[r], r, out, post)
}

/// Case A: output `o` folds the contiguous run `xs[off(o)..off(o) + r]`,
/// where `off` walks the kept axes `(ks, kst)` from `base`.
fn fold_runs<T: Float, M: Monoid<T>>(
    ctx: &ExecContext,
    xs: &[T],
    base: usize,
    ks: &[usize],
    kst: &[usize],
    r: usize,
    out: &mut RawTensor,
    post: impl Fn(T) -> T + Send + Sync,
) -> Result<()> {
    let dst = out.as_mut_slice::<T>()?;
    let o_n = dst.len();
    if o_n < 8 && r > BLOCK {
        // Few long runs: parallelise inside each run.
        for (o, d) in dst.iter_mut().enumerate() {
            let off = base + shape::offset_of(ks, kst, o);
            *d = post(fold_contig_par::<T, M>(ctx, &xs[off..off + r]));
        }
        return Ok(());
    }
    let plan = Plan::new(ks, [(kst, base)]);
    let [si] = plan.inner_strides();
    let per = (CHUNK / r.max(1)).max(1);
    ctx.par_chunks_mut(dst, per, o_n * r >= PAR_THRESHOLD, |c, d| {
        let s = c * per;
        let e = s + d.len();
        plan.for_rows(s, e, |[off], pos, len| {
            for j in 0..len {
                let o = off + j * si;
                d[pos - s + j] = post(fold_contig::<T, M>(&xs[o..o + r]));
            }
        });
    });
    Ok(())
}

/// Case B: `out[p, q] = fold_r xs[p, r, q]` for contiguous `xs` of `[p, r, q]`,
/// folding blocks of [`ROW_BLOCK`] rows and combining the blocks in order.
fn fold_cols<T: Float, M: Monoid<T>>(
    ctx: &ExecContext,
    xs: &[T],
    p: usize,
    r: usize,
    q: usize,
    out: &mut RawTensor,
    post: impl Fn(T) -> T + Send + Sync,
) -> Result<()> {
    let dst = out.as_mut_slice::<T>()?;
    let ncol = q.div_ceil(COLS);
    let tasks = p * ncol;
    let per = (CHUNK / (r * q.min(COLS)).max(1)).max(1);
    // Task t = (pi, q0) owns out[pi*q + q0 .. + w]; tasks in order own consecutive runs, so
    // chunk c (tasks c*per..) owns the run from its first task's start to the next chunk's.
    let task_start = |t: usize| (t / ncol) * q + (t % ncol) * COLS;
    ctx.par_split_mut(
        dst,
        tasks.div_ceil(per),
        p * r * q >= PAR_THRESHOLD,
        |c| task_start(c * per),
        |c, run| {
            let at = task_start(c * per);
            for t in c * per..((c + 1) * per).min(tasks) {
                let (pi, q0) = (t / ncol, (t % ncol) * COLS);
                let w = (q - q0).min(COLS);
                let x = &xs[pi * r * q..(pi + 1) * r * q];
                let mut tot = [M::identity(); COLS];
                let mut blk = [M::identity(); COLS];
                for rb in (0..r).step_by(ROW_BLOCK) {
                    blk[..w].fill(M::identity());
                    for row in rb..(rb + ROW_BLOCK).min(r) {
                        let xr = &x[row * q + q0..row * q + q0 + w];
                        for (b, &v) in blk[..w].iter_mut().zip(xr) {
                            *b = M::combine(*b, v);
                        }
                    }
                    for (t, &b) in tot[..w].iter_mut().zip(&blk[..w]) {
                        *t = M::combine(*t, b);
                    }
                }
                let d = &mut run[pi * q + q0 - at..pi * q + q0 - at + w];
                for (o, &v) in d.iter_mut().zip(&tot[..w]) {
                    *o = post(v);
                }
            }
        },
    );
    Ok(())
}

/// `[prod(shape[..axis]), shape[axis], prod(shape[axis+1..])]`.
fn split3(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape::numel(&shape[..axis]),
        shape[axis],
        shape::numel(&shape[axis + 1..]),
    )
}

fn arg_extreme<T: Float>(
    ctx: &ExecContext,
    op: &'static str,
    x: &RawTensor,
    axis: usize,
    keepdim: bool,
    better: fn(T, T) -> bool,
) -> Result<RawTensor> {
    shape::check_axis(op, axis, x.shape())?;
    let mut red = vec![false; x.rank()];
    red[axis] = true;
    let (p, r, q) = split3(x.shape(), axis);
    if r == 0 {
        return Err(Error::InvalidArgument {
            op,
            msg: format!("cannot reduce the empty axis {axis} of {:?}", x.shape()),
        });
    }
    let mut out = ctx.empty(crate::DType::I64, &reduced_shape(x.shape(), &red, keepdim))?;
    let xc = ctx.contiguous(x)?;
    let xs = xc.as_slice::<T>()?;
    let dst = out.as_mut_slice::<i64>()?;
    let n = p * q;
    let per = (CHUNK / r).max(1);
    ctx.par_chunks_mut(dst, per, n * r >= PAR_THRESHOLD, |c, d| {
        for (o, out) in (c * per..).zip(d.iter_mut()) {
            let (pi, qi) = (o / q, o % q);
            let base = pi * r * q + qi;
            let (mut best, mut bi) = (xs[base], 0usize);
            // The first NaN wins (as PyTorch); otherwise the first strict extremum.
            for k in 1..r {
                if best.is_nan() {
                    break;
                }
                let v = xs[base + k * q];
                if v.is_nan() || better(v, best) {
                    best = v;
                    bi = k;
                }
            }
            *out = bi as i64;
        }
    });
    Ok(out)
}

fn scan<T: Float>(
    ctx: &ExecContext,
    op: &'static str,
    x: &RawTensor,
    axis: usize,
    reverse: bool,
) -> Result<RawTensor> {
    if x.rank() == 0 && axis == 0 {
        return ctx.copy(x);
    }
    shape::check_axis(op, axis, x.shape())?;
    let (p, r, q) = split3(x.shape(), axis);
    let mut out = ctx.empty(T::DTYPE, x.shape())?;
    let xc = ctx.contiguous(x)?;
    let xs = xc.as_slice::<T>()?;
    let dst = out.as_mut_slice::<T>()?;
    let ncol = q.div_ceil(COLS);
    let per = (CHUNK / (r * q.min(COLS)).max(1)).max(1);
    if q == 1 {
        // The axis is the contiguous one: one plain sequential scan per run
        // (the same additions in the same order as the column path).
        ctx.par_chunks_mut(dst, per * r, p * r >= PAR_THRESHOLD, |c, runs| {
            for (pi, d) in (c * per..).zip(runs.chunks_exact_mut(r)) {
                let x = &xs[pi * r..(pi + 1) * r];
                let mut acc = T::ZERO;
                if reverse {
                    for (o, &v) in d.iter_mut().zip(x).rev() {
                        acc += v;
                        *o = acc;
                    }
                } else {
                    for (o, &v) in d.iter_mut().zip(x) {
                        acc += v;
                        *o = acc;
                    }
                }
            }
        });
        return Ok(out);
    }
    // Task t = (pi, q0) owns columns q0..q0+w of every row of block pi: a tile of rows
    // pi*r..(pi+1)*r by columns q0..q0+w of the output seen as [p*r, q].
    let row_cuts: Vec<usize> = (0..=p).map(|pi| pi * r).collect();
    let col_cuts: Vec<usize> = (0..ncol).map(|i| i * COLS).chain([q]).collect();
    let par = p * r * q >= PAR_THRESHOLD;
    ctx.par_tiles_mut(dst, q, &row_cuts, &col_cuts, per, par, |t, tile| {
        let (pi, q0) = (t / ncol, (t % ncol) * COLS);
        let w = (q - q0).min(COLS);
        let mut acc = [T::ZERO; COLS];
        for k in 0..r {
            // Sequential along the axis: out[r] = out[r∓1] + x[r].
            let row = if reverse { r - 1 - k } else { k };
            let at = pi * r * q + row * q + q0;
            let d = tile.row(row);
            for ((a, o), &v) in acc[..w].iter_mut().zip(d.iter_mut()).zip(&xs[at..at + w]) {
                *a += v;
                *o = *a;
            }
        }
    });
    Ok(out)
}

impl ExecContext {
    /// Reduces over `axes` (empty slice = all axes; duplicates or out-of-range
    /// axes are errors); `keepdim` keeps reduced axes as size 1, like PyTorch.
    /// Over an empty axis: sum 0, mean NaN, max/min an error.
    ///
    /// ```
    /// use fucina_core::{ExecContext, kernels::reduce::ReduceOp};
    /// let ctx = ExecContext::with_threads(1)?;
    /// let x = ctx.from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// assert_eq!(ctx.reduce(&x, ReduceOp::Sum, &[1], false)?.to_vec::<f32>()?, vec![6.0, 15.0]);
    /// assert_eq!(ctx.reduce(&x, ReduceOp::Max, &[0], true)?.shape(), &[1, 3]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn reduce(
        &self,
        x: &RawTensor,
        op: ReduceOp,
        axes: &[usize],
        keepdim: bool,
    ) -> Result<RawTensor> {
        let name = op.name();
        let red = reduce_mask(name, x.shape(), axes)?;
        let r: usize = (0..x.rank())
            .filter(|&d| red[d])
            .map(|d| x.shape()[d])
            .product();
        if r == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min) {
            return Err(Error::InvalidArgument {
                op: name,
                msg: format!("cannot reduce empty axes {axes:?} of {:?}", x.shape()),
            });
        }
        crate::dispatch_float!(x.dtype(), name, T => {
            let mut out = self.empty(T::DTYPE, &reduced_shape(x.shape(), &red, keepdim))?;
            match op {
                ReduceOp::Sum => fold_axes::<T, SumM>(self, x, &red, &mut out, |v| v)?,
                ReduceOp::Mean => {
                    let n = T::from_usize(r);
                    fold_axes::<T, SumM>(self, x, &red, &mut out, move |v| v / n)?
                }
                ReduceOp::Max => fold_axes::<T, MaxM>(self, x, &red, &mut out, |v| v)?,
                ReduceOp::Min => fold_axes::<T, MinM>(self, x, &red, &mut out, |v| v)?,
            }
            Ok(out)
        })
    }

    /// The adjoint of broadcasting: sums `x` down to `shape`, which must
    /// broadcast to `x.shape()`.
    pub fn sum_to_shape(&self, x: &RawTensor, shape: &[usize]) -> Result<RawTensor> {
        const OP: &str = "sum_to_shape";
        let xs = x.shape();
        let bad = || Error::Broadcast {
            op: OP,
            lhs: shape.to_vec(),
            rhs: xs.to_vec(),
        };
        if shape.len() > xs.len() {
            return Err(bad());
        }
        let lead = xs.len() - shape.len();
        let mut axes = vec![];
        for d in 0..xs.len() {
            if d < lead {
                if xs[d] != 1 {
                    axes.push(d);
                }
            } else if shape[d - lead] != xs[d] {
                if shape[d - lead] != 1 {
                    return Err(bad());
                }
                axes.push(d);
            }
        }
        if !x.dtype().is_compute_float() {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: x.dtype(),
            });
        }
        if axes.is_empty() {
            return self.reshape(x, shape);
        }
        self.reduce(x, ReduceOp::Sum, &axes, true)?.reshape(shape)
    }

    /// Index (I64) of the FIRST maximum along `axis` (a NaN counts as the maximum).
    pub fn argmax(&self, x: &RawTensor, axis: usize, keepdim: bool) -> Result<RawTensor> {
        crate::dispatch_float!(x.dtype(), "argmax", T => {
            arg_extreme::<T>(self, "argmax", x, axis, keepdim, |v, b| v > b)
        })
    }

    /// Index (I64) of the FIRST minimum along `axis` (a NaN counts as the minimum).
    pub fn argmin(&self, x: &RawTensor, axis: usize, keepdim: bool) -> Result<RawTensor> {
        crate::dispatch_float!(x.dtype(), "argmin", T => {
            arg_extreme::<T>(self, "argmin", x, axis, keepdim, |v, b| v < b)
        })
    }

    /// Σ (x − mean)² / (n − ddof) over `axes` (empty = all), two-pass; n − ddof ≤ 0
    /// divides by 0 (inf or NaN, as PyTorch).
    pub fn variance(
        &self,
        x: &RawTensor,
        axes: &[usize],
        ddof: usize,
        keepdim: bool,
    ) -> Result<RawTensor> {
        const OP: &str = "variance";
        let red = reduce_mask(OP, x.shape(), axes)?;
        let n: usize = (0..x.rank())
            .filter(|&d| red[d])
            .map(|d| x.shape()[d])
            .product();
        crate::dispatch_float!(x.dtype(), OP, T => {
            let mean = self.reduce(x, ReduceOp::Mean, axes, true)?;
            let d2 = map2::<T, T, T>(self, OP, x, &mean, |u, m| (u - m) * (u - m))?;
            drop(mean);
            let red_shape = reduced_shape(x.shape(), &red, keepdim);
            let mut out = self.empty(T::DTYPE, &red_shape)?;
            let div = T::from_usize(n.saturating_sub(ddof));
            fold_axes::<T, SumM>(self, &d2, &red, &mut out, move |v| v / div)?;
            Ok(out)
        })
    }

    /// Inclusive cumulative sum along `axis` (sequential along the axis).
    pub fn cumsum(&self, x: &RawTensor, axis: usize) -> Result<RawTensor> {
        crate::dispatch_float!(x.dtype(), "cumsum", T => scan::<T>(self, "cumsum", x, axis, false))
    }

    /// Reverse cumulative sum (the cumsum adjoint) along `axis`:
    /// `out[i] = Σ_{j ≥ i} x[j]`, accumulated from the end.
    pub fn cumsum_reverse(&self, x: &RawTensor, axis: usize) -> Result<RawTensor> {
        crate::dispatch_float!(x.dtype(), "cumsum_reverse", T => {
            scan::<T>(self, "cumsum_reverse", x, axis, true)
        })
    }
}

/// The plain scalar spec: every output walks its reduced elements in
/// row-major order, accumulating in f64.
pub mod reference {
    use super::ReduceOp;
    use crate::dtype::Float;
    use crate::error::Result;
    use crate::shape;
    use crate::tensor::RawTensor;

    /// Visits, for each output (kept axes row-major), the reduced elements in order.
    fn each_group<T: Float>(
        x: &RawTensor,
        axes: &[usize],
        mut f: impl FnMut(&mut dyn Iterator<Item = f64>),
    ) -> Result<()> {
        let rank = x.rank();
        let red: Vec<bool> = (0..rank)
            .map(|d| axes.is_empty() || axes.contains(&d))
            .collect();
        let kept: Vec<usize> = (0..rank).filter(|&d| !red[d]).collect();
        let rax: Vec<usize> = (0..rank).filter(|&d| red[d]).collect();
        let ks: Vec<usize> = kept.iter().map(|&d| x.shape()[d]).collect();
        let rs: Vec<usize> = rax.iter().map(|&d| x.shape()[d]).collect();
        let xs = x.storage::<T>()?;
        for o in 0..shape::numel(&ks) {
            let mut idx = vec![0usize; rank];
            let mut rem = o;
            for (i, &d) in kept.iter().enumerate().rev() {
                idx[d] = rem % ks[i];
                rem /= ks[i];
            }
            let nr = shape::numel(&rs);
            let mut it = (0..nr).map(|ri| {
                let mut idx = idx.clone();
                let mut rem = ri;
                for (i, &d) in rax.iter().enumerate().rev() {
                    idx[d] = rem % rs[i];
                    rem /= rs[i];
                }
                let off: usize = x.offset()
                    + idx
                        .iter()
                        .zip(x.strides())
                        .map(|(i, s)| i * s)
                        .sum::<usize>();
                xs[off].to_f64()
            });
            f(&mut it);
        }
        Ok(())
    }

    /// The reference of `ctx.reduce` (values in kept-axes row-major order, in f64).
    pub fn reduce<T: Float>(x: &RawTensor, op: ReduceOp, axes: &[usize]) -> Result<Vec<f64>> {
        let mut out = vec![];
        each_group::<T>(x, axes, |it| {
            let mut n = 0usize;
            let mut acc = match op {
                ReduceOp::Sum | ReduceOp::Mean => 0.0,
                ReduceOp::Max => f64::NEG_INFINITY,
                ReduceOp::Min => f64::INFINITY,
            };
            for v in it {
                n += 1;
                acc = match op {
                    ReduceOp::Sum | ReduceOp::Mean => acc + v,
                    _ if v.is_nan() || acc.is_nan() => f64::NAN,
                    ReduceOp::Max => acc.max(v),
                    ReduceOp::Min => acc.min(v),
                };
            }
            out.push(if op == ReduceOp::Mean {
                acc / n as f64
            } else {
                acc
            });
        })?;
        Ok(out)
    }

    /// The reference of `ctx.variance` (two-pass, in f64).
    pub fn variance<T: Float>(x: &RawTensor, axes: &[usize], ddof: usize) -> Result<Vec<f64>> {
        let mut out = vec![];
        each_group::<T>(x, axes, |it| {
            let v: Vec<f64> = it.collect();
            let m = v.iter().sum::<f64>() / v.len() as f64;
            let ss: f64 = v.iter().map(|x| (x - m) * (x - m)).sum();
            out.push(ss / v.len().saturating_sub(ddof) as f64);
        })?;
        Ok(out)
    }

    /// The reference of `ctx.argmax` / `ctx.argmin` (first extremum; NaN wins).
    pub fn arg_extreme<T: Float>(x: &RawTensor, axis: usize, max: bool) -> Result<Vec<i64>> {
        let mut out = vec![];
        each_group::<T>(x, &[axis], |it| {
            let mut best: Option<(usize, f64)> = None;
            for (i, v) in it.enumerate() {
                best = match best {
                    None => Some((i, v)),
                    Some((_, b)) if b.is_nan() => best,
                    Some(_) if v.is_nan() => Some((i, v)),
                    Some((_, b)) if (max && v > b) || (!max && v < b) => Some((i, v)),
                    _ => best,
                };
            }
            out.push(best.map_or(-1, |b| b.0 as i64));
        })?;
        Ok(out)
    }

    /// The reference of `ctx.cumsum` (or `cumsum_reverse`), sequential in `T`,
    /// in row-major order of `x`'s shape.
    pub fn cumsum<T: Float>(x: &RawTensor, axis: usize, reverse: bool) -> Result<Vec<T>> {
        let v = x.to_vec::<T>()?;
        let sh = x.shape();
        let (p, r, q) = (
            shape::numel(&sh[..axis]),
            sh[axis],
            shape::numel(&sh[axis + 1..]),
        );
        let mut out = v.clone();
        for pi in 0..p {
            for qi in 0..q {
                let mut acc = T::ZERO;
                for k in 0..r {
                    let ri = if reverse { r - 1 - k } else { k };
                    let i = pi * r * q + ri * q + qi;
                    acc += v[i];
                    out[i] = acc;
                }
            }
        }
        Ok(out)
    }
}
