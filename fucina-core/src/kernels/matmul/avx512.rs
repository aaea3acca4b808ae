//! AVX-512F GEMM micro-kernels: the `micro` template on ZMM registers.
//!
//! f32: 6 × 32 (12 accumulators of 16 lanes); f64: 6 × 16 (12 accumulators of 8 lanes): the
//! AVX2 register plan (12 accumulators, two B vectors, one A broadcast) at twice the width.
//! The loop and epilogue are the template's, so every element of C gets the same FMA chain and
//! the same epilogue operations as on the AVX2 kernels: bitwise the same result. B panels are
//! packed by the AVX2 register transposes at this width (`avx2::pack_b_kmajor_*::<NR>`), so
//! the path needs AVX2 and FMA besides AVX-512F (every AVX-512F CPU has them; `available`
//! checks all three anyway).

// AVX-512 intrinsics and target features are stable from Rust 1.89: the workspace's
// `rust-version`.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::micro::micro_kernel;
use super::tile::Tile;
pub use super::tile::{MR, NR512_F32, NR512_F64};

/// True when this CPU runs the kernels below and their B packing (AVX-512F, AVX2 and FMA;
/// detected once, in `kernels::simd`).
pub fn available() -> bool {
    crate::kernels::simd::has_avx512f() && crate::kernels::simd::has_avx2_fma()
}

/// Broadcasts the f32 at `x` to all 16 lanes (the template's `$bcast` takes a reference, as
/// `_mm256_broadcast_ss` does). Safe to call from code compiled with AVX-512F (the kernels).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn broadcast_ss(x: &f32) -> __m512 {
    _mm512_set1_ps(*x)
}

/// Broadcasts the f64 at `x` to all 8 lanes (as [`broadcast_ss`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn broadcast_sd(x: &f64) -> __m512d {
    _mm512_set1_pd(*x)
}

micro_kernel!(
    "avx512f",
    kernel_f32,
    f32,
    __m512,
    16,
    NR512_F32,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    broadcast_ss,
    _mm512_fmadd_ps,
    _mm512_mul_ps,
    _mm512_add_ps,
    _mm512_set1_ps
);

micro_kernel!(
    "avx512f",
    kernel_f64,
    f64,
    __m512d,
    8,
    NR512_F64,
    _mm512_setzero_pd,
    _mm512_loadu_pd,
    _mm512_storeu_pd,
    broadcast_sd,
    _mm512_fmadd_pd,
    _mm512_mul_pd,
    _mm512_add_pd,
    _mm512_set1_pd
);
