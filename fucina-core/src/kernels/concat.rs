//! Concat, stack and constant pad (copies), and split / chunk (narrow views, no copy).
//!
//! Every op here is a pure data movement, so it runs on any dtype. Inputs may
//! have any strides; the output is a fresh contiguous tensor written in full.
//! Parallel chunks are fixed runs of output rows, so results never depend on
//! the thread count (a copy is exact anyway).

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::shape::{self, StridedIter};
use crate::tensor::RawTensor;

/// Elements of work per parallel chunk (fixed: never derived from the thread count).
const CHUNK: usize = 1 << 15;

/// Copies each input's block `[outer, a_t * inner]` into its column range of the
/// contiguous output `[outer, total * inner]`.
fn concat_typed<T: Element>(
    ctx: &ExecContext,
    xs: &[&RawTensor],
    axis: usize,
    out: &mut RawTensor,
) -> Result<()> {
    let oshape = out.shape().to_vec();
    let outer = shape::numel(&oshape[..axis]);
    let total = oshape[axis];
    let inner = shape::numel(&oshape[axis + 1..]);
    let dst = out.as_mut_slice::<T>()?;
    let row_len = total * inner;
    let mut start = 0usize;
    for x in xs {
        let a = x.shape()[axis];
        let blk = a * inner;
        if blk == 0 || outer == 0 {
            start += a;
            continue;
        }
        let s = x.storage::<T>()?;
        let outer_shape = &x.shape()[..axis];
        let outer_strides = &x.strides()[..axis];
        let sub_shape = &x.shape()[axis..];
        let sub_strides = &x.strides()[axis..];
        let sub_contig = shape::is_contiguous(sub_shape, sub_strides);
        let xoff = x.offset();
        let rows_per_chunk = (CHUNK / blk).max(1);
        let col0 = start * inner;
        // Chunk c owns output rows r0..r1 (whole rows); this input fills columns col0..+blk.
        let chunk_len = rows_per_chunk * row_len;
        ctx.par_chunks_mut(&mut *dst, chunk_len, outer * blk >= CHUNK, |c, rows| {
            let r0 = c * rows_per_chunk;
            for (o, orow) in (r0..).zip(rows.chunks_exact_mut(row_len)) {
                let base = xoff + shape::offset_of(outer_shape, outer_strides, o);
                let d = &mut orow[col0..col0 + blk];
                if sub_contig {
                    d.copy_from_slice(&s[base..base + blk]);
                } else {
                    for (v, off) in d
                        .iter_mut()
                        .zip(StridedIter::new(sub_shape, sub_strides, base))
                    {
                        *v = s[off];
                    }
                }
            }
        });
        start += a;
    }
    Ok(())
}

/// Fills `out` with `value` and copies `x` into its interior at `pads[i].0`.
fn pad_typed<T: Element>(
    ctx: &ExecContext,
    x: &RawTensor,
    pads: &[(usize, usize)],
    value: f64,
    out: &mut RawTensor,
) -> Result<()> {
    let ostrides = shape::contiguous_strides(out.shape());
    let dst = out.as_mut_slice::<T>()?;
    dst.fill(T::from_f64(value));
    let n = x.numel();
    if n == 0 {
        return Ok(());
    }
    let s = x.storage::<T>()?;
    let r = x.rank();
    if r == 0 {
        dst[0] = s[x.offset()];
        return Ok(());
    }
    let last = x.shape()[r - 1];
    let last_stride = x.strides()[r - 1];
    let rows = n / last;
    let xo_shape = &x.shape()[..r - 1];
    let xo_strides = &x.strides()[..r - 1];
    let oo_strides = &ostrides[..r - 1];
    let corner: usize = pads.iter().zip(&ostrides).map(|(p, s)| p.0 * s).sum();
    let xoff = x.offset();
    let rows_per_chunk = (CHUNK / last).max(1);
    // Rows of x land on increasing, disjoint interior rows of the output: chunk c owns the
    // output from its first row's start to the next chunk's (the first chunk from 0).
    let out_row = |row: usize| corner + shape::offset_of(xo_shape, oo_strides, row);
    let n_chunks = rows.div_ceil(rows_per_chunk);
    let first = |c: usize| {
        if c == 0 {
            0
        } else {
            out_row(c * rows_per_chunk)
        }
    };
    ctx.par_split_mut(dst, n_chunks, n >= CHUNK, first, |c, piece| {
        let r0 = c * rows_per_chunk;
        let r1 = (r0 + rows_per_chunk).min(rows);
        let at = first(c);
        for row in r0..r1 {
            let xb = xoff + shape::offset_of(xo_shape, xo_strides, row);
            let ob = out_row(row) - at;
            let d = &mut piece[ob..ob + last];
            if last_stride == 1 {
                d.copy_from_slice(&s[xb..xb + last]);
            } else {
                for (j, v) in d.iter_mut().enumerate() {
                    *v = s[xb + j * last_stride];
                }
            }
        }
    });
    Ok(())
}

impl ExecContext {
    /// Concatenates `xs` along `axis`: every other dim equal, one dtype (any), any strides.
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(1)?;
    /// let a = ctx.from_slice(&[1i64, 2, 3, 4], &[2, 2])?;
    /// let b = ctx.from_slice(&[5i64, 6], &[2, 1])?;
    /// let c = ctx.concat(&[&a, &b], 1)?;
    /// assert_eq!(c.to_vec::<i64>()?, vec![1, 2, 5, 3, 4, 6]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn concat(&self, xs: &[&RawTensor], axis: usize) -> Result<RawTensor> {
        let first = xs.first().ok_or_else(|| Error::InvalidArgument {
            op: "concat",
            msg: "no tensors to concatenate".into(),
        })?;
        let rank = first.rank();
        if axis >= rank {
            return Err(Error::axis("concat", axis, rank, first.shape()));
        }
        let mut oshape = first.shape().to_vec();
        oshape[axis] = 0;
        for x in xs {
            if x.dtype() != first.dtype() {
                return Err(Error::DTypeMismatch {
                    op: "concat",
                    lhs: first.dtype(),
                    rhs: x.dtype(),
                });
            }
            let same = x.rank() == rank
                && (0..rank).all(|d| d == axis || x.shape()[d] == first.shape()[d]);
            if !same {
                return Err(Error::ShapeMismatch {
                    op: "concat",
                    lhs: first.shape().to_vec(),
                    rhs: x.shape().to_vec(),
                });
            }
            oshape[axis] = shape::add_of(
                "concat",
                "concatenated extent",
                oshape[axis],
                x.shape()[axis],
                x.shape(),
            )?;
        }
        shape::numel_of("concat", &oshape)?;
        let mut out = self.empty(first.dtype(), &oshape)?;
        crate::dispatch_any!(first.dtype(), T => concat_typed::<T>(self, xs, axis, &mut out))?;
        Ok(out)
    }

    /// Stacks equal-shaped tensors along a new axis `axis` (0..=rank).
    pub fn stack(&self, xs: &[&RawTensor], axis: usize) -> Result<RawTensor> {
        let first = xs.first().ok_or_else(|| Error::InvalidArgument {
            op: "stack",
            msg: "no tensors to stack".into(),
        })?;
        if axis > first.rank() {
            return Err(Error::axis("stack", axis, first.rank() + 1, first.shape()));
        }
        let mut views = Vec::with_capacity(xs.len());
        for x in xs {
            if x.shape() != first.shape() {
                return Err(Error::ShapeMismatch {
                    op: "stack",
                    lhs: first.shape().to_vec(),
                    rhs: x.shape().to_vec(),
                });
            }
            views.push(x.unsqueeze(axis)?);
        }
        let refs: Vec<&RawTensor> = views.iter().collect();
        self.concat(&refs, axis)
    }

    /// Pads with the constant `value` (converted to x's dtype): `pads[i] = (before, after)`
    /// elements added on each side of axis `i`; one pair per axis.
    pub fn pad(&self, x: &RawTensor, pads: &[(usize, usize)], value: f64) -> Result<RawTensor> {
        if pads.len() != x.rank() {
            return Err(Error::InvalidArgument {
                op: "pad",
                msg: format!(
                    "{} (before, after) pairs given for a tensor of rank {} (shape {:?})",
                    pads.len(),
                    x.rank(),
                    x.shape()
                ),
            });
        }
        let oshape = x
            .shape()
            .iter()
            .zip(pads)
            .map(|(&d, &(b, a))| shape::sum_of("pad", "padded extent", &[d, b, a]))
            .collect::<Result<Vec<usize>>>()?;
        shape::numel_of("pad", &oshape)?;
        let mut out = self.empty(x.dtype(), &oshape)?;
        crate::dispatch_any!(x.dtype(), T => pad_typed::<T>(self, x, pads, value, &mut out))?;
        Ok(out)
    }
}

/// Splits `x` along `axis` into views of the given sizes, which must sum to `shape[axis]`.
pub fn split(x: &RawTensor, axis: usize, sizes: &[usize]) -> Result<Vec<RawTensor>> {
    if axis >= x.rank() {
        return Err(Error::axis("split", axis, x.rank(), x.shape()));
    }
    let total = shape::sum_of("split", "sum of sizes", sizes)?;
    if total != x.shape()[axis] {
        return Err(Error::InvalidArgument {
            op: "split",
            msg: format!(
                "sizes {sizes:?} sum to {total}, not to dim {} of shape {:?}",
                axis,
                x.shape()
            ),
        });
    }
    let mut start = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for &s in sizes {
        out.push(x.narrow(axis, start, s)?);
        start += s;
    }
    Ok(out)
}

/// Splits `x` along `axis` into views of `ceil(d / n)` elements (the last may be smaller),
/// as `torch.chunk`: fewer than `n` chunks may come back; a zero-length axis gives `n`
/// empty chunks.
pub fn chunk(x: &RawTensor, axis: usize, n: usize) -> Result<Vec<RawTensor>> {
    if axis >= x.rank() {
        return Err(Error::axis("chunk", axis, x.rank(), x.shape()));
    }
    if n == 0 {
        return Err(Error::InvalidArgument {
            op: "chunk",
            msg: "number of chunks must be at least 1".into(),
        });
    }
    let d = x.shape()[axis];
    if d == 0 {
        return split(x, axis, &vec![0; n]);
    }
    let size = d.div_ceil(n);
    let mut sizes = Vec::with_capacity(n);
    let mut left = d;
    while left > 0 {
        let s = size.min(left);
        sizes.push(s);
        left -= s;
    }
    split(x, axis, &sizes)
}

/// Scalar reference implementations: the spec of this file's kernels.
pub mod reference {
    use crate::dtype::Element;
    use crate::shape;

    /// Concat of row-major slices `xs[t]` of shapes `shapes[t]` along `axis`.
    pub fn concat<T: Element>(xs: &[&[T]], shapes: &[&[usize]], axis: usize) -> Vec<T> {
        let outer = shape::numel(&shapes[0][..axis]);
        let mut out = Vec::new();
        for o in 0..outer {
            for (x, s) in xs.iter().zip(shapes) {
                let blk = shape::numel(&s[axis..]);
                out.extend_from_slice(&x[o * blk..(o + 1) * blk]);
            }
        }
        out
    }

    /// Constant pad of a row-major slice `x` of `shape`.
    pub fn pad<T: Element>(x: &[T], shape: &[usize], pads: &[(usize, usize)], value: T) -> Vec<T> {
        let oshape: Vec<usize> = shape
            .iter()
            .zip(pads)
            .map(|(&d, &(b, a))| d + b + a)
            .collect();
        let ostr = shape::contiguous_strides(&oshape);
        let mut out = vec![value; shape::numel(&oshape)];
        for (l, &v) in x.iter().enumerate() {
            // Multi-index of element l, shifted by `before` on every axis.
            let mut rem = l;
            let mut off = 0;
            for d in (0..shape.len()).rev() {
                off += (rem % shape[d] + pads[d].0) * ostr[d];
                rem /= shape[d];
            }
            out[off] = v;
        }
        out
    }
}
