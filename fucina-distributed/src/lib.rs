//! fucina-distributed: data-parallel training across processes and machines.
//!
//! Each rank (an MPI process under `mpirun`, with its own `ExecContext` and
//! threads) holds a full copy of the model and trains on its own shard of
//! the data ([`DistributedSampler`]). [`DataParallel`] broadcasts rank 0's
//! parameters at the start and, after each backward, replaces every
//! gradient with its average over the ranks, bucket by bucket
//! ([`BucketPlan`], 25 MiB by default), with a reduction that leaves
//! **bitwise-identical** gradients, hence parameters and optimizer states,
//! on every rank. Rank 0 writes checkpoints and every rank resumes from
//! them ([`save_checkpoint`], [`resume`]). Every collective has a deadline
//! and names the ranks it is waiting for, so a failed rank never leaves its
//! peers hanging.
//!
//! Everything is written against the [`Transport`] trait: the `mpi` feature
//! provides the MPI transport (`mpi::init`); without it the
//! crate still builds (no MPI needed) with [`LocalTransport`], ranks as
//! threads of one process, on which the tests run the whole protocol.
//!
//! # A training step
//!
//! ```
//! use fucina_autograd::{ScopeExt, Tensor};
//! use fucina_distributed::{DataParallel, DdpOptions, LocalTransport, Transport};
//! use fucina_optim::{AdamConfig, AdamW, Optimizer};
//! let ranks = LocalTransport::group(2, std::time::Duration::from_secs(10))?;
//! let threads: Vec<_> = ranks.into_iter().map(|t| std::thread::spawn(move || {
//!     let ctx = fucina_core::ExecContext::with_threads(1)?;
//!     let w = Tensor::variable(&ctx, &[0.5f32, -0.5], &[2, 1])?;
//!     let ddp = DataParallel::new(&t, vec![w.clone()], DdpOptions::default())?;
//!     let mut opt = AdamW::single(vec![w.clone()], AdamConfig::adamw(0.01))?;
//!     // this rank's batch (rank-dependent data)
//!     let x = Tensor::constant(&ctx, &[1.0f32 + t.rank() as f32, 2.0], &[1, 2])?;
//!     {
//!         let _scope = ctx.scope();
//!         x.matmul(&w)?.square()?.mean_all()?.backward()?;
//!     }
//!     ddp.average_gradients()?; // the mean of both ranks' gradients, same bits on both
//!     opt.step()?;
//!     opt.zero_grad();
//!     ddp.check_in_sync() // every rank holds the same parameters
//! })).collect();
//! let hashes: Vec<u64> = threads.into_iter().map(|h| h.join().unwrap()).collect::<Result<_, _>>()?;
//! assert_eq!(hashes[0], hashes[1]);
//! # Ok::<(), fucina_distributed::Error>(())
//! ```
//!
//! Launching, what is averaged and when, checkpoints and measurements:
//! `docs/DISTRIBUTED.md`.
#![warn(missing_docs)]

pub mod bucket;
pub mod checkpoint;
pub mod ddp;
pub mod error;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod sampler;
pub mod transport;

pub use bucket::{Bucket, BucketPlan, Slot, DEFAULT_BUCKET_BYTES};
pub use checkpoint::{resume, save_checkpoint};
pub use ddp::{broadcast_tensors, mean_across_ranks, params_hash, DataParallel, DdpOptions};
pub use error::{Error, Result};
pub use sampler::DistributedSampler;
pub use transport::{
    all_gather_u64, barrier, broadcast_bytes, LocalTransport, Transport, DEFAULT_TIMEOUT,
};
