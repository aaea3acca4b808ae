//! Raw aligned memory blocks and the refcounted [`Buffer`] over them.
//!
//! A [`Buffer`] is an `Arc` over one 64-byte-aligned block. Views clone the
//! `Arc`; when the last reference drops, the block goes back to the pool it
//! came from through a weak back-pointer (freed instead if the pool is gone).
//! Writing is only possible while the buffer is unique ([`Buffer::get_mut`]),
//! so a fresh kernel output can be filled before anyone else can see it.
//!
//! A buffer has two sizes: the block's capacity (after the pool's rounding)
//! and its logical length, the bytes requested when it was handed out. Every
//! safe access (views, `storage()`, `get_mut`) is bounded by the logical
//! length, so a recycled block's tail (another tensor's old data, or memory
//! never written) is unreachable.

use std::alloc::{alloc, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use crate::pool::PoolShared;

/// Alignment of every block, in bytes (one cache line, one AVX-512 vector).
pub const ALIGN: usize = 64;

/// One owned, 64-byte-aligned allocation. Frees itself on drop.
pub(crate) struct RawBlock {
    ptr: NonNull<u8>,
    bytes: usize,
}

// SAFETY: a RawBlock is plain owned memory with no thread affinity.
unsafe impl Send for RawBlock {}
// SAFETY: shared access only hands out reads; writes need `&mut`.
unsafe impl Sync for RawBlock {}

impl RawBlock {
    /// Allocates exactly `bytes` (at least 1) uninitialised bytes, or `None` if the
    /// system refuses. Exactly: the pool accounts a block by its `bytes()`, which
    /// must equal the rounded size it reserved for the request.
    pub(crate) fn alloc(bytes: usize) -> Option<RawBlock> {
        let bytes = bytes.max(1);
        let layout = Layout::from_size_align(bytes, ALIGN).ok()?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc(layout) };
        let ptr = NonNull::new(ptr)?;
        #[cfg(debug_assertions)]
        // SAFETY: freshly allocated, `bytes` long. 0xFF bytes are NaN in every float type.
        unsafe {
            std::ptr::write_bytes(ptr.as_ptr(), 0xFF, bytes)
        };
        Some(RawBlock { ptr, bytes })
    }

    #[inline]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for RawBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `alloc` with exactly this layout.
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.bytes, ALIGN),
            )
        }
    }
}

/// Which free list of the pool a block belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// The f32 arm: capacities rounded by [`crate::pool::allocation_len`].
    F32,
    /// The byte-slab arm: sizes rounded to 4096 bytes; every other dtype and scratch.
    Slab,
}

pub(crate) struct BufferInner {
    block: Option<RawBlock>,
    arm: Arm,
    pool: Weak<PoolShared>,
    /// The logical length in bytes (≤ the block's capacity), fixed at creation.
    len_bytes: usize,
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            if let Some(pool) = self.pool.upgrade() {
                pool.reclaim(block, self.arm);
            }
        }
    }
}

/// Refcounted storage: the memory behind one or more tensor views.
#[derive(Clone)]
pub struct Buffer {
    inner: Arc<BufferInner>,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("ptr", &self.as_ptr())
            .field("bytes", &self.capacity_bytes())
            .field("arm", &self.inner.arm)
            .field("refs", &self.ref_count())
            .finish()
    }
}

impl Buffer {
    /// A buffer over `block` whose safe accesses are bounded by `len_bytes`
    /// (clamped to the block's capacity).
    pub(crate) fn new(
        block: RawBlock,
        arm: Arm,
        pool: Weak<PoolShared>,
        len_bytes: usize,
    ) -> Buffer {
        let len_bytes = len_bytes.min(block.bytes());
        Buffer {
            inner: Arc::new(BufferInner {
                block: Some(block),
                arm,
                pool,
                len_bytes,
            }),
        }
    }

    #[inline]
    fn block(&self) -> &RawBlock {
        // The block is only taken in Drop.
        match &self.inner.block {
            Some(b) => b,
            None => unreachable!("buffer block taken before drop"),
        }
    }

    /// Start of the block.
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        self.block().ptr() as *const u8
    }

    /// Start of the block, for writing. Callers must hold the only reference
    /// or otherwise guarantee exclusive access to the bytes they write.
    #[inline]
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.block().ptr()
    }

    /// Capacity in bytes (after the pool's rounding).
    #[inline]
    pub fn capacity_bytes(&self) -> usize {
        self.block().bytes()
    }

    /// The logical length in bytes: what was requested when the buffer was
    /// handed out. Views and slices never reach past it.
    #[inline]
    pub fn len_bytes(&self) -> usize {
        self.inner.len_bytes
    }

    /// The pool arm the buffer returns to.
    pub fn arm(&self) -> Arm {
        self.inner.arm
    }

    /// Number of live references (tensor views) to this buffer.
    pub fn ref_count(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// True when this is the only reference, so the bytes may be written.
    #[inline]
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// True when both handles share one block.
    pub fn same_as(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The first [`Buffer::len_bytes`] bytes, mutably, when this is the only reference.
    pub fn get_mut(&mut self) -> Option<&mut [u8]> {
        let inner = Arc::get_mut(&mut self.inner)?;
        let len = inner.len_bytes;
        let b = inner.block.as_mut()?;
        // SAFETY: unique access to an allocation of `bytes() >= len` bytes.
        Some(unsafe { std::slice::from_raw_parts_mut(b.ptr(), len) })
    }
}
