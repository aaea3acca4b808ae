//! The raw tensor: a dtype, a shape, strides and an offset over a [`Buffer`].
//!
//! Every view op here (`clone_view`, `view_with_strides`, `reshape`,
//! `broadcast_to`, `narrow`, `permute`, `transpose`, `squeeze`, `unsqueeze`)
//! returns a new header over the same buffer and bumps its refcount; nothing
//! here allocates element memory. Copies (`contiguous`) live on the context.
//!
//! Invariant: every view addresses only elements below its extent, the
//! buffer's logical length ([`Buffer::len_bytes`] / element size, fixed when
//! the tensor was created), never the pooled block's larger capacity; each
//! view op checks its reach with overflow-checked arithmetic.

use smallvec::SmallVec;

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::shape::{self, Dims, StridedIter};
use crate::storage::Buffer;

/// A strided view over refcounted storage. `Clone` is `clone_view`.
#[derive(Clone)]
pub struct RawTensor {
    buf: Buffer,
    dtype: DType,
    shape: Dims,
    strides: Dims,
    offset: usize,
}

impl std::fmt::Debug for RawTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawTensor")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape.as_slice())
            .field("strides", &self.strides.as_slice())
            .field("offset", &self.offset)
            .finish()
    }
}

impl RawTensor {
    /// A contiguous tensor of `shape` over `buf`, which must hold enough bytes.
    pub fn from_buffer(buf: Buffer, dtype: DType, shape: &[usize]) -> Result<RawTensor> {
        let need = shape::checked_numel(shape).and_then(|n| n.checked_mul(dtype.size_of()));
        if need.filter(|&need| need <= buf.len_bytes()).is_none() {
            return Err(Error::InvalidArgument {
                op: "from_buffer",
                msg: format!(
                    "buffer of {} bytes cannot hold shape {shape:?} of {dtype}",
                    buf.len_bytes()
                ),
            });
        }
        Ok(RawTensor {
            buf,
            dtype,
            shape: SmallVec::from_slice(shape),
            strides: shape::contiguous_strides(shape),
            offset: 0,
        })
    }

    /// The element type.
    #[inline]
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The shape.
    #[inline]
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The strides, in elements.
    #[inline]
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    /// Offset of element 0 in the buffer, in elements.
    #[inline]
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Number of axes.
    #[inline]
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements.
    #[inline]
    pub fn numel(&self) -> usize {
        shape::numel(&self.shape)
    }
    /// The storage.
    #[inline]
    pub fn buffer(&self) -> &Buffer {
        &self.buf
    }
    /// The extent in elements: how far into the buffer any view of this
    /// tensor may reach (the buffer's logical length over the element size).
    #[inline]
    pub fn extent(&self) -> usize {
        self.buf.len_bytes() / self.dtype.size_of()
    }
    /// Row-major contiguous (offset may be non-zero).
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        shape::is_contiguous(&self.shape, &self.strides)
    }

    fn check_dtype<T: Element>(&self, op: &'static str) -> Result<()> {
        if T::DTYPE != self.dtype {
            return Err(Error::DTypeMismatch {
                op,
                lhs: self.dtype,
                rhs: T::DTYPE,
            });
        }
        Ok(())
    }

    /// The elements of a contiguous view, in order.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.check_dtype::<T>("as_slice")?;
        if !self.is_contiguous() {
            return Err(Error::NotContiguous {
                op: "as_slice",
                shape: self.shape.to_vec(),
            });
        }
        // SAFETY: dtype checked; the buffer is 64-byte aligned and holds
        // offset + numel elements (checked when the view was made).
        Ok(unsafe {
            std::slice::from_raw_parts(
                (self.buf.as_ptr() as *const T).add(self.offset),
                self.numel(),
            )
        })
    }

    /// The bytes of a contiguous view, in order (any dtype).
    pub fn as_bytes(&self) -> Result<&[u8]> {
        if !self.is_contiguous() {
            return Err(Error::NotContiguous {
                op: "as_bytes",
                shape: self.shape.to_vec(),
            });
        }
        let w = self.dtype.size_of();
        // SAFETY: offset + numel ≤ extent (checked when the view was made), so
        // these bytes lie within the buffer's logical length.
        Ok(unsafe {
            std::slice::from_raw_parts(self.buf.as_ptr().add(self.offset * w), self.numel() * w)
        })
    }

    /// The buffer up to this tensor's [`RawTensor::extent`] as `T`s (for
    /// strided kernels that index by offset). Never the block's recycled tail.
    pub fn storage<T: Element>(&self) -> Result<&[T]> {
        self.check_dtype::<T>("storage")?;
        let n = self.extent();
        // SAFETY: aligned; extent ≤ the block's capacity (Buffer::new clamps); dtype checked.
        Ok(unsafe { std::slice::from_raw_parts(self.buf.as_ptr() as *const T, n) })
    }

    /// The elements of a contiguous view, mutably; only when this view holds
    /// the sole reference to its buffer (a fresh output, or copy-on-write).
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        self.check_dtype::<T>("as_mut_slice")?;
        if !self.is_contiguous() {
            return Err(Error::NotContiguous {
                op: "as_mut_slice",
                shape: self.shape.to_vec(),
            });
        }
        let n = self.numel();
        let off = self.offset;
        let bytes = self
            .buf
            .get_mut()
            .ok_or(Error::SharedBuffer { op: "as_mut_slice" })?;
        // SAFETY: unique, aligned, in bounds, dtype checked.
        Ok(unsafe { std::slice::from_raw_parts_mut((bytes.as_mut_ptr() as *mut T).add(off), n) })
    }

    /// The buffer's bytes up to its logical length, mutably; only when this view is the sole reference.
    pub fn as_mut_bytes(&mut self) -> Result<&mut [u8]> {
        self.buf
            .get_mut()
            .ok_or(Error::SharedBuffer { op: "as_mut_bytes" })
    }

    /// The same view read as another dtype of the same width (a bit cast).
    pub fn reinterpret(&self, dtype: DType) -> Result<RawTensor> {
        let mut v = self.clone();
        v.set_dtype_same_width(dtype)?;
        Ok(v)
    }

    /// Changes the dtype tag in place to another of the same width (a bit cast).
    pub fn set_dtype_same_width(&mut self, dtype: DType) -> Result<()> {
        if dtype.size_of() != self.dtype.size_of() {
            return Err(Error::DTypeMismatch {
                op: "reinterpret",
                lhs: self.dtype,
                rhs: dtype,
            });
        }
        self.dtype = dtype;
        Ok(())
    }

    /// Copies the elements out in row-major logical order (any strides).
    /// A broadcast view can name far more elements than memory holds: the
    /// vector is reserved fallibly, so that is [`Error::OutOfMemory`], not an abort.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_dtype::<T>("to_vec")?;
        let n = self.numel();
        let mut out = try_vec_with_capacity::<T>(n)?;
        if self.is_contiguous() {
            out.extend_from_slice(self.as_slice::<T>()?);
            return Ok(out);
        }
        let st = self.storage::<T>()?;
        out.extend(self.offsets().map(|o| st[o]));
        Ok(out)
    }

    /// The scalar value of a one-element tensor.
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::InvalidArgument {
                op: "item",
                msg: format!("tensor of shape {:?} is not a scalar", self.shape()),
            });
        }
        Ok(self.storage::<T>()?[self.offset])
    }

    /// Element offsets in row-major logical order.
    pub fn offsets(&self) -> StridedIter {
        StridedIter::new(&self.shape, &self.strides, self.offset)
    }

    /// A new header over the same buffer (bumps the refcount).
    #[inline]
    pub fn clone_view(&self) -> RawTensor {
        self.clone()
    }

    /// A view with explicit shape, strides and offset, checked against the buffer.
    pub fn view_with_strides(
        &self,
        shape: &[usize],
        strides: &[usize],
        offset: usize,
    ) -> Result<RawTensor> {
        if shape.len() != strides.len() {
            return Err(Error::BadView {
                op: "view_with_strides",
                from: self.shape.to_vec(),
                to: shape.to_vec(),
            });
        }
        // Bounded by the extent of the tensor viewed, never the block's capacity.
        let extent = self.extent();
        // One past the last element addressed; None when the arithmetic overflows
        // (such a view could never fit, and wrapping would defeat the bound check).
        let last = shape::view_reach(shape, strides, offset);
        if last.filter(|&last| last <= extent).is_none() || shape::checked_numel(shape).is_none() {
            return Err(Error::BadView {
                op: "view_with_strides",
                from: self.shape.to_vec(),
                to: shape.to_vec(),
            });
        }
        Ok(RawTensor {
            buf: self.buf.clone(),
            dtype: self.dtype,
            shape: SmallVec::from_slice(shape),
            strides: SmallVec::from_slice(strides),
            offset,
        })
    }

    fn with_layout(&self, shape: Dims, strides: Dims, offset: usize) -> RawTensor {
        RawTensor {
            buf: self.buf.clone(),
            dtype: self.dtype,
            shape,
            strides,
            offset,
        }
    }

    /// A view with a new shape of the same element count; fails with
    /// [`Error::BadView`] when the strides cannot express it (copy first).
    pub fn reshape(&self, shape: &[usize]) -> Result<RawTensor> {
        // The reach check is O(rank) and cheap: it keeps a view in bounds even
        // if the stride arithmetic met a size-1 axis with an extreme stride.
        match shape::view_strides(&self.shape, &self.strides, shape).filter(|st| {
            shape::view_reach(shape, st, self.offset).is_some_and(|r| r <= self.extent())
        }) {
            Some(st) => Ok(self.with_layout(SmallVec::from_slice(shape), st, self.offset)),
            None => Err(Error::BadView {
                op: "reshape",
                from: self.shape.to_vec(),
                to: shape.to_vec(),
            }),
        }
    }

    /// A view broadcast to `shape` (stride 0 on expanded axes).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<RawTensor> {
        if shape::checked_numel(shape).is_none() {
            return Err(Error::BadView {
                op: "broadcast_to",
                from: self.shape.to_vec(),
                to: shape.to_vec(),
            });
        }
        let st = shape::broadcast_strides("broadcast_to", &self.shape, &self.strides, shape)?;
        Ok(self.with_layout(SmallVec::from_slice(shape), st, self.offset))
    }

    /// The sub-range `start..start+len` of `axis`.
    pub fn narrow(&self, axis: usize, start: usize, len: usize) -> Result<RawTensor> {
        if axis >= self.rank() {
            return Err(Error::axis("narrow", axis, self.rank(), &self.shape));
        }
        let end = start.checked_add(len);
        if end.filter(|&end| end <= self.shape[axis]).is_none() {
            // start + len exactly (in u128: it may pass usize::MAX).
            return Err(Error::out_of_range(
                "narrow",
                "end",
                start as u128 + len as u128,
                self.shape[axis] + 1,
                &self.shape,
            ));
        }
        let mut shape = self.shape.clone();
        shape[axis] = len;
        // An empty view keeps its offset: moving it could point past the
        // extent (the fuzz soak found `[0, 2]` narrowed on axis 1 at offset 1).
        let off = if shape.contains(&0) {
            self.offset
        } else {
            self.offset + start * self.strides[axis]
        };
        Ok(self.with_layout(shape, self.strides.clone(), off))
    }

    /// Index `index` of `axis`, removing the axis.
    pub fn select(&self, axis: usize, index: usize) -> Result<RawTensor> {
        // Checked here so that errors name `select` and the index, not the
        // `narrow` it is made of.
        if axis >= self.rank() {
            return Err(Error::axis("select", axis, self.rank(), &self.shape));
        }
        if index >= self.shape[axis] {
            return Err(Error::out_of_range(
                "select",
                "index",
                index,
                self.shape[axis],
                &self.shape,
            ));
        }
        let v = self.narrow(axis, index, 1)?;
        v.squeeze(axis)
    }

    /// Reorders the axes: output axis `i` is input axis `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Result<RawTensor> {
        let r = self.rank();
        let mut seen = [false; 64];
        if perm.len() != r
            || r > 64
            || perm
                .iter()
                .any(|&p| p >= r || std::mem::replace(&mut seen[p], true))
        {
            return Err(Error::InvalidArgument {
                op: "permute",
                msg: format!("{perm:?} is not a permutation of {r} axes"),
            });
        }
        let shape = perm.iter().map(|&p| self.shape[p]).collect();
        let strides = perm.iter().map(|&p| self.strides[p]).collect();
        Ok(self.with_layout(shape, strides, self.offset))
    }

    /// Swaps two axes.
    pub fn transpose(&self, a: usize, b: usize) -> Result<RawTensor> {
        let r = self.rank();
        if a >= r || b >= r {
            return Err(Error::axis("transpose", a.max(b), r, &self.shape));
        }
        let mut v = self.clone();
        v.shape.swap(a, b);
        v.strides.swap(a, b);
        Ok(v)
    }

    /// Removes `axis`, which must have size 1.
    pub fn squeeze(&self, axis: usize) -> Result<RawTensor> {
        if axis >= self.rank() || self.shape[axis] != 1 {
            return Err(Error::InvalidArgument {
                op: "squeeze",
                msg: format!("axis {axis} of shape {:?} is not of size 1", self.shape()),
            });
        }
        let mut v = self.clone();
        v.shape.remove(axis);
        v.strides.remove(axis);
        Ok(v)
    }

    /// Inserts a size-1 axis at `axis` (0..=rank).
    pub fn unsqueeze(&self, axis: usize) -> Result<RawTensor> {
        if axis > self.rank() {
            return Err(Error::axis("unsqueeze", axis, self.rank() + 1, &self.shape));
        }
        let mut v = self.clone();
        let st = if axis < self.rank() {
            // The new axis has size 1: its stride is never multiplied by an index.
            self.strides[axis].saturating_mul(self.shape[axis])
        } else {
            1
        };
        v.shape.insert(axis, 1);
        v.strides.insert(axis, st);
        Ok(v)
    }
}

/// An empty vector with room for `n` elements of `T`, reserved fallibly:
/// [`Error::OutOfMemory`] when the system refuses (or the byte count
/// overflows), never an abort.
pub fn try_vec_with_capacity<T>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        requested_bytes: n.saturating_mul(std::mem::size_of::<T>()),
        live_bytes: 0,
        // The system refused: no pool limit is involved.
        limit_bytes: 0,
    })?;
    Ok(v)
}
