//! f32 tanh over a slice, vectorised: [`crate::vmath::tanh_f32`] (bit for bit the platform's
//! fdlibm `tanhf`) in a loop compiled for AVX-512 or AVX2 when the CPU has it. The baseline
//! SSE2 build of the same loop has no blend and no 8-lane divide and runs no faster than the
//! libm call, so only the AVX2 and AVX-512 variants are worth a dispatch. Every variant
//! computes the same bits: the loop body is the one scalar function, which uses separate IEEE
//! operations (rustc never contracts or reassociates float math), so a lane's result does not
//! depend on the vector width; `fucina-core/tests/vmath.rs` checks each variant this CPU has
//! against the scalar function on a sweep of the f32 range.

/// `y[i] = tanh(x[i])` for f32, `y.len() == x.len()`: the widest variant this CPU runs.
pub fn tanh_f32_slice(x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match super::simd_level() {
        // SAFETY: the CPU has AVX-512 F/BW/VL/DQ and AVX2 (detected once, in `kernels::simd`).
        super::SimdLevel::Avx512 => return unsafe { tanh_avx512(x, y) },
        // SAFETY: the CPU has AVX2 (as above).
        super::SimdLevel::Avx2 => return unsafe { tanh_avx2(x, y) },
        super::SimdLevel::Base => {}
    }
    tanh_loop(x, y);
}

/// One slice loop of [`tanh_f32_slice`]: `y[i] = tanh(x[i])`.
pub type TanhSliceFn = fn(&[f32], &mut [f32]);

/// Every variant of [`tanh_f32_slice`] this CPU can run, by name (`"avx512"`, `"avx2"`,
/// `"base"`), for tests that compare each with the scalar function.
pub fn tanh_f32_slice_variants() -> Vec<(&'static str, TanhSliceFn)> {
    let mut v: Vec<(&'static str, TanhSliceFn)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let level = super::simd_level();
        if level == super::SimdLevel::Avx512 {
            // SAFETY: listed only when the CPU has the variant's features.
            v.push(("avx512", |x, y| unsafe { tanh_avx512(x, y) }));
        }
        if level != super::SimdLevel::Base {
            // SAFETY: as above (AVX-512 rows imply AVX2: `simd_level`).
            v.push(("avx2", |x, y| unsafe { tanh_avx2(x, y) }));
        }
    }
    v.push(("base", tanh_loop));
    v
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

/// # Safety
/// The CPU has AVX-512 F, BW, VL, DQ and AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2")]
unsafe fn tanh_avx512(x: &[f32], y: &mut [f32]) {
    tanh_loop(x, y);
}
