//! Differentiable ops, one file per domain (mirroring `fucina-core/src/kernels`);
//! fused ops (a kernel with its own backward) one file per op family in
//! [`fused`], each with its gradcheck rows.
//!
//! Each op: validate, run the kernel, and `graph::record` a backward
//! node that holds `clone_view`s of exactly what its formula needs. The math
//! of each backward is written next to it.

pub mod concat;
pub(crate) mod derivatives;
pub mod elementwise;
pub mod fused;
pub mod index;
pub(crate) mod linear_map;
pub mod matmul;
pub mod reduce;
pub mod shape;

/// The fused ops at their historical paths (`ops::attention::AttentionOpts`, ...).
pub use fused::{attention, loss, norm, softmax};

use fucina_core::shape::normalize_axis;

use crate::error::Result;
use crate::tape::tensor::Tensor;

/// Resolves a possibly negative axis of `t`.
pub(crate) fn axis_of(op: &'static str, t: &Tensor, axis: isize) -> Result<usize> {
    Ok(normalize_axis(op, axis, t.rank(), t.shape())?)
}

/// Resolves a list of possibly negative axes of `t` (empty = all axes).
pub(crate) fn axes_of(op: &'static str, t: &Tensor, axes: &[isize]) -> Result<Vec<usize>> {
    if axes.is_empty() {
        return Ok((0..t.rank()).collect());
    }
    axes.iter().map(|&a| axis_of(op, t, a)).collect()
}

/// Checks that both operands share a dtype.
pub(crate) fn same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(fucina_core::Error::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: b.dtype(),
        }
        .into());
    }
    Ok(())
}
