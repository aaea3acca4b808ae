//! fucina: a CPU autograd training framework, as one crate.
//!
//! This umbrella re-exports the workspace's library crates under short names
//! (`fucina::core`, `fucina::autograd`, `fucina::nn`, `fucina::optim`),
//! `ndarray`, `serde_json` and `tokenizers` (so their types cannot come from
//! a mismatched version),
//! one [`Error`] that every crate's error converts into, and a [`prelude`]
//! with what a training loop uses.
//!
//! ```
//! use fucina::prelude::*;
//!
//! fn main() -> fucina::Result<()> {
//!     let ctx = ExecContext::with_threads(1)?;
//!     let w = Tensor::variable(&ctx, &[0.1f32; 6], &[3, 2])?;
//!     let x = Tensor::constant(&ctx, &[1.0f32, -1.0, 0.5, 2.0], &[2, 2])?;
//!     let mut opt = Sgd::single(vec![w.clone()], SgdConfig::new(0.1))?;
//!     {
//!         let _scope = ctx.scope(); // owns this step's intermediates
//!         let loss = x.linear(&w, None)?.square()?.mean_all()?;
//!         loss.backward()?;
//!     }
//!     opt.step()?;
//!     Ok(())
//! }
//! ```
#![warn(missing_docs)]

pub use fucina_autograd as autograd;
pub use fucina_core as core;
pub use fucina_nn as nn;
/// The `tokenizers` crate behind [`nn::hf::Tokenizer`] (re-exported so the
/// versions cannot mismatch).
pub use fucina_nn::tokenizers;
pub use fucina_optim as optim;
pub use ndarray;
/// The `serde_json` of `TrainerState::extra` (re-exported so the versions
/// cannot mismatch).
pub use serde_json;

mod error;
pub mod prelude;

pub use error::{Error, Result};

// The README's code blocks compile and run as doctests of this crate.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
