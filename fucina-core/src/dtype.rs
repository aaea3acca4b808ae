//! Element types. A leaf module: it knows nothing of buffers or tensors.
//!
//! [`DType`] is the runtime tag every tensor carries; [`Element`] maps a Rust
//! type to its tag; [`Float`] is the arithmetic trait the kernels are generic
//! over (f32 and f64). f16 and bf16 are storage types: they convert to and
//! from the compute types but kernels do not run on them.

use half::{bf16, f16};

/// The runtime element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary64.
    F64,
    /// IEEE 754 binary16 (storage only).
    F16,
    /// bfloat16 (storage only).
    BF16,
    /// Signed 32-bit integer (indices).
    I32,
    /// Signed 64-bit integer (indices).
    I64,
    /// Unsigned 32-bit integer (indices).
    U32,
    /// Unsigned 8-bit integer (masks, raw bytes).
    U8,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::U32,
        DType::U8,
    ];

    /// Size of one element in bytes.
    pub const fn size_of(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::F16 | DType::BF16 => 2,
            DType::U8 => 1,
        }
    }

    /// True for the floating point types.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// True for the types kernels compute in (f32, f64).
    pub const fn is_compute_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// True for the integer index types.
    pub const fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64 | DType::U32 | DType::U8)
    }

    /// Lower-case name, as safetensors and PyTorch spell it.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U32 => "u32",
            DType::U8 => "u8",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can be stored in a tensor.
pub trait Element:
    bytemuck::Pod + Send + Sync + Copy + PartialEq + std::fmt::Debug + 'static
{
    /// The runtime tag of this type.
    const DTYPE: DType;
    /// Converts to f64 (exact for every type but i64/u64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// Converts from f64 (rounding to nearest; integers truncate toward zero).
    fn from_f64(v: f64) -> Self;
}

/// `impl Element` for each `type, DType: |x| to_f64, |v| from_f64;` row.
macro_rules! element {
    ($($t:ty, $d:ident: |$x:ident| $to:expr, |$v:ident| $from:expr;)*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline]
            fn to_f64(self) -> f64 {
                let $x = self;
                $to
            }
            #[inline]
            fn from_f64($v: f64) -> Self {
                $from
            }
        }
    )*};
}
element! {
    i32, I32: |x| x as f64, |v| v as i32;
    i64, I64: |x| x as f64, |v| v as i64;
    u32, U32: |x| x as f64, |v| v as u32;
    u8, U8: |x| x as f64, |v| v as u8;
    f32, F32: |x| x as f64, |v| v as f32;
    f64, F64: |x| x, |v| v;
    // The half types (storage only) convert through f64 by `half`.
    f16, F16: |x| x.to_f64(), |v| f16::from_f64(v);
    bf16, BF16: |x| x.to_f64(), |v| bf16::from_f64(v);
}

/// The floating point types kernels compute in: f32 and f64.
pub trait Float:
    Element
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + std::ops::AddAssign
    + std::ops::SubAssign
    + std::ops::MulAssign
    + std::ops::DivAssign
    + std::iter::Sum
    + Default
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Positive infinity.
    const INFINITY: Self;
    /// Negative infinity.
    const NEG_INFINITY: Self;
    /// Machine epsilon.
    const EPSILON: Self;
    /// Converts from f32.
    fn from_f32(v: f32) -> Self;
    /// Converts from usize.
    fn from_usize(v: usize) -> Self;
    /// e^x.
    fn exp(self) -> Self;
    /// ln(x).
    fn ln(self) -> Self;
    /// ln(1+x).
    fn ln_1p(self) -> Self;
    /// √x.
    fn sqrt(self) -> Self;
    /// tanh(x).
    fn tanh(self) -> Self;
    /// sin(x).
    fn sin(self) -> Self;
    /// cos(x).
    fn cos(self) -> Self;
    /// |x|.
    fn abs(self) -> Self;
    /// x^y.
    fn powf(self, y: Self) -> Self;
    /// Fused multiply-add `self * a + b`.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// The larger (NaN-propagating as `f32::max` is not: returns the non-NaN).
    fn max(self, o: Self) -> Self;
    /// The smaller.
    fn min(self, o: Self) -> Self;
    /// True when NaN.
    fn is_nan(self) -> bool;
    /// The error function.
    fn erf(self) -> Self;
}

macro_rules! float_impl {
    // Methods that call the primitive's own method of the same name.
    (@unary $t:ident: $($f:ident)*) => {
        $(
            #[inline]
            fn $f(self) -> Self {
                $t::$f(self)
            }
        )*
    };
    (@binary $t:ident: $($f:ident)*) => {
        $(
            #[inline]
            fn $f(self, o: Self) -> Self {
                $t::$f(self, o)
            }
        )*
    };
    ($t:ident, $tanh:path) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const INFINITY: Self = $t::INFINITY;
            const NEG_INFINITY: Self = $t::NEG_INFINITY;
            const EPSILON: Self = $t::EPSILON;
            #[inline]
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            #[inline]
            fn from_usize(v: usize) -> Self {
                v as $t
            }
            float_impl!(@unary $t: exp ln ln_1p sqrt sin cos abs);
            // Always inlined, so a pointwise loop over it vectorises (see `vmath`).
            #[inline(always)]
            fn tanh(self) -> Self {
                $tanh(self)
            }
            float_impl!(@binary $t: powf max min);
            #[inline]
            fn mul_add(self, a: Self, b: Self) -> Self {
                $t::mul_add(self, a, b)
            }
            #[inline]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
            #[inline]
            fn erf(self) -> Self {
                crate::dtype::erf_f64(self as f64) as $t
            }
        }
    };
}
// f32 tanh: the branch-free port of the platform routine (same bits, vectorises).
float_impl!(f32, crate::vmath::tanh_f32);
float_impl!(f64, f64::tanh);

/// erf(x) to full f64 precision (the `libm` port of FreeBSD's msun).
pub fn erf_f64(x: f64) -> f64 {
    libm::erf(x)
}

/// Converts a slice between element types through f64 (exact for float widening).
pub fn convert_slice<S: Element, D: Element>(src: &[S], dst: &mut [D]) {
    debug_assert_eq!(src.len(), dst.len());
    for (d, s) in dst.iter_mut().zip(src) {
        *d = D::from_f64(s.to_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // Values from Abramowitz & Stegun tables.
        let cases = [
            (0.0, 0.0),
            (0.1, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (-1.0, -0.842_700_792_949_714_9),
        ];
        for (x, want) in cases {
            assert!(
                (erf_f64(x) - want).abs() < 1e-15,
                "erf({x}) = {}",
                erf_f64(x)
            );
        }
    }

    #[test]
    fn sizes_and_conversions() {
        assert_eq!(DType::BF16.size_of(), 2);
        let src = [1.5f32, -2.25, 65504.0];
        let mut h = [f16::ZERO; 3];
        convert_slice(&src, &mut h);
        let mut back = [0f64; 3];
        convert_slice(&h, &mut back);
        assert_eq!(back, [1.5, -2.25, 65504.0]);
    }
}
