//! Shape and stride arithmetic shared by views and kernels. A leaf module.
//!
//! Strides are in elements and never negative; a stride of 0 is a broadcast
//! axis. Row-major ("C") order is the contiguous layout.
//!
//! Every size computed from user input (element counts, sums of extents,
//! padded lengths, offsets, a view's reach) goes through the checked helpers
//! here ([`numel_of`], [`sum_of`], [`add_of`], [`mul_of`], [`view_reach`]),
//! which return [`Error::SizeOverflow`] instead of wrapping. Entry points
//! validate with them once; kernels then use the unchecked forms.

use smallvec::SmallVec;

use crate::error::{Error, Result};

/// A small inline vector of dimensions or strides (no heap for rank ≤ 6).
pub type Dims = SmallVec<[usize; 6]>;

/// Number of elements of a shape (1 for a scalar).
#[inline]
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Number of elements of a shape, or `None` if the product overflows `usize`.
#[inline]
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// `v`, or (when a checked computation gave `None`) [`Error::SizeOverflow`] naming `op`,
/// `what` and the `shape` it came from.
#[inline]
fn or_overflow(
    v: Option<usize>,
    op: &'static str,
    what: &'static str,
    shape: &[usize],
) -> Result<usize> {
    v.ok_or_else(|| Error::SizeOverflow {
        op,
        what,
        shape: shape.to_vec(),
    })
}

/// Element count of `shape`, or [`Error::SizeOverflow`] naming `op`.
#[inline]
pub fn numel_of(op: &'static str, shape: &[usize]) -> Result<usize> {
    or_overflow(checked_numel(shape), op, "element count", shape)
}

/// `pub fn $name(op, what, a, b, shape)`: `a $sym b` by `usize::$checked`, or
/// [`Error::SizeOverflow`] naming `op`, `what` and the `shape` it came from.
macro_rules! checked_of {
    ($($name:ident: $checked:ident, $sym:literal;)*) => {$(
        #[doc = concat!("`a ", $sym, " b`, or [`Error::SizeOverflow`] naming `op`, `what` and the `shape` it came from.")]
        #[inline]
        pub fn $name(
            op: &'static str,
            what: &'static str,
            a: usize,
            b: usize,
            shape: &[usize],
        ) -> Result<usize> {
            or_overflow(a.$checked(b), op, what, shape)
        }
    )*};
}
checked_of! {
    add_of: checked_add, "+";
    mul_of: checked_mul, "*";
}

/// The sum of `values`, or [`Error::SizeOverflow`] naming `op` and `what`
/// (the error carries the values summed).
pub fn sum_of(op: &'static str, what: &'static str, values: &[usize]) -> Result<usize> {
    let sum = values.iter().try_fold(0usize, |acc, &v| acc.checked_add(v));
    or_overflow(sum, op, what, values)
}

/// One past the last element a view of `(shape, strides)` at `offset` addresses
/// (`offset` itself for an empty view), or `None` when that overflows `usize`.
/// A view is in bounds when this is at most the extent of the tensor it views.
pub fn view_reach(shape: &[usize], strides: &[usize], offset: usize) -> Option<usize> {
    if shape.contains(&0) {
        return Some(offset);
    }
    shape
        .iter()
        .zip(strides)
        .try_fold(offset, |acc, (&d, &s)| {
            (d - 1).checked_mul(s).and_then(|x| acc.checked_add(x))
        })
        .and_then(|x| x.checked_add(1))
}

/// Row-major strides of a contiguous tensor of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Dims {
    let mut s: Dims = SmallVec::from_elem(0, shape.len());
    let mut acc = 1usize;
    for i in (0..shape.len()).rev() {
        s[i] = acc;
        acc *= shape[i];
    }
    s
}

/// True when `(shape, strides)` is row-major contiguous (size-1 axes may have any stride).
pub fn is_contiguous(shape: &[usize], strides: &[usize]) -> bool {
    let mut acc = 1usize;
    for i in (0..shape.len()).rev() {
        if shape[i] != 1 && strides[i] != acc {
            return false;
        }
        acc *= shape[i];
    }
    true
}

/// The NumPy broadcast of two shapes, or a [`Error::Broadcast`] naming `op`.
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Dims> {
    let n = a.len().max(b.len());
    let mut out: Dims = SmallVec::from_elem(1, n);
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::broadcast(op, a, b));
        };
    }
    Ok(out)
}

/// Strides that read a tensor of `(shape, strides)` as if broadcast to `target`
/// (stride 0 on new or size-1 axes), or an error if it does not broadcast.
pub fn broadcast_strides(
    op: &'static str,
    shape: &[usize],
    strides: &[usize],
    target: &[usize],
) -> Result<Dims> {
    if shape.len() > target.len() {
        return Err(Error::broadcast(op, shape, target));
    }
    let lead = target.len() - shape.len();
    let mut out: Dims = SmallVec::from_elem(0, target.len());
    for i in 0..shape.len() {
        let t = target[lead + i];
        if shape[i] == t {
            out[lead + i] = if t == 1 { 0 } else { strides[i] };
        } else if shape[i] == 1 {
            out[lead + i] = 0;
        } else {
            return Err(Error::broadcast(op, shape, target));
        }
    }
    Ok(out)
}

/// `Ok` when `axis` is an axis of `shape`, else [`Error::axis`] (for ops that
/// take a `usize` axis; [`normalize_axis`] also accepts negative ones).
pub fn check_axis(op: &'static str, axis: usize, shape: &[usize]) -> Result<()> {
    if axis >= shape.len() {
        return Err(Error::axis(op, axis, shape.len(), shape));
    }
    Ok(())
}

/// Normalises a possibly negative axis against `rank` (`-1` is the last axis).
pub fn normalize_axis(
    op: &'static str,
    axis: isize,
    rank: usize,
    shape: &[usize],
) -> Result<usize> {
    let a = if axis < 0 { axis + rank as isize } else { axis };
    if a < 0 || a as usize >= rank {
        return Err(Error::axis(op, axis, rank, shape));
    }
    Ok(a as usize)
}

/// Strides for viewing `(shape, strides)` as `new_shape` without copying, if possible
/// (PyTorch's `computeStride`: groups of merged axes must be contiguous among themselves).
pub fn view_strides(shape: &[usize], strides: &[usize], new_shape: &[usize]) -> Option<Dims> {
    let n = numel(shape);
    if checked_numel(new_shape) != Some(n) {
        return None;
    }
    if n == 0 || is_contiguous(shape, strides) {
        return Some(contiguous_strides(new_shape));
    }
    let mut new_strides: Dims = SmallVec::from_elem(0, new_shape.len());
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base_stride = *strides.last().unwrap_or(&1);
    let mut tensor_numel = 1usize;
    let mut view_numel = 1usize;
    for tensor_d in (0..shape.len()).rev() {
        tensor_numel *= shape[tensor_d];
        if tensor_d == 0
            || (shape[tensor_d - 1] != 1
                && strides[tensor_d - 1] != tensor_numel * chunk_base_stride)
        {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel * chunk_base_stride;
                view_numel *= new_shape[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    if view_d != -1 {
        return None;
    }
    Some(new_strides)
}

/// Iterates the element offsets of a strided view in row-major logical order.
#[derive(Clone, Debug)]
pub struct StridedIter {
    shape: Dims,
    strides: Dims,
    index: Dims,
    offset: usize,
    remaining: usize,
}

impl StridedIter {
    /// Offsets of `(shape, strides)` starting at `offset`.
    pub fn new(shape: &[usize], strides: &[usize], offset: usize) -> StridedIter {
        StridedIter {
            shape: SmallVec::from_slice(shape),
            strides: SmallVec::from_slice(strides),
            index: SmallVec::from_elem(0, shape.len()),
            offset,
            remaining: numel(shape),
        }
    }
}

impl Iterator for StridedIter {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let cur = self.offset;
        // Advance the multi-index, innermost axis first.
        for d in (0..self.shape.len()).rev() {
            self.index[d] += 1;
            if self.index[d] < self.shape[d] {
                self.offset += self.strides[d];
                break;
            }
            self.offset -= (self.shape[d] - 1) * self.strides[d];
            self.index[d] = 0;
        }
        Some(cur)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for StridedIter {}

/// The offset of the element at the row-major linear index `linear`.
#[inline]
pub fn offset_of(shape: &[usize], strides: &[usize], mut linear: usize) -> usize {
    let mut off = 0;
    for d in (0..shape.len()).rev() {
        let i = linear % shape[d];
        linear /= shape[d];
        off += i * strides[d];
    }
    off
}

/// True when no two in-range multi-indices of `(shape, strides)` share an offset
/// (sufficient test: sorted by stride, each stride covers the extent of the smaller ones).
pub fn non_overlapping(shape: &[usize], strides: &[usize]) -> bool {
    // An empty tensor has no elements to overlap (its strides may be 0).
    if shape.contains(&0) {
        return true;
    }
    let mut dims: SmallVec<[(usize, usize); 6]> = shape
        .iter()
        .zip(strides)
        .filter(|(&d, _)| d > 1)
        .map(|(&d, &s)| (s, d))
        .collect();
    dims.sort_unstable();
    let mut extent = 1usize;
    for (s, d) in dims {
        if s < extent {
            return false;
        }
        extent += s * (d - 1);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        assert_eq!(
            broadcast_shapes("t", &[3, 1, 5], &[4, 5])
                .unwrap()
                .as_slice(),
            &[3, 4, 5]
        );
        assert!(broadcast_shapes("t", &[3], &[4]).is_err());
    }

    #[test]
    fn strided_iter_matches_offset_of() {
        let shape = [2, 3, 4];
        let strides = [1, 8, 2];
        let got: Vec<usize> = StridedIter::new(&shape, &strides, 5).collect();
        let want: Vec<usize> = (0..24)
            .map(|i| 5 + offset_of(&shape, &strides, i))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn view_strides_of_transposed_fails_to_merge() {
        // A transposed 2x3 cannot be flattened without a copy.
        assert!(view_strides(&[3, 2], &[1, 3], &[6]).is_none());
        // But splitting an axis works.
        assert_eq!(
            view_strides(&[3, 4], &[1, 3], &[3, 2, 2])
                .unwrap()
                .as_slice(),
            &[1, 6, 3]
        );
    }
}
