//! The buffer pool: recycles transient tensor memory.
//!
//! A leaf module: it never references the context or tensors, so anything may
//! depend on it without forming a cycle. Rules (DESIGN.md, MEMORY-MODEL.md):
//! - [`allocation_len`]: len ≤ 1024 → next power of two, else a multiple of 1024;
//! - each arm keeps a free list ordered ascending by capacity (a `BTreeMap`
//!   of capacity → blocks, so acquire and release are O(log n)); acquire is
//!   first fit; within a size class reuse is LIFO (same address back), and
//!   eviction takes the largest class's oldest block;
//! - `max_cached_bytes` (default 1 GiB) bounds the cached bytes of both arms
//!   together; a block that alone exceeds it, or would overflow it, is freed;
//! - the free lists sit behind one mutex; `outstanding` is atomic;
//! - an optional memory limit bounds live bytes however they are obtained: a
//!   cache hit that would take live bytes past it fails with
//!   [`Error::OutOfMemory`]; a fresh allocation that would take live plus
//!   cached bytes past it first evicts cached blocks, then fails the same way;
//!   setting the limit evicts cached blocks down to it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::storage::{Arm, Buffer, RawBlock};

/// Default bound on cached (free-list) bytes: 1 GiB.
pub const DEFAULT_MAX_CACHED_BYTES: usize = 1 << 30;
/// Byte quantum of the slab arm.
pub const SLAB_QUANTUM: usize = 4096;
/// The largest request, in bytes after rounding, the pool will try to serve;
/// anything larger is [`Error::OutOfMemory`] before any size arithmetic can overflow.
pub const MAX_REQUEST_BYTES: usize = (isize::MAX as usize) & !(SLAB_QUANTUM - 1);

/// Rounded element count the f32 arm allocates for a request of `len` elements.
///
/// ```
/// use fucina_core::pool::allocation_len;
/// assert_eq!(allocation_len(3), 4);
/// assert_eq!(allocation_len(1025), 2048);
/// assert_eq!(allocation_len(2049), 3072);
/// ```
pub const fn allocation_len(len: usize) -> usize {
    if len <= 1024 {
        if len <= 1 {
            1
        } else {
            len.next_power_of_two()
        }
    } else {
        len.div_ceil(1024) * 1024
    }
}

/// Rounded byte size the slab arm allocates for a request of `bytes` bytes.
pub const fn slab_len(bytes: usize) -> usize {
    if bytes == 0 {
        SLAB_QUANTUM
    } else {
        bytes.div_ceil(SLAB_QUANTUM) * SLAB_QUANTUM
    }
}

/// A snapshot of the pool's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers handed out and not yet returned.
    pub outstanding: usize,
    /// Bytes held by outstanding buffers.
    pub live_bytes: usize,
    /// The largest `live_bytes` seen since creation (or [`BufferPool::reset_peak`]).
    pub peak_live_bytes: usize,
    /// Bytes sitting in the free lists.
    pub cached_bytes: usize,
    /// Blocks sitting in the free lists.
    pub cached_buffers: usize,
    /// Acquires served from a free list.
    pub hits: u64,
    /// Acquires that allocated fresh memory.
    pub misses: u64,
}

/// One arm's free list: blocks grouped by capacity in a `BTreeMap`, so first
/// fit is `range(bytes..).next()` (O(log n)); within one capacity a deque,
/// newest at the back: acquire pops the back (LIFO, same address back),
/// eviction pops the front (the oldest). Both O(1) after the map lookup.
#[derive(Default)]
struct ArmList {
    by_size: BTreeMap<usize, VecDeque<RawBlock>>,
    count: usize,
}

impl ArmList {
    fn push(&mut self, block: RawBlock) {
        self.by_size
            .entry(block.bytes())
            .or_default()
            .push_back(block);
        self.count += 1;
    }

    /// Capacity of the first-fit block for `bytes` (the smallest ≥ `bytes`).
    fn first_fit(&self, bytes: usize) -> Option<usize> {
        self.by_size.range(bytes..).next().map(|(&k, _)| k)
    }

    /// Takes the most recently released block of capacity `size`.
    fn take_newest(&mut self, size: usize) -> Option<RawBlock> {
        let q = self.by_size.get_mut(&size)?;
        let b = q.pop_back();
        if q.is_empty() {
            self.by_size.remove(&size);
        }
        self.count -= usize::from(b.is_some());
        b
    }

    /// Capacity of the largest cached block (0 when empty).
    fn largest(&self) -> usize {
        self.by_size.last_key_value().map_or(0, |(&k, _)| k)
    }

    /// Takes the oldest block of the largest capacity.
    fn take_largest(&mut self) -> Option<RawBlock> {
        let mut e = self.by_size.last_entry()?;
        let b = e.get_mut().pop_front();
        if e.get().is_empty() {
            e.remove();
        }
        self.count -= usize::from(b.is_some());
        b
    }

    /// Capacities in free-list order: ascending.
    fn sizes(&self) -> Vec<usize> {
        self.by_size
            .iter()
            .flat_map(|(&k, q)| std::iter::repeat_n(k, q.len()))
            .collect()
    }
}

#[derive(Default)]
struct FreeLists {
    f32_arm: ArmList,
    slab_arm: ArmList,
    cached_bytes: usize,
}

impl FreeLists {
    fn list(&mut self, arm: Arm) -> &mut ArmList {
        match arm {
            Arm::F32 => &mut self.f32_arm,
            Arm::Slab => &mut self.slab_arm,
        }
    }

    /// Frees the largest cached block of either arm; false when both are empty.
    fn evict_largest(&mut self) -> bool {
        let a = self.f32_arm.largest();
        let s = self.slab_arm.largest();
        let block = if a == 0 && s == 0 {
            return false;
        } else if a >= s {
            self.f32_arm.take_largest()
        } else {
            self.slab_arm.take_largest()
        };
        if let Some(b) = block {
            self.cached_bytes -= b.bytes();
        }
        true
    }
}

pub(crate) struct PoolShared {
    lists: Mutex<FreeLists>,
    outstanding: AtomicUsize,
    live_bytes: AtomicUsize,
    peak_live_bytes: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
    max_cached_bytes: AtomicUsize,
    /// 0 means no limit.
    memory_limit: AtomicUsize,
}

impl PoolShared {
    fn lock(&self) -> MutexGuard<'_, FreeLists> {
        // A panic while holding the lock cannot leave the lists inconsistent
        // (every mutation is a single push/remove), so poisoning is ignored.
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns a released block to its free list (or frees it). Runs at refcount 0.
    pub(crate) fn reclaim(&self, block: RawBlock, arm: Arm) {
        let bytes = block.bytes();
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
        self.live_bytes.fetch_sub(bytes, Ordering::AcqRel);
        let cap = self.max_cached_bytes.load(Ordering::Relaxed);
        let mut lists = self.lock();
        if bytes > cap || lists.cached_bytes + bytes > cap {
            drop(lists);
            drop(block);
            return;
        }
        lists.cached_bytes += bytes;
        lists.list(arm).push(block);
    }

    fn note_live(&self, bytes: usize) {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        let live = self.live_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak_live_bytes.fetch_max(live, Ordering::AcqRel);
    }

    /// A buffer of capacity ≥ `bytes` (already rounded for `arm`) whose
    /// logical length is `len_bytes`.
    fn acquire(self: &Arc<Self>, arm: Arm, bytes: usize, len_bytes: usize) -> Result<Buffer> {
        let limit = self.memory_limit.load(Ordering::Relaxed);
        let mut lists = self.lock();
        if let Some(size) = lists.list(arm).first_fit(bytes) {
            // The limit bounds live bytes however they are obtained: a cache
            // hit that would take live bytes past it fails like a miss.
            let live = self.live_bytes.load(Ordering::Acquire);
            if limit != 0 && live.saturating_add(size) > limit {
                return Err(Error::OutOfMemory {
                    requested_bytes: size,
                    live_bytes: live,
                    limit_bytes: limit,
                });
            }
            let Some(block) = lists.list(arm).take_newest(size) else {
                unreachable!("first_fit returned a size with no block")
            };
            lists.cached_bytes -= block.bytes();
            self.note_live(block.bytes());
            drop(lists);
            self.hits.fetch_add(1, Ordering::Relaxed);
            #[cfg(debug_assertions)]
            // SAFETY: the block is unshared; poison it so unwritten outputs show as NaN.
            unsafe {
                std::ptr::write_bytes(block.ptr(), 0xFF, block.bytes())
            };
            return Ok(Buffer::new(block, arm, Arc::downgrade(self), len_bytes));
        }
        if limit != 0 {
            let live = self.live_bytes.load(Ordering::Acquire);
            let need = |cached: usize| live.saturating_add(cached).saturating_add(bytes);
            while need(lists.cached_bytes) > limit && lists.evict_largest() {}
            if need(lists.cached_bytes) > limit {
                return Err(Error::OutOfMemory {
                    requested_bytes: bytes,
                    live_bytes: live,
                    limit_bytes: limit,
                });
            }
        }
        // Reserve the bytes under the lock so concurrent misses respect the limit.
        self.note_live(bytes);
        drop(lists);
        self.misses.fetch_add(1, Ordering::Relaxed);
        match RawBlock::alloc(bytes) {
            Some(block) => {
                // reclaim subtracts block.bytes(): it must be what was reserved.
                debug_assert_eq!(block.bytes(), bytes);
                Ok(Buffer::new(block, arm, Arc::downgrade(self), len_bytes))
            }
            None => {
                let live = self.live_bytes.fetch_sub(bytes, Ordering::AcqRel) - bytes;
                self.outstanding.fetch_sub(1, Ordering::AcqRel);
                Err(Error::OutOfMemory {
                    requested_bytes: bytes,
                    live_bytes: live,
                    limit_bytes: limit,
                })
            }
        }
    }
}

/// The pool of reusable buffers owned by an [`crate::ExecContext`].
///
/// Cloning the handle shares the pool.
///
/// ```
/// use fucina_core::pool::BufferPool;
/// let pool = BufferPool::new();
/// let a = pool.acquire_f32(1000).unwrap();
/// let addr = a.as_ptr();
/// drop(a);
/// let b = pool.acquire_f32(1000).unwrap();
/// assert_eq!(b.as_ptr(), addr); // LIFO reuse: same address back
/// ```
#[derive(Clone)]
pub struct BufferPool {
    shared: Arc<PoolShared>,
}

impl Default for BufferPool {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("stats", &self.stats())
            .finish()
    }
}

impl BufferPool {
    /// A pool with the default 1 GiB cache bound and no memory limit.
    pub fn new() -> BufferPool {
        Self::with_max_cached_bytes(DEFAULT_MAX_CACHED_BYTES)
    }

    /// A pool whose free lists hold at most `max_cached_bytes` bytes.
    pub fn with_max_cached_bytes(max_cached_bytes: usize) -> BufferPool {
        BufferPool {
            shared: Arc::new(PoolShared {
                lists: Mutex::new(FreeLists::default()),
                outstanding: AtomicUsize::new(0),
                live_bytes: AtomicUsize::new(0),
                peak_live_bytes: AtomicUsize::new(0),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
                max_cached_bytes: AtomicUsize::new(max_cached_bytes),
                memory_limit: AtomicUsize::new(0),
            }),
        }
    }

    /// The bound on cached bytes.
    pub fn max_cached_bytes(&self) -> usize {
        self.shared.max_cached_bytes.load(Ordering::Relaxed)
    }

    /// Changes the bound on cached bytes; evicts cached blocks to honour it at once.
    pub fn set_max_cached_bytes(&self, bytes: usize) {
        self.shared.max_cached_bytes.store(bytes, Ordering::Relaxed);
        let mut lists = self.shared.lock();
        while lists.cached_bytes > bytes && lists.evict_largest() {}
    }

    /// Sets (or with `None` clears) the limit on live plus cached bytes.
    /// `Some(0)` is stored as a 1-byte limit (0 internally means "none"), so
    /// it refuses every fresh allocation rather than lifting the limit.
    /// Cached blocks are evicted until live plus cached bytes fit under it.
    pub fn set_memory_limit(&self, limit: Option<usize>) {
        let stored = limit.map_or(0, |l| l.max(1));
        self.shared.memory_limit.store(stored, Ordering::Relaxed);
        if stored != 0 {
            let mut lists = self.shared.lock();
            let live = self.shared.live_bytes.load(Ordering::Acquire);
            while live.saturating_add(lists.cached_bytes) > stored && lists.evict_largest() {}
        }
    }

    /// The limit on live plus cached bytes, if any.
    pub fn memory_limit(&self) -> Option<usize> {
        match self.shared.memory_limit.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// A buffer from the f32 arm holding at least `len` f32 elements.
    pub fn acquire_f32(&self, len: usize) -> Result<Buffer> {
        // allocation_len rounds up by less than 1024 elements; check before it can overflow.
        if len > (MAX_REQUEST_BYTES / 4).saturating_sub(1024) {
            return Err(self.too_large(len.saturating_mul(4)));
        }
        self.shared
            .acquire(Arm::F32, allocation_len(len) * 4, len * 4)
    }

    /// A 64-byte-aligned slab of at least `bytes` bytes (rounded to 4096).
    pub fn acquire_slab(&self, bytes: usize) -> Result<Buffer> {
        if bytes > MAX_REQUEST_BYTES {
            return Err(self.too_large(bytes));
        }
        self.shared.acquire(Arm::Slab, slab_len(bytes), bytes)
    }

    /// The error for a request no allocator could serve.
    fn too_large(&self, requested_bytes: usize) -> Error {
        Error::OutOfMemory {
            requested_bytes,
            live_bytes: self.shared.live_bytes.load(Ordering::Acquire),
            limit_bytes: self
                .memory_limit()
                .unwrap_or(MAX_REQUEST_BYTES)
                .min(MAX_REQUEST_BYTES),
        }
    }

    /// A buffer for `len` elements of `dtype`: f32 from the f32 arm, the rest from slabs.
    pub fn acquire(&self, dtype: DType, len: usize) -> Result<Buffer> {
        match dtype {
            DType::F32 => self.acquire_f32(len),
            d => self.acquire_slab(len.saturating_mul(d.size_of())),
        }
    }

    /// An RAII scratch lease of `len` elements of `T` from the slab arm.
    /// The slab returns to the pool when the lease drops.
    pub fn scratch<T: Element>(&self, len: usize) -> Result<ScratchLease<T>> {
        let buf = self.acquire_slab(len.saturating_mul(std::mem::size_of::<T>()))?;
        Ok(ScratchLease {
            buf,
            len,
            _t: std::marker::PhantomData,
        })
    }

    /// Frees every cached block.
    pub fn trim(&self) {
        let mut lists = self.shared.lock();
        while lists.evict_largest() {}
    }

    /// Resets the peak live-bytes counter to the current live bytes.
    pub fn reset_peak(&self) {
        let live = self.shared.live_bytes.load(Ordering::Acquire);
        self.shared.peak_live_bytes.store(live, Ordering::Release);
    }

    /// Buffers handed out and not yet returned.
    #[inline]
    pub fn outstanding(&self) -> usize {
        self.shared.outstanding.load(Ordering::Acquire)
    }

    /// A snapshot of every counter.
    pub fn stats(&self) -> PoolStats {
        let lists = self.shared.lock();
        PoolStats {
            outstanding: self.shared.outstanding.load(Ordering::Acquire),
            live_bytes: self.shared.live_bytes.load(Ordering::Acquire),
            peak_live_bytes: self.shared.peak_live_bytes.load(Ordering::Acquire),
            cached_bytes: lists.cached_bytes,
            cached_buffers: lists.f32_arm.count + lists.slab_arm.count,
            hits: self.shared.hits.load(Ordering::Relaxed),
            misses: self.shared.misses.load(Ordering::Relaxed),
        }
    }

    /// Capacities (bytes) of the cached blocks of one arm, in free-list order.
    pub fn cached_sizes(&self, arm: Arm) -> Vec<usize> {
        let mut lists = self.shared.lock();
        lists.list(arm).sizes()
    }

    /// `Ok` when no buffer is outstanding, else [`Error::Leak`].
    pub fn check_leaks(&self) -> Result<()> {
        match self.outstanding() {
            0 => Ok(()),
            n => Err(Error::Leak { outstanding: n }),
        }
    }
}

/// Scratch memory leased from the slab arm; returns to the pool on drop.
pub struct ScratchLease<T: Element> {
    buf: Buffer,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Element> std::ops::Deref for ScratchLease<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the slab is 64-byte aligned and holds at least len * size_of::<T>() bytes.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr() as *const T, self.len) }
    }
}

impl<T: Element> std::ops::DerefMut for ScratchLease<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: the lease holds the only reference to the slab.
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_mut_ptr() as *mut T, self.len) }
    }
}
