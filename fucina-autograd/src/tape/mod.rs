//! The tape: the differentiable [`Tensor`](tensor::Tensor) (`tensor`), its
//! backward nodes and the `Backward` trait (`graph`), the reverse walk
//! (`engine`) and the exec scopes that own a step's intermediates (`scope`).
//!
//! These four are one unit and know each other (a tensor holds its node, a
//! node its inputs' tensors, the engine walks both, a scope adopts tensors):
//! the architecture test allows cycles inside this folder and nowhere else in
//! the crate. Everything outside `tape/` builds on it. The modules are also
//! re-exported at the crate root (`fucina_autograd::tensor`, ...), their
//! paths before the folder existed.

pub mod engine;
pub mod graph;
pub mod higher;
pub mod scope;
pub mod tensor;
