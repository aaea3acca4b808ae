//! Shared machinery of the fused update loops: fixed-size chunking over the
//! context's threads (each chunk gets its own disjoint `&mut` part of the
//! parameter and moment buffers, cut safely by core's
//! `ExecContext::par_zip_chunks_mut`), and moment storage types.
//!
//! Chunk boundaries depend only on the element count ([`CHUNK`]), never on the
//! thread count, and every element's update reads and writes only that
//! element, so an update is bitwise identical for any number of threads.

use std::ops::Range;

use fucina_core::{bf16, DType, Element, ExecContext, Float, RawTensor, ZipMut};

/// Elements per parallel chunk of an update (fixed: results never depend on threads).
pub const CHUNK: usize = 1 << 14;

/// The body of a fused update over a range of elements. `Z` is the chunk's
/// part of the update's mutable buffers (the parameter and its moments, as a
/// tuple of slices cut by [`ExecContext::par_zip_chunks_mut`]); read-only
/// inputs (the gradient) are indexed with the range. Implementations mark
/// `run` `#[inline(always)]`, so it is compiled into each vector-ISA variant
/// of [`run_chunks`] (AVX-512 or AVX2 + FMA on x86-64, where `mul_add` is one
/// instruction and the loop vectorises); results are identical on every path
/// (FMA is exactly rounded everywhere).
pub(crate) trait ChunkKernel<Z>: Sync {
    /// Updates elements `r`, whose part of every mutable buffer is `z`.
    fn run(&self, r: Range<usize>, z: Z);
}

/// Runs `k` over `0..n` in fixed chunks of [`CHUNK`], in parallel when `n > CHUNK`;
/// chunk `c` gets elements `c·CHUNK ..` of every buffer of `bufs` (each of length `n`)
/// as disjoint `&mut` slices.
pub(crate) fn run_chunks<Z: ZipMut, K: ChunkKernel<Z>>(
    ctx: &ExecContext,
    n: usize,
    bufs: Z,
    k: &K,
) {
    ctx.par_zip_chunks_mut(bufs, CHUNK, n.div_ceil(CHUNK), n > CHUNK, |c, z| {
        let lo = c * CHUNK;
        dispatch(k, lo..(lo + CHUNK).min(n), z)
    });
}

#[inline]
fn dispatch<Z, K: ChunkKernel<Z>>(k: &K, r: Range<usize>, z: Z) {
    #[cfg(target_arch = "x86_64")]
    {
        /// # Safety
        /// The CPU has AVX-512F/VL, AVX2 and FMA.
        #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
        unsafe fn avx512<Z, K: ChunkKernel<Z>>(k: &K, r: Range<usize>, z: Z) {
            k.run(r, z)
        }
        /// # Safety
        /// The CPU has AVX2 and FMA.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<Z, K: ChunkKernel<Z>>(k: &K, r: Range<usize>, z: Z) {
            k.run(r, z)
        }
        use fucina_core::kernels::simd::{update_isa, UpdateIsa};
        match update_isa() {
            // SAFETY: core detected AVX-512F/VL, AVX2 and FMA on this CPU.
            UpdateIsa::Avx512 => return unsafe { avx512(k, r, z) },
            // SAFETY: core detected AVX2 and FMA on this CPU.
            UpdateIsa::Avx2Fma => return unsafe { avx2(k, r, z) },
            UpdateIsa::Base => {}
        }
    }
    k.run(r, z)
}

/// How a moment buffer of a parameter of compute type `T` is stored.
pub(crate) trait Moment<T>: Element {
    /// Widens a stored value to the compute type.
    fn load(self) -> T;
    /// Rounds a computed value to storage (round to nearest even for bf16).
    fn store(v: T) -> Self;
}

/// `impl Moment<T> for S`, one `S => T: load, store;` row each: the
/// widening of a stored value and the rounding of a computed one.
macro_rules! moments {
    ($($s:ty => $t:ty: $load:expr, $store:expr;)*) => {$(
        impl Moment<$t> for $s {
            #[inline(always)]
            fn load(self) -> $t {
                $load(self)
            }
            #[inline(always)]
            fn store(v: $t) -> $s {
                $store(v)
            }
        }
    )*};
}

moments! {
    f32 => f32: std::convert::identity, std::convert::identity;
    f64 => f64: std::convert::identity, std::convert::identity;
    bf16 => f32: bf16::to_f32, bf16::from_f32;
    bf16 => f64: bf16::to_f64, bf16::from_f64;
}

/// One optimizer state buffer (a moment), stored as f32, f64 or bf16.
///
/// The elements live in a contiguous tensor from the parameter's context's
/// pool, so optimizer state is counted in `ctx.stats()` and bounded by the
/// pool's memory limit (a moment that does not fit is
/// `fucina_core::Error::OutOfMemory`). `Clone` shares the buffer; the next
/// update through a shared clone copies it first (copy on write).
pub struct Buf {
    t: RawTensor,
    ctx: ExecContext,
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buf")
            .field("dtype", &self.dtype())
            .field("len", &self.len())
            .finish()
    }
}

impl Clone for Buf {
    fn clone(&self) -> Buf {
        Buf {
            t: self.t.clone_view(),
            ctx: self.ctx.clone(),
        }
    }
}

impl PartialEq for Buf {
    /// Equal when dtype, length and every byte agree.
    fn eq(&self, other: &Buf) -> bool {
        self.dtype() == other.dtype() && self.len() == other.len() && self.bytes() == other.bytes()
    }
}

/// The op name carried by state-buffer errors.
const OP: &str = "optimizer state";

impl Buf {
    /// A zero buffer of `n` elements stored as `dtype` (f32, f64 or bf16),
    /// allocated from `ctx`'s pool.
    pub fn zeros(ctx: &ExecContext, dtype: DType, n: usize) -> crate::Result<Buf> {
        Self::check_dtype(dtype)?;
        Ok(Buf {
            t: ctx.zeros(dtype, &[n])?,
            ctx: ctx.clone(),
        })
    }

    fn check_dtype(dtype: DType) -> crate::Result<()> {
        match dtype {
            DType::F32 | DType::F64 | DType::BF16 => Ok(()),
            d => Err(crate::Error::Core(fucina_core::Error::UnsupportedDType {
                op: OP,
                dtype: d,
            })),
        }
    }

    /// The storage dtype.
    pub fn dtype(&self) -> DType {
        self.t.dtype()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.t.numel()
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pool tensor holding the elements (`[len]`, contiguous).
    pub fn tensor(&self) -> &RawTensor {
        &self.t
    }

    /// The raw little-endian bytes (for safetensors).
    pub fn bytes(&self) -> &[u8] {
        // A Buf's tensor is always a fresh contiguous `[n]`: as_bytes cannot fail.
        self.t.as_bytes().unwrap_or(&[])
    }

    /// A buffer of `dtype` read from little-endian bytes (any alignment),
    /// allocated from `ctx`'s pool; a byte count that is not a whole number
    /// of elements is [`crate::Error::StateMismatch`].
    pub fn from_bytes(ctx: &ExecContext, dtype: DType, bytes: &[u8]) -> crate::Result<Buf> {
        Self::check_dtype(dtype)?;
        let w = dtype.size_of();
        if !bytes.len().is_multiple_of(w) {
            return Err(crate::Error::StateMismatch(format!(
                "{} bytes are not a whole number of {dtype} elements",
                bytes.len()
            )));
        }
        let mut t = ctx.empty(dtype, &[bytes.len() / w])?;
        t.as_mut_bytes()?.copy_from_slice(bytes);
        Ok(Buf {
            t,
            ctx: ctx.clone(),
        })
    }

    /// The values widened to f64 (tests, inspection).
    pub fn to_f64(&self) -> Vec<f64> {
        let b = self.bytes();
        match self.dtype() {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect(),
            DType::F64 => b
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
            _ => b
                .chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
        }
    }

    /// True when no clone shares the elements (an update writes in place).
    pub(crate) fn is_unique(&self) -> bool {
        self.t.buffer().is_unique()
    }

    /// This buffer if no clone shares it, else a private copy (same bytes).
    pub(crate) fn unique(&self) -> crate::Result<Buf> {
        let t = if self.is_unique() {
            self.t.clone_view()
        } else {
            self.ctx.copy(&self.t)?
        };
        Ok(Buf {
            t,
            ctx: self.ctx.clone(),
        })
    }

    /// The elements as `M`, mutably, copying first if a clone shares them.
    fn slice_mut<M: Element>(&mut self) -> crate::Result<&mut [M]> {
        if !self.t.buffer().is_unique() {
            self.t = self.ctx.copy(&self.t)?;
        }
        Ok(self.t.as_mut_slice::<M>()?)
    }
}

/// Typed access to a [`Buf`].
pub(crate) trait BufElem: Element {
    /// The elements, or `None` when the buffer is stored as another dtype.
    fn slice(b: &mut Buf) -> crate::Result<Option<&mut [Self]>> {
        if b.dtype() != Self::DTYPE {
            return Ok(None);
        }
        b.slice_mut::<Self>().map(Some)
    }
}
impl BufElem for f32 {}
impl BufElem for f64 {}
impl BufElem for bf16 {}

/// The `n` typed elements of `optimizer`'s buffer `name`, `b`, or a
/// state-mismatch error naming both.
pub(crate) fn typed<'b, M: BufElem>(
    b: &'b mut Buf,
    optimizer: &str,
    name: &str,
    n: usize,
) -> crate::Result<&'b mut [M]> {
    let dt = b.dtype();
    let s = M::slice(b)?.ok_or_else(|| {
        crate::Error::StateMismatch(format!(
            "{optimizer} {name}: stored as {dt}, expected {}",
            M::DTYPE
        ))
    })?;
    if s.len() != n {
        return Err(crate::Error::StateMismatch(format!(
            "{optimizer} {name}: {} elements, parameter has {n}",
            s.len()
        )));
    }
    Ok(s)
}

/// PyTorch's `lerp(start, end, w)` as its CPU kernel rounds it: one fused
/// multiply-add, `fma(w, end − start, start)` when |w| < 0.5, else
/// `fma(w − 1, end − start, end)`; `w_minus_1` is `w − 1` rounded to `T`.
#[inline(always)]
pub(crate) fn lerp<T: Float>(start: T, end: T, w: T, w_minus_1: T) -> T {
    if w.abs() < T::from_f64(0.5) {
        w.mul_add(end - start, start)
    } else {
        w_minus_1.mul_add(end - start, end)
    }
}

/// The storage dtype of a moment: bf16 when asked, else the parameter's own.
pub(crate) fn moment_dtype(param: DType, bf16_storage: bool) -> DType {
    if bf16_storage {
        DType::BF16
    } else {
        param
    }
}

/// Binds `$M` to the Rust storage type of a moment of dtype `$dt` for
/// parameters of compute type `$T` (`$T` itself or bf16).
macro_rules! dispatch_moment {
    ($dt:expr, $T:ty, $M:ident => $body:expr) => {
        match $dt {
            fucina_core::DType::BF16 => {
                type $M = fucina_core::bf16;
                $body
            }
            d if d == <$T as fucina_core::Element>::DTYPE => {
                type $M = $T;
                $body
            }
            d => Err($crate::Error::StateMismatch(format!(
                "moment stored as {d} for a {} parameter",
                <$T as fucina_core::Element>::DTYPE
            ))),
        }
    };
}
pub(crate) use dispatch_moment;
