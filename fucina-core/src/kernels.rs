//! The numeric kernels. Each kernel module has a validated entry point (a
//! method on [`crate::ExecContext`]) that takes its output from the context's
//! pool, an unchecked fast kernel behind it, and a plain scalar reference
//! implementation that is its spec (`reference` submodules). Fused ops (a
//! kernel with its own backward kernel: norms, softmax, cross-entropy,
//! attention) live in [`fused`], one file per op family. `with_scratch` lends a
//! kernel its thread-local tile scratch.

pub mod concat;
pub mod copy;
pub mod elementwise;
pub mod fused;
pub mod index;
pub mod map;
pub mod matmul;
pub mod random;
pub mod reduce;
pub mod rows;
pub mod simd;

use std::cell::Cell;
use std::thread::LocalKey;

/// Runs `f` on the thread-local scratch `key` as a slice of `len` elements of `T`
/// (contents unspecified; grown as needed). The buffer is taken while in use, so a
/// re-entrant call just allocates.
pub(crate) fn with_scratch<T: bytemuck::Pod, R>(
    key: &'static LocalKey<Cell<Vec<f64>>>,
    len: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    let words = (len * std::mem::size_of::<T>()).div_ceil(8);
    let mut buf = key.with(Cell::take);
    if buf.len() < words {
        buf = vec![0.0; words];
    }
    let slice: &mut [T] = bytemuck::cast_slice_mut(&mut buf[..words]);
    let out = f(&mut slice[..len]);
    key.with(|c| c.set(buf));
    out
}
