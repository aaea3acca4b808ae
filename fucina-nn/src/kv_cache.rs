//! The KV cache of a decoding session (the founding document's KvCache):
//! per layer one K and one V buffer `[B, Hkv, capacity, D]`, allocated once
//! for the session and appended in place; attention reads a zero-copy
//! narrow of the filled prefix `[B, Hkv, len, D]`. [`KvCache::reset`] sets
//! the length to 0 and keeps the buffers (stale rows are overwritten by the
//! next append, which is correct because only the prefix is ever read).
//!
//! Appending needs the buffer to itself: a view of a previous step still
//! held (by a tape node in grad mode, say) makes [`KvCache::append`] fail
//! with a shared-buffer error rather than change what that view sees.

use fucina_core::{DType, ExecContext, Float, RawTensor};

use crate::error::{Error, Result};

/// Per-layer K/V buffers and the filled length.
#[derive(Debug)]
pub struct KvCache {
    k: Vec<RawTensor>,
    v: Vec<RawTensor>,
    len: usize,
    /// How many rows of the current step each layer has appended
    /// (all layers append the same count before [`KvCache::advance`]).
    pending: Vec<usize>,
    batch: usize,
    kv_heads: usize,
    capacity: usize,
    head_dim: usize,
}

impl KvCache {
    /// Buffers for `layers` layers of `batch` sequences of up to `capacity`
    /// positions, `kv_heads` heads of `head_dim` (f32 or f64).
    pub fn new(
        ctx: &ExecContext,
        dtype: DType,
        layers: usize,
        batch: usize,
        kv_heads: usize,
        capacity: usize,
        head_dim: usize,
    ) -> Result<KvCache> {
        if !matches!(dtype, DType::F32 | DType::F64) {
            return Err(Error::config(
                "KvCache",
                format!("dtype {dtype} is not f32 or f64"),
            ));
        }
        let dims = [
            ("batch", batch),
            ("kv_heads", kv_heads),
            ("capacity", capacity),
            ("head_dim", head_dim),
        ];
        if let Some((name, _)) = dims.iter().find(|(_, v)| *v == 0) {
            return Err(Error::config("KvCache", format!("{name} must be positive")));
        }
        let shape = [batch, kv_heads, capacity, head_dim];
        fucina_core::shape::numel_of("KvCache", &shape)?;
        let mut k = Vec::new();
        let mut v = Vec::new();
        for _ in 0..layers {
            k.push(ctx.zeros(dtype, &shape)?);
            v.push(ctx.zeros(dtype, &shape)?);
        }
        Ok(KvCache {
            k,
            v,
            len: 0,
            pending: vec![0; layers],
            batch,
            kv_heads,
            capacity,
            head_dim,
        })
    }

    /// Positions filled.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most positions the buffers hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Layers.
    pub fn layers(&self) -> usize {
        self.k.len()
    }

    /// Forgets every cached position and keeps the buffers.
    pub fn reset(&mut self) {
        self.len = 0;
        self.pending.iter_mut().for_each(|p| *p = 0);
    }

    /// Writes this step's `k` and `v` (`[B, T, Hkv, D]`, any strides) of
    /// layer `layer` after the filled prefix and returns the views
    /// `[B, Hkv, len + T, D]` attention reads. The length moves on at
    /// [`KvCache::advance`], once every layer has appended.
    pub fn append(
        &mut self,
        layer: usize,
        k: &RawTensor,
        v: &RawTensor,
    ) -> Result<(RawTensor, RawTensor)> {
        let want = |t: &RawTensor| {
            t.rank() == 4
                && t.shape()[0] == self.batch
                && t.shape()[2] == self.kv_heads
                && t.shape()[3] == self.head_dim
                && t.dtype() == self.k.first().map_or(t.dtype(), |c| c.dtype())
        };
        if layer >= self.k.len() || !want(k) || !want(v) || k.shape() != v.shape() {
            return Err(Error::input(
                "KvCache",
                format!(
                    "append wants layer < {} and k, v of [{}, T, {}, {}] in the cache's dtype",
                    self.k.len(),
                    self.batch,
                    self.kv_heads,
                    self.head_dim
                ),
                k.shape(),
            ));
        }
        let t = k.shape()[1];
        let end = self.len + t;
        if end > self.capacity {
            return Err(Error::input(
                "KvCache",
                format!(
                    "{} cached + {t} new positions exceed the capacity {}",
                    self.len, self.capacity
                ),
                k.shape(),
            ));
        }
        let (len, cap) = (self.len, self.capacity);
        write_rows(&mut self.k[layer], k, len, cap)?;
        write_rows(&mut self.v[layer], v, len, cap)?;
        self.pending[layer] = t;
        Ok((
            self.k[layer].narrow(2, 0, end)?,
            self.v[layer].narrow(2, 0, end)?,
        ))
    }

    /// Moves the length on by the `t` positions every layer appended.
    pub fn advance(&mut self, t: usize) -> Result<()> {
        if self.pending.iter().any(|&p| p != t) {
            return Err(Error::config(
                "KvCache",
                format!(
                    "advance({t}) but the layers appended {:?} positions",
                    self.pending
                ),
            ));
        }
        self.len += t;
        self.pending.iter_mut().for_each(|p| *p = 0);
        Ok(())
    }
}

/// Copies `src [B, T, H, D]` into rows `len..len + T` of `dst [B, H, cap, D]`.
fn write_rows(dst: &mut RawTensor, src: &RawTensor, len: usize, cap: usize) -> Result<()> {
    match dst.dtype() {
        DType::F32 => write_typed::<f32>(dst, src, len, cap),
        DType::F64 => write_typed::<f64>(dst, src, len, cap),
        d => Err(Error::config(
            "KvCache",
            format!("dtype {d} is not f32 or f64"),
        )),
    }
}

fn write_typed<T: Float>(
    dst: &mut RawTensor,
    src: &RawTensor,
    len: usize,
    cap: usize,
) -> Result<()> {
    let s = src.shape();
    let (b, t, h, d) = (s[0], s[1], s[2], s[3]);
    let st = src.strides().to_vec();
    let (off, data) = (src.offset(), src.storage::<T>()?);
    let out = dst.as_mut_slice::<T>()?;
    for bi in 0..b {
        for ti in 0..t {
            for hi in 0..h {
                let from = off + bi * st[0] + ti * st[1] + hi * st[2];
                let to = ((bi * h + hi) * cap + len + ti) * d;
                for x in 0..d {
                    out[to + x] = data[from + x * st[3]];
                }
            }
        }
    }
    Ok(())
}
