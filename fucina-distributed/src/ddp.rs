//! Data parallelism: parameters broadcast from rank 0 at the start, and
//! gradients averaged across ranks after each backward, bucket by bucket,
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

use std::cell::{Cell, RefCell};

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
        let sync = self.syncs.get() + 1;
        self.syncs.set(sync);
        let nb = self.plan.buckets.len();
        for (i, b) in self.plan.buckets.iter().enumerate() {
            let what = format!("gradient averaging #{sync}, bucket {}/{nb}", i + 1);
            match b.dtype {
                DType::F32 => self.average_bucket::<f32>(b, &what)?,
                DType::F64 => self.average_bucket::<f64>(b, &what)?,
                other => {
                    return Err(Error::InvalidConfig(format!(
                        "bucket of dtype {other}: only f32 and f64 gradients can be averaged"
                    )))
                }
            }
        }
        Ok(())
    }

    fn average_bucket<T: Element + bytemuck::Pod>(&self, b: &Bucket, what: &str) -> Result<()> {
        let t = self.transport;
        let n = t.size();
        if n == 1 {
            // The average over one rank is the gradient itself; a parameter
            // without a gradient gets zeros, as with more ranks.
            for s in &b.slots {
                let p = &self.params[s.param];
                if p.grad_raw().is_none() {
                    p.set_grad(Some(p.ctx().zeros(b.dtype, p.shape())?))?;
                }
            }
            return Ok(());
        }
        let c = b.chunk_len(n);
        let sz = std::mem::size_of::<T>();
        let mut guard = self.scratch.borrow_mut();
        let Scratch {
            flat,
            recv,
            mine,
            acc,
        } = &mut *guard;
        let flat = typed::<T>(flat, c * n);
        flat.fill(T::from_f64(0.0));
        for s in &b.slots {
            let p = &self.params[s.param];
            if let Some(g) = p.grad_raw() {
                let g = p.ctx().contiguous(&g)?;
                flat[s.offset..s.offset + s.len].copy_from_slice(g.as_slice::<T>()?);
            }
        }
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
        for s in &b.slots {
            let p = &self.params[s.param];
            let g = p
                .ctx()
                .from_slice(&flat[s.offset..s.offset + s.len], p.shape())?;
            p.set_grad(Some(g))?;
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
