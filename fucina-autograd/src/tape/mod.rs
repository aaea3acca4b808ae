//! The tape: the differentiable [`Tensor`](tensor::Tensor) (`tensor`), its
//! backward nodes and the `Backward` trait (`graph`), the reverse walk
//! (`engine`), the recorded walk of `create_graph` (`higher`) and the exec
//! scopes that own a step's intermediates (`scope`).
//!
//! These are one unit and know each other (a tensor holds its node, a
//! node its inputs' tensors, the engine walks both, a scope adopts tensors):
//! the architecture test allows cycles inside this folder and nowhere else in
//! the crate. Everything outside `tape/` builds on it.

pub mod engine;
pub mod graph;
pub mod higher;
pub mod scope;
pub mod tensor;
