//! fucina-optim: optimizers, parameter groups, learning-rate schedules,
//! gradient clipping, optimizer state files and crash-safe training
//! checkpoints.
//!
//! Update formulas follow PyTorch's single-tensor implementations exactly
//! (golden-tested against torch); updates are fused single-pass loops chunked
//! over the context's threads with fixed boundaries, so they are bitwise
//! identical for any thread count; resume from a checkpoint is bit-exact.
//!
//! # A training step
//!
//! ```
//! use fucina_autograd::{ScopeExt, Tensor};
//! use fucina_optim::{clip_grad_norm, AdamConfig, AdamW, Optimizer};
//! let ctx = fucina_core::ExecContext::with_threads(1)?;
//! let w = Tensor::variable(&ctx, &[0.5f64, -0.5], &[2, 1])?;
//! let x = Tensor::constant(&ctx, &[1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
//! let y = Tensor::constant(&ctx, &[1.0f64, 2.0], &[2, 1])?;
//! let mut opt = AdamW::single(vec![w.clone()], AdamConfig::adamw(0.05))?;
//! for _ in 0..100 {
//!     {
//!         let _scope = ctx.scope(); // frees the step's intermediates when it closes
//!         let loss = x.matmul(&w)?.sub(&y)?.square()?.mean_all()?;
//!         loss.backward()?;
//!     }
//!     clip_grad_norm(&opt.params(), 1.0)?; // backward → clip → step → zero_grad
//!     opt.step()?;
//!     opt.zero_grad();
//! }
//! # Ok::<(), fucina_optim::Error>(())
//! ```
//!
//! # Gradient accumulation
//!
//! To train on a batch of `k·b` samples with memory for `b`: run `k`
//! micro-batches, each loss divided by `k`, calling `backward` on each
//! (gradients accumulate into the leaves until `zero_grad`); then clip, step
//! and zero once. With a mean-reduced loss this gives the gradient of the
//! big batch (up to summation order), so the update is the same:
//!
//! ```
//! use fucina_autograd::{ScopeExt, Tensor};
//! use fucina_optim::{Optimizer, Sgd, SgdConfig};
//! let ctx = fucina_core::ExecContext::with_threads(1)?;
//! let w = Tensor::variable(&ctx, &[0.5f64, -0.5], &[2, 1])?;
//! let data: Vec<f64> = (0..16).map(|i| i as f64 / 8.0).collect();
//! let mut opt = Sgd::single(vec![w.clone()], SgdConfig::new(0.1))?;
//! let k = 4; // micro-batches of 2 rows each
//! for m in 0..k {
//!     let _scope = ctx.scope();
//!     let x = Tensor::constant(&ctx, &data[m * 4..m * 4 + 4], &[2, 2])?;
//!     let loss = x.matmul(&w)?.square()?.mean_all()?.div_scalar(k as f64)?;
//!     loss.backward()?; // accumulates
//! }
//! opt.step()?;
//! opt.zero_grad();
//! # Ok::<(), fucina_optim::Error>(())
//! ```
#![warn(missing_docs)]

pub mod algo;
pub mod checkpoint;
pub mod clip;
pub mod error;
pub mod io;
pub mod kernel;
pub mod optimizer;
pub mod schedule;
pub mod state;

pub use algo::adam::{AdamConfig, AdamW};
pub use algo::lion::{Lion, LionConfig};
pub use algo::muon::{Muon, MuonConfig, MuonLrAdjust};
pub use algo::rmsprop::{RmsProp, RmsPropConfig};
pub use algo::sgd::{Sgd, SgdConfig};
pub use checkpoint::{
    find_latest, fnv1a64, load_checkpoint, load_latest, load_model, load_model_bytes, model_bytes,
    remove_stale_saves, save_checkpoint, save_model, Checkpoint, FileDigest, LatestCheckpoint,
    SkippedCheckpoint, TrainerState,
};
pub use clip::{clip_grad_norm, clip_grad_value, grad_norm, grads_are_finite};
pub use error::{Error, Result};
pub use io::write_atomic;
pub use kernel::Buf;
pub use optimizer::{Algorithm, Optim, Optimizer, ParamGroup, ParamState, Update};
pub use schedule::Schedule;
