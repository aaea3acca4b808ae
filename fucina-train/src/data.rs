//! Datasets and the data loader.
//!
//! A [`Dataset`] is a length and a get-by-index. The [`DataLoader`] turns
//! one into batches: the epoch's order is the identity, or (with `shuffle`)
//! a Fisher–Yates permutation drawn from `rng::at(seed, epoch)` — the same
//! rule as `fucina_distributed::DistributedSampler`, so
//! [`LoaderOptions::shard`] gives rank `r` of `w` the positions `r, r + w, …`
//! of that order, the sampler's shard. Batches are consecutive runs of
//! `batch_size` positions; `drop_last` drops a short tail. Sharded (`w >
//! 1`), every rank runs the same number of full batches, `len / (w ·
//! batch_size)` (the sampler's rule: a rank with one more batch than its
//! peers would wait for them forever in the gradient exchange).
//!
//! With `prefetch > 0`, `workers` threads build the batches ahead of the
//! consumer: worker `w` builds batches `w, w + workers, …`, each into its own
//! bounded queue of `prefetch` batches, and the consumer takes batch `k`
//! from queue `k mod workers`, so the order never depends on timing. With
//! `prefetch == 0` the batches are built on the caller's thread. Either way
//! the batch order is a pure function of the seed and the epoch, and
//! [`DataLoader::epoch_from`] resumes an epoch at any batch.

use std::io::BufRead;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

use fucina_core::rng::{self, SplitMix64};

use crate::error::{Error, Result};

/// A data set: `len` items, each got by index (any order, any thread).
pub trait Dataset: Send + Sync + 'static {
    /// One item.
    type Item: Send + 'static;
    /// The number of items.
    fn len(&self) -> usize;
    /// The item at `index` (`< len`).
    fn get(&self, index: usize) -> Result<Self::Item>;
    /// True when there are no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Items held in memory.
#[derive(Clone, Debug)]
pub struct InMemory<T> {
    items: Arc<Vec<T>>,
}

impl<T> InMemory<T> {
    /// A data set of `items`.
    pub fn new(items: Vec<T>) -> InMemory<T> {
        InMemory {
            items: Arc::new(items),
        }
    }
}

impl<T: Clone + Send + Sync + 'static> Dataset for InMemory<T> {
    type Item = T;
    fn len(&self) -> usize {
        self.items.len()
    }
    fn get(&self, index: usize) -> Result<T> {
        self.items
            .get(index)
            .cloned()
            .ok_or_else(|| out_of_range("InMemory", index, self.items.len()))
    }
}

/// The items of a data set at given indices, in that order: how a loader
/// takes an order made elsewhere, such as one rank's share of an epoch from
/// `fucina_distributed::DistributedSampler::indices(epoch)` (then load it
/// with `shuffle(false)`; a new `Subset` per epoch).
///
/// ```
/// use fucina_train::{Dataset, InMemory, Subset};
/// let s = Subset::new(InMemory::new(vec!['a', 'b', 'c', 'd']), vec![3, 1])?;
/// assert_eq!((s.len(), s.get(0)?, s.get(1)?), (2, 'd', 'b'));
/// assert!(Subset::new(InMemory::new(vec!['a']), vec![1]).is_err());
/// # Ok::<(), fucina_train::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Subset<D> {
    inner: D,
    indices: Arc<Vec<usize>>,
}

impl<D: Dataset> Subset<D> {
    /// `inner`'s items at `indices`; an error naming the first index out of range.
    pub fn new(inner: D, indices: Vec<usize>) -> Result<Subset<D>> {
        let n = inner.len();
        if let Some(&bad) = indices.iter().find(|&&i| i >= n) {
            return Err(out_of_range("Subset", bad, n));
        }
        Ok(Subset {
            inner,
            indices: Arc::new(indices),
        })
    }
}

impl<D: Dataset> Dataset for Subset<D> {
    type Item = D::Item;
    fn len(&self) -> usize {
        self.indices.len()
    }
    fn get(&self, index: usize) -> Result<D::Item> {
        let i = *self
            .indices
            .get(index)
            .ok_or_else(|| out_of_range("Subset", index, self.indices.len()))?;
        self.inner.get(i)
    }
}

fn out_of_range(what: &'static str, index: usize, len: usize) -> Error {
    Error::config(
        what,
        format!("index {index} is out of range for {len} items"),
    )
}

/// Windows of a token stream for causal language modelling: item `i` is
/// `(input, target)`, `window` tokens from a start and the same shifted by
/// one (transformers' labels, before the model's own shift).
#[derive(Clone, Debug)]
pub struct TextWindows {
    tokens: Arc<Vec<u32>>,
    window: usize,
    starts: Starts,
}

#[derive(Clone, Debug)]
enum Starts {
    /// Start `i · stride`.
    Sequential { stride: usize, count: usize },
    /// `count` starts drawn from `rng::at(seed, i)`.
    Random { seed: u64, count: usize },
}

impl TextWindows {
    /// Non-overlapping consecutive windows (start `i · window`), as many as
    /// fit with their one-token-shifted target.
    pub fn sequential(tokens: Vec<u32>, window: usize) -> Result<TextWindows> {
        let span = Self::span(&tokens, window)?;
        let count = span.div_ceil(window).min((tokens.len() - 1) / window);
        Ok(TextWindows {
            tokens: Arc::new(tokens),
            window,
            starts: Starts::Sequential {
                stride: window,
                count,
            },
        })
    }

    /// `count` windows at random starts (start of item `i` from
    /// `rng::at(seed, i)`: a pure function of the seed and the index).
    pub fn random(tokens: Vec<u32>, window: usize, count: usize, seed: u64) -> Result<TextWindows> {
        Self::span(&tokens, window)?;
        Ok(TextWindows {
            tokens: Arc::new(tokens),
            window,
            starts: Starts::Random { seed, count },
        })
    }

    /// The number of valid starts, or an error when no window fits.
    fn span(tokens: &[u32], window: usize) -> Result<usize> {
        if window == 0 || tokens.len() <= window {
            return Err(Error::config(
                "TextWindows",
                format!(
                    "a window of {window} tokens (plus its shifted target) needs a stream longer than {window}, got {} tokens",
                    tokens.len()
                ),
            ));
        }
        Ok(tokens.len() - window)
    }

    fn start(&self, index: usize) -> usize {
        let span = (self.tokens.len() - self.window) as u64;
        match self.starts {
            Starts::Sequential { stride, .. } => index * stride,
            Starts::Random { seed, .. } => (rng::at(seed, index as u64) % span) as usize,
        }
    }
}

impl Dataset for TextWindows {
    type Item = (Vec<i64>, Vec<i64>);
    fn len(&self) -> usize {
        match self.starts {
            Starts::Sequential { count, .. } | Starts::Random { count, .. } => count,
        }
    }
    fn get(&self, index: usize) -> Result<(Vec<i64>, Vec<i64>)> {
        if index >= self.len() {
            return Err(out_of_range("TextWindows", index, self.len()));
        }
        let s = self.start(index);
        let w = self.window;
        let x = self.tokens[s..s + w].iter().map(|&t| t as i64).collect();
        let y = self.tokens[s + 1..s + w + 1]
            .iter()
            .map(|&t| t as i64)
            .collect();
        Ok((x, y))
    }
}

/// One JSON object per line (blank lines skipped), e.g. the
/// `{"prompt": …, "completion": …}` format of fine-tuning data.
#[derive(Clone, Debug)]
pub struct JsonlDataset {
    rows: Arc<Vec<serde_json::Value>>,
    /// The 1-based line number of each row in the file.
    lines: Arc<Vec<usize>>,
    path: Arc<Path>,
}

impl JsonlDataset {
    /// Reads `path`; an unreadable or non-regular file, a line that is not
    /// a JSON object (naming its line number) or a file with no rows is an
    /// error.
    pub fn open(path: &Path) -> Result<JsonlDataset> {
        // Only a regular file: a FIFO would hang and `/dev/zero` is one
        // endless line.
        let meta = std::fs::metadata(path).map_err(|e| Error::file(path, e.to_string()))?;
        if !meta.is_file() {
            return Err(Error::file(path, "not a regular file"));
        }
        let f = std::fs::File::open(path).map_err(|e| Error::file(path, e.to_string()))?;
        let (mut rows, mut lines) = (Vec::new(), Vec::new());
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line.map_err(|e| Error::file(path, format!("line {}: {e}", i + 1)))?;
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(&line)
                .map_err(|e| Error::file(path, format!("line {}: not JSON: {e}", i + 1)))?;
            if !v.is_object() {
                return Err(Error::file(
                    path,
                    format!("line {}: not a JSON object", i + 1),
                ));
            }
            rows.push(v);
            lines.push(i + 1);
        }
        if rows.is_empty() {
            return Err(Error::file(path, "no rows (an empty JSONL file)"));
        }
        Ok(JsonlDataset {
            rows: Arc::new(rows),
            lines: Arc::new(lines),
            path: Arc::from(path),
        })
    }

    /// The file the rows were read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The 1-based line number of row `index` in the file.
    pub fn line_of(&self, index: usize) -> Option<usize> {
        self.lines.get(index).copied()
    }

    /// The string field `key` of row `index`: an error naming the file and
    /// the line where it is missing or not a string.
    pub fn string(&self, index: usize, key: &str) -> Result<&str> {
        let row = self
            .rows
            .get(index)
            .ok_or_else(|| out_of_range("JsonlDataset", index, self.rows.len()))?;
        row.get(key).and_then(|v| v.as_str()).ok_or_else(|| {
            let line = self.lines[index];
            let what = if row.get(key).is_some() {
                "is not a string"
            } else {
                "is missing"
            };
            Error::file(&self.path, format!("line {line}: field `{key}` {what}"))
        })
    }

    /// The string field `key` of every row (an error naming the file and
    /// the line where it is missing or not a string).
    pub fn strings(&self, key: &str) -> Result<Vec<String>> {
        (0..self.rows.len())
            .map(|i| self.string(i, key).map(str::to_string))
            .collect()
    }
}

impl Dataset for JsonlDataset {
    type Item = serde_json::Value;
    fn len(&self) -> usize {
        self.rows.len()
    }
    fn get(&self, index: usize) -> Result<serde_json::Value> {
        self.rows
            .get(index)
            .cloned()
            .ok_or_else(|| out_of_range("JsonlDataset", index, self.rows.len()))
    }
}

/// How a [`DataLoader`] batches.
#[derive(Clone, Debug)]
pub struct LoaderOptions {
    batch_size: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    prefetch: usize,
    workers: usize,
    shard: (usize, usize),
}

impl LoaderOptions {
    /// Batches of `batch_size`, shuffled with seed 0, the short tail kept,
    /// two batches prefetched by one worker thread.
    pub fn new(batch_size: usize) -> LoaderOptions {
        LoaderOptions {
            batch_size,
            shuffle: true,
            seed: 0,
            drop_last: false,
            prefetch: 2,
            workers: 1,
            shard: (0, 1),
        }
    }
    fucina_nn::setters! {
        /// Shuffle each epoch (on by default).
        shuffle(on: bool) => shuffle,
        /// The shuffle's seed.
        seed(seed: u64) => seed,
        /// Drop a last batch shorter than `batch_size`.
        drop_last(on: bool) => drop_last,
        /// Batches built ahead per worker (0: built on the caller's thread).
        prefetch(depth: usize) => prefetch,
        /// Worker threads when prefetching (at least 1).
        workers(n: usize) => workers,
    }
    /// Rank `rank` of `world` takes positions `rank, rank + world, …` of the
    /// epoch order (fucina-distributed's `DistributedSampler` shard).
    pub fn shard(mut self, rank: usize, world: usize) -> Self {
        self.shard = (rank, world);
        self
    }
}

type Collate<D, B> = dyn Fn(Vec<<D as Dataset>::Item>) -> Result<B> + Send + Sync;

/// Batches of a [`Dataset`], collated by a function (to tensors, padded
/// sequences, …).
pub struct DataLoader<D: Dataset, B> {
    dataset: Arc<D>,
    opts: LoaderOptions,
    collate: Arc<Collate<D, B>>,
}

impl<D: Dataset, B: Send + 'static> DataLoader<D, B> {
    /// A loader over `dataset`. Errors: a zero batch size or worker count,
    /// a bad shard, or (with `drop_last`) fewer items than one batch.
    pub fn new(
        dataset: D,
        opts: LoaderOptions,
        collate: impl Fn(Vec<D::Item>) -> Result<B> + Send + Sync + 'static,
    ) -> Result<DataLoader<D, B>> {
        let err = |m: String| Err(Error::config("DataLoader", m));
        if opts.batch_size == 0 {
            return err("batch_size must be positive".into());
        }
        if opts.workers == 0 && opts.prefetch > 0 {
            return err("workers must be at least 1 when prefetching".into());
        }
        let (rank, world) = opts.shard;
        if world == 0 || rank >= world {
            return err(format!(
                "shard rank {rank} of world {world}: need rank < world"
            ));
        }
        let loader = DataLoader {
            dataset: Arc::new(dataset),
            opts,
            collate: Arc::new(collate),
        };
        if loader.batches_per_epoch() == 0 {
            return err(format!(
                "{} items ({} in this shard) make no batch of {}{}",
                loader.dataset.len(),
                loader.shard_len(),
                loader.opts.batch_size,
                if loader.opts.drop_last {
                    " with drop_last"
                } else {
                    ""
                }
            ));
        }
        Ok(loader)
    }

    /// The data set.
    pub fn dataset(&self) -> &D {
        &self.dataset
    }

    fn shard_len(&self) -> usize {
        let (rank, world) = self.opts.shard;
        let n = self.dataset.len();
        n / world + usize::from(rank < n % world)
    }

    /// Batches in one epoch (the same on every rank of a shard).
    pub fn batches_per_epoch(&self) -> usize {
        let (n, b) = (self.shard_len(), self.opts.batch_size);
        let world = self.opts.shard.1;
        if world > 1 {
            return self.dataset.len() / world.saturating_mul(b);
        }
        if self.opts.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// The dataset indices of every batch of `epoch`, in order: a pure
    /// function of the seed, the epoch and the shard.
    pub fn batch_indices(&self, epoch: u64) -> Result<Vec<Vec<usize>>> {
        let n = self.dataset.len();
        let mut order: Vec<usize> = Vec::new();
        order.try_reserve_exact(n).map_err(|_| {
            Error::config(
                "DataLoader",
                format!("cannot allocate the order of {n} items"),
            )
        })?;
        order.extend(0..n);
        if self.opts.shuffle {
            let mut g = SplitMix64::new(rng::at(self.opts.seed, epoch));
            for i in (1..n).rev() {
                let j = g.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
        }
        let (rank, world) = self.opts.shard;
        let shard: Vec<usize> = order.into_iter().skip(rank).step_by(world).collect();
        let mut batches: Vec<Vec<usize>> = shard
            .chunks(self.opts.batch_size)
            .map(<[usize]>::to_vec)
            .collect();
        if self.opts.drop_last
            && batches
                .last()
                .is_some_and(|b| b.len() < self.opts.batch_size)
        {
            batches.pop();
        }
        // Sharded: the same count of full batches on every rank.
        batches.truncate(self.batches_per_epoch());
        Ok(batches)
    }

    /// The batches of `epoch`.
    pub fn epoch(&self, epoch: u64) -> Result<EpochIter<D, B>> {
        self.epoch_from(epoch, 0)
    }

    /// The batches of `epoch` from batch `start` on (a resumed run: the same
    /// batches as the uninterrupted epoch's from `start`).
    pub fn epoch_from(&self, epoch: u64, start: usize) -> Result<EpochIter<D, B>> {
        if start > self.batches_per_epoch() {
            return Err(Error::config(
                "DataLoader",
                format!(
                    "cannot resume at batch {start}: an epoch has {} batches",
                    self.batches_per_epoch()
                ),
            ));
        }
        let batches: Vec<Vec<usize>> = self.batch_indices(epoch)?.into_iter().skip(start).collect();
        let total = batches.len();
        if self.opts.prefetch == 0 {
            return Ok(EpochIter {
                source: Source::Inline {
                    dataset: Arc::clone(&self.dataset),
                    collate: Arc::clone(&self.collate),
                    batches,
                },
                next: 0,
                total,
            });
        }
        let workers = self.opts.workers.min(total.max(1));
        let mut queues = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for w in 0..workers {
            let (tx, rx) = sync_channel::<Result<B>>(self.opts.prefetch);
            let mine: Vec<Vec<usize>> = batches.iter().skip(w).step_by(workers).cloned().collect();
            let dataset = Arc::clone(&self.dataset);
            let collate = Arc::clone(&self.collate);
            let h = std::thread::Builder::new()
                .name(format!("fucina-loader-{w}"))
                .spawn(move || {
                    for idx in mine {
                        let b = build(&*dataset, &*collate, &idx);
                        let failed = b.is_err();
                        // The consumer hung up (dropped the iterator): stop.
                        if tx.send(b).is_err() || failed {
                            return;
                        }
                    }
                })
                .map_err(|e| Error::Worker(format!("cannot start a worker thread: {e}")))?;
            queues.push(rx);
            handles.push(h);
        }
        Ok(EpochIter {
            source: Source::Workers { queues, handles },
            next: 0,
            total,
        })
    }
}

fn build<D: Dataset, B>(dataset: &D, collate: &Collate<D, B>, idx: &[usize]) -> Result<B> {
    let mut items = Vec::with_capacity(idx.len());
    for &i in idx {
        items.push(dataset.get(i)?);
    }
    collate(items)
}

enum Source<D: Dataset, B> {
    Inline {
        dataset: Arc<D>,
        collate: Arc<Collate<D, B>>,
        batches: Vec<Vec<usize>>,
    },
    Workers {
        queues: Vec<Receiver<Result<B>>>,
        handles: Vec<std::thread::JoinHandle<()>>,
    },
}

/// One epoch's batches, in order. Dropping it stops the workers and waits
/// for them (so nothing they built outlives it); an error or the end of the
/// epoch releases them at once.
pub struct EpochIter<D: Dataset, B> {
    source: Source<D, B>,
    next: usize,
    total: usize,
}

impl<D: Dataset, B> EpochIter<D, B> {
    /// Drops the queues (a worker blocked in `send` then stops) and joins
    /// the workers.
    fn stop_workers(&mut self) {
        if let Source::Workers { queues, handles } = &mut self.source {
            queues.clear();
            for h in handles.drain(..) {
                // A worker that panicked already reported through its queue.
                let _ = h.join();
            }
        }
    }

    /// Batches left in this epoch.
    pub fn remaining(&self) -> usize {
        self.total - self.next
    }
}

impl<D: Dataset, B> Iterator for EpochIter<D, B> {
    type Item = Result<B>;
    fn next(&mut self) -> Option<Result<B>> {
        if self.next >= self.total {
            return None;
        }
        let k = self.next;
        self.next += 1;
        let out = match &self.source {
            Source::Inline {
                dataset,
                collate,
                batches,
            } => build(&**dataset, &**collate, &batches[k]),
            Source::Workers { queues, .. } => match queues[k % queues.len()].recv() {
                Ok(b) => b,
                Err(_) => Err(Error::Worker(format!("a worker stopped before batch {k}"))),
            },
        };
        if out.is_err() {
            self.next = self.total; // an error ends the epoch
        }
        if self.next >= self.total {
            self.stop_workers();
        }
        Some(out)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.remaining();
        (n, Some(n))
    }
}

impl<D: Dataset, B> Drop for EpochIter<D, B> {
    fn drop(&mut self) {
        self.stop_workers();
    }
}
