//! The numeric kernels. Each kernel module has a validated entry point (a
//! method on [`crate::ExecContext`]) that takes its output from the context's
//! pool, an unchecked fast kernel behind it, and a plain scalar reference
//! implementation that is its spec (`reference` submodules). Fused ops (a
//! kernel with its own backward kernel: norms, softmax, cross-entropy,
//! attention) live in [`fused`], one file per op family.

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
