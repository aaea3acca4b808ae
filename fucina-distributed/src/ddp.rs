//! Data parallelism: parameters broadcast from rank 0 at the start, and
//! gradients averaged across ranks after (or during) each backward, bucket by bucket,
//! with a reduction whose result is bitwise identical on every rank.
//!
//! The averaging of a bucket of `L` elements over `n` ranks (padded to
//! `n·c`, `c = ceil(L/n)`):
//! 1. **reduce-scatter**: rank `r` sends chunk `q` of its flat gradient to
//!    rank `q` and receives chunk `r` of every rank's gradient;
//! 2. **ordered sum**: rank `r` sums its chunk over the ranks in rank order
//!    `0, 1, ..., n−1` (in f64, then divides by `n` and rounds once to the
//!    gradient's dtype);
//! 3. **all-gather**: every rank receives every reduced chunk.
//!
//! Each element is summed once, by one rank, in a fixed order, and the
//! result is copied to everyone, so every rank holds the same bits (MPI's own
//! allreduce does not promise that for floats). The traffic per rank is
//! `2·(n−1)/n·L` elements, the same as a ring allreduce. The buffers of
//! the exchange are kept between steps (no fresh, page-faulting allocation
//! per step), and a job of one rank skips the exchange: the average of one
//! gradient is that gradient, bit for bit.
//!
//! [`DataParallel::backward_overlapped`] runs the same averaging while
//! backward runs: autograd's gradient-ready hook marks each parameter's
//! gradient final, and each bucket, once complete, goes to a communication
//! thread; the result is bitwise the same, since each element's sum depends
//! only on that element's values across ranks.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;

use fucina_autograd::Tensor;
use fucina_core::{DType, Element, RawTensor};

use crate::bucket::{Bucket, BucketPlan, DEFAULT_BUCKET_BYTES};
use crate::error::{Error, Result};
use crate::transport::{all_gather_u64, broadcast_bytes, Transport};

/// Options of [`DataParallel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpOptions {
    /// The bucket cap in bytes (default [`DEFAULT_BUCKET_BYTES`], 25 MiB).
    pub bucket_bytes: usize,
    /// Broadcast rank 0's parameter values to every rank in
    /// [`DataParallel::new`] (default true).
    pub broadcast_params: bool,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            broadcast_params: true,
        }
    }
}

/// Keeps a model's parameters identical across the ranks of a job.
///
/// The loop on every rank: forward and backward on this rank's batch (a
/// mean-reduced loss), [`DataParallel::average_gradients`], then the
/// optimizer's step. The averaged gradient is the gradient of the mean loss
/// over the global batch, so the step is the one a single process takes
/// with the ranks' batches concatenated (up to floating-point summation
/// order).
pub struct DataParallel<'t> {
    transport: &'t dyn Transport,
    params: Vec<Tensor>,
    plan: BucketPlan,
    syncs: Cell<u64>,
    /// Buckets the last overlapped call sent before backward ended.
    sent_early: Cell<usize>,
    scratch: RefCell<Scratch>,
}

/// The averaging's buffers, reused from step to step.
#[derive(Default)]
struct Scratch {
    /// The flat bucket, as 8-byte words (aligned for f32 and f64).
    flat: Vec<u64>,
    /// One receive buffer per rank.
    recv: Vec<Vec<u8>>,
    /// This rank's reduced chunk, as bytes.
    mine: Vec<u8>,
    /// The f64 accumulator of the ordered sum.
    acc: Vec<f64>,
}

/// The first `len` elements of `buf` viewed as `T` (an 8-byte-aligned
/// element type), growing `buf` when it is too short.
fn typed<T: bytemuck::Pod>(buf: &mut Vec<u64>, len: usize) -> &mut [T] {
    let words = (len * std::mem::size_of::<T>()).div_ceil(8);
    if buf.len() < words {
        buf.resize(words, 0);
    }
    &mut bytemuck::cast_slice_mut::<u64, T>(&mut buf[..words])[..len]
}

impl<'t> DataParallel<'t> {
    /// Checks that every rank has the same parameter list (count, shapes,
    /// dtypes: [`Error::ParamMismatch`] otherwise), plans the buckets, and
    /// (by default) broadcasts rank 0's parameter values to every rank.
    pub fn new(
        transport: &'t dyn Transport,
        params: Vec<Tensor>,
        opts: DdpOptions,
    ) -> Result<Self> {
        let specs: Vec<(usize, DType)> = params.iter().map(|p| (p.numel(), p.dtype())).collect();
        let plan = BucketPlan::new(&specs, opts.bucket_bytes)?;
        let mut layout = Fnv::new();
        for p in &params {
            layout.write(p.dtype().to_string().as_bytes());
            for &d in p.shape() {
                layout.write(&(d as u64).to_le_bytes());
            }
            layout.write(b";");
        }
        let layouts = all_gather_u64(transport, "parameter layout check", layout.finish())?;
        let differ: Vec<usize> = (0..layouts.len())
            .filter(|&q| layouts[q] != layouts[0])
            .collect();
        if !differ.is_empty() {
            return Err(Error::ParamMismatch {
                rank: transport.rank(),
                detail: format!(
                    "rank(s) {differ:?} have parameter counts, shapes or dtypes different from rank 0's (this rank has {} parameters)",
                    params.len()
                ),
            });
        }
        let ddp = DataParallel {
            transport,
            params,
            plan,
            syncs: Cell::new(0),
            sent_early: Cell::new(0),
            scratch: RefCell::new(Scratch::default()),
        };
        if opts.broadcast_params {
            ddp.broadcast(&ddp.params)?;
        }
        Ok(ddp)
    }

    /// The parameters, in registration order.
    pub fn params(&self) -> &[Tensor] {
        &self.params
    }

    /// The bucketing plan.
    pub fn plan(&self) -> &BucketPlan {
        &self.plan
    }

    /// The transport.
    pub fn transport(&self) -> &dyn Transport {
        self.transport
    }

    /// Copies rank 0's values of `tensors` (parameters or buffers such as
    /// running statistics) to every rank. Every rank passes tensors of the
    /// same shapes and dtypes.
    pub fn broadcast(&self, tensors: &[Tensor]) -> Result<()> {
        broadcast_tensors(self.transport, tensors)
    }

    /// Replaces every parameter's gradient by its average over the ranks
    /// (a parameter without a gradient counts as a zero gradient, and
    /// receives the average like the others, as in PyTorch's DDP). Call after
    /// backward and before clipping and the optimizer step.
    pub fn average_gradients(&self) -> Result<()> {
        let sync = self.next_sync();
        let mut scratch = self.scratch.borrow_mut();
        let mut averager = Averager {
            t: self.transport,
            params: &self.params,
            scratch: &mut scratch,
        };
        for (i, b) in self.plan.buckets.iter().enumerate() {
            let grads: Vec<Option<RawTensor>> = b
                .slots
                .iter()
                .map(|s| self.params[s.param].grad_raw())
                .collect();
            let what = self.what(sync, i);
            let avg = averager.bucket(b, &grads, &what)?;
            self.store(b, avg)?;
        }
        Ok(())
    }

    /// Runs backward from `loss` (a scalar) and averages the gradients while
    /// it runs: the same gradients as `loss.backward()` followed by
    /// [`DataParallel::average_gradients`], bit for bit, with the exchange
    /// overlapped with the rest of backward (issue 28; PyTorch DDP's
    /// gradient-ready hooks).
    ///
    /// Backward runs on this thread with a gradient-ready hook
    /// ([`Tensor::backward_with_ready_hook`]); as soon as every gradient of
    /// the next bucket of the plan is final, the bucket is handed to a
    /// communication thread, which averages it (reduce-scatter, ordered f64
    /// sum, all-gather, as [`DataParallel::average_gradients`]) while
    /// backward goes on. Buckets leave in plan order (reverse registration
    /// order, the order backward usually finishes gradients in); a bucket
    /// whose gradients are not all ready when backward ends (a parameter
    /// the loss does not use, or one used early in the forward pass) and
    /// every bucket after it are averaged after backward, from the committed
    /// gradients. The call returns when every bucket is averaged and stored,
    /// so the optimizer may step right after. Only the communication thread
    /// uses the transport during the call (the MPI transport requests
    /// `MPI_THREAD_SERIALIZED` and serializes its calls). An error of the
    /// exchange or of backward is returned as this crate's [`Error`], after
    /// the communication thread has ended; a panic there is
    /// [`Error::CommThreadPanicked`]. With one rank it is backward followed
    /// by [`DataParallel::average_gradients`].
    pub fn backward_overlapped(&self, loss: &Tensor) -> Result<()> {
        let t = self.transport;
        if t.size() == 1 {
            self.sent_early.set(0);
            loss.backward()?;
            return self.average_gradients();
        }
        let sync = self.next_sync();
        let buckets = &self.plan.buckets;
        let mut bucket_of = vec![0; self.params.len()];
        for (i, b) in buckets.iter().enumerate() {
            for s in &b.slots {
                bucket_of[s.param] = i;
            }
        }
        // A gradient the leaf already holds (accumulation): the hook's
        // gradient is added to it, as backward's commit will.
        let olds: Vec<Option<RawTensor>> = self.params.iter().map(|p| p.grad_raw()).collect();
        let mut scratch = std::mem::take(&mut *self.scratch.borrow_mut());
        let params = &self.params[..];
        let cancel = AtomicBool::new(false);
        let (outcome, done) = std::thread::scope(|scope| {
            let (tx, rx) = channel::<Job>();
            let (cancel, olds, scratch) = (&cancel, &olds, &mut scratch);
            let comm = scope.spawn(move || -> Result<Vec<(usize, Vec<Option<RawTensor>>)>> {
                let mut done = Vec::new();
                let mut averager = Averager { t, params, scratch };
                for job in rx {
                    if cancel.load(Ordering::Relaxed) {
                        break;
                    }
                    let b = &buckets[job.bucket];
                    let mut grads = Vec::with_capacity(b.slots.len());
                    for (s, g) in b.slots.iter().zip(job.grads) {
                        let old = if job.staged {
                            olds[s.param].as_ref()
                        } else {
                            None
                        };
                        grads.push(match (g, old) {
                            (Some(g), Some(old)) => Some(params[s.param].ctx().binary(
                                old,
                                &g,
                                fucina_core::kernels::elementwise::BinaryOp::Add,
                            )?),
                            (g, _) => g,
                        });
                    }
                    let what = what_of(sync, job.bucket, buckets.len());
                    let avg = averager.bucket(b, &grads, &what)?;
                    done.push((job.bucket, avg));
                }
                Ok(done)
            });
            let mut staged: Vec<Option<RawTensor>> = vec![None; params.len()];
            let mut fired = vec![false; params.len()];
            let mut ready = vec![0usize; buckets.len()];
            let mut next = 0;
            let mut cursor = params.len();
            let mut hook = |leaf: &Tensor, g: &RawTensor| {
                // Gradients come roughly in reverse parameter order: search
                // downwards from the last match.
                let n = params.len();
                let Some(i) = (1..=n)
                    .map(|k| (cursor + n - k) % n)
                    .find(|&i| !fired[i] && params[i].same_as(leaf))
                else {
                    return; // not a parameter, or listed once and seen
                };
                cursor = i;
                fired[i] = true;
                staged[i] = Some(g.clone());
                ready[bucket_of[i]] += 1;
                while next < buckets.len() && ready[next] == buckets[next].slots.len() {
                    let grads = buckets[next]
                        .slots
                        .iter()
                        .map(|s| staged[s.param].take())
                        .collect();
                    // A send fails only when the thread has stopped on an
                    // error, which its join reports.
                    let _ = tx.send(Job {
                        bucket: next,
                        grads,
                        staged: true,
                    });
                    next += 1;
                }
            };
            let outcome = loss
                .backward_with_ready_hook(&mut hook)
                .map_err(Error::from);
            self.sent_early.set(next);
            if outcome.is_ok() {
                // The rest, from the committed gradients.
                for (i, b) in buckets.iter().enumerate().skip(next) {
                    let grads = b.slots.iter().map(|s| params[s.param].grad_raw()).collect();
                    let _ = tx.send(Job {
                        bucket: i,
                        grads,
                        staged: false,
                    });
                }
            } else {
                cancel.store(true, Ordering::Relaxed);
            }
            drop(tx);
            let done = comm.join().unwrap_or_else(|panic| {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into());
                Err(Error::CommThreadPanicked {
                    rank: t.rank(),
                    what: format!("gradient averaging #{sync}"),
                    message,
                })
            });
            (outcome, done)
        });
        *self.scratch.borrow_mut() = scratch;
        outcome?;
        for (i, avg) in done? {
            self.store(&buckets[i], avg)?;
        }
        Ok(())
    }

    /// `(sent early, buckets)`: how many buckets the last
    /// [`DataParallel::backward_overlapped`] handed to its communication
    /// thread while backward was still running, and how many the plan has.
    pub fn overlapped_buckets(&self) -> (usize, usize) {
        (self.sent_early.get(), self.plan.buckets.len())
    }

    /// The number of this averaging (1, 2, ...), for error messages.
    fn next_sync(&self) -> u64 {
        let sync = self.syncs.get() + 1;
        self.syncs.set(sync);
        sync
    }

    fn what(&self, sync: u64, bucket: usize) -> String {
        what_of(sync, bucket, self.plan.buckets.len())
    }

    /// Stores the averaged gradients of bucket `b` (`None`: left as it is).
    fn store(&self, b: &Bucket, avg: Vec<Option<RawTensor>>) -> Result<()> {
        for (s, g) in b.slots.iter().zip(avg) {
            if let Some(g) = g {
                self.params[s.param].set_grad(Some(g))?;
            }
        }
        Ok(())
    }

    /// A 64-bit hash (FNV-1a) of this rank's parameter values, in order.
    pub fn params_hash(&self) -> Result<u64> {
        params_hash(&self.params)
    }

    /// Checks that every rank holds bitwise-identical parameters (by hash);
    /// returns the common hash, or [`Error::ParamMismatch`] listing each
    /// rank's hash.
    pub fn check_in_sync(&self) -> Result<u64> {
        let h = self.params_hash()?;
        let all = all_gather_u64(self.transport, "parameter hash check", h)?;
        if all.iter().any(|&x| x != all[0]) {
            return Err(Error::ParamMismatch {
                rank: self.transport.rank(),
                detail: format!("parameter hashes by rank: {all:x?}"),
            });
        }
        Ok(h)
    }
}

/// The name of bucket `bucket` (of `nb`) of averaging number `sync`, in errors.
fn what_of(sync: u64, bucket: usize, nb: usize) -> String {
    format!("gradient averaging #{sync}, bucket {}/{nb}", bucket + 1)
}

/// A bucket handed to the communication thread of
/// [`DataParallel::backward_overlapped`].
struct Job {
    /// Its index in the plan.
    bucket: usize,
    /// One gradient per slot (`None`: no gradient, averaged as zeros).
    grads: Vec<Option<RawTensor>>,
    /// True when `grads` are backward's staged sums, to which the gradients
    /// the parameters held before backward are still to be added; false
    /// when they are the committed gradients.
    staged: bool,
}

/// One rank's side of the averaging: the transport, the parameters and
/// the buffers reused from bucket to bucket.
struct Averager<'a> {
    t: &'a dyn Transport,
    params: &'a [Tensor],
    scratch: &'a mut Scratch,
}

impl Averager<'_> {
    /// The average over the ranks of bucket `b`, whose slots' gradients are
    /// `grads` (`None`: zeros): one new gradient per slot, or `None` where the
    /// gradient stays as it is (a job of one rank, whose average is the
    /// gradient itself).
    fn bucket(&mut self, b: &Bucket, grads: &[Option<RawTensor>], what: &str) -> Averaged {
        match b.dtype {
            DType::F32 => self.typed::<f32>(b, grads, what),
            DType::F64 => self.typed::<f64>(b, grads, what),
            other => Err(Error::InvalidConfig(format!(
                "bucket of dtype {other}: only f32 and f64 gradients can be averaged"
            ))),
        }
    }

    fn typed<T: Element + bytemuck::Pod>(
        &mut self,
        b: &Bucket,
        grads: &[Option<RawTensor>],
        what: &str,
    ) -> Averaged {
        let (t, params) = (self.t, self.params);
        let n = t.size();
        if n == 1 {
            // The average over one rank is the gradient itself; a parameter
            // without a gradient gets zeros, as with more ranks.
            return b
                .slots
                .iter()
                .zip(grads)
                .map(|(s, g)| {
                    let p = &params[s.param];
                    Ok(match g {
                        Some(_) => None,
                        None => Some(p.ctx().zeros(b.dtype, p.shape())?),
                    })
                })
                .collect();
        }
        let c = b.chunk_len(n);
        let sz = std::mem::size_of::<T>();
        let Scratch {
            flat,
            recv,
            mine,
            acc,
        } = &mut *self.scratch;
        let flat = typed::<T>(flat, c * n);
        // The slots tile 0..b.len: each is overwritten (zeros without a
        // gradient), then the padding is zeroed.
        for (s, g) in b.slots.iter().zip(grads) {
            let dst = &mut flat[s.offset..s.offset + s.len];
            match g {
                Some(g) => {
                    dst.copy_from_slice(params[s.param].ctx().contiguous(g)?.as_slice::<T>()?)
                }
                None => dst.fill(T::from_f64(0.0)),
            }
        }
        flat[b.len..].fill(T::from_f64(0.0));
        recv.resize_with(n, Vec::new);
        for r in recv.iter_mut() {
            r.resize(c * sz, 0);
        }
        // 1. reduce-scatter: chunk q to rank q.
        let bytes: &[u8] = bytemuck::cast_slice(flat);
        let send: Vec<&[u8]> = (0..n)
            .map(|q| &bytes[q * c * sz..(q + 1) * c * sz])
            .collect();
        t.exchange(&format!("{what}: reduce-scatter"), &send, recv)?;
        // 2. the ordered sum of this rank's chunk: ranks 0, 1, ..., n-1.
        acc.clear();
        acc.resize(c, 0.0);
        for r in recv.iter() {
            for (a, v) in acc.iter_mut().zip(r.chunks_exact(sz)) {
                *a += bytemuck::pod_read_unaligned::<T>(v).to_f64();
            }
        }
        let inv = n as f64;
        mine.clear();
        for &a in acc.iter() {
            mine.extend_from_slice(bytemuck::bytes_of(&T::from_f64(a / inv)));
        }
        // 3. all-gather: every rank's reduced chunk to everyone.
        let send = vec![&mine[..]; n];
        t.exchange(&format!("{what}: all-gather"), &send, recv)?;
        for (q, r) in recv.iter().enumerate() {
            bytemuck::cast_slice_mut::<T, u8>(&mut flat[q * c..(q + 1) * c]).copy_from_slice(r);
        }
        b.slots
            .iter()
            .map(|s| {
                let p = &params[s.param];
                Ok(Some(p.ctx().from_slice(
                    &flat[s.offset..s.offset + s.len],
                    p.shape(),
                )?))
            })
            .collect()
    }
}

/// Each slot's averaged gradient (`None`: unchanged).
type Averaged = Result<Vec<Option<RawTensor>>>;

/// Rank 0's values of `tensors` to every rank (one message with all of them).
pub fn broadcast_tensors(t: &dyn Transport, tensors: &[Tensor]) -> Result<()> {
    let mut blob = Vec::new();
    if t.rank() == 0 {
        for x in tensors {
            blob.extend_from_slice(&tensor_bytes(&x.raw()?, x)?);
        }
    }
    let blob = broadcast_bytes(t, "broadcast of parameters and buffers", 0, &blob)?;
    if t.rank() == 0 {
        return Ok(());
    }
    let expected: usize = tensors
        .iter()
        .map(|x| x.numel() * x.dtype().size_of())
        .sum();
    if blob.len() != expected {
        return Err(Error::SizeMismatch {
            rank: t.rank(),
            what: "broadcast of parameters and buffers".into(),
            peer: 0,
            expected,
            got: blob.len(),
        });
    }
    let mut at = 0;
    for x in tensors {
        let nbytes = x.numel() * x.dtype().size_of();
        let raw = fucina_core::dispatch_any!(x.dtype(), T => {
            let mut vals = vec![<T as Element>::from_f64(0.0); x.numel()];
            bytemuck::cast_slice_mut::<T, u8>(&mut vals).copy_from_slice(&blob[at..at + nbytes]);
            x.ctx().from_slice(&vals, x.shape())?
        });
        x.set_value(raw)?;
        at += nbytes;
    }
    Ok(())
}

/// The bytes of a tensor's value, contiguous, little-endian.
fn tensor_bytes(raw: &RawTensor, owner: &Tensor) -> Result<Vec<u8>> {
    let raw = owner.ctx().contiguous(raw)?;
    Ok(
        fucina_core::dispatch_any!(raw.dtype(), T => bytemuck::cast_slice::<T, u8>(raw.as_slice::<T>()?).to_vec()),
    )
}

/// A 64-bit hash (FNV-1a) of the values of `params`, in order: equal hashes
/// on two ranks mean (up to a 2^-64 collision) bitwise-equal parameters.
pub fn params_hash(params: &[Tensor]) -> Result<u64> {
    let mut h = Fnv::new();
    for p in params {
        h.write(&tensor_bytes(&p.raw()?, p)?);
    }
    Ok(h.finish())
}

/// The mean of one `f64` per rank (e.g. the ranks' losses), summed in rank
/// order so that every rank gets the same bits.
pub fn mean_across_ranks(t: &dyn Transport, what: &str, x: f64) -> Result<f64> {
    let all = all_gather_u64(t, what, x.to_bits())?;
    Ok(all.iter().map(|&b| f64::from_bits(b)).sum::<f64>() / all.len() as f64)
}

/// FNV-1a, 64 bit.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
