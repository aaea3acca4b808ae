//! SiLU (`x·σ(x)`), forward and backward, with its one exp vectorised: contiguous runs are
//! cut into blocks of [`BLOCK`] whose `e^{-|x|}` go through [`ExpSlice`] (f32:
//! `kernels::simd::exp_f32_in_place`, bitwise `f32::exp`); the rest is the op table's own
//! `silu_y` / `silu_dy` (`unary_ops.rs`), which its `f` / `df` are written with, so every
//! output is bit for bit the table kernel's `f(x)` / `gy·df(x)`. Strided runs use `f` / `df`
//! per element. Each element is computed on its own in the map engine's fixed chunks, so
//! results never depend on the thread count.

use super::gelu::{backward_row, sigmoid_block, ExpSlice, BLOCK};
use super::pointwise::{Pointwise, Silu};
use super::unary_ops::{silu_dy, silu_y};
use crate::error::Result;
use crate::exec::ExecContext;
use crate::kernels::map::{map1_runs, map2_runs};
use crate::tensor::RawTensor;

/// `y[i] = silu(x[i])` over one contiguous run.
fn forward_row<T: ExpSlice>(x: &[T], y: &mut [T]) {
    let (mut a, mut e) = ([T::ZERO; BLOCK], [T::ZERO; BLOCK]);
    for (xc, yc) in x.chunks(BLOCK).zip(y.chunks_mut(BLOCK)) {
        let (a, e) = (&mut a[..xc.len()], &mut e[..xc.len()]);
        sigmoid_block(xc, a, e, |v| v);
        for ((o, &v), &e) in yc.iter_mut().zip(xc).zip(e.iter()) {
            *o = silu_y(v, e);
        }
    }
}

/// `gx[i] = gy[i]·silu'(x[i])` over one contiguous run of each.
fn backward_row_silu<T: ExpSlice>(x: &[T], gy: &[T], gx: &mut [T]) {
    let block = |xc: &[T], a: &mut [T], e: &mut [T]| sigmoid_block(xc, a, e, |v| v);
    backward_row(x, gy, gx, block, |v, _, e| silu_dy(v, e));
}

/// `silu(x)` as a fresh contiguous tensor; `x` may have any strides.
pub(super) fn forward<T: ExpSlice>(ctx: &ExecContext, x: &RawTensor) -> Result<RawTensor> {
    map1_runs::<T, T>(ctx, x, forward_row::<T>, |v| Silu.f(v))
}

/// `gx = gy·silu'(x)` (`x` and `gy` of one shape, any strides), fresh and contiguous.
pub(super) fn backward<T: ExpSlice>(
    ctx: &ExecContext,
    x: &RawTensor,
    gy: &RawTensor,
) -> Result<RawTensor> {
    map2_runs::<T, T, T>(ctx, x, gy, backward_row_silu::<T>, |v, g| g * Silu.df(v))
}
