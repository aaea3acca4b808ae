//! Shape arguments: [`IntoShape`] lets [`Tensor::reshape`] and
//! [`Tensor::view`] take a shape in whatever integer type the caller holds,
//! with one `-1` to infer, and no `as isize` casts.
//!
//! The convention of the public API: sizes are `usize` (`shape()`,
//! constructors, `narrow`'s start and length), axes are `isize` (negative
//! counts from the end, as in PyTorch). Only a shape that may contain `-1`
//! goes through [`IntoShape`], which accepts slices, arrays and `Vec`s of
//! `usize`, `isize`, `i32`, `i64`, `u32` or `u64`, and tuples mixing them (so a
//! computed `usize` and a literal `-1` sit together: `(batch, -1)`).
//!
//! ```
//! use fucina_autograd::Tensor;
//! let ctx = fucina_core::ExecContext::with_threads(1)?;
//! let x = Tensor::arange(&ctx, fucina_core::DType::F32, 0.0, 24.0, 1.0)?;
//! let batch: usize = 2;
//! assert_eq!(x.reshape([-1, 4])?.shape(), &[6, 4]); // literals
//! assert_eq!(x.reshape((batch, -1))?.shape(), &[2, 12]); // a usize and -1
//! assert_eq!(x.reshape([batch, 3, 4])?.shape(), &[2, 3, 4]);
//! assert_eq!(x.reshape(x.shape())?.shape(), &[24]); // a &[usize]
//! # Ok::<(), fucina_autograd::Error>(())
//! ```
//!
//! [`Tensor::reshape`]: crate::Tensor::reshape
//! [`Tensor::view`]: crate::Tensor::view

use smallvec::SmallVec;

use fucina_core::Error as CoreError;

use crate::error::Result;

/// A shape with signed entries (`-1` = infer), as [`IntoShape`] yields it.
pub type SignedDims = SmallVec<[i64; 6]>;

/// One entry of a shape argument: a size, or `-1` to infer it.
pub trait DimArg: Copy {
    /// The entry as i64, or `None` when it does not fit (a `u64` above `i64::MAX`).
    fn to_i64(self) -> Option<i64>;
}

macro_rules! dim_arg {
    ($($t:ty),*) => {$(
        impl DimArg for $t {
            #[inline]
            fn to_i64(self) -> Option<i64> {
                i64::try_from(self).ok()
            }
        }
    )*};
}
dim_arg!(usize, isize, i32, i64, u32, u64);

/// Anything usable as a shape argument that may contain one `-1`.
pub trait IntoShape {
    /// The entries as i64, or an error naming `op` when one does not fit.
    fn signed_dims(&self, op: &'static str) -> Result<SignedDims>;
}

fn collect<D: DimArg>(op: &'static str, ds: &[D]) -> Result<SignedDims> {
    ds.iter()
        .map(|d| {
            d.to_i64().ok_or_else(|| {
                CoreError::InvalidArgument {
                    op,
                    msg: "a dimension does not fit in i64".into(),
                }
                .into()
            })
        })
        .collect()
}

impl<D: DimArg> IntoShape for &[D] {
    fn signed_dims(&self, op: &'static str) -> Result<SignedDims> {
        collect(op, self)
    }
}
impl<D: DimArg, const N: usize> IntoShape for [D; N] {
    fn signed_dims(&self, op: &'static str) -> Result<SignedDims> {
        collect(op, self)
    }
}
impl<D: DimArg, const N: usize> IntoShape for &[D; N] {
    fn signed_dims(&self, op: &'static str) -> Result<SignedDims> {
        collect(op, &self[..])
    }
}
impl<D: DimArg> IntoShape for Vec<D> {
    fn signed_dims(&self, op: &'static str) -> Result<SignedDims> {
        collect(op, self)
    }
}
impl<D: DimArg> IntoShape for &Vec<D> {
    fn signed_dims(&self, op: &'static str) -> Result<SignedDims> {
        collect(op, self)
    }
}
/// The rank-0 shape.
impl IntoShape for () {
    fn signed_dims(&self, _op: &'static str) -> Result<SignedDims> {
        Ok(SignedDims::new())
    }
}

macro_rules! tuple_shape {
    ($($name:ident . $i:tt),+) => {
        impl<$($name: DimArg),+> IntoShape for ($($name,)+) {
            fn signed_dims(&self, op: &'static str) -> Result<SignedDims> {
                let mut out = SignedDims::new();
                $(out.push(collect(op, &[self.$i])?[0]);)+
                Ok(out)
            }
        }
    };
}
tuple_shape!(A.0);
tuple_shape!(A.0, B.1);
tuple_shape!(A.0, B.1, C.2);
tuple_shape!(A.0, B.1, C.2, D.3);
tuple_shape!(A.0, B.1, C.2, D.3, E.4);
tuple_shape!(A.0, B.1, C.2, D.3, E.4, F.5);

/// Resolves `shape` (at most one −1) against a tensor of shape `from`: the
/// element counts must agree. Sizes are multiplied with overflow checks.
pub(crate) fn resolve_shape(op: &'static str, from: &[usize], shape: &[i64]) -> Result<Vec<usize>> {
    let numel: usize = from.iter().product();
    let mut infer = None;
    let mut known = 1usize;
    let mut out: Vec<usize> = Vec::with_capacity(shape.len());
    for (i, &d) in shape.iter().enumerate() {
        if d == -1 {
            if infer.replace(i).is_some() {
                return Err(CoreError::InvalidArgument {
                    op,
                    msg: format!("only one dimension can be -1, got {shape:?}"),
                }
                .into());
            }
            out.push(0);
            continue;
        }
        let size = usize::try_from(d).map_err(|_| CoreError::InvalidArgument {
            op,
            msg: format!("invalid dimension {d} in {shape:?}: sizes are >= 0, or -1 to infer one"),
        })?;
        known = known
            .checked_mul(size)
            .ok_or_else(|| CoreError::InvalidArgument {
                op,
                msg: format!("the shape {shape:?} overflows usize"),
            })?;
        out.push(size);
    }
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(CoreError::BadView {
                op,
                from: from.to_vec(),
                to: out,
            }
            .into());
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(CoreError::BadView {
            op,
            from: from.to_vec(),
            to: out,
        }
        .into());
    }
    Ok(out)
}
