//! Branch-free, vectorisable transcendental functions that give exactly the bits of the
//! scalar libm routine they replace.
//!
//! A libm call in a pointwise loop keeps the loop scalar (a call per element, branches by
//! range inside). The functions here compute every range's formula with plain IEEE
//! operations — separate multiply and add, never a fused multiply-add, in the libm source's
//! order — and pick the lane's result with selects, so LLVM vectorises the loop around them
//! while each lane's result stays the one the scalar routine returns. Each function names
//! the routine it reproduces; `fucina-core/tests/vmath.rs` compares them bit for bit against
//! a scalar transcription of that routine over a sweep of every f32 bit pattern (and, on
//! glibc, against the platform libm itself), with an exhaustive run behind `--ignored`.

/// The constants of fdlibm's single-precision `expm1f` (Sun Microsystems, 1993; as in
/// glibc's `sysdeps/ieee754/flt-32/s_expm1f.c`).
mod expm1f {
    pub const LN2_HI: f32 = f32::from_bits(0x3f31_7180);
    pub const LN2_LO: f32 = f32::from_bits(0x3717_f7d1);
    pub const INVLN2: f32 = f32::from_bits(0x3fb8_aa3b);
    pub const Q1: f32 = f32::from_bits(0xbd08_8889);
    pub const Q2: f32 = f32::from_bits(0x3ad0_0d01);
    pub const Q3: f32 = f32::from_bits(0xb8a6_70cd);
    pub const Q4: f32 = f32::from_bits(0x3686_7e54);
    pub const Q5: f32 = f32::from_bits(0xb457_edbb);
}

/// `e^a − 1` for `a` in `(-2, 0] ∪ [2, 44]` (the arguments `tanh_f32` passes), bit for bit
/// fdlibm's `expm1f` there. Range reduction `a = k·ln2 + (x + c)` (k = −1 near −ln2, else
/// `trunc(a/ln2 ± ½)`; none when |a| ≤ ½ln2), the rational approximation of
/// `x·(e^x + 1)/(e^x − 1)` in `hxs = x²/2`, then the reconstruction for each k class; every
/// class is computed and the lane's own one selected. There `k ∈ {0, −1, −2, −3} ∪ [3, 63]`:
/// fdlibm's k = 1 class (`0.35 < a < 1.04`) is never reached, so it is not computed.
#[inline(always)]
fn expm1_f32_tanh_range(a: f32) -> f32 {
    use expm1f::*;
    let hx = a.to_bits() & 0x7fff_ffff;
    let neg = a.to_bits() >> 31 != 0;
    let reduce = hx > 0x3eb1_7218; // |a| > ½·ln2
    let near = hx < 0x3f85_1592; // |a| < 1.5·ln2: k = ±1
    let half = if neg { -0.5f32 } else { 0.5 };
    let kf = INVLN2 * a + half;
    // C's `(int)kf` truncates toward zero. Done in float so the loop stays vector (`as i32`
    // is scalarised: its NaN and saturation rules): `trunc` (one rounding instruction from
    // SSE4.1 on), then the integer read out of the bits of `trunc + 1.5·2^23`. Every lane has
    // |kf| < 64 (a is in (−44, 44), never NaN: `tanh_f32` passes 0 for the lanes outside the
    // formula's range), so the sum is exact.
    const MAGIC: f32 = 12_582_912.0;
    let k_far = (kf.trunc() + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32;
    let k1 = if neg { -1 } else { 1 };
    let k = if !reduce {
        0
    } else if near {
        k1
    } else {
        k_far
    };
    let t = k as f32;
    // fdlibm writes the k = ±1 case as `a ∓ ln2_hi`, `±ln2_lo`: the same values as
    // `a − t·ln2_hi` and `t·ln2_lo` with t = ±1 (multiplying by ±1 is exact).
    let hi = a - t * LN2_HI;
    let lo = t * LN2_LO;
    let xr = hi - lo;
    let c = (hi - xr) - lo;
    let x = if reduce { xr } else { a };

    let hfx = 0.5 * x;
    let hxs = x * hfx;
    let r1 = 1.0 + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))));
    let t3 = 3.0 - r1 * hfx;
    let e0 = hxs * ((r1 - t3) / (6.0 - x * t3));

    // k == 0.
    let r_k0 = x - (x * e0 - hxs);
    // k != 0.
    let e = (x * (e0 - c) - c) - hxs;
    let r_km1 = 0.5 * (x - e) - 0.5;
    let shift = (k as u32) << 23; // k added to an exponent (wrapping, as C's int add)
    let y_far = f32::from_bits((1.0 - (e - x)).to_bits().wrapping_add(shift)) - 1.0;
    // 2^-k from its exponent field (a constant shift, so the loop needs no per-lane shift
    // counts); fdlibm's `0x3f800000 − (0x1000000 >> k)` is the bit pattern of the exact
    // 1 − 2^-k, and its `(0x7f − k) << 23` this 2^-k.
    let pow2neg = f32::from_bits(((127 - k.clamp(1, 126)) as u32) << 23);
    let t_mid = 1.0 - pow2neg;
    let y_mid = f32::from_bits((t_mid - (e - x)).to_bits().wrapping_add(shift));
    let y_hi = f32::from_bits(((x - (e + pow2neg)) + 1.0).to_bits().wrapping_add(shift));
    let r = if k == 0 {
        r_k0
    } else if k == -1 {
        r_km1
    } else if k <= -2 || k > 56 {
        y_far
    } else if k < 23 {
        y_mid
    } else {
        y_hi
    };
    // |a| < 2^-25: fdlibm returns a itself.
    if hx < 0x3300_0000 {
        a
    } else {
        r
    }
}

/// tanh for f32, bit for bit fdlibm's `tanhf` (glibc's `sysdeps/ieee754/flt-32/s_tanhf.c`,
/// the routine `f32::tanh` calls on glibc) with its `expm1f`: `tanh|x| = 1 − 2/(e^{2|x|}+1)`
/// through `t = expm1(2|x|)` when |x| ≥ 1, `−t/(t+2)` with `t = expm1(−2|x|)` below;
/// ±1 from |x| ≥ 22, x itself below 2^-55; odd symmetry; NaN stays NaN.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let jx = x.to_bits();
    let ix = jx & 0x7fff_ffff;
    let ax = f32::from_bits(ix);
    let big = ix >= 0x3f80_0000; // |x| ≥ 1
    let arg = if big { 2.0 * ax } else { -2.0 * ax };
    // Lanes outside the formula's range still evaluate it; keep their argument in range so
    // the unused work stays finite (the select below discards it).
    let t = expm1_f32_tanh_range(if ix < 0x41b0_0000 { arg } else { 0.0 });
    // `1 − 2/(t+2)` or `−t/(t+2)`: one divide of the lane's own numerator (the same IEEE
    // quotient either way), not both computed and one thrown away. The numerator is picked
    // by an xor blend of its bits: LLVM turns a plain `if` there into two vector divides
    // and a select.
    let (two, neg_t) = (2.0f32.to_bits(), (-t).to_bits());
    let pick = (big as u32).wrapping_neg();
    let q = f32::from_bits(neg_t ^ ((neg_t ^ two) & pick)) / (t + 2.0);
    let z = if big { 1.0 - q } else { q };
    // |x| ≥ 22: 1 − tiny, which rounds to 1.
    let z = if ix >= 0x41b0_0000 { 1.0 } else { z };
    let signed = if jx >> 31 != 0 { -z } else { z };
    if ix >= 0x7f80_0000 {
        // ±inf → ±1 (1/x ± 1); NaN → NaN, quieted (as 1/x + 1 does).
        if ix > 0x7f80_0000 {
            x + x
        } else if jx >> 31 != 0 {
            -1.0
        } else {
            1.0
        }
    } else if ix < 0x2400_0000 {
        // |x| < 2^-55 (and ±0): x·(1 + x), which is x.
        x * (1.0 + x)
    } else {
        signed
    }
}
