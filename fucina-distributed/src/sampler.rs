//! The distributed sampler: each rank's disjoint, seeded shard of a data set
//! per epoch.
//!
//! Invariants: every rank computes the same permutation of `0..len` for an
//! epoch (a Fisher–Yates shuffle driven by `rng::at(seed, epoch)`), and rank
//! `r` of `n` takes positions `r, r + n, r + 2n, ...` of it, so the shards
//! are disjoint and their union is the whole data set. Global batch `k` (the
//! union of every rank's batch `k`) is positions `k·n·b .. (k+1)·n·b` of the
//! permutation: exactly the batch a single process with batch `n·b` and the
//! same seed draws, which is what makes data-parallel training equal to
//! large-batch training. Every rank runs the same number of batches per
//! epoch (`len / (n·b)`, rounded down), so no rank waits in a collective for
//! a peer that has finished its epoch; the few samples left over in an epoch
//! are in other positions (and so used) in the next epoch's shuffle.

use fucina_core::rng::{self, SplitMix64};

use crate::error::{Error, Result};

/// A rank's view of a data set of `len` samples, shuffled per epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributedSampler {
    len: usize,
    rank: usize,
    world: usize,
    seed: u64,
    shuffle: bool,
}

impl DistributedSampler {
    /// A shuffling sampler for rank `rank` of `world` over `len` samples.
    /// Errors when `world` is 0 or `rank >= world`.
    ///
    /// ```
    /// use fucina_distributed::DistributedSampler;
    /// let s0 = DistributedSampler::new(10, 0, 2, 7)?;
    /// let s1 = DistributedSampler::new(10, 1, 2, 7)?;
    /// let mut all = s0.indices(3)?;
    /// all.extend(s1.indices(3)?);
    /// all.sort();
    /// assert_eq!(all, (0..10).collect::<Vec<_>>()); // disjoint, and the union is everything
    /// # Ok::<(), fucina_distributed::Error>(())
    /// ```
    pub fn new(len: usize, rank: usize, world: usize, seed: u64) -> Result<Self> {
        if world == 0 || rank >= world {
            return Err(Error::InvalidConfig(format!(
                "DistributedSampler: rank {rank} of world size {world}: need 0 <= rank < world"
            )));
        }
        Ok(DistributedSampler {
            len,
            rank,
            world,
            seed,
            shuffle: true,
        })
    }

    /// The same sampler without shuffling (the epoch order is `0..len`).
    pub fn without_shuffle(mut self) -> Self {
        self.shuffle = false;
        self
    }

    /// Samples in the data set.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the data set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The order of the whole data set in `epoch` (the same on every rank).
    /// Errors (never an abort) when `len` indices cannot be allocated.
    pub fn epoch_order(&self, epoch: u64) -> Result<Vec<usize>> {
        let mut order: Vec<usize> = Vec::new();
        order.try_reserve_exact(self.len).map_err(|_| {
            Error::InvalidConfig(format!(
                "DistributedSampler: cannot allocate the order of {} samples",
                self.len
            ))
        })?;
        order.extend(0..self.len);
        if self.shuffle {
            let mut g = SplitMix64::new(rng::at(self.seed, epoch));
            for i in (1..self.len).rev() {
                let j = g.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
        }
        Ok(order)
    }

    /// This rank's shard of `epoch`: positions `rank, rank + world, ...` of
    /// [`DistributedSampler::epoch_order`].
    pub fn indices(&self, epoch: u64) -> Result<Vec<usize>> {
        Ok(self
            .epoch_order(epoch)?
            .into_iter()
            .skip(self.rank)
            .step_by(self.world)
            .collect())
    }

    /// The number of samples in this rank's shard (shards differ by at most one).
    pub fn shard_len(&self) -> usize {
        self.len / self.world + usize::from(self.rank < self.len % self.world)
    }

    /// Batches of `batch` samples per rank per epoch: `len / (world·batch)`,
    /// the same on every rank. Errors when `batch` is 0 or the data set has
    /// fewer than `world·batch` samples.
    pub fn batches_per_epoch(&self, batch: usize) -> Result<usize> {
        let global = batch.saturating_mul(self.world);
        if batch == 0 || global > self.len {
            return Err(Error::InvalidConfig(format!(
                "DistributedSampler: batch {batch} per rank x {} ranks needs at least that many samples, the data set has {}",
                self.world, self.len
            )));
        }
        Ok(self.len / global)
    }

    /// The sample indices of this rank's batch at global step `step` (steps
    /// run through epochs: epoch `step / batches_per_epoch`, batch
    /// `step % batches_per_epoch` within it).
    pub fn batch(&self, step: u64, batch: usize) -> Result<Vec<usize>> {
        let per_epoch = self.batches_per_epoch(batch)? as u64;
        let (epoch, k) = (step / per_epoch, (step % per_epoch) as usize);
        let shard = self.indices(epoch)?;
        Ok(shard[k * batch..(k + 1) * batch].to_vec())
    }
}
