//! The creation and readback methods of [`ExecContext`]: `empty`, `full`,
//! `zeros`, `ones`, `from_slice`, `from_vec`, `scalar`, `arange` and `to_vec`.
//! Every new tensor's buffer comes from the context's pool.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::shape;
use crate::tensor::RawTensor;

impl ExecContext {
    /// An uninitialised contiguous tensor (NaN-poisoned in debug builds).
    pub fn empty(&self, dtype: DType, shape: &[usize]) -> Result<RawTensor> {
        let n = shape::checked_numel(shape).ok_or_else(|| Error::InvalidArgument {
            op: "empty",
            msg: format!("shape {shape:?} has more elements than usize can count"),
        })?;
        let buf = self.inner.pool.acquire(dtype, n)?;
        RawTensor::from_buffer(buf, dtype, shape)
    }

    /// A tensor of `shape` filled with `value`.
    pub fn full<T: Element>(&self, shape: &[usize], value: T) -> Result<RawTensor> {
        let mut t = self.empty(T::DTYPE, shape)?;
        t.as_mut_slice::<T>()?.fill(value);
        Ok(t)
    }

    /// A tensor of zeros of any dtype.
    pub fn zeros(&self, dtype: DType, shape: &[usize]) -> Result<RawTensor> {
        let mut t = self.empty(dtype, shape)?;
        let n = t.numel() * dtype.size_of();
        t.as_mut_bytes()?[..n].fill(0);
        Ok(t)
    }

    /// A tensor of ones of a float dtype.
    pub fn ones(&self, dtype: DType, shape: &[usize]) -> Result<RawTensor> {
        self.full_f64(dtype, shape, 1.0)
    }

    /// A tensor of `shape` filled with `value` converted to `dtype`.
    pub fn full_f64(&self, dtype: DType, shape: &[usize], value: f64) -> Result<RawTensor> {
        crate::dispatch_any!(dtype, T => self.full::<T>(shape, T::from_f64(value)))
    }

    /// A tensor holding a copy of `data` with `shape`.
    pub fn from_slice<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<RawTensor> {
        if shape::checked_numel(shape) != Some(data.len()) {
            return Err(Error::ShapeMismatch {
                op: "from_slice",
                lhs: vec![data.len()],
                rhs: shape.to_vec(),
            });
        }
        let mut t = self.empty(T::DTYPE, shape)?;
        t.as_mut_slice::<T>()?.copy_from_slice(data);
        Ok(t)
    }

    /// A tensor from an owned vector (copied into a pool buffer, so it is pooled and aligned).
    pub fn from_vec<T: Element>(&self, data: Vec<T>, shape: &[usize]) -> Result<RawTensor> {
        self.from_slice(&data, shape)
    }

    /// A scalar (rank 0) tensor.
    pub fn scalar<T: Element>(&self, v: T) -> Result<RawTensor> {
        self.from_slice(&[v], &[])
    }

    /// `[start, start + step, ...)` below `end`, as a 1-D tensor.
    pub fn arange<T: Element>(&self, start: f64, end: f64, step: f64) -> Result<RawTensor> {
        if step == 0.0 || !((end - start) / step).is_finite() {
            return Err(Error::InvalidArgument {
                op: "arange",
                msg: format!("bad range {start}..{end} step {step}"),
            });
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        let mut t = self.empty(T::DTYPE, &[n])?;
        for (i, v) in t.as_mut_slice::<T>()?.iter_mut().enumerate() {
            *v = T::from_f64(start + i as f64 * step);
        }
        Ok(t)
    }

    /// The elements in row-major logical order.
    pub fn to_vec<T: Element>(&self, t: &RawTensor) -> Result<Vec<T>> {
        t.to_vec::<T>()
    }
}
