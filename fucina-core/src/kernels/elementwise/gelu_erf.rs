//! GELU in its exact erf form, forward and backward, with the erf vectorised: contiguous
//! runs go through `kernels::simd::erf_in_place` (AVX2, bitwise `libm::erf`) in blocks of
//! [`BLOCK`], and the rest of the formula is the op table's own `gelu_erf_y` /
//! `gelu_erf_dy` (`unary_ops.rs`), so every output is bit for bit the table kernel's
//! `GeluErf.f(x)` / `gy·GeluErf.df(x)` — the erf argument rounded to the element type and
//! widened to f64, erf's result rounded back, exactly as `Float::erf`. The backward's
//! Gaussian `exp` stays `Float::exp` (the platform's libm, which cannot be reproduced
//! portably), one call per element.
//!
//! Each element is computed on its own in the map engine's fixed chunks, so results never
//! depend on the thread count; strided runs fall back to the table's per-element `f` / `df`.

use super::map::{run_chunks, Plan};
use super::pointwise::{GeluErf, Pointwise};
use super::unary_ops::{gelu_erf_arg, gelu_erf_dy, gelu_erf_y};
use crate::dtype::Float;
use crate::error::Result;
use crate::exec::ExecContext;
use crate::kernels::simd::erf_in_place;
use crate::tensor::RawTensor;

/// Elements per erf block (a stack buffer of f64).
const BLOCK: usize = 256;

/// `y[i] = gelu_erf(x[i])` over one contiguous run.
#[inline]
fn forward_row<T: Float>(x: &[T], y: &mut [T]) {
    let mut buf = [0.0f64; BLOCK];
    for (xc, yc) in x.chunks(BLOCK).zip(y.chunks_mut(BLOCK)) {
        let e = &mut buf[..xc.len()];
        for (e, &v) in e.iter_mut().zip(xc) {
            *e = gelu_erf_arg(v).to_f64();
        }
        erf_in_place(e);
        for ((o, &v), &e) in yc.iter_mut().zip(xc).zip(e.iter()) {
            *o = gelu_erf_y(v, T::from_f64(e));
        }
    }
}

/// `gx[i] = gy[i]·gelu_erf'(x[i])` over one contiguous run of each.
#[inline]
fn backward_row<T: Float>(x: &[T], gy: &[T], gx: &mut [T]) {
    let mut buf = [0.0f64; BLOCK];
    for ((xc, gc), oc) in x
        .chunks(BLOCK)
        .zip(gy.chunks(BLOCK))
        .zip(gx.chunks_mut(BLOCK))
    {
        let e = &mut buf[..xc.len()];
        for (e, &v) in e.iter_mut().zip(xc) {
            *e = gelu_erf_arg(v).to_f64();
        }
        erf_in_place(e);
        for (((o, &v), &g), &e) in oc.iter_mut().zip(xc).zip(gc).zip(e.iter()) {
            // gx = gy · f'(x), as the generic unary backward.
            *o = g * gelu_erf_dy(v, T::from_f64(e));
        }
    }
}

/// `gelu_erf(x)` as a fresh contiguous tensor; `x` may have any strides.
pub(super) fn forward<T: Float>(ctx: &ExecContext, x: &RawTensor) -> Result<RawTensor> {
    let mut out = ctx.empty(T::DTYPE, x.shape())?;
    let xs = x.storage::<T>()?;
    let plan = Plan::new(x.shape(), [(x.strides(), x.offset())]);
    let [si] = plan.inner_strides();
    run_chunks::<T>(ctx, &mut out, |start, dst| {
        plan.for_rows(start, start + dst.len(), |[ox], pos, len| {
            let d = &mut dst[pos - start..pos - start + len];
            if si == 1 {
                forward_row(&xs[ox..ox + len], d);
            } else {
                for (j, o) in d.iter_mut().enumerate() {
                    *o = GeluErf.f(xs[ox + j * si]);
                }
            }
        })
    })?;
    Ok(out)
}

/// `gx = gy·gelu_erf'(x)` (`x` and `gy` of one shape, any strides) as a fresh contiguous
/// tensor.
pub(super) fn backward<T: Float>(
    ctx: &ExecContext,
    x: &RawTensor,
    gy: &RawTensor,
) -> Result<RawTensor> {
    let mut out = ctx.empty(T::DTYPE, gy.shape())?;
    let (xs, gs) = (x.storage::<T>()?, gy.storage::<T>()?);
    let plan = Plan::new(
        gy.shape(),
        [(x.strides(), x.offset()), (gy.strides(), gy.offset())],
    );
    let [ix, ig] = plan.inner_strides();
    run_chunks::<T>(ctx, &mut out, |start, dst| {
        plan.for_rows(start, start + dst.len(), |[ox, og], pos, len| {
            let d = &mut dst[pos - start..pos - start + len];
            if (ix, ig) == (1, 1) {
                backward_row(&xs[ox..ox + len], &gs[og..og + len], d);
            } else {
                for (j, o) in d.iter_mut().enumerate() {
                    *o = gs[og + j * ig] * GeluErf.df(xs[ox + j * ix]);
                }
            }
        })
    })?;
    Ok(out)
}
