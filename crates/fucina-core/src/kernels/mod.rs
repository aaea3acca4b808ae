//! The numeric kernels. Each kernel module has a validated entry point (a
//! method on [`crate::ExecContext`]) that takes its output from the context's
//! pool, an unchecked fast kernel behind it, and a plain scalar reference
//! implementation that is its spec (`reference` submodules).

pub mod attention;
pub mod concat;
pub mod copy;
pub mod elementwise;
pub mod index;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod random;
pub mod reduce;
pub mod softmax;
