//! The differentiable [`Tensor`]: a value, an optional backward node, and
//! (for leaves) an accumulated gradient.
//!
//! A `Tensor` is a cheap shared handle (`Rc`): cloning it does not copy data.
//! Leaves are made by [`Tensor::variable`] (requires a gradient) and
//! [`Tensor::constant`]; every op result is a non-leaf that requires a
//! gradient iff some input does (and grad mode is on). Values are immutable
//! once shared; the only in-place writes are optimizer updates through
//! [`Tensor::value_mut`], which copies first if the buffer is shared.

use std::cell::{Cell, Ref, RefCell, RefMut};
use std::rc::Rc;

use fucina_core::shape::Dims;
use fucina_core::{DType, Element, ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::graph::Node;

pub(crate) struct TensorInner {
    pub(crate) value: RefCell<Option<RawTensor>>,
    pub(crate) ctx: ExecContext,
    pub(crate) shape: Dims,
    pub(crate) dtype: DType,
    pub(crate) requires_grad: Cell<bool>,
    pub(crate) grad_fn: RefCell<Option<Rc<Node>>>,
    pub(crate) grad: RefCell<Option<RawTensor>>,
    pub(crate) scoped: Cell<bool>,
}

impl TensorInner {
    /// Releases value, node and gradient back to the pool (scope close).
    pub(crate) fn release(&self) {
        let v = self.value.borrow_mut().take();
        let n = self.grad_fn.borrow_mut().take();
        let g = self.grad.borrow_mut().take();
        drop((g, n, v));
    }
}

/// A differentiable tensor handle (f32 or f64 for differentiable ops).
///
/// ```
/// use fucina_autograd::Tensor;
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let x = Tensor::variable(&ctx, &[1.0f64, 2.0, 3.0], &[3]).unwrap();
/// let y = x.mul(&x).unwrap().sum_all().unwrap(); // Σ x²
/// y.backward().unwrap();
/// assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![2.0, 4.0, 6.0]);
/// ```
#[derive(Clone)]
pub struct Tensor(pub(crate) Rc<TensorInner>);

// Display and Debug (PyTorch's layout) live in display.rs.

impl Tensor {
    pub(crate) fn new_internal(
        ctx: &ExecContext,
        value: RawTensor,
        requires_grad: bool,
        node: Option<Rc<Node>>,
    ) -> Tensor {
        Tensor(Rc::new(TensorInner {
            shape: smallvec::SmallVec::from_slice(value.shape()),
            dtype: value.dtype(),
            value: RefCell::new(Some(value)),
            ctx: ctx.clone(),
            requires_grad: Cell::new(requires_grad),
            grad_fn: RefCell::new(node),
            grad: RefCell::new(None),
            scoped: Cell::new(false),
        }))
    }

    /// A leaf over an existing raw tensor. `requires_grad` makes it a variable.
    pub fn from_raw(ctx: &ExecContext, value: RawTensor, requires_grad: bool) -> Tensor {
        Self::new_internal(ctx, value, requires_grad, None)
    }

    /// A leaf that requires a gradient, holding a copy of `data`. `T` must be
    /// a float type (f32 or f64): other dtypes are an error here, at creation.
    pub fn variable<T: Element>(ctx: &ExecContext, data: &[T], shape: &[usize]) -> Result<Tensor> {
        crate::creation::check_grad_dtype("Tensor::variable", T::DTYPE)?;
        Ok(Self::from_raw(ctx, ctx.from_slice(data, shape)?, true))
    }

    /// A leaf that needs no gradient, holding a copy of `data`.
    pub fn constant<T: Element>(ctx: &ExecContext, data: &[T], shape: &[usize]) -> Result<Tensor> {
        Ok(Self::from_raw(ctx, ctx.from_slice(data, shape)?, false))
    }

    /// A constant filled with `value`.
    pub fn full(ctx: &ExecContext, dtype: DType, shape: &[usize], value: f64) -> Result<Tensor> {
        Ok(Self::from_raw(
            ctx,
            ctx.full_f64(dtype, shape, value)?,
            false,
        ))
    }

    /// A constant of zeros.
    pub fn zeros(ctx: &ExecContext, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        Ok(Self::from_raw(ctx, ctx.zeros(dtype, shape)?, false))
    }

    /// A constant of ones.
    pub fn ones(ctx: &ExecContext, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        Self::full(ctx, dtype, shape, 1.0)
    }

    /// A rank-0 constant.
    pub fn scalar(ctx: &ExecContext, dtype: DType, value: f64) -> Result<Tensor> {
        Self::full(ctx, dtype, &[], value)
    }

    /// The context this tensor's ops run on.
    #[inline]
    pub fn ctx(&self) -> &ExecContext {
        &self.0.ctx
    }

    /// The shape (available even after the value was released).
    #[inline]
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    /// The element type.
    #[inline]
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// Number of axes.
    #[inline]
    pub fn rank(&self) -> usize {
        self.0.shape.len()
    }

    /// Number of elements.
    #[inline]
    pub fn numel(&self) -> usize {
        self.0.shape.iter().product()
    }

    /// True when gradients flow to or through this tensor.
    #[inline]
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad.get()
    }

    /// Turns gradient tracking of a leaf on or off (freezing a parameter).
    /// Non-leaf results cannot be changed: use [`Tensor::detach`].
    pub fn set_requires_grad(&self, on: bool) -> Result<()> {
        if on {
            crate::creation::check_grad_dtype("set_requires_grad", self.dtype())?;
        }
        if !self.is_leaf() {
            return Err(Error::Core(fucina_core::Error::InvalidArgument {
                op: "set_requires_grad",
                msg: "only leaves can change requires_grad; use detach()".into(),
            }));
        }
        self.0.requires_grad.set(on);
        Ok(())
    }

    /// True for tensors made by a constructor (no backward node).
    pub fn is_leaf(&self) -> bool {
        self.0.grad_fn.borrow().is_none()
    }

    /// True when an exec scope adopted this result.
    pub fn is_scoped(&self) -> bool {
        self.0.scoped.get()
    }

    /// True once the owning scope has closed (the value is gone).
    pub fn is_released(&self) -> bool {
        self.0.value.borrow().is_none()
    }

    /// The name of the op that produced this tensor, if it records a backward.
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        self.0.grad_fn.borrow().as_ref().map(|n| n.name)
    }

    /// A view of the value (bumps the buffer's refcount).
    #[inline]
    pub fn raw(&self) -> Result<RawTensor> {
        self.0
            .value
            .borrow()
            .as_ref()
            .cloned()
            .ok_or(Error::TensorReleased)
    }

    /// Borrows the value without bumping the refcount.
    pub fn value(&self) -> Result<Ref<'_, RawTensor>> {
        Ref::filter_map(self.0.value.borrow(), |v| v.as_ref()).map_err(|_| Error::TensorReleased)
    }

    /// The value, mutably, for in-place updates of leaves (optimizer steps).
    /// Copies the buffer first if another view shares it (copy-on-write).
    pub fn value_mut(&self) -> Result<RefMut<'_, RawTensor>> {
        let mut v = RefMut::filter_map(self.0.value.borrow_mut(), |v| v.as_mut())
            .map_err(|_| Error::TensorReleased)?;
        if !v.buffer().is_unique() || !v.is_contiguous() || v.offset() != 0 {
            *v = self.0.ctx.copy(&v)?;
        }
        Ok(v)
    }

    /// Replaces the value of a leaf (same shape and dtype).
    pub fn set_value(&self, value: RawTensor) -> Result<()> {
        if value.shape() != self.shape() || value.dtype() != self.dtype() {
            return Err(Error::Core(fucina_core::Error::ShapeMismatch {
                op: "set_value",
                lhs: self.shape().to_vec(),
                rhs: value.shape().to_vec(),
            }));
        }
        *self.0.value.borrow_mut() = Some(value);
        Ok(())
    }

    /// The accumulated gradient of a leaf, as a constant tensor.
    pub fn grad(&self) -> Option<Tensor> {
        self.0
            .grad
            .borrow()
            .as_ref()
            .map(|g| Tensor::from_raw(&self.0.ctx, g.clone(), false))
    }

    /// The accumulated gradient of a leaf, as a raw view.
    pub fn grad_raw(&self) -> Option<RawTensor> {
        self.0.grad.borrow().clone()
    }

    /// Replaces the accumulated gradient (clipping, custom accumulation).
    pub fn set_grad(&self, grad: Option<RawTensor>) -> Result<()> {
        if let Some(g) = &grad {
            if g.shape() != self.shape() || g.dtype() != self.dtype() {
                return Err(Error::GradientShapeMismatch {
                    op: "set_grad",
                    input: 0,
                    expected: self.shape().to_vec(),
                    got: g.shape().to_vec(),
                });
            }
        }
        *self.0.grad.borrow_mut() = grad;
        Ok(())
    }

    /// Drops the accumulated gradient (PyTorch's `zero_grad(set_to_none=True)`).
    pub fn zero_grad(&self) {
        self.0.grad.borrow_mut().take();
    }

    /// A constant sharing this value, cut from the graph.
    pub fn detach(&self) -> Result<Tensor> {
        Ok(Tensor::from_raw(&self.0.ctx, self.raw()?, false))
    }

    /// The value of a one-element tensor, as f64.
    pub fn item(&self) -> Result<f64> {
        let v = self.value()?;
        Ok(fucina_core::dispatch_any!(v.dtype(), T => v.item::<T>()?.to_f64()))
    }

    /// The elements in row-major order.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(self.value()?.to_vec::<T>()?)
    }

    /// The elements converted to f64, whatever the dtype.
    pub fn to_vec_f64(&self) -> Result<Vec<f64>> {
        let v = self.value()?;
        Ok(
            fucina_core::dispatch_any!(v.dtype(), T => v.to_vec::<T>()?.into_iter().map(|x| x.to_f64()).collect()),
        )
    }

    /// Runs backward from this scalar (seed 1), accumulating into leaf gradients.
    pub fn backward(&self) -> Result<()> {
        crate::engine::backward(self, None)
    }

    /// Runs backward with an explicit seed gradient of this tensor's shape.
    pub fn backward_with(&self, seed: &RawTensor) -> Result<()> {
        crate::engine::backward(self, Some(seed.clone()))
    }

    /// True when both handles are the same tensor.
    pub fn same_as(&self, other: &Tensor) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}
