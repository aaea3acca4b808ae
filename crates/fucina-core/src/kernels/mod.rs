//! The numeric kernels. Each kernel module has a validated entry point that
//! takes its output from the context's pool, an unchecked fast kernel behind
//! it, and a plain scalar reference implementation that is its spec.

pub mod copy;
