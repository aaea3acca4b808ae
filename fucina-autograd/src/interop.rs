//! ndarray interop at the autograd level: [`Tensor::from_ndarray`] and
//! [`Tensor::to_ndarray`]. Use the `ndarray` this crate re-exports
//! (`fucina_autograd::ndarray`, or `fucina::ndarray`), so the array types
//! always come from the same version as fucina's.
//!
//! ```
//! use fucina_autograd::{ndarray, Tensor};
//! let ctx = fucina_core::ExecContext::with_threads(1)?;
//! let a = ndarray::array![[1.0f32, 2.0], [3.0, 4.0]];
//! let x = Tensor::from_ndarray(&ctx, &a)?.requires_grad_(true)?;
//! let y = (&x * 2.0)?.to_ndarray::<f32>()?;
//! assert_eq!(y, ndarray::array![[2.0f32, 4.0], [6.0, 8.0]].into_dyn());
//! # Ok::<(), fucina_autograd::Error>(())
//! ```

use ndarray::{ArrayBase, ArrayD, Data, Dimension};

use fucina_core::{Element, ExecContext};

use crate::error::Result;
use crate::tape::tensor::Tensor;

impl Tensor {
    /// A constant holding a copy of `array` (any dimensionality and memory
    /// order; the elements are read in logical row-major order). Chain
    /// [`Tensor::requires_grad_`] to make it a variable.
    pub fn from_ndarray<T, S, D>(ctx: &ExecContext, array: &ArrayBase<S, D>) -> Result<Tensor>
    where
        T: Element,
        S: Data<Elem = T>,
        D: Dimension,
    {
        let raw = ctx.from_ndarray(&array.view().into_dyn())?;
        Ok(Tensor::leaf(ctx, raw))
    }

    /// A standard-layout copy of the value as an `ArrayD<T>`; `T` must be the
    /// tensor's dtype (a mismatch is an error naming both).
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        Ok(self.value()?.to_ndarray::<T>()?)
    }
}
