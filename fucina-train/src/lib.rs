//! fucina's training-loop kit: the plumbing every training loop needs,
//! with the loop itself left in the user's hands.
//!
//! - [`data`]: the [`Dataset`] trait with in-memory, text-window and JSONL
//!   implementations, and the [`DataLoader`]: batches of a seeded
//!   per-epoch shuffle, `drop_last`, a collate function to tensors
//!   ([`collate::pad_sequences`] pads and masks variable-length sequences)
//!   and background prefetch on worker threads with a bounded queue. The
//!   batch order is a pure function of the seed and the epoch, whatever the
//!   prefetch depth or the worker count, and a resumed epoch continues it.
//! - [`causal`]: causal-LM examples with labels (prompt tokens masked with
//!   the ignore index), packing into fixed blocks, the JSONL
//!   prompt/completion and text formats, and their padded batches.
//! - [`accumulate`]: gradient accumulation, K micro-batches summed into the
//!   leaf gradients with the loss scaled by 1/K.
//! - [`metrics`]: a logger writing JSONL and TensorBoard event files.
//! - [`policy`]: keep the last N checkpoints, keep the best by a metric,
//!   early stopping with patience.
//!
//! ```
//! use fucina_train::{DataLoader, InMemory, LoaderOptions};
//! let data = InMemory::new((0..10u32).collect());
//! let loader = DataLoader::new(data, LoaderOptions::new(4).seed(7).drop_last(true), |items: Vec<u32>| {
//!     Ok(items)
//! })?;
//! let epoch0: Vec<Vec<u32>> = loader.epoch(0)?.collect::<Result<_, _>>()?;
//! assert_eq!(epoch0.len(), 2); // 10 items, batches of 4, the last 2 dropped
//! # Ok::<(), fucina_train::Error>(())
//! ```

pub mod accumulate;
pub mod causal;
pub mod collate;
pub mod data;
pub mod error;
pub mod metrics;
pub mod policy;
pub mod progress;
mod tensorboard;

pub use accumulate::accumulate_gradients;
pub use data::{
    DataLoader, Dataset, EpochIter, InMemory, JsonlDataset, LoaderOptions, Subset, TextWindows,
};
pub use error::{Error, Result};
pub use metrics::MetricsLogger;
pub use policy::{EarlyStopping, KeepBest, KeepLast, Mode as MetricMode};
