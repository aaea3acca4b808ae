//! Fused ops: kernels that carry their own backward kernel, one file per op
//! (or op family) holding the forward entry point, the backward entry point
//! and the `pub mod reference` scalar spec together.
//!
//! A fused op is registered here by one `pub mod` line; its differentiable
//! side (the `Tensor` method, the backward node and the gradcheck rows) is the
//! file of the same name in `fucina-autograd/src/ops/fused/`, registered by
//! one line of that folder's `fused_ops!` list. The crate split puts the two
//! halves in two crates: fucina-core cannot name autograd's `Tensor`.
//!
//! Invariants: as every kernel module, each entry point validates and then
//! runs kernels that trust what was validated; rows run in fixed chunks and
//! reduce in a fixed order, so results are bitwise identical for any thread
//! count. Each family has one path, `kernels::fused::<family>`.

pub mod attention;
pub mod loss;
pub mod norm;
pub mod rope;
pub mod softmax;
