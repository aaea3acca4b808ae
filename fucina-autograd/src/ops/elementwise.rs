//! Pointwise ops: the unary and binary tiers (one `UnaryOp` / `BinaryOp` gives
//! forward and derivatives together; their methods are generated from the core
//! op tables), where / masked_fill, dropout.

use fucina_core::kernels::elementwise::{BinaryOp, BinarySaved, CmpOp, Saved, UnaryOp};
use fucina_core::{ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::ops::derivatives::{binary_graph, unary_graph};
use crate::ops::same_dtype;
use crate::tape::graph::{record, should_record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;

/// Backward of a pointwise unary op: gx = gy · f'(x), with f' evaluated by the
/// kernel tier from the saved input or output (whichever the formula needs).
struct UnaryBackward {
    op: UnaryOp,
    /// x or y as `op.saved()` says; `None` for a constant derivative.
    saved: Option<RawTensor>,
}

impl Backward for UnaryBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        // A constant derivative reads nothing: gy stands in for the saved value.
        let saved = self.saved.as_ref().unwrap_or(gy);
        Ok(smallvec::smallvec![Some(
            ctx.unary_backward(saved, gy, self.op)?
        )])
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let s = match (self.op.saved(), &self.saved) {
            (Saved::Input, Some(x)) => Some(saved.input(0, x)),
            (Saved::Output, Some(y)) => Some(saved.output(y)),
            _ => None,
        };
        Ok(smallvec::smallvec![Some(unary_graph(
            self.op,
            s.as_ref(),
            gy
        )?)])
    }
}

/// Backward of a pointwise unary op that kept its derivative from the forward
/// ([`UnaryOp::keeps_derivative`]): gx = gy · d with d = f'(x) (bit for bit
/// what [`UnaryBackward`] computes from x).
struct DerivativeBackward {
    op: UnaryOp,
    d: RawTensor,
}

impl Backward for DerivativeBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        Ok(smallvec::smallvec![Some(ctx.binary(
            gy,
            &self.d,
            BinaryOp::Mul
        )?)])
    }
    /// The node kept f'(x), not x, so f''(x) is out of reach: an error naming
    /// the fix (under `higher_order()` the forward records `UnaryBackward`).
    fn backward_graph(&self, _saved: &SavedTensors<'_>, _gy: &Tensor) -> Result<TensorGrads> {
        Err(Error::ForwardNotHigherOrder { op: self.op.name() })
    }
}

/// Backward of a binary op (declared in the core binary table): ga = gy·∂f/∂a,
/// gb = gy·∂f/∂b at the broadcast output shape, evaluated by the kernel tier
/// from the table's partials (the engine reduces them to the input shapes).
/// Add: (gy, gy); sub: (gy, −gy); mul: (gy·b, gy·a); div: (gy/b, −gy·a/b²);
/// pow: (gy·b·a^(b−1), gy·out·ln a); maximum/minimum: the gradient goes to the
/// larger/smaller operand, split evenly on exact ties. The node keeps only what
/// `op.saves()` names.
struct BinaryBackward {
    op: BinaryOp,
    a: Option<RawTensor>,
    b: Option<RawTensor>,
    out: Option<RawTensor>,
}

impl Backward for BinaryBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        // What the op does not save its partials do not read: gy stands in
        // (same dtype, and a shape that broadcasts to gy's).
        let a = self.a.as_ref().unwrap_or(gy);
        let b = self.b.as_ref().unwrap_or(gy);
        let out = self.out.as_ref().unwrap_or(gy);
        let (ga, gb) = ctx.binary_backward(a, b, out, gy, self.op, [needs[0], needs[1]])?;
        Ok(smallvec::smallvec![ga, gb])
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let a = self.a.as_ref().map(|a| saved.input(0, a));
        let b = self.b.as_ref().map(|b| saved.input(1, b));
        let out = self.out.as_ref().map(|o| saved.output(o));
        let (ga, gb) = binary_graph(
            self.op,
            a.as_ref(),
            b.as_ref(),
            out.as_ref(),
            gy,
            [saved.needs(0), saved.needs(1)],
        )?;
        Ok(smallvec::smallvec![ga, gb])
    }
}

impl Tensor {
    /// Applies a pointwise unary op from the kernel tier, recording its backward.
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        let x = self.raw()?;
        let ctx = self.ctx();
        if op.keeps_derivative() && should_record(&[self]) && !crate::grad_mode::is_higher_order() {
            // One pass gives f(x) and f'(x); the node keeps f'(x) instead of x.
            let (y, d) = ctx.unary_with_derivative(&x, op)?;
            drop(x);
            return Ok(record(ctx, op.name(), y, &[self], |_| {
                Box::new(DerivativeBackward { op, d })
            }));
        }
        let y = ctx.unary(&x, op)?;
        Ok(record(ctx, op.name(), y, &[self], |y| {
            let saved = match op.saved() {
                Saved::Input => Some(x),
                Saved::Output => Some(y.clone()),
                Saved::Nothing => None,
            };
            Box::new(UnaryBackward { op, saved })
        }))
    }

    /// x − s.
    pub fn sub_scalar(&self, s: f64) -> Result<Tensor> {
        self.unary(UnaryOp::AddScalar(-s))
    }
    /// x / s.
    pub fn div_scalar(&self, s: f64) -> Result<Tensor> {
        self.unary(UnaryOp::MulScalar(1.0 / s))
    }

    /// Applies a binary pointwise op from the kernel tier with NumPy
    /// broadcasting, recording its backward (`add`, `mul`, ... and the
    /// operators call this).
    ///
    /// ```
    /// use fucina_autograd::{BinaryOp, Tensor};
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let a = Tensor::variable(&ctx, &[1.0f64, 2.0, 3.0], &[3])?;
    /// let b = Tensor::constant(&ctx, &[10.0f64], &[1])?; // broadcast
    /// let y = a.add(&b)?.mul(&a)?.tanh()?; // also `(&a + &b)?`, `&a * &a`...
    /// y.sum_all()?.backward()?;
    /// assert_eq!(y.shape(), &[3]);
    /// assert_eq!(a.grad().unwrap().shape(), &[3]);
    /// let m = a.binary(&b, BinaryOp::Maximum)?; // = a.maximum(&b)
    /// assert_eq!(m.to_vec::<f64>()?, vec![10.0, 10.0, 10.0]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn binary(&self, other: &Tensor, op: BinaryOp) -> Result<Tensor> {
        same_dtype("binary", self, other)?;
        let a = self.raw()?;
        let b = other.raw()?;
        let ctx = self.ctx();
        let y = ctx.binary(&a, &b, op)?;
        Ok(record(ctx, op.name(), y, &[self, other], |y| {
            let (a, b, out) = match op.saves() {
                BinarySaved::Nothing => (None, None, None),
                BinarySaved::Operands => (Some(a), Some(b), None),
                BinarySaved::OperandsAndOutput => (Some(a), Some(b), Some(y.clone())),
            };
            Box::new(BinaryBackward { op, a, b, out })
        }))
    }

    /// A U8 mask constant: `self op other` elementwise (not differentiable).
    pub fn compare(&self, other: &Tensor, op: CmpOp) -> Result<Tensor> {
        let m = self.ctx().compare(&self.value()?, &other.value()?, op)?;
        let t = Tensor::leaf(self.ctx(), m);
        crate::tape::scope::adopt(&t);
        Ok(t)
    }

    /// `cond ? self : other` with broadcasting; `cond` is a U8 mask.
    pub fn where_cond(&self, cond: &Tensor, other: &Tensor) -> Result<Tensor> {
        same_dtype("where", self, other)?;
        let c = cond.raw()?;
        let ctx = self.ctx();
        let y = ctx.where_cond(&c, &self.value()?, &other.value()?)?;
        Ok(record(ctx, "where", y, &[self, other], |_| {
            Box::new(WhereBackward { cond: c })
        }))
    }

    /// `x` with `value` written where the U8 `mask` (broadcast to x) is 1.
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        let m = mask.raw()?;
        let ctx = self.ctx();
        let y = ctx.masked_fill(&self.value()?, &m, value)?;
        Ok(record(ctx, "masked_fill", y, &[self], |_| {
            Box::new(MaskedFillBackward { mask: m })
        }))
    }

    /// Inverted dropout with a counter-based mask: a pure function of
    /// `(seed, element index)`, regenerated in backward and never stored.
    ///
    /// A linear map: gx = gy · mask / (1 − p), the same mask again, whose own
    /// backward is the dropout again.
    pub fn dropout(&self, p: f64, seed: u64) -> Result<Tensor> {
        crate::ops::linear_map::linear_map(
            "dropout",
            self,
            std::sync::Arc::new(move |ctx, x| ctx.dropout(x, p, seed)),
            std::sync::Arc::new(move |ctx, g| ctx.dropout_backward(g, p, seed)),
        )
    }
}

/// ga = cond ? gy : 0, gb = cond ? 0 : gy.
struct WhereBackward {
    cond: RawTensor,
}

impl Backward for WhereBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let zero = ctx.zeros(gy.dtype(), &[])?;
        let ga = if needs[0] {
            Some(ctx.where_cond(&self.cond, gy, &zero)?)
        } else {
            None
        };
        let gb = if needs[1] {
            Some(ctx.where_cond(&self.cond, &zero, gy)?)
        } else {
            None
        };
        Ok(smallvec::smallvec![ga, gb])
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let cond = saved.constant(&self.cond);
        let zero = Tensor::scalar(gy.ctx(), gy.dtype(), 0.0)?;
        let needs = saved.needs_input_grad();
        let ga = needs[0].then(|| gy.where_cond(&cond, &zero)).transpose()?;
        let gb = needs[1].then(|| zero.where_cond(&cond, gy)).transpose()?;
        Ok(smallvec::smallvec![ga, gb])
    }
}

/// gx = mask ? 0 : gy.
struct MaskedFillBackward {
    mask: RawTensor,
}

impl Backward for MaskedFillBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        Ok(smallvec::smallvec![Some(
            ctx.masked_fill(gy, &self.mask, 0.0)?
        )])
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        Ok(smallvec::smallvec![Some(
            gy.masked_fill(&saved.constant(&self.mask), 0.0)?
        )])
    }
}

/// Generates one `Tensor` method per op of the unary table
/// (`fucina-core/src/kernels/elementwise/unary_ops.rs`): `x.op(params)` is
/// `x.unary(UnaryOp::Op(params))`, whose backward is `UnaryBackward`.
macro_rules! unary_methods {
    ($( {
        [$(#[doc = $doc:literal])*] $V:ident [$( ( $($p:ident : $pt:ty = $a:expr),+ ) )?]
        $name:literal $method:ident $($rest:tt)*
    } )*) => {
        impl Tensor {
            $(
                $(#[doc = $doc])*
                pub fn $method(&self $(, $($p: $pt),+)?) -> Result<Tensor> {
                    self.unary(UnaryOp::$V $( ( $($p),+ ) )?)
                }
            )*
        }
    };
}
fucina_core::for_each_unary_op!(unary_methods);

/// Generates one `Tensor` method per op of the binary table
/// (`fucina-core/src/kernels/elementwise/binary_ops.rs`): `a.op(&b)` is
/// `a.binary(&b, BinaryOp::Op)` with broadcasting, whose backward is
/// `BinaryBackward`.
macro_rules! binary_methods {
    ($( { [$(#[doc = $doc:literal])*] $V:ident $name:literal $method:ident $($rest:tt)* } )*) => {
        impl Tensor {
            $(
                $(#[doc = $doc])*
                /// With NumPy broadcasting.
                pub fn $method(&self, other: &Tensor) -> Result<Tensor> {
                    self.binary(other, BinaryOp::$V)
                }
            )*
        }
    };
}
fucina_core::for_each_binary_op!(binary_methods);

/// Raised by ops whose integer inputs cannot carry a gradient.
pub(crate) fn not_differentiable(op: &'static str) -> Error {
    Error::NotDifferentiable { op }
}
