//! The differentiable [`Tensor`]: a value, an optional backward node, and
//! (for leaves) an accumulated gradient.
//!
//! A `Tensor` is a cheap shared handle (`Arc`): cloning it does not copy
//! data. It is `Send` and `Sync`: each mutable slot sits behind its own
//! `std::sync::Mutex`, held only for a clone or a swap (never across a
//! kernel or user code, so no lock is ever taken twice by one thread and no
//! lock can poison; a poisoned lock is entered anyway). Nothing here hands
//! out a borrow: [`Tensor::value`] returns a view (a refcount bump), so no
//! borrow conflict exists to panic on. Leaves are made by
//! [`Tensor::variable`] (requires a gradient) and [`Tensor::constant`];
//! every op result is a non-leaf that requires a gradient iff some input
//! does (and grad mode is on). Values are immutable once shared; the only
//! in-place writes are optimizer updates through [`Tensor::update_value`],
//! which copies first if the buffer is shared.
//!
//! Dropping the last handle of a deep graph never recurses: [`crate::tape::graph`]'s
//! `Node` drop defers nested node drops to a thread-local queue it drains.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fucina_core::shape::Dims;
use fucina_core::{DType, Element, ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::tape::graph::Node;

/// Locks `m`, entering a poisoned lock anyway: every critical section in this
/// crate is a clone, a take or a swap, so a panic elsewhere never leaves the
/// slot half-written. Never panics.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The value slot of a tensor.
pub(crate) enum Slot {
    /// The value, readable.
    Value(RawTensor),
    /// Taken out by [`Tensor::update_value`] while its closure runs.
    Updating,
    /// Released by its exec scope.
    Released,
}

pub(crate) struct TensorInner {
    pub(crate) value: Mutex<Slot>,
    pub(crate) ctx: ExecContext,
    pub(crate) shape: Dims,
    pub(crate) dtype: DType,
    pub(crate) requires_grad: AtomicBool,
    pub(crate) grad_fn: Mutex<Option<Arc<Node>>>,
    pub(crate) grad: Mutex<Option<RawTensor>>,
    /// The gradient with its history, when a `create_graph` backward stored
    /// it (its value is `grad`'s); cleared whenever `grad` changes otherwise.
    pub(crate) grad_graph: Mutex<Option<Tensor>>,
    pub(crate) scoped: AtomicBool,
}

impl TensorInner {
    /// Releases value, node and gradient back to the pool (scope close).
    /// Each slot is emptied under its lock and dropped after it.
    pub(crate) fn release(&self) {
        let v = std::mem::replace(&mut *lock(&self.value), Slot::Released);
        let n = lock(&self.grad_fn).take();
        let g = lock(&self.grad).take();
        let gg = lock(&self.grad_graph).take();
        drop((gg, g, n, v));
    }

    /// The value (a view), or why there is none.
    #[inline]
    pub(crate) fn value(&self) -> Result<RawTensor> {
        match &*lock(&self.value) {
            Slot::Value(v) => Ok(v.clone()),
            Slot::Updating => Err(Error::ValueBusy),
            Slot::Released => Err(Error::TensorReleased),
        }
    }

    /// True once the owning scope released the value.
    pub(crate) fn is_released(&self) -> bool {
        matches!(&*lock(&self.value), Slot::Released)
    }

    /// The backward node, if any (a refcount bump).
    #[inline]
    pub(crate) fn grad_fn(&self) -> Option<Arc<Node>> {
        lock(&self.grad_fn).clone()
    }
}

/// Puts a value taken by [`Tensor::update_value`] back, even if the closure
/// panics; if the scope released the tensor meanwhile, the value is dropped.
struct Restore<'a> {
    inner: &'a TensorInner,
    value: Option<RawTensor>,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let Some(v) = self.value.take() else { return };
        let mut slot = lock(&self.inner.value);
        if matches!(&*slot, Slot::Updating) {
            *slot = Slot::Value(v);
        } else {
            drop(slot);
            drop(v);
        }
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
pub struct Tensor(pub(crate) Arc<TensorInner>);

// Display and Debug (PyTorch's layout) live in display.rs.

impl Tensor {
    pub(crate) fn new_internal(
        ctx: &ExecContext,
        value: RawTensor,
        requires_grad: bool,
        node: Option<Arc<Node>>,
    ) -> Tensor {
        Tensor(Arc::new(TensorInner {
            shape: smallvec::SmallVec::from_slice(value.shape()),
            dtype: value.dtype(),
            value: Mutex::new(Slot::Value(value)),
            ctx: ctx.clone(),
            requires_grad: AtomicBool::new(requires_grad),
            grad_fn: Mutex::new(node),
            grad: Mutex::new(None),
            grad_graph: Mutex::new(None),
            scoped: AtomicBool::new(false),
        }))
    }

    /// A leaf over an existing raw tensor. `requires_grad` makes it a
    /// variable, which only f32 and f64 tensors can be: any other dtype with
    /// `requires_grad` is [`Error::NonFloatVariable`] here, at creation (as
    /// [`Tensor::variable`] and [`Tensor::set_requires_grad`]); a constant
    /// (`false`) never fails.
    ///
    /// ```
    /// use fucina_autograd::{Error, Tensor};
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let ids = ctx.from_slice(&[1i64, 2], &[2])?;
    /// assert!(matches!(
    ///     Tensor::from_raw(&ctx, ids.clone(), true),
    ///     Err(Error::NonFloatVariable { .. })
    /// ));
    /// assert!(!Tensor::from_raw(&ctx, ids, false)?.requires_grad());
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn from_raw(ctx: &ExecContext, value: RawTensor, requires_grad: bool) -> Result<Tensor> {
        if requires_grad {
            check_grad_dtype("Tensor::from_raw", value.dtype())?;
        }
        Ok(Self::new_internal(ctx, value, requires_grad, None))
    }

    /// A constant leaf over an existing raw tensor (never fails).
    pub(crate) fn leaf(ctx: &ExecContext, value: RawTensor) -> Tensor {
        Self::new_internal(ctx, value, false, None)
    }

    /// A leaf that requires a gradient, holding a copy of `data`. `T` must be
    /// a float type (f32 or f64): other dtypes are an error here, at creation.
    pub fn variable<T: Element>(ctx: &ExecContext, data: &[T], shape: &[usize]) -> Result<Tensor> {
        check_grad_dtype("Tensor::variable", T::DTYPE)?;
        Ok(Self::new_internal(
            ctx,
            ctx.from_slice(data, shape)?,
            true,
            None,
        ))
    }

    /// A leaf that needs no gradient, holding a copy of `data`.
    pub fn constant<T: Element>(ctx: &ExecContext, data: &[T], shape: &[usize]) -> Result<Tensor> {
        Ok(Self::leaf(ctx, ctx.from_slice(data, shape)?))
    }

    /// A constant filled with `value`.
    pub fn full(ctx: &ExecContext, dtype: DType, shape: &[usize], value: f64) -> Result<Tensor> {
        Ok(Self::leaf(ctx, ctx.full_f64(dtype, shape, value)?))
    }

    /// A constant of zeros.
    pub fn zeros(ctx: &ExecContext, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        Ok(Self::leaf(ctx, ctx.zeros(dtype, shape)?))
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
        self.0.requires_grad.load(Ordering::Relaxed)
    }

    /// Turns gradient tracking of a leaf on or off (freezing a parameter).
    /// Non-leaf results cannot be changed: use [`Tensor::detach`].
    pub fn set_requires_grad(&self, on: bool) -> Result<()> {
        if on {
            check_grad_dtype("set_requires_grad", self.dtype())?;
        }
        if !self.is_leaf() {
            return Err(Error::Core(fucina_core::Error::InvalidArgument {
                op: "set_requires_grad",
                msg: "only leaves can change requires_grad; use detach()".into(),
            }));
        }
        self.0.requires_grad.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// True for tensors made by a constructor (no backward node).
    pub fn is_leaf(&self) -> bool {
        lock(&self.0.grad_fn).is_none()
    }

    /// True when an exec scope adopted this result.
    pub fn is_scoped(&self) -> bool {
        self.0.scoped.load(Ordering::Relaxed)
    }

    /// True once the owning scope has closed (the value is gone).
    pub fn is_released(&self) -> bool {
        self.0.is_released()
    }

    /// The name of the op that produced this tensor, if it records a backward.
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        lock(&self.0.grad_fn).as_ref().map(|n| n.name)
    }

    /// A view of the value (bumps the buffer's refcount); the same as [`Tensor::value`].
    #[inline]
    pub fn raw(&self) -> Result<RawTensor> {
        self.0.value()
    }

    /// The value, as a view (a `clone_view`: bumps the buffer's refcount,
    /// copies nothing). Holding it never blocks anything: the view keeps the
    /// buffer alive on its own, even past the scope's close.
    ///
    /// Errors: [`Error::TensorReleased`] once the owning scope closed;
    /// [`Error::ValueBusy`] from inside this tensor's own
    /// [`Tensor::update_value`] closure.
    #[inline]
    pub fn value(&self) -> Result<RawTensor> {
        self.0.value()
    }

    /// Updates the value of a leaf in place (optimizer steps): `f` gets the
    /// value, made unique, contiguous and at offset 0 first (copied if another
    /// view shares the buffer: copy-on-write), and may write through
    /// `as_mut_slice`. While `f` runs the value is taken out, so reading or
    /// setting this same tensor from inside `f` is [`Error::ValueBusy`] (never
    /// a panic or a deadlock); if the scope releases the tensor meanwhile,
    /// the update is dropped. An error from `f` keeps whatever `f` wrote.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
    /// let w = Tensor::variable(&ctx, &[1.0f64, 2.0], &[2]).unwrap();
    /// w.update_value(|v| {
    ///     v.as_mut_slice::<f64>()?.iter_mut().for_each(|x| *x *= 10.0);
    ///     Ok::<(), fucina_autograd::Error>(())
    /// })
    /// .unwrap();
    /// assert_eq!(w.to_vec::<f64>().unwrap(), vec![10.0, 20.0]);
    /// ```
    pub fn update_value<R, E>(
        &self,
        f: impl FnOnce(&mut RawTensor) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E>
    where
        E: From<Error>,
    {
        let taken = {
            let mut slot = lock(&self.0.value);
            match &*slot {
                Slot::Value(_) => match std::mem::replace(&mut *slot, Slot::Updating) {
                    Slot::Value(v) => v,
                    _ => return Err(Error::ValueBusy.into()),
                },
                Slot::Updating => return Err(Error::ValueBusy.into()),
                Slot::Released => return Err(Error::TensorReleased.into()),
            }
        };
        let mut guard = Restore {
            inner: &self.0,
            value: Some(taken),
        };
        let Some(v) = guard.value.as_mut() else {
            return Err(Error::ValueBusy.into());
        };
        if !v.buffer().is_unique() || !v.is_contiguous() || v.offset() != 0 {
            *v = self.0.ctx.copy(v).map_err(Error::from)?;
        }
        f(v)
    }

    /// Replaces the value of a leaf (same shape and dtype). The old value is
    /// swapped out; views of it taken earlier keep reading the old data.
    /// [`Error::TensorReleased`] after the scope closed, [`Error::ValueBusy`]
    /// inside this tensor's [`Tensor::update_value`].
    pub fn set_value(&self, value: RawTensor) -> Result<()> {
        if value.shape() != self.shape() || value.dtype() != self.dtype() {
            return Err(Error::Core(fucina_core::Error::ShapeMismatch {
                op: "set_value",
                lhs: self.shape().to_vec(),
                rhs: value.shape().to_vec(),
            }));
        }
        let old = {
            let mut slot = lock(&self.0.value);
            match &*slot {
                Slot::Value(_) => std::mem::replace(&mut *slot, Slot::Value(value)),
                Slot::Updating => return Err(Error::ValueBusy),
                Slot::Released => return Err(Error::TensorReleased),
            }
        };
        drop(old);
        Ok(())
    }

    /// Replaces the values of several leaves all or nothing: every target's
    /// shape and dtype are checked and every value slot is locked (in address
    /// order, so two such calls cannot deadlock) before any is written; a
    /// released or busy target is an error, with the position of that target
    /// in `targets`, and nothing changed. A tensor named twice gets its last
    /// value. The old values drop after the locks are released.
    pub(crate) fn set_values(
        targets: Vec<(&Tensor, RawTensor)>,
    ) -> std::result::Result<(), Box<(usize, Error)>> {
        for (i, (t, v)) in targets.iter().enumerate() {
            if v.shape() != t.shape() || v.dtype() != t.dtype() {
                return Err(Box::new((
                    i,
                    Error::Core(fucina_core::Error::ShapeMismatch {
                        op: "set_value",
                        lhs: t.shape().to_vec(),
                        rhs: v.shape().to_vec(),
                    }),
                )));
            }
        }
        // (address, position, tensor, value): the last value of each
        // distinct tensor, in address order.
        let mut order: Vec<(usize, usize, &Tensor, RawTensor)> = Vec::with_capacity(targets.len());
        for (i, (t, v)) in targets.into_iter().enumerate() {
            let addr = Arc::as_ptr(&t.0) as usize;
            match order.iter_mut().find(|e| e.0 == addr) {
                Some(e) => {
                    e.1 = i;
                    e.3 = v;
                }
                None => order.push((addr, i, t, v)),
            }
        }
        order.sort_by_key(|e| e.0);
        let mut guards = Vec::with_capacity(order.len());
        for (_, i, t, _) in &order {
            let g = lock(&t.0.value);
            match &*g {
                Slot::Value(_) => {}
                Slot::Updating => return Err(Box::new((*i, Error::ValueBusy))),
                Slot::Released => return Err(Box::new((*i, Error::TensorReleased))),
            }
            guards.push(g);
        }
        let old: Vec<Slot> = guards
            .iter_mut()
            .zip(order)
            .map(|(g, (_, _, _, v))| std::mem::replace(&mut **g, Slot::Value(v)))
            .collect();
        drop(guards);
        drop(old);
        Ok(())
    }

    /// The accumulated gradient of a leaf: a constant tensor, or, after a
    /// backward with `create_graph`, the gradient with its history (it can be
    /// differentiated again).
    ///
    /// As in PyTorch, a gradient with history refers back to the graph that
    /// produced it, which may hold this leaf: [`Tensor::zero_grad`] (or
    /// [`Tensor::set_grad`]) releases it. Prefer [`crate::grad_with`] with
    /// `create_graph`, which touches no leaf.
    pub fn grad(&self) -> Option<Tensor> {
        if let Some(g) = lock(&self.0.grad_graph).clone() {
            return Some(g);
        }
        let g = lock(&self.0.grad).clone();
        g.map(|g| Tensor::leaf(&self.0.ctx, g))
    }

    /// The accumulated gradient of a leaf, as a raw view.
    pub fn grad_raw(&self) -> Option<RawTensor> {
        lock(&self.0.grad).clone()
    }

    /// Replaces the accumulated gradient (clipping, custom accumulation);
    /// [`Error::TensorReleased`] once the scope released the tensor.
    pub fn set_grad(&self, grad: Option<RawTensor>) -> Result<()> {
        if let Some(g) = &grad {
            crate::error::check_grad_fits(
                "set_grad",
                0,
                (self.shape(), self.dtype()),
                (g.shape(), g.dtype()),
            )?;
        }
        if self.0.is_released() {
            return Err(Error::TensorReleased);
        }
        let old = std::mem::replace(&mut *lock(&self.0.grad), grad);
        let old_graph = lock(&self.0.grad_graph).take();
        drop((old, old_graph));
        Ok(())
    }

    /// Drops the accumulated gradient (PyTorch's `zero_grad(set_to_none=True)`).
    pub fn zero_grad(&self) {
        let old = lock(&self.0.grad).take();
        let old_graph = lock(&self.0.grad_graph).take();
        drop((old, old_graph));
    }

    /// A constant sharing this value, cut from the graph.
    pub fn detach(&self) -> Result<Tensor> {
        Ok(Tensor::leaf(&self.0.ctx, self.raw()?))
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
        crate::tape::engine::backward(self, None)
    }

    /// Runs backward with an explicit seed gradient of this tensor's shape.
    pub fn backward_with(&self, seed: &RawTensor) -> Result<()> {
        crate::tape::engine::backward(self, Some(seed.clone()))
    }

    /// Runs backward from this scalar (seed 1) as [`Tensor::backward`] does,
    /// calling `ready(leaf, g)` as soon as each leaf's gradient is final (all
    /// of this call's contributions summed into `g`): PyTorch's
    /// `register_post_accumulate_grad_hook`, for one call. When it fires, in
    /// which order and what `g` is: [`crate::backward_with_ready_hook`].
    pub fn backward_with_ready_hook(
        &self,
        ready: &mut dyn FnMut(&Tensor, &RawTensor),
    ) -> Result<()> {
        crate::tape::engine::backward_with_ready_hook(self, None, ready)
    }

    /// True when both handles are the same tensor.
    pub fn same_as(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// `Tensor` is `Send` and `Sync` (checked at compile time).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Tensor>();
};

/// Errors unless `dtype` can carry a gradient (f32 or f64, the dtypes the
/// differentiable kernels compute in).
pub(crate) fn check_grad_dtype(op: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_compute_float() {
        Ok(())
    } else {
        Err(Error::NonFloatVariable { op, dtype })
    }
}
