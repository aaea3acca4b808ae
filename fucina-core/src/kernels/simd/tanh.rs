//! f32 tanh over a slice, vectorised: [`crate::vmath::tanh_f32`] (bit for bit the platform's
//! fdlibm `tanhf`) in a loop compiled for AVX2 when the CPU has it. The baseline SSE2 build
//! of the same loop has no blend and no 8-lane divide and runs no faster than the libm call,
//! so only the AVX2 variant is worth a dispatch; every variant computes the same bits.

/// `y[i] = tanh(x[i])` for f32, `y.len() == x.len()`.
pub fn tanh_f32_slice(x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        // SAFETY: the CPU has AVX2 (detected once, in `kernels::simd`).
        unsafe { tanh_avx2(x, y) };
        return;
    }
    tanh_loop(x, y);
}

#[inline(always)]
fn tanh_loop(x: &[f32], y: &mut [f32]) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o = crate::vmath::tanh_f32(v);
    }
}

/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tanh_avx2(x: &[f32], y: &mut [f32]) {
    tanh_loop(x, y);
}
