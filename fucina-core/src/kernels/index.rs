//! Index-select / embedding / gather along an axis, their adjoints index-add /
//! embedding-backward / scatter-add, and one-hot.
//!
//! Indices (I64, I32, U32 or U8, any strides) are read once and checked at the
//! entry: a negative or too-large index is [`Error::OutOfRange`], never a panic.
//! Selections are pure copies (any dtype); `embedding_to` gathers a bf16/f16
//! table into f32/f64 rows, widening only the gathered rows. The adds (f32/f64) are parallel by
//! DESTINATION with fixed chunks, and every destination sums its contributions
//! in increasing source order starting from 0: bitwise equal to the reference
//! and to itself for any thread count, duplicates included.

use crate::dtype::{DType, Element, Float};
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::pool::ScratchLease;
use crate::shape;
use crate::tensor::RawTensor;

/// Elements of work per parallel chunk (fixed: never derived from the thread count).
const CHUNK: usize = 1 << 14;

/// Reads an integer index tensor (any strides) in row-major order into pool
/// scratch, checking `0 <= i < bound` (`shape` is what errors report).
pub(crate) fn read_indices(
    ctx: &ExecContext,
    op: &'static str,
    idx: &RawTensor,
    bound: usize,
    shape: &[usize],
) -> Result<ScratchLease<i64>> {
    let mut out = ctx.pool().scratch::<i64>(idx.numel())?;
    fn fill<I: Element>(idx: &RawTensor, out: &mut [i64], conv: impl Fn(I) -> i64) -> Result<()> {
        let s = idx.storage::<I>()?;
        if idx.is_contiguous() {
            let o = idx.offset();
            for (d, &v) in out.iter_mut().zip(&s[o..o + idx.numel()]) {
                *d = conv(v);
            }
        } else {
            for (d, off) in out.iter_mut().zip(idx.offsets()) {
                *d = conv(s[off]);
            }
        }
        Ok(())
    }
    match idx.dtype() {
        DType::I64 => fill::<i64>(idx, &mut out, |v| v)?,
        DType::I32 => fill::<i32>(idx, &mut out, |v| v as i64)?,
        DType::U32 => fill::<u32>(idx, &mut out, |v| v as i64)?,
        DType::U8 => fill::<u8>(idx, &mut out, |v| v as i64)?,
        d => return Err(Error::UnsupportedDType { op, dtype: d }),
    }
    if let Some(&bad) = out.iter().find(|&&v| v < 0 || v as u64 >= bound as u64) {
        return Err(Error::OutOfRange {
            op,
            what: "index",
            index: bad,
            bound,
            shape: shape.to_vec(),
        });
    }
    Ok(out)
}

/// Row-major offsets of `shape` under `strides`, into pool scratch (for strided inner loops).
fn offset_table(
    ctx: &ExecContext,
    shape: &[usize],
    strides: &[usize],
) -> Result<ScratchLease<i64>> {
    let mut t = ctx.pool().scratch::<i64>(shape::numel(shape))?;
    for (d, off) in t.iter_mut().zip(shape::StridedIter::new(shape, strides, 0)) {
        *d = off as i64;
    }
    Ok(t)
}

/// `t` (of `shape` and `strides`) seen as `[outer, A, inner]` about `axis`: where each outer
/// block starts, the axis stride and, when the inner part is not contiguous, its offset table.
struct AxisView<'a> {
    outer_shape: &'a [usize],
    outer_strides: &'a [usize],
    axis_stride: usize,
    /// Row-major offsets of the inner part; `None` when it is contiguous.
    table: Option<ScratchLease<i64>>,
}

impl<'a> AxisView<'a> {
    fn new(
        ctx: &ExecContext,
        shape: &'a [usize],
        strides: &'a [usize],
        axis: usize,
    ) -> Result<Self> {
        let (inner_shape, inner_strides) = (&shape[axis + 1..], &strides[axis + 1..]);
        let table = if shape::is_contiguous(inner_shape, inner_strides) {
            None
        } else {
            Some(offset_table(ctx, inner_shape, inner_strides)?)
        };
        Ok(AxisView {
            outer_shape: &shape[..axis],
            outer_strides: &strides[..axis],
            axis_stride: strides[axis],
            table,
        })
    }

    /// Storage offset (before the tensor's own offset) of outer block `o`.
    fn outer_offset(&self, o: usize) -> usize {
        shape::offset_of(self.outer_shape, self.outer_strides, o)
    }
}

/// `f(r, row)` on each of the `rows` rows of `width` elements at the front of `dst`, in fixed
/// chunks of `CHUNK / width` rows (parallel once there are `CHUNK` elements or more).
fn par_rows<T: Send>(
    ctx: &ExecContext,
    dst: &mut [T],
    rows: usize,
    width: usize,
    f: impl Fn(usize, &mut [T]) + Send + Sync,
) {
    if rows == 0 || width == 0 {
        return;
    }
    let rows_per_chunk = (CHUNK / width).max(1);
    // Chunk c owns rows r0..r0 + rows_per_chunk.
    let dst = &mut dst[..rows * width];
    ctx.par_chunks_mut(
        dst,
        rows_per_chunk * width,
        rows * width >= CHUNK,
        |c, chunk| {
            let r0 = c * rows_per_chunk;
            for (r, d) in (r0..).zip(chunk.chunks_exact_mut(width)) {
                f(r, d);
            }
        },
    );
}

/// Rows `ids` of the `[V, D]` table `x` (any strides) into the contiguous `out`
/// (`[ids.len(), D]` elements), each element widened from `S` to `D` exactly (through f64:
/// bf16/f16 to f32/f64). In fixed row chunks, as `select_rows`.
fn widen_rows<S: Element, D: Element>(
    ctx: &ExecContext,
    x: &RawTensor,
    ids: &[i64],
    out: &mut RawTensor,
) -> Result<()> {
    let d = x.shape()[1];
    let (rs, cs) = (x.strides()[0], x.strides()[1]);
    let s = x.storage::<S>()?;
    let xoff = x.offset();
    let n = ids.len();
    let dst = out.as_mut_slice::<D>()?;
    par_rows(ctx, dst, n, d, |r, row| {
        let base = xoff + ids[r] as usize * rs;
        for (j, v) in row.iter_mut().enumerate() {
            *v = D::from_f64(s[base + j * cs].to_f64());
        }
    });
    Ok(())
}

/// `out[o, i, :] = x[o, ids[i], :]` with x seen as `[outer, A, inner]` about `axis`;
/// `out` is contiguous with `outer * ids.len() * inner` elements.
fn select_rows<T: Element>(
    ctx: &ExecContext,
    x: &RawTensor,
    axis: usize,
    ids: &[i64],
    out: &mut RawTensor,
) -> Result<()> {
    let xs = x.shape();
    let inner = shape::numel(&xs[axis + 1..]);
    let n = ids.len();
    let rows = shape::numel(&xs[..axis]) * n;
    let view = AxisView::new(ctx, xs, x.strides(), axis)?;
    let s = x.storage::<T>()?;
    let xoff = x.offset();
    let dst = out.as_mut_slice::<T>()?;
    par_rows(ctx, dst, rows, inner, |r, d| {
        let (o, i) = (r / n, r % n);
        let base = xoff + view.outer_offset(o) + ids[i] as usize * view.axis_stride;
        match &view.table {
            None => d.copy_from_slice(&s[base..base + inner]),
            Some(t) => {
                for (v, &off) in d.iter_mut().zip(t.iter()) {
                    *v = s[base + off as usize];
                }
            }
        }
    });
    Ok(())
}

/// Adjoint of [`select_rows`]: out (contiguous `shape`, seen as `[outer, A, inner]`)
/// gets `out[o, a, :] = 0 + Σ_{i: ids[i] = a, i increasing} src[o, i, :]`.
fn index_add_rows<T: Float>(
    ctx: &ExecContext,
    shape_: &[usize],
    axis: usize,
    ids: &[i64],
    src: &RawTensor,
) -> Result<RawTensor> {
    let a_len = shape_[axis];
    let outer = shape::numel(&shape_[..axis]);
    let inner = shape::numel(&shape_[axis + 1..]);
    let n = ids.len();
    // Stable counting sort of source positions by destination: the positions that
    // land on destination a are order[starts[a]..starts[a+1]], increasing.
    let mut starts = ctx.pool().scratch::<i64>(a_len + 1)?;
    starts.fill(0);
    for &a in ids {
        starts[a as usize + 1] += 1;
    }
    for a in 0..a_len {
        starts[a + 1] += starts[a];
    }
    let mut order = ctx.pool().scratch::<i64>(n)?;
    {
        let mut next = ctx.pool().scratch::<i64>(a_len)?;
        next.copy_from_slice(&starts[..a_len]);
        for (i, &a) in ids.iter().enumerate() {
            order[next[a as usize] as usize] = i as i64;
            next[a as usize] += 1;
        }
    }
    let view = AxisView::new(ctx, src.shape(), src.strides(), axis)?;
    let s = src.storage::<T>()?;
    let soff = src.offset();
    let mut out = ctx.empty(T::DTYPE, shape_)?;
    let dst = out.as_mut_slice::<T>()?;
    let (starts, order) = (&starts[..], &order[..]);
    par_rows(ctx, dst, outer * a_len, inner, |r, d| {
        let (o, a) = (r / a_len, r % a_len);
        d.fill(T::ZERO);
        let obase = soff + view.outer_offset(o);
        for &i in &order[starts[a] as usize..starts[a + 1] as usize] {
            let base = obase + i as usize * view.axis_stride;
            match &view.table {
                None => {
                    for (v, &x) in d.iter_mut().zip(&s[base..base + inner]) {
                        *v += x;
                    }
                }
                Some(t) => {
                    for (v, &off) in d.iter_mut().zip(t.iter()) {
                        *v += s[base + off as usize];
                    }
                }
            }
        }
    });
    Ok(out)
}

/// Validation shared by gather and scatter_add: `idx` has rank `r` and
/// `idx.shape[d] <= limit[d]` for every `d` (skipping `skip_axis` when given).
fn check_idx_shape(
    op: &'static str,
    idx: &RawTensor,
    limit: &[usize],
    skip_axis: Option<usize>,
) -> Result<()> {
    let ok = idx.rank() == limit.len()
        && idx
            .shape()
            .iter()
            .zip(limit)
            .enumerate()
            .all(|(d, (&i, &l))| Some(d) == skip_axis || i <= l);
    if ok {
        Ok(())
    } else {
        Err(Error::ShapeMismatch {
            op,
            lhs: idx.shape().to_vec(),
            rhs: limit.to_vec(),
        })
    }
}

/// `out[p] = x[p with coordinate axis replaced by ids[p]]` over the positions p of `ishape`.
fn gather_typed<T: Element>(
    ctx: &ExecContext,
    x: &RawTensor,
    axis: usize,
    ids: &[i64],
    ishape: &[usize],
    out: &mut RawTensor,
) -> Result<()> {
    let st = x.strides();
    let outer_shape = &ishape[..axis];
    let k_len = ishape[axis];
    let inner_shape = &ishape[axis + 1..];
    let inner = shape::numel(inner_shape);
    let rows = shape::numel(outer_shape) * k_len;
    let table = offset_table(ctx, inner_shape, &st[axis + 1..])?;
    let s = x.storage::<T>()?;
    let xoff = x.offset();
    let axis_stride = st[axis];
    let dst = out.as_mut_slice::<T>()?;
    let table = &table[..];
    par_rows(ctx, dst, rows, inner, |r, d| {
        let base = xoff + shape::offset_of(outer_shape, &st[..axis], r / k_len);
        let row_ids = &ids[r * inner..(r + 1) * inner];
        for ((v, &off), &i) in d.iter_mut().zip(table).zip(row_ids) {
            *v = s[base + i as usize * axis_stride + off as usize];
        }
    });
    Ok(())
}

/// Adjoint of gather onto zeros(`shape_`): `out[p | axis <- ids[p]] += src[p]` for the
/// positions p of `ishape` in row-major order. Parallel by destination: the positions
/// sharing the non-axis coordinates (o, j) write only column (o, :, j), so chunks own
/// disjoint (o, j-block) sets and each destination sums in increasing k.
fn scatter_add_typed<T: Float>(
    ctx: &ExecContext,
    shape_: &[usize],
    axis: usize,
    ids: &[i64],
    ishape: &[usize],
    src: &RawTensor,
) -> Result<RawTensor> {
    let ostrides = shape::contiguous_strides(shape_);
    let ss = src.strides();
    let outer_shape = &ishape[..axis];
    let outer = shape::numel(outer_shape);
    let k_len = ishape[axis];
    let inner_shape = &ishape[axis + 1..];
    let inner = shape::numel(inner_shape);
    let otab = offset_table(ctx, inner_shape, &ostrides[axis + 1..])?;
    let stab = offset_table(ctx, inner_shape, &ss[axis + 1..])?;
    let s = src.storage::<T>()?;
    let soff = src.offset();
    let mut out = ctx.zeros(T::DTYPE, shape_)?;
    let dst = out.as_mut_slice::<T>()?;
    if outer == 0 || k_len == 0 || inner == 0 {
        return Ok(out);
    }
    // Work units: (outer group, j-block). Small rows are grouped several o per chunk;
    // long ones are split into j-blocks. Both depend on the problem size only.
    let row_work = k_len * inner;
    let (o_per, jb) = if row_work >= CHUNK {
        (1, (CHUNK / k_len).clamp(1, inner))
    } else {
        (CHUNK / row_work, inner)
    };
    let n_jb = inner.div_ceil(jb);
    let n_og = outer.div_ceil(o_per);
    let (otab, stab) = (&otab[..], &stab[..]);
    let (o_axis, s_axis) = (ostrides[axis], ss[axis]);
    // Chunk (og, b) owns out[o, :, otab[j]] for o in its group and j in its block. Seen as
    // rows of `o_axis` elements, that is a tile: the rows from its first o to the next group's,
    // by the columns from otab[j0] to the next block's (otab increases with j).
    let a_len = shape_[axis];
    let out_row = |o: usize| shape::offset_of(outer_shape, &ostrides[..axis], o) / o_axis;
    let row_cuts: Vec<usize> = (0..n_og)
        .map(|g| out_row(g * o_per))
        .chain([out_row(outer - 1) + a_len])
        .collect();
    let col_cuts: Vec<usize> = (0..n_jb)
        .map(|b| otab[b * jb] as usize)
        .chain([o_axis])
        .collect();
    let par = outer * row_work >= CHUNK;
    if n_jb == 1 {
        // Whole rows per chunk: each group owns one contiguous run of the output.
        let start = |g: usize| row_cuts[g] * o_axis;
        ctx.par_split_mut(dst, n_og, par, start, |og, run| {
            let at = start(og);
            for o in og * o_per..((og + 1) * o_per).min(outer) {
                let ob = out_row(o) * o_axis - at;
                let sb = soff + shape::offset_of(outer_shape, &ss[..axis], o);
                for k in 0..k_len {
                    let row = (o * k_len + k) * inner;
                    for j in 0..inner {
                        let a = ids[row + j] as usize;
                        let v = s[sb + k * s_axis + stab[j] as usize];
                        run[ob + a * o_axis + otab[j] as usize] += v;
                    }
                }
            }
        });
        return Ok(out);
    }
    ctx.par_tiles_mut(dst, o_axis, &row_cuts, &col_cuts, 1, par, |c, tile| {
        let (og, b) = (c / n_jb, c % n_jb);
        let (j0, j1) = (b * jb, ((b + 1) * jb).min(inner));
        let (r0, c0) = (row_cuts[og], col_cuts[b]);
        for o in og * o_per..((og + 1) * o_per).min(outer) {
            let orow = out_row(o) - r0;
            let sb = soff + shape::offset_of(outer_shape, &ss[..axis], o);
            for k in 0..k_len {
                let row = (o * k_len + k) * inner;
                for j in j0..j1 {
                    let a = ids[row + j] as usize;
                    let v = s[sb + k * s_axis + stab[j] as usize];
                    tile.row(orow + a)[otab[j] as usize - c0] += v;
                }
            }
        }
    });
    Ok(out)
}

/// The checks index_select and index_add share: `axis` within `shape`'s rank, `idx` 1-D.
fn check_select(op: &'static str, shape: &[usize], axis: usize, idx: &RawTensor) -> Result<()> {
    if axis >= shape.len() {
        return Err(Error::axis(op, axis, shape.len(), shape));
    }
    if idx.rank() != 1 {
        return Err(Error::InvalidArgument {
            op,
            msg: format!("index must be 1-D, got shape {:?}", idx.shape()),
        });
    }
    Ok(())
}

impl ExecContext {
    /// The rows an embedding lookup reads (checked against the `[V, D]` table `weight`)
    /// and the shape of its output, `[..ids.shape, D]`.
    fn embedding_rows(
        &self,
        weight: &RawTensor,
        ids: &RawTensor,
    ) -> Result<(ScratchLease<i64>, Vec<usize>)> {
        const OP: &str = "embedding";
        if weight.rank() != 2 {
            return Err(Error::InvalidArgument {
                op: OP,
                msg: format!("weight must be [V, D], got shape {:?}", weight.shape()),
            });
        }
        let list = read_indices(self, OP, ids, weight.shape()[0], weight.shape())?;
        let mut oshape = ids.shape().to_vec();
        oshape.push(weight.shape()[1]);
        Ok((list, oshape))
    }

    /// Rows of `x` along `axis` picked by the 1-D index `idx` (I64/I32/U32/U8); any dtype
    /// and strides. `out.shape` is `x.shape` with `shape[axis] = idx.len()`.
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(1)?;
    /// let x = ctx.from_slice(&[1.0f32, 2., 3., 4., 5., 6.], &[3, 2])?;
    /// let idx = ctx.from_slice(&[2i64, 0, 2], &[3])?;
    /// let y = ctx.index_select(&x, 0, &idx)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![5., 6., 1., 2., 5., 6.]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn index_select(&self, x: &RawTensor, axis: usize, idx: &RawTensor) -> Result<RawTensor> {
        const OP: &str = "index_select";
        check_select(OP, x.shape(), axis, idx)?;
        let ids = read_indices(self, OP, idx, x.shape()[axis], x.shape())?;
        let mut oshape = x.shape().to_vec();
        oshape[axis] = ids.len();
        let mut out = self.empty(x.dtype(), &oshape)?;
        crate::dispatch_any!(x.dtype(), T => select_rows::<T>(self, x, axis, &ids, &mut out))?;
        Ok(out)
    }

    /// Embedding lookup: `weight [V, D]` (any dtype), `ids` of any shape → `[..ids.shape, D]`.
    pub fn embedding(&self, weight: &RawTensor, ids: &RawTensor) -> Result<RawTensor> {
        let (list, oshape) = self.embedding_rows(weight, ids)?;
        let mut out = self.empty(weight.dtype(), &oshape)?;
        crate::dispatch_any!(weight.dtype(), T => select_rows::<T>(self, weight, 0, &list, &mut out))?;
        Ok(out)
    }

    /// [`ExecContext::embedding`] into rows of `dtype`: the table's own dtype (the plain
    /// lookup), or f32/f64 from a bf16/f16 table, where only the gathered rows are widened
    /// (exactly), never the table. Other pairs are [`Error::DTypeMismatch`].
    ///
    /// ```
    /// use fucina_core::{DType, ExecContext};
    /// let ctx = ExecContext::with_threads(1)?;
    /// let t = ctx.to_dtype(&ctx.from_slice(&[0.5f32, 1.0, -2.0, 3.0], &[2, 2])?, DType::BF16)?;
    /// let ids = ctx.from_slice(&[1i64, 1, 0], &[3])?;
    /// let rows = ctx.embedding_to(&t, &ids, DType::F32)?;
    /// assert_eq!(rows.to_vec::<f32>()?, vec![-2.0, 3.0, -2.0, 3.0, 0.5, 1.0]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn embedding_to(
        &self,
        weight: &RawTensor,
        ids: &RawTensor,
        dtype: DType,
    ) -> Result<RawTensor> {
        const OP: &str = "embedding";
        if dtype == weight.dtype() {
            return self.embedding(weight, ids);
        }
        if !(dtype.is_compute_float() && matches!(weight.dtype(), DType::BF16 | DType::F16)) {
            return Err(Error::DTypeMismatch {
                op: OP,
                lhs: dtype,
                rhs: weight.dtype(),
            });
        }
        let (list, oshape) = self.embedding_rows(weight, ids)?;
        let mut out = self.empty(dtype, &oshape)?;
        use half::{bf16, f16};
        match (weight.dtype(), dtype) {
            (DType::BF16, DType::F32) => widen_rows::<bf16, f32>(self, weight, &list, &mut out)?,
            (DType::BF16, _) => widen_rows::<bf16, f64>(self, weight, &list, &mut out)?,
            (_, DType::F32) => widen_rows::<f16, f32>(self, weight, &list, &mut out)?,
            _ => widen_rows::<f16, f64>(self, weight, &list, &mut out)?,
        }
        Ok(out)
    }

    /// Adjoint of [`ExecContext::index_select`] (f32/f64): zeros(`shape`), then
    /// `out[.., idx[i], ..] += src[.., i, ..]` along `axis`. Deterministic with duplicates:
    /// each destination sums its contributions in increasing `i`, starting from 0.
    pub fn index_add(
        &self,
        shape: &[usize],
        axis: usize,
        idx: &RawTensor,
        src: &RawTensor,
    ) -> Result<RawTensor> {
        const OP: &str = "index_add";
        check_select(OP, shape, axis, idx)?;
        let mut want = shape.to_vec();
        want[axis] = idx.numel();
        if src.shape() != want.as_slice() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: src.shape().to_vec(),
                rhs: want,
            });
        }
        let ids = read_indices(self, OP, idx, shape[axis], shape)?;
        crate::dispatch_float!(src.dtype(), OP, T => index_add_rows::<T>(self, shape, axis, &ids, src))
    }

    /// Adjoint of [`ExecContext::embedding`] (f32/f64): `grad_weight [vocab, D]` from
    /// `grad_out [..ids.shape, D]`; `gw[v] = Σ_{i: ids[i] = v, i increasing} g[i]`.
    pub fn embedding_backward(
        &self,
        vocab: usize,
        ids: &RawTensor,
        grad_out: &RawTensor,
    ) -> Result<RawTensor> {
        const OP: &str = "embedding_backward";
        let r = ids.rank();
        if grad_out.rank() != r + 1 || grad_out.shape()[..r] != *ids.shape() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: ids.shape().to_vec(),
                rhs: grad_out.shape().to_vec(),
            });
        }
        let d = grad_out.shape()[r];
        let n = ids.numel();
        let list = read_indices(self, OP, ids, vocab, &[vocab, d])?;
        let g = self.reshape(grad_out, &[n, d])?;
        crate::dispatch_float!(g.dtype(), OP, T => index_add_rows::<T>(self, &[vocab, d], 0, &list, &g))
    }

    /// `torch.gather` / `take_along_axis`: `idx` has x's rank, `idx.shape[d] <= x.shape[d]`
    /// for `d != axis`; `out.shape = idx.shape` and, for axis 1,
    /// `out[i][j] = x[i][idx[i][j]]`. Any dtype and strides.
    pub fn gather(&self, x: &RawTensor, axis: usize, idx: &RawTensor) -> Result<RawTensor> {
        const OP: &str = "gather";
        if axis >= x.rank() {
            return Err(Error::axis(OP, axis, x.rank(), x.shape()));
        }
        check_idx_shape(OP, idx, x.shape(), Some(axis))?;
        let ids = read_indices(self, OP, idx, x.shape()[axis], x.shape())?;
        let mut out = self.empty(x.dtype(), idx.shape())?;
        crate::dispatch_any!(x.dtype(), T => gather_typed::<T>(self, x, axis, &ids, idx.shape(), &mut out))?;
        Ok(out)
    }

    /// Adjoint of [`ExecContext::gather`] (`torch.scatter_add` onto zeros(`shape`)), f32/f64:
    /// `out[p | axis <- idx[p]] += src[p]`; `idx.shape <= src.shape` on every axis and
    /// `<= shape` off `axis`. Deterministic: each destination sums in increasing position.
    pub fn scatter_add(
        &self,
        shape: &[usize],
        axis: usize,
        idx: &RawTensor,
        src: &RawTensor,
    ) -> Result<RawTensor> {
        const OP: &str = "scatter_add";
        if axis >= shape.len() {
            return Err(Error::axis(OP, axis, shape.len(), shape));
        }
        check_idx_shape(OP, idx, shape, Some(axis))?;
        check_idx_shape(OP, idx, src.shape(), None)?;
        let ids = read_indices(self, OP, idx, shape[axis], shape)?;
        crate::dispatch_float!(src.dtype(), OP, T => scatter_add_typed::<T>(self, shape, axis, &ids, idx.shape(), src))
    }

    /// One-hot encoding: `idx.shape + [classes]` of `dtype` (any), 1 at each index, else 0.
    /// Not differentiable.
    pub fn one_hot(&self, idx: &RawTensor, classes: usize, dtype: DType) -> Result<RawTensor> {
        const OP: &str = "one_hot";
        let ids = read_indices(self, OP, idx, classes, idx.shape())?;
        let mut oshape = idx.shape().to_vec();
        oshape.push(classes);
        let mut out = self.zeros(dtype, &oshape)?;
        crate::dispatch_any!(dtype, T => {
            let d = out.as_mut_slice::<T>()?;
            let one = T::from_f64(1.0);
            for (i, &c) in ids.iter().enumerate() {
                d[i * classes + c as usize] = one;
            }
        });
        Ok(out)
    }
}

/// Scalar reference implementations: the spec of this file's kernels. Tensors are
/// row-major slices with explicit shapes; indices are checked (Err on a bad one).
pub mod reference {
    use crate::dtype::{Element, Float};
    use crate::error::{Error, Result};
    use crate::shape;

    fn check(op: &'static str, ids: &[i64], bound: usize, shape: &[usize]) -> Result<()> {
        match ids.iter().find(|&&v| v < 0 || v as u64 >= bound as u64) {
            Some(&bad) => Err(Error::OutOfRange {
                op,
                what: "index",
                index: bad,
                bound,
                shape: shape.to_vec(),
            }),
            None => Ok(()),
        }
    }

    /// `out[o, i, j] = x[o, idx[i], j]` with x `[outer, A, inner]` about `axis`.
    pub fn index_select<T: Element>(
        x: &[T],
        shape: &[usize],
        axis: usize,
        idx: &[i64],
    ) -> Result<Vec<T>> {
        check("index_select", idx, shape[axis], shape)?;
        let outer = shape::numel(&shape[..axis]);
        let a = shape[axis];
        let inner = shape::numel(&shape[axis + 1..]);
        let mut out = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            for &i in idx {
                for j in 0..inner {
                    out.push(x[(o * a + i as usize) * inner + j]);
                }
            }
        }
        Ok(out)
    }

    /// zeros(`shape`); then for i increasing: `out[o, idx[i], j] += src[o, i, j]`.
    pub fn index_add<T: Float>(
        shape: &[usize],
        axis: usize,
        idx: &[i64],
        src: &[T],
    ) -> Result<Vec<T>> {
        check("index_add", idx, shape[axis], shape)?;
        let outer = shape::numel(&shape[..axis]);
        let a = shape[axis];
        let inner = shape::numel(&shape[axis + 1..]);
        let n = idx.len();
        let mut out = vec![T::ZERO; shape::numel(shape)];
        for o in 0..outer {
            for (i, &d) in idx.iter().enumerate() {
                for j in 0..inner {
                    out[(o * a + d as usize) * inner + j] += src[(o * n + i) * inner + j];
                }
            }
        }
        Ok(out)
    }

    /// Position `p` of `ishape` (row-major) with coordinate `axis` replaced by `v`,
    /// as a row-major linear index into `shape`.
    fn replaced(p: usize, ishape: &[usize], axis: usize, v: usize, shape: &[usize]) -> usize {
        let mut rem = p;
        let mut coords = vec![0; ishape.len()];
        for d in (0..ishape.len()).rev() {
            coords[d] = rem % ishape[d];
            rem /= ishape[d];
        }
        coords[axis] = v;
        coords
            .iter()
            .zip(shape::contiguous_strides(shape).iter())
            .map(|(c, s)| c * s)
            .sum()
    }

    /// `out[p] = x[p | axis <- idx[p]]` over the positions p of `ishape`.
    pub fn gather<T: Element>(
        x: &[T],
        shape: &[usize],
        axis: usize,
        idx: &[i64],
        ishape: &[usize],
    ) -> Result<Vec<T>> {
        check("gather", idx, shape[axis], shape)?;
        Ok((0..idx.len())
            .map(|p| x[replaced(p, ishape, axis, idx[p] as usize, shape)])
            .collect())
    }

    /// zeros(`shape`); then for p increasing: `out[p | axis <- idx[p]] += src[p]`
    /// (`src` row-major of `ishape`, i.e. already narrowed to idx's shape).
    pub fn scatter_add<T: Float>(
        shape: &[usize],
        axis: usize,
        idx: &[i64],
        ishape: &[usize],
        src: &[T],
    ) -> Result<Vec<T>> {
        check("scatter_add", idx, shape[axis], shape)?;
        let mut out = vec![T::ZERO; shape::numel(shape)];
        for p in 0..idx.len() {
            out[replaced(p, ishape, axis, idx[p] as usize, shape)] += src[p];
        }
        Ok(out)
    }

    /// `out[i, c] = (idx[i] == c)` as 1/0.
    pub fn one_hot<T: Element>(idx: &[i64], classes: usize) -> Result<Vec<T>> {
        check("one_hot", idx, classes, &[classes])?;
        let mut out = vec![T::from_f64(0.0); idx.len() * classes];
        for (i, &c) in idx.iter().enumerate() {
            out[i * classes + c as usize] = T::from_f64(1.0);
        }
        Ok(out)
    }
}
