//! Strided copy to contiguous, and dtype conversion: the kernels and their
//! `ExecContext` entry points (`copy`, `contiguous`, `reshape`, `to_dtype`).
//!
//! Dtype-agnostic: a copy moves elements by their byte width, so every dtype
//! (f16, bf16 and the integer types included) shares one kernel.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::shape;
use crate::tensor::RawTensor;

impl ExecContext {
    /// `t` itself (a view) when contiguous, else a contiguous copy.
    pub fn contiguous(&self, t: &RawTensor) -> Result<RawTensor> {
        if t.is_contiguous() {
            return Ok(t.clone_view());
        }
        self.copy(t)
    }

    /// A fresh contiguous copy of any view.
    pub fn copy(&self, t: &RawTensor) -> Result<RawTensor> {
        let mut out = self.empty(t.dtype(), t.shape())?;
        strided_copy(self, t, &mut out)?;
        Ok(out)
    }

    /// `reshape` as a view when the strides allow it, else through a contiguous copy.
    pub fn reshape(&self, t: &RawTensor, shape: &[usize]) -> Result<RawTensor> {
        if shape::checked_numel(shape) != Some(t.numel()) {
            return Err(Error::BadView {
                op: "reshape",
                from: t.shape().to_vec(),
                to: shape.to_vec(),
            });
        }
        match t.reshape(shape) {
            Ok(v) => Ok(v),
            Err(_) => self.copy(t)?.reshape(shape),
        }
    }

    /// Converts to another dtype (a copy; a view when the dtype already matches).
    pub fn to_dtype(&self, t: &RawTensor, dtype: DType) -> Result<RawTensor> {
        if t.dtype() == dtype {
            return Ok(t.clone_view());
        }
        let mut out = self.empty(dtype, t.shape())?;
        convert(t, &mut out)?;
        Ok(out)
    }
}

/// Elements per parallel chunk of a copy (fixed, so results never depend on threads).
const COPY_CHUNK: usize = 1 << 16;

fn copy_typed<T: Element>(ctx: &ExecContext, src: &RawTensor, dst: &mut RawTensor) -> Result<()> {
    let n = src.numel();
    let shape = src.shape().to_vec();
    let strides = src.strides().to_vec();
    let off = src.offset();
    let s = src.storage::<T>()?;
    let d = dst.as_mut_slice::<T>()?;
    if src.is_contiguous() {
        d.copy_from_slice(&s[off..off + n]);
        return Ok(());
    }
    // Rows of the innermost axis are copied with a stride loop; rows are split into fixed chunks.
    let inner = *shape.last().unwrap_or(&1);
    let inner_stride = *strides.last().unwrap_or(&1);
    let outer_shape = &shape[..shape.len().saturating_sub(1)];
    let outer_strides = &strides[..strides.len().saturating_sub(1)];
    let rows_per_chunk = (COPY_CHUNK / inner.max(1)).max(1);
    // Each chunk gets its own disjoint rows of `d`.
    ctx.par_chunks_mut(d, rows_per_chunk * inner, n >= COPY_CHUNK, |c, dc| {
        let r0 = c * rows_per_chunk;
        for (r, drow) in (r0..).zip(dc.chunks_exact_mut(inner)) {
            let base = off + crate::shape::offset_of(outer_shape, outer_strides, r);
            for (j, o) in drow.iter_mut().enumerate() {
                *o = s[base + j * inner_stride];
            }
        }
    });
    Ok(())
}

/// Copies any view `src` into the fresh contiguous `dst` of the same shape and dtype.
pub fn strided_copy(ctx: &ExecContext, src: &RawTensor, dst: &mut RawTensor) -> Result<()> {
    if src.shape() != dst.shape() {
        return Err(Error::ShapeMismatch {
            op: "copy",
            lhs: src.shape().to_vec(),
            rhs: dst.shape().to_vec(),
        });
    }
    if src.dtype() != dst.dtype() {
        return Err(Error::DTypeMismatch {
            op: "copy",
            lhs: src.dtype(),
            rhs: dst.dtype(),
        });
    }
    match src.dtype().size_of() {
        1 => copy_bytes::<u8>(ctx, src, dst),
        2 => copy_bytes::<half::f16>(ctx, src, dst),
        4 => copy_bytes::<u32>(ctx, src, dst),
        8 => copy_bytes::<i64>(ctx, src, dst),
        _ => unreachable!("dtype sizes are 1, 2, 4 or 8"),
    }
}

/// Reinterprets both tensors as same-width unsigned integers and copies.
fn copy_bytes<U: Element>(ctx: &ExecContext, src: &RawTensor, dst: &mut RawTensor) -> Result<()> {
    let s = src.reinterpret(U::DTYPE)?;
    let orig = dst.dtype();
    dst.set_dtype_same_width(U::DTYPE)?;
    let r = copy_typed::<U>(ctx, &s, dst);
    dst.set_dtype_same_width(orig)?;
    r
}

/// Converts `src` element-wise into `dst` (same shape, any dtypes).
pub fn convert(src: &RawTensor, dst: &mut RawTensor) -> Result<()> {
    if src.shape() != dst.shape() {
        return Err(Error::ShapeMismatch {
            op: "to_dtype",
            lhs: src.shape().to_vec(),
            rhs: dst.shape().to_vec(),
        });
    }
    let dd = dst.dtype();
    crate::dispatch_any!(src.dtype(), S => {
        let s = src.storage::<S>()?;
        crate::dispatch_any!(dd, D => {
            let d = dst.as_mut_slice::<D>()?;
            for (o, x) in d.iter_mut().zip(src.offsets()) {
                *o = D::from_f64(s[x].to_f64());
            }
            Ok(())
        })
    })
}
