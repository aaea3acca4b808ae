//! ndarray interop (feature `ndarray`): `ArrayD<T>` to and from [`RawTensor`].

use ndarray::{ArrayD, IxDyn};

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::tensor::RawTensor;

impl ExecContext {
    /// A pooled tensor holding a copy of `a` (any memory order).
    pub fn from_ndarray<T: Element>(&self, a: &ndarray::ArrayViewD<'_, T>) -> Result<RawTensor> {
        // Sized fallibly first (a broadcast view of a huge shape is a clean
        // error, never an abort), then the elements in logical order.
        let n = a.len();
        let mut data: Vec<T> = Vec::new();
        data.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
            requested_bytes: n.saturating_mul(std::mem::size_of::<T>()),
            live_bytes: 0,
            limit_bytes: 0,
        })?;
        data.extend(a.iter().copied());
        self.from_slice(&data, a.shape())
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
