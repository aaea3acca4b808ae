//! The B element types a GEMM reads (its own compute type, or bf16/f16 storage widened while
//! B is packed) and the portable widening pack.
//!
//! A leaf of the GEMM like `tile`: the packed driver and the tiled path both use it. Widening
//! bf16 or f16 to f32 or f64 is exact, so a panel packed here holds exactly the values a pack
//! of the fully widened matrix would hold, in the same places: the product is bitwise the
//! f32 (f64) GEMM of the widened weight, and no widened copy of the whole B ever exists.

use half::{bf16, f16};

use crate::dtype::Float;

/// An element type B may have when A and C are `T`: `T` itself, or a storage type widened to
/// `T` exactly.
pub trait BElem<T: Float>: Copy + Send + Sync + bytemuck::Pod + 'static {
    /// The value as a `T` (exact).
    fn widen(self) -> T;
    /// `Some(the same slice)` when this *is* `T` (no widening: the kernels' own packs run).
    fn same(s: &[Self]) -> Option<&[T]>;
}

/// `T` reads itself.
macro_rules! b_same {
    ($t:ty) => {
        impl BElem<$t> for $t {
            #[inline(always)]
            fn widen(self) -> $t {
                self
            }
            #[inline(always)]
            fn same(s: &[$t]) -> Option<&[$t]> {
                Some(s)
            }
        }
    };
}
b_same!(f32);
b_same!(f64);

/// A 16-bit storage type widened with `$to` (exact).
macro_rules! b_widen {
    ($s:ty, $t:ty, $to:ident) => {
        impl BElem<$t> for $s {
            #[inline(always)]
            fn widen(self) -> $t {
                self.$to()
            }
            #[inline(always)]
            fn same(_: &[$s]) -> Option<&[$t]> {
                None
            }
        }
    };
}
b_widen!(bf16, f32, to_f32);
b_widen!(bf16, f64, to_f64);
b_widen!(f16, f32, to_f32);
b_widen!(f16, f64, to_f64);

/// Packs lanes `0..len` and K steps `0..k` of `src` into panels of width `w`, widening each
/// element: `dst[pi·k·w + p·w + i] = widen(src[(pi·w + i)·lane + p·step])`, zero for the lanes
/// past `len` in the last panel. The layout of `packed::pack_panels` (B's columns are the
/// lanes: `(lane, step) = (cs, rs)`), so the packed panel equals the pack of the widened B.
///
/// # Safety
/// Every addressed element of `src` is readable; `dst` holds `len.div_ceil(w) · k · w`.
pub unsafe fn pack_panels_widen<T: Float, S: BElem<T>>(
    dst: &mut [T],
    src: *const S,
    (lane, step): (usize, usize),
    (len, k): (usize, usize),
    w: usize,
) {
    let panels = len.div_ceil(w);
    for pi in 0..panels {
        let l0 = pi * w;
        let valid = w.min(len - l0);
        let d = &mut dst[pi * k * w..(pi + 1) * k * w];
        if lane == 1 {
            // Lanes contiguous: one short run per K step.
            for (p, row) in d.chunks_exact_mut(w).enumerate() {
                // SAFETY: lanes l0..l0 + valid of step p are inside the caller's block.
                let from = unsafe { src.add(p * step + l0) };
                for (i, v) in row[..valid].iter_mut().enumerate() {
                    // SAFETY: as above, lane i < valid.
                    *v = unsafe { *from.add(i) }.widen();
                }
                row[valid..].fill(T::ZERO);
            }
        } else {
            if valid < w {
                for row in d.chunks_exact_mut(w) {
                    row[valid..].fill(T::ZERO);
                }
            }
            // Lanes strided (K-major B, as `linear`'s `wᵀ`): each lane's K steps in turn.
            for i in 0..valid {
                // SAFETY: lane l0 + i is inside the caller's block.
                let line = unsafe { src.add((l0 + i) * lane) };
                for p in 0..k {
                    // SAFETY: K step p of that lane is inside the block.
                    d[p * w + i] = unsafe { *line.add(p * step) }.widen();
                }
            }
        }
    }
}
