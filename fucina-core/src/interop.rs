//! ndarray interop (feature `ndarray`): `ArrayD<T>` to and from [`RawTensor`].

use ndarray::{ArrayD, IxDyn};

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::tensor::RawTensor;

impl ExecContext {
    /// A pooled tensor holding a copy of `a` (any memory order).
    pub fn from_ndarray<T: Element>(&self, a: &ndarray::ArrayViewD<'_, T>) -> Result<RawTensor> {
        // The pool first (a broadcast view of a huge shape is a clean
        // error), then the elements in logical order.
        let mut t = self.empty(T::DTYPE, a.shape())?;
        for (d, s) in t.as_mut_slice::<T>()?.iter_mut().zip(a.iter()) {
            *d = *s;
        }
        Ok(t)
    }
}

impl RawTensor {
    /// A standard-layout `ArrayD` copy of this view.
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        let v = self.to_vec::<T>()?;
        ArrayD::from_shape_vec(IxDyn(self.shape()), v).map_err(|e| Error::InvalidArgument {
            op: "to_ndarray",
            msg: e.to_string(),
        })
    }
}
