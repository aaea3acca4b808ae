//! The broadcast map engine behind every pointwise kernel (the elementwise
//! ops, GELU and gradient accumulation in `elementwise/`) and the chunking the
//! reductions (`reduce.rs`) and random fills (`random.rs`) share.
//!
//! `map1..map4` apply a per-element closure to operands of any strides,
//! broadcast NumPy-style to one output shape, and write a fresh contiguous
//! output. Axes are collapsed first (so contiguous inputs become one long
//! row), then the output is cut into fixed chunks of [`CHUNK`] elements that
//! run in parallel above [`PAR_THRESHOLD`]. Each element is computed on its
//! own, so results never depend on the thread count. The closure is a
//! generic parameter: every op gets its own monomorphised loop.

use smallvec::SmallVec;

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::shape::{self, Dims};
use crate::tensor::RawTensor;

/// Elements per parallel chunk (fixed: chunking never depends on threads).
pub const CHUNK: usize = 1 << 15;
/// Outputs at least this large run their chunks in parallel.
pub const PAR_THRESHOLD: usize = 1 << 15;

/// A collapsed iteration plan: `N` operands read at `offsets + Σ idx·strides`
/// over `shape` (rank ≥ 1), in row-major order of the output.
#[derive(Clone, Debug)]
pub struct Plan<const N: usize> {
    /// The collapsed shape (size-1 axes dropped, mergeable axes merged).
    pub shape: Dims,
    /// Per-operand strides over `shape`.
    pub strides: [Dims; N],
    /// Per-operand element offsets of element 0.
    pub offsets: [usize; N],
}

impl<const N: usize> Plan<N> {
    /// Plans `N` operands, each given as `(strides broadcast to out_shape, offset)`.
    pub fn new(out_shape: &[usize], ops: [(&[usize], usize); N]) -> Plan<N> {
        let mut shape: Dims = SmallVec::new();
        let mut strides: [Dims; N] = std::array::from_fn(|_| SmallVec::new());
        for d in 0..out_shape.len() {
            let n = out_shape[d];
            if n == 1 {
                continue;
            }
            let last = shape.len();
            let merge = last > 0 && (0..N).all(|k| strides[k][last - 1] == ops[k].0[d] * n);
            if merge {
                shape[last - 1] *= n;
                for k in 0..N {
                    strides[k][last - 1] = ops[k].0[d];
                }
            } else {
                shape.push(n);
                for k in 0..N {
                    strides[k].push(ops[k].0[d]);
                }
            }
        }
        if shape.is_empty() {
            shape.push(1);
            for s in strides.iter_mut() {
                s.push(0);
            }
        }
        Plan {
            shape,
            strides,
            offsets: std::array::from_fn(|k| ops[k].1),
        }
    }

    /// Inner-axis stride of each operand.
    #[inline]
    pub fn inner_strides(&self) -> [usize; N] {
        std::array::from_fn(|k| *self.strides[k].last().unwrap_or(&0))
    }

    /// Calls `f(offsets, pos, len)` for each run of the innermost axis that
    /// intersects the output range `start..end`; `pos` is the output index of
    /// the run's first element and the operands advance by their inner strides.
    pub fn for_rows(&self, start: usize, end: usize, mut f: impl FnMut([usize; N], usize, usize)) {
        let rank = self.shape.len();
        let inner = self.shape[rank - 1];
        let mut idx: Dims = SmallVec::from_elem(0, rank);
        let mut rem = start;
        for d in (0..rank).rev() {
            idx[d] = rem % self.shape[d];
            rem /= self.shape[d];
        }
        let mut offs: [usize; N] = std::array::from_fn(|k| {
            self.offsets[k]
                + (0..rank)
                    .map(|d| idx[d] * self.strides[k][d])
                    .sum::<usize>()
        });
        let mut pos = start;
        while pos < end {
            let j = idx[rank - 1];
            let len = (inner - j).min(end - pos);
            f(offs, pos, len);
            pos += len;
            if pos >= end {
                break;
            }
            // The run ended at the end of its row: rewind the inner axis, carry outward.
            for k in 0..N {
                offs[k] -= j * self.strides[k][rank - 1];
            }
            idx[rank - 1] = 0;
            for d in (0..rank - 1).rev() {
                idx[d] += 1;
                for k in 0..N {
                    offs[k] += self.strides[k][d];
                }
                if idx[d] < self.shape[d] {
                    break;
                }
                for k in 0..N {
                    offs[k] -= self.shape[d] * self.strides[k][d];
                }
                idx[d] = 0;
            }
        }
    }
}

/// Runs `body(start, dst)` over fixed chunks of the contiguous output `out`,
/// where `dst` is `out[start..start + dst.len()]`.
pub fn run_chunks<O: Element>(
    ctx: &ExecContext,
    out: &mut RawTensor,
    body: impl Fn(usize, &mut [O]) + Send + Sync,
) -> Result<()> {
    let o = out.as_mut_slice::<O>()?;
    let n = o.len();
    ctx.par_chunks_mut(o, CHUNK, n >= PAR_THRESHOLD, |c, dst| body(c * CHUNK, dst));
    Ok(())
}

/// A fresh contiguous output of `shape` written one innermost-axis run at a time over the
/// [`Plan`] of the operands' `layouts` (`(strides broadcast to shape, offset)` each):
/// `fill(dst, offsets, inner_strides)` writes the run `dst`, whose operands start at
/// `offsets`. In the fixed chunks of [`run_chunks`]. The loop [`map1_runs`] and
/// [`map2_runs`] share; inlined, so each caller's run body stays its own.
#[inline(always)]
fn runs_into<O: Element, const N: usize>(
    ctx: &ExecContext,
    shape: &[usize],
    layouts: [(&[usize], usize); N],
    fill: impl Fn(&mut [O], [usize; N], [usize; N]) + Send + Sync,
) -> Result<RawTensor> {
    let mut out = ctx.empty(O::DTYPE, shape)?;
    let plan = Plan::new(shape, layouts);
    let strides = plan.inner_strides();
    run_chunks::<O>(ctx, &mut out, |start, dst| {
        plan.for_rows(start, start + dst.len(), |offsets, pos, len| {
            fill(&mut dst[pos - start..pos - start + len], offsets, strides);
        })
    })?;
    Ok(out)
}

/// The broadcast shape of several operand shapes, or [`Error::Broadcast`].
pub fn broadcast_all(op: &'static str, shapes: &[&[usize]]) -> Result<Dims> {
    let mut out: Dims = SmallVec::from_slice(shapes.first().copied().unwrap_or(&[]));
    for s in &shapes[1..] {
        out = shape::broadcast_shapes(op, &out, s)?;
    }
    Ok(out)
}

fn bstrides(op: &'static str, t: &RawTensor, target: &[usize]) -> Result<Dims> {
    shape::broadcast_strides(op, t.shape(), t.strides(), target)
}

/// `out[i] = f(x[i])` for any strides of `x`.
pub fn map1<A: Element, O: Element>(
    ctx: &ExecContext,
    x: &RawTensor,
    f: impl Fn(A) -> O + Send + Sync,
) -> Result<RawTensor> {
    map1_runs(
        ctx,
        x,
        |src: &[A], dst: &mut [O]| {
            for (o, &v) in dst.iter_mut().zip(src) {
                *o = f(v);
            }
        },
        &f,
    )
}

/// [`map1`] with the contiguous runs handed to `run(src, dst)` whole (`dst.len() ==
/// src.len()`), so a loop written inside `run` around an inlined `f` vectorises even when
/// `f` is too large for the compiler to inline into a generic loop; strided runs use `f`
/// per element. `run` must compute exactly `dst[i] = f(src[i])`.
pub fn map1_runs<A: Element, O: Element>(
    ctx: &ExecContext,
    x: &RawTensor,
    run: impl Fn(&[A], &mut [O]) + Send + Sync,
    f: impl Fn(A) -> O + Send + Sync,
) -> Result<RawTensor> {
    let xs = x.storage::<A>()?;
    let layouts = [(x.strides(), x.offset())];
    runs_into(ctx, x.shape(), layouts, |d: &mut [O], [ox], [si]| {
        if si == 1 {
            run(&xs[ox..ox + d.len()], d);
        } else {
            for (j, o) in d.iter_mut().enumerate() {
                *o = f(xs[ox + j * si]);
            }
        }
    })
}

/// `out[i] = f(a[i], b[i])` for `a` and `b` of one shape (any strides; the output has it),
/// with the runs where both are contiguous handed to `run(a, b, dst)` whole, as in
/// [`map1_runs`]; other runs use `f` per element. `run` must compute exactly
/// `dst[i] = f(a[i], b[i])`.
pub fn map2_runs<A: Element, B: Element, O: Element>(
    ctx: &ExecContext,
    a: &RawTensor,
    b: &RawTensor,
    run: impl Fn(&[A], &[B], &mut [O]) + Send + Sync,
    f: impl Fn(A, B) -> O + Send + Sync,
) -> Result<RawTensor> {
    if a.shape() != b.shape() {
        return Err(Error::ShapeMismatch {
            op: "map2_runs",
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    let (asl, bsl) = (a.storage::<A>()?, b.storage::<B>()?);
    let layouts = [(a.strides(), a.offset()), (b.strides(), b.offset())];
    runs_into(
        ctx,
        a.shape(),
        layouts,
        |d: &mut [O], [oa, ob], [sa, sb]| {
            let len = d.len();
            if (sa, sb) == (1, 1) {
                run(&asl[oa..oa + len], &bsl[ob..ob + len], d);
            } else {
                for (j, o) in d.iter_mut().enumerate() {
                    *o = f(asl[oa + j * sa], bsl[ob + j * sb]);
                }
            }
        },
    )
}

/// `out[i] = f(a[i], b[i])` with `a` and `b` broadcast to their common shape.
pub fn map2<A: Element, B: Element, O: Element>(
    ctx: &ExecContext,
    op: &'static str,
    a: &RawTensor,
    b: &RawTensor,
    f: impl Fn(A, B) -> O + Send + Sync,
) -> Result<RawTensor> {
    let shape = shape::broadcast_shapes(op, a.shape(), b.shape())?;
    map2_to(ctx, op, a, b, &shape, f)
}

/// [`map2`] onto an explicit output shape that both operands broadcast to.
pub fn map2_to<A: Element, B: Element, O: Element>(
    ctx: &ExecContext,
    op: &'static str,
    a: &RawTensor,
    b: &RawTensor,
    shape: &[usize],
    f: impl Fn(A, B) -> O + Send + Sync,
) -> Result<RawTensor> {
    let sa = bstrides(op, a, shape)?;
    let sb = bstrides(op, b, shape)?;
    let mut out = ctx.empty(O::DTYPE, shape)?;
    let xa = a.storage::<A>()?;
    let xb = b.storage::<B>()?;
    let plan = Plan::new(shape, [(&sa, a.offset()), (&sb, b.offset())]);
    let [ia, ib] = plan.inner_strides();
    run_chunks::<O>(ctx, &mut out, |start, dst| {
        plan.for_rows(start, start + dst.len(), |[oa, ob], pos, len| {
            let d = &mut dst[pos - start..pos - start + len];
            match (ia, ib) {
                (1, 1) => {
                    for ((o, &u), &v) in d.iter_mut().zip(&xa[oa..oa + len]).zip(&xb[ob..ob + len])
                    {
                        *o = f(u, v);
                    }
                }
                (1, 0) => {
                    let v = xb[ob];
                    for (o, &u) in d.iter_mut().zip(&xa[oa..oa + len]) {
                        *o = f(u, v);
                    }
                }
                (0, 1) => {
                    let u = xa[oa];
                    for (o, &v) in d.iter_mut().zip(&xb[ob..ob + len]) {
                        *o = f(u, v);
                    }
                }
                _ => {
                    for (j, o) in d.iter_mut().enumerate() {
                        *o = f(xa[oa + j * ia], xb[ob + j * ib]);
                    }
                }
            }
        })
    })?;
    Ok(out)
}

/// `out[i] = f(a[i], b[i], c[i])` with all three broadcast to their common shape.
pub fn map3<A: Element, B: Element, C: Element, O: Element>(
    ctx: &ExecContext,
    op: &'static str,
    a: &RawTensor,
    b: &RawTensor,
    c: &RawTensor,
    f: impl Fn(A, B, C) -> O + Send + Sync,
) -> Result<RawTensor> {
    let shape = broadcast_all(op, &[a.shape(), b.shape(), c.shape()])?;
    let sa = bstrides(op, a, &shape)?;
    let sb = bstrides(op, b, &shape)?;
    let sc = bstrides(op, c, &shape)?;
    let mut out = ctx.empty(O::DTYPE, &shape)?;
    let (xa, xb, xc) = (a.storage::<A>()?, b.storage::<B>()?, c.storage::<C>()?);
    let plan = Plan::new(
        &shape,
        [(&sa, a.offset()), (&sb, b.offset()), (&sc, c.offset())],
    );
    let [ia, ib, ic] = plan.inner_strides();
    run_chunks::<O>(ctx, &mut out, |start, dst| {
        plan.for_rows(start, start + dst.len(), |[oa, ob, oc], pos, len| {
            let d = &mut dst[pos - start..pos - start + len];
            if (ia, ib, ic) == (1, 1, 1) {
                let (ra, rb, rc) = (&xa[oa..oa + len], &xb[ob..ob + len], &xc[oc..oc + len]);
                for (j, o) in d.iter_mut().enumerate() {
                    *o = f(ra[j], rb[j], rc[j]);
                }
            } else {
                for (j, o) in d.iter_mut().enumerate() {
                    *o = f(xa[oa + j * ia], xb[ob + j * ib], xc[oc + j * ic]);
                }
            }
        })
    })?;
    Ok(out)
}

/// `out[i] = f(t0[i], t1[i], t2[i], t3[i])` for four operands of one element
/// type, all broadcast to `shape` (which they must broadcast to).
pub fn map4<T: Element>(
    ctx: &ExecContext,
    op: &'static str,
    ts: [&RawTensor; 4],
    shape: &[usize],
    f: impl Fn(T, T, T, T) -> T + Send + Sync,
) -> Result<RawTensor> {
    let st: [Dims; 4] = [
        bstrides(op, ts[0], shape)?,
        bstrides(op, ts[1], shape)?,
        bstrides(op, ts[2], shape)?,
        bstrides(op, ts[3], shape)?,
    ];
    let xs: [&[T]; 4] = [
        ts[0].storage::<T>()?,
        ts[1].storage::<T>()?,
        ts[2].storage::<T>()?,
        ts[3].storage::<T>()?,
    ];
    let mut out = ctx.empty(T::DTYPE, shape)?;
    let plan = Plan::new(shape, std::array::from_fn(|k| (&st[k][..], ts[k].offset())));
    let inn = plan.inner_strides();
    run_chunks::<T>(ctx, &mut out, |start, dst| {
        plan.for_rows(start, start + dst.len(), |o, pos, len| {
            let d = &mut dst[pos - start..pos - start + len];
            if inn == [1, 1, 1, 1] {
                let r: [&[T]; 4] = std::array::from_fn(|k| &xs[k][o[k]..o[k] + len]);
                for (j, v) in d.iter_mut().enumerate() {
                    *v = f(r[0][j], r[1][j], r[2][j], r[3][j]);
                }
            } else {
                for (j, v) in d.iter_mut().enumerate() {
                    *v = f(
                        xs[0][o[0] + j * inn[0]],
                        xs[1][o[1] + j * inn[1]],
                        xs[2][o[2] + j * inn[2]],
                        xs[3][o[3] + j * inn[3]],
                    );
                }
            }
        })
    })?;
    Ok(out)
}

/// Checks that `t` has dtype `want`, else [`Error::DTypeMismatch`] naming `op`.
pub fn expect_dtype(op: &'static str, t: &RawTensor, want: crate::DType) -> Result<()> {
    if t.dtype() != want {
        return Err(Error::DTypeMismatch {
            op,
            lhs: t.dtype(),
            rhs: want,
        });
    }
    Ok(())
}
