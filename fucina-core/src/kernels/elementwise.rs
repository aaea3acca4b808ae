//! Elementwise unary and binary ops with broadcasting, scalar variants,
//! comparisons, where and masked fill, and the pointwise derivative tier.
//!
//! A pointwise op is declared once, in the op tables (`unary_ops.rs`,
//! `binary_ops.rs`), which generate a [`Pointwise`] (unary) or
//! [`PointwiseBinary`] struct holding its forward `f` and derivative together;
//! the enums [`UnaryOp`] / [`BinaryOp`] are dispatched to those structs once
//! per call, so every hot loop is monomorphised (no per-element dispatch).
//! Outputs are fresh contiguous tensors; inputs may have any strides.
//! [`reference`](mod@reference) is the plain scalar spec the tests compare against.

mod accumulate;
mod binary_ops;
mod gelu;
mod pointwise;
pub mod reference;
mod silu;
mod unary_ops;

pub use pointwise::*;
pub use unary_ops::{Domain, KernelParam};

use crate::dtype::{DType, Element, Float};
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::kernels::map::{expect_dtype, map1, map1_runs, map2, map2_to, map3, map4};
use crate::shape;
use crate::tensor::RawTensor;

// The element types the table's hooks run on (f32, f64: their vectorised exp).
use gelu::ExpSlice as HookFloat;
use unary_ops::c;

// ------------------------------------------------------------------ unary

/// `Some(hook)` for a table entry's hook, `None` where the entry has none.
macro_rules! hook {
    () => {
        None
    };
    ($($f:tt)+) => {
        Some($($f)+)
    };
}

/// A unary entry's `forward:` hook: f(x), vectorised.
type ForwardHook = fn(&ExecContext, &RawTensor) -> Result<RawTensor>;
/// A unary entry's `backward:` hook: gy·f'(saved), vectorised.
type BackwardHook = fn(&ExecContext, &RawTensor, &RawTensor) -> Result<RawTensor>;
/// A unary entry's `with_derivative:` hook: (f(x), f'(x)) in one pass.
type WithDerivativeHook = fn(&ExecContext, &RawTensor) -> Result<(RawTensor, RawTensor)>;

/// Generates, from the op table, the [`UnaryOp`] enum, its dispatch to the
/// kernel structs (with the entries' `special:` kernels), its per-op
/// metadata and its hooks.
macro_rules! unary_enum {
    ($( {
        [$(#[doc = $doc:literal])*] $V:ident [$( ( $($p:ident : $pt:ty = $a:expr),+ ) )?]
        $name:literal $method:ident $saved:ident [$dom:expr] $f:tt $df:tt $rf:tt $rdf:tt $torch:literal
        [$($cond:expr => $K:expr)?] [$($($fwd:ident)::+)?] [$($($bwd:ident)::+)?]
        [$($($wd:ident)::+)?] $act:tt
    } )*) => {
        /// A unary pointwise op (declared in the op table, `unary_ops.rs`).
        /// Scalars are carried as f64 and converted to the tensor's element
        /// type once per call.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum UnaryOp {
            $(
                $(#[doc = $doc])*
                $V $( ( $($pt),+ ) )?,
            )*
        }

        /// Dispatches `op` to its kernel struct once (or to the kernel its
        /// entry's `special:` hook names); `v` runs monomorphised on it.
        pub fn visit_unary<T: Float, V: UnaryVisitor<T>>(op: UnaryOp, v: V) -> V::Out {
            match op {
                $( UnaryOp::$V $( ( $($p),+ ) )? => {
                    $( if $cond {
                        return v.visit($K);
                    } )?
                    v.visit($V $( ( $( c::<T>($p) ),+ ) )?)
                } )*
            }
        }

        impl UnaryOp {
            /// Every op once, with the example parameters its gradcheck row uses.
            pub const EXAMPLES: &'static [UnaryOp] = &[
                $( UnaryOp::$V $( ( $($a),+ ) )?, )*
            ];

            /// A short lower-case name (also the backward node's name).
            pub fn name(self) -> &'static str {
                match self {
                    $( UnaryOp::$V { .. } => $name, )*
                }
            }

            /// The `Tensor` method that applies this op.
            pub fn method(self) -> &'static str {
                match self {
                    $( UnaryOp::$V { .. } => stringify!($method), )*
                }
            }

            /// Where its gradcheck and torch-golden inputs are drawn from.
            pub fn domain(self) -> Domain {
                match self {
                    $( UnaryOp::$V { .. } => $dom, )*
                }
            }

            /// The PyTorch function it matches.
            pub fn torch(self) -> &'static str {
                match self {
                    $( UnaryOp::$V { .. } => $torch, )*
                }
            }

            /// Its entry's `forward:` hook (bit for bit `f`, vectorised).
            fn forward_hook<T: HookFloat>(self) -> Option<ForwardHook> {
                match self {
                    $( UnaryOp::$V { .. } => hook!($( $($fwd)::+::<T> )?), )*
                }
            }

            /// Its entry's `backward:` hook (bit for bit `gy·df`, vectorised).
            fn backward_hook<T: HookFloat>(self) -> Option<BackwardHook> {
                match self {
                    $( UnaryOp::$V { .. } => hook!($( $($bwd)::+::<T> )?), )*
                }
            }

            /// Its entry's `with_derivative:` hook ((f, f') in one pass).
            fn with_derivative_hook<T: HookFloat>(self) -> Option<WithDerivativeHook> {
                match self {
                    $( UnaryOp::$V { .. } => hook!($( $($wd)::+::<T> )?), )*
                }
            }
        }
    };
}
crate::for_each_unary_op!(unary_enum);

/// What a unary backward needs saved: the input x or the output y.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Saved {
    /// The forward input x.
    Input,
    /// The forward output y.
    Output,
    /// Neither: the derivative is a constant (`neg`, `add_scalar`,
    /// `mul_scalar`, `rsub_scalar`), so the backward keeps nothing alive
    /// and any tensor of the shape (the incoming gradient) stands in.
    Nothing,
}

/// A generic action over a concrete [`Pointwise`] kernel (a "generic closure").
pub trait UnaryVisitor<T: Float> {
    /// The result.
    type Out;
    /// Runs with the kernel `k`.
    fn visit<K: Pointwise<T>>(self, k: K) -> Self::Out;
}

struct SavedOf;
impl UnaryVisitor<f64> for SavedOf {
    type Out = Saved;
    fn visit<K: Pointwise<f64>>(self, _: K) -> Saved {
        K::SAVED
    }
}

impl UnaryOp {
    /// Whether the backward reads the input x or the output y.
    pub fn saved(self) -> Saved {
        visit_unary::<f64, _>(self, SavedOf)
    }

    /// Whether a training forward should keep f'(x) (from
    /// [`ExecContext::unary_with_derivative`]) for the backward instead of x: true where the
    /// derivative shares an expensive part with the forward, so one pass computes it once
    /// (`gelu_erf`: the erf). The node holds f'(x) in place of x; x is freed only when
    /// nothing else holds it (an exec scope keeps a step's intermediates, so there the
    /// derivative adds one tensor of x's size: minilm's peak RSS went 836 → 878 MB).
    /// These are the entries with a `with_derivative:` hook.
    pub fn keeps_derivative(self) -> bool {
        self.with_derivative_hook::<f64>().is_some()
    }

    fn validate(self) -> Result<()> {
        if let UnaryOp::Clamp(lo, hi) = self {
            if lo.is_nan() || hi.is_nan() || lo > hi {
                return Err(Error::InvalidArgument {
                    op: "clamp",
                    msg: format!("bounds must satisfy lo <= hi, got [{lo}, {hi}]"),
                });
            }
        }
        Ok(())
    }
}

/// Declares a visitor: the struct `$name` of the listed fields and its `$visitor` impl,
/// whose `visit` evaluates `$body` with the struct bound to `$v` and the kernel (a
/// `$kernel<T>`) to `$k`. A visitor is the "generic closure" a closure cannot be (its body
/// is generic over the kernel type); this writes one as its fields and body only.
macro_rules! visitor {
    (
        $(#[$doc:meta])*
        $name:ident<$lt:lifetime> { $($field:ident: $ty:ty),* $(,)? }
        impl $visitor:ident<$kernel:ident> -> $out:ty;
        |$v:ident, $k:ident| $body:expr
    ) => {
        $(#[$doc])*
        struct $name<$lt> {
            $($field: $ty),*
        }
        impl<T: Float> $visitor<T> for $name<'_> {
            type Out = $out;
            fn visit<K: $kernel<T>>(self, k: K) -> $out {
                let ($v, $k) = (self, k);
                $body
            }
        }
    };
}

visitor! {
    /// f(x), elementwise. The loop sits inside the run closure, where `k.f` is inlined: it
    /// vectorises for the branch-free ops (tanh through `vmath`), whatever their size.
    Forward<'a> { ctx: &'a ExecContext, x: &'a RawTensor }
    impl UnaryVisitor<Pointwise> -> Result<RawTensor>;
    |v, k| map1_runs::<T, T>(
        v.ctx,
        v.x,
        move |src, dst| {
            for (o, &v) in dst.iter_mut().zip(src) {
                *o = k.f(v);
            }
        },
        move |v| k.f(v),
    )
}

/// Tanh's `forward:` hook: for f32 the contiguous runs go through the AVX2 / AVX-512 loop
/// (`kernels::simd::tanh_f32_slice`, bit for bit `vmath::tanh_f32`, the table's f32
/// `tanh`); f64 takes the generic path.
fn tanh_forward<T: Float>(ctx: &ExecContext, x: &RawTensor) -> Result<RawTensor> {
    if x.dtype() == DType::F32 {
        map1_runs::<f32, f32>(
            ctx,
            x,
            crate::kernels::simd::tanh_f32_slice,
            crate::vmath::tanh_f32,
        )
    } else {
        visit_unary::<T, _>(UnaryOp::Tanh, Forward { ctx, x })
    }
}

visitor! {
    /// gx = gy · f'(.), elementwise.
    Backward<'a> { ctx: &'a ExecContext, saved: &'a RawTensor, gy: &'a RawTensor }
    impl UnaryVisitor<Pointwise> -> Result<RawTensor>;
    |v, k| map2::<T, T, T>(v.ctx, "unary_backward", v.saved, v.gy, move |s, g| g * k.df(s))
}

visitor! {
    /// f'(.) from the saved value, elementwise.
    Derivative<'a> { ctx: &'a ExecContext, saved: &'a RawTensor }
    impl UnaryVisitor<Pointwise> -> Result<RawTensor>;
    |v, k| map1::<T, T>(v.ctx, v.saved, move |s| k.df(s))
}

/// `Ok` when `a` and `b` have one dtype, else [`Error::DTypeMismatch`] naming `op`.
pub(crate) fn same_dtype(op: &'static str, a: &RawTensor, b: &RawTensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: b.dtype(),
        });
    }
    Ok(())
}

/// `Ok` when `a` and `b` have one shape, else [`Error::ShapeMismatch`] naming `op`.
pub(crate) fn same_shape(op: &'static str, a: &RawTensor, b: &RawTensor) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    Ok(())
}

impl ExecContext {
    /// `y = op(x)` elementwise; `x` may have any strides; f32/f64 only.
    ///
    /// ```
    /// use fucina_core::{ExecContext, kernels::elementwise::UnaryOp};
    /// let ctx = ExecContext::with_threads(1)?;
    /// let x = ctx.from_slice(&[-1.0f32, 0.0, 2.0], &[3])?;
    /// assert_eq!(ctx.unary(&x, UnaryOp::Relu)?.to_vec::<f32>()?, vec![0.0, 0.0, 2.0]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn unary(&self, x: &RawTensor, op: UnaryOp) -> Result<RawTensor> {
        op.validate()?;
        crate::dispatch_float!(x.dtype(), op.name(), T => {
            match op.forward_hook::<T>() {
                Some(forward) => forward(self, x),
                None => visit_unary::<T, _>(op, Forward { ctx: self, x }),
            }
        })
    }

    /// `(op(x), op'(x))`, both of x's shape: the forward and its derivative, for a backward
    /// that multiplies by the derivative (`gy·d`, bit for bit [`Self::unary_backward`]'s
    /// result) instead of re-deriving it. An entry's `with_derivative:` hook computes both in
    /// one pass (see [`UnaryOp::keeps_derivative`]); other ops compute the two in turn.
    ///
    /// ```
    /// use fucina_core::{ExecContext, kernels::elementwise::UnaryOp};
    /// let ctx = ExecContext::with_threads(1)?;
    /// let x = ctx.from_slice(&[-1.0f32, 0.0, 2.0], &[3])?;
    /// let (y, d) = ctx.unary_with_derivative(&x, UnaryOp::Relu)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 0.0, 2.0]);
    /// assert_eq!(d.to_vec::<f32>()?, vec![0.0, 0.0, 1.0]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn unary_with_derivative(
        &self,
        x: &RawTensor,
        op: UnaryOp,
    ) -> Result<(RawTensor, RawTensor)> {
        op.validate()?;
        crate::dispatch_float!(x.dtype(), op.name(), T => {
            if let Some(both) = op.with_derivative_hook::<T>() {
                both(self, x)
            } else {
                let y = self.unary(x, op)?;
                let saved = match op.saved() {
                    Saved::Input | Saved::Nothing => x,
                    Saved::Output => &y,
                };
                let d = visit_unary::<T, _>(op, Derivative { ctx: self, saved })?;
                Ok((y, d))
            }
        })
    }

    /// gx = gy * f'(.) where `saved` is x or y per `op.saved()` (any tensor of gy's shape,
    /// gy itself, for [`Saved::Nothing`]); same shape as gy.
    pub fn unary_backward(
        &self,
        saved: &RawTensor,
        gy: &RawTensor,
        op: UnaryOp,
    ) -> Result<RawTensor> {
        op.validate()?;
        same_dtype("unary_backward", saved, gy)?;
        same_shape("unary_backward", saved, gy)?;
        crate::dispatch_float!(gy.dtype(), op.name(), T => {
            match op.backward_hook::<T>() {
                Some(backward) => backward(self, saved, gy),
                None => visit_unary::<T, _>(op, Backward { ctx: self, saved, gy }),
            }
        })
    }
}

// ----------------------------------------------------------------- binary

/// Generates, from the binary op table, the [`BinaryOp`] enum, its dispatch
/// to the kernel structs and its per-op metadata.
macro_rules! binary_enum {
    ($( {
        [$(#[doc = $doc:literal])*] $V:ident $name:literal $method:ident $saves:ident
        $f:tt $da:tt $db:tt $rf:tt $rda:tt $rdb:tt [$adom:expr] [$($ash:expr),*]
        [$bdom:expr] [$($bsh:expr),*] $torch:literal
    } )*) => {
        /// A binary pointwise op with NumPy broadcasting (declared in the op
        /// table, `binary_ops.rs`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum BinaryOp {
            $(
                $(#[doc = $doc])*
                $V,
            )*
        }

        /// Dispatches `op` to its kernel struct once.
        pub fn visit_binary<T: Float, V: BinaryVisitor<T>>(op: BinaryOp, v: V) -> V::Out {
            match op {
                $( BinaryOp::$V => v.visit($V), )*
            }
        }

        impl BinaryOp {
            /// Every op once, in table order.
            pub const ALL: &'static [BinaryOp] = &[ $( BinaryOp::$V, )* ];

            /// A short lower-case name (also the backward node's name).
            pub fn name(self) -> &'static str {
                match self {
                    $( BinaryOp::$V => $name, )*
                }
            }

            /// The `Tensor` method that applies this op.
            pub fn method(self) -> &'static str {
                match self {
                    $( BinaryOp::$V => stringify!($method), )*
                }
            }

            /// What the backward node keeps alive for its partials.
            pub fn saves(self) -> BinarySaved {
                match self {
                    $( BinaryOp::$V => BinarySaved::$saves, )*
                }
            }

            /// The (domain, shape) of a and of b in its gradcheck row (and torch golden).
            pub fn example_inputs(self) -> [(Domain, &'static [usize]); 2] {
                match self {
                    $( BinaryOp::$V => [($adom, &[$($ash),*]), ($bdom, &[$($bsh),*])], )*
                }
            }

            /// The PyTorch function it matches.
            pub fn torch(self) -> &'static str {
                match self {
                    $( BinaryOp::$V => $torch, )*
                }
            }
        }
    };
}
crate::for_each_binary_op!(binary_enum);

/// What the backward of a binary op reads besides gy (its node keeps exactly this).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinarySaved {
    /// Nothing: both partials are constants (±1).
    Nothing,
    /// The operands a and b.
    Operands,
    /// The operands and the forward output out = f(a, b).
    OperandsAndOutput,
}

/// A generic action over a concrete [`PointwiseBinary`] kernel.
pub trait BinaryVisitor<T: Float> {
    /// The result.
    type Out;
    /// Runs with the kernel `k`.
    fn visit<K: PointwiseBinary<T>>(self, k: K) -> Self::Out;
}

visitor! {
    /// f(a, b) at the broadcast shape, as op `name`.
    BinForward<'a> { ctx: &'a ExecContext, a: &'a RawTensor, b: &'a RawTensor, name: &'static str }
    impl BinaryVisitor<PointwiseBinary> -> Result<RawTensor>;
    |v, k| map2::<T, T, T>(v.ctx, v.name, v.a, v.b, move |u, w| k.f(u, w))
}

visitor! {
    /// ga = gy · ∂f/∂a(a, b, out), gb = gy · ∂f/∂b(a, b, out), at the output shape, for
    /// those `needs` asks.
    BinBackward<'a> {
        ctx: &'a ExecContext,
        a: &'a RawTensor,
        b: &'a RawTensor,
        out: &'a RawTensor,
        gy: &'a RawTensor,
        needs: [bool; 2],
    }
    impl BinaryVisitor<PointwiseBinary> -> Result<(Option<RawTensor>, Option<RawTensor>)>;
    |v, k| {
        let ts = [v.a, v.b, v.out, v.gy];
        let ga = if v.needs[0] {
            Some(partial_grad::<T>(v.ctx, K::DA, ts, move |a, b, o| k.da(a, b, o))?)
        } else {
            None
        };
        let gb = if v.needs[1] {
            Some(partial_grad::<T>(v.ctx, K::DB, ts, move |a, b, o| k.db(a, b, o))?)
        } else {
            None
        };
        Ok((ga, gb))
    }
}

/// gy · ∂ for one partial `d` of the form `form`, at gy's (the output's) shape;
/// `ts` = [a, b, out, gy]. The cheap forms read only what they need.
fn partial_grad<T: Float>(
    ctx: &ExecContext,
    form: Partial,
    ts: [&RawTensor; 4],
    d: impl Fn(T, T, T) -> T + Send + Sync,
) -> Result<RawTensor> {
    const OP: &str = "binary_backward";
    let [a, b, _, gy] = ts;
    match form {
        // ∂ = 1: the gradient is gy itself.
        Partial::One => Ok(gy.clone_view()),
        // ∂ = −1: −gy.
        Partial::MinusOne => map1::<T, T>(ctx, gy, |g| -g),
        // ∂ = a or b: gy times that operand.
        Partial::A => map2::<T, T, T>(ctx, OP, gy, a, |g, u| g * u),
        Partial::B => map2::<T, T, T>(ctx, OP, gy, b, |g, v| g * v),
        Partial::Expr => map4::<T>(ctx, OP, ts, gy.shape(), move |a, b, o, g| g * d(a, b, o)),
    }
}

impl ExecContext {
    /// `op(a, b)` with NumPy broadcasting; dtypes must match (f32/f64).
    ///
    /// ```
    /// use fucina_core::{ExecContext, kernels::elementwise::BinaryOp};
    /// let ctx = ExecContext::with_threads(1)?;
    /// let a = ctx.from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let b = ctx.from_slice(&[10.0f64, 20.0], &[2])?;
    /// let y = ctx.binary(&a, &b, BinaryOp::Add)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![11.0, 22.0, 13.0, 24.0]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn binary(&self, a: &RawTensor, b: &RawTensor, op: BinaryOp) -> Result<RawTensor> {
        let name = op.name();
        same_dtype(name, a, b)?;
        crate::dispatch_float!(a.dtype(), name, T => {
            visit_binary::<T, _>(op, BinForward { ctx: self, a, b, name })
        })
    }

    /// Gradients of a binary op at the BROADCAST OUTPUT shape (the caller
    /// reduces to input shapes). `out` is the forward result (needed by Pow for
    /// d/db = out·ln(a)). `needs = [need_ga, need_gb]`. Only what
    /// [`BinaryOp::saves`] names is read: for the others any tensor of the
    /// right dtype and a compatible shape may be passed (gy itself, say).
    pub fn binary_backward(
        &self,
        a: &RawTensor,
        b: &RawTensor,
        out: &RawTensor,
        gy: &RawTensor,
        op: BinaryOp,
        needs: [bool; 2],
    ) -> Result<(Option<RawTensor>, Option<RawTensor>)> {
        const OP: &str = "binary_backward";
        same_dtype(OP, a, b)?;
        same_dtype(OP, a, out)?;
        same_dtype(OP, a, gy)?;
        let shape = shape::broadcast_shapes(OP, a.shape(), b.shape())?;
        if shape.as_slice() != gy.shape() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: shape.to_vec(),
                rhs: gy.shape().to_vec(),
            });
        }
        same_shape(OP, out, gy)?;
        crate::dispatch_float!(gy.dtype(), op.name(), T => {
            visit_binary::<T, _>(op, BinBackward { ctx: self, a, b, out, gy, needs })
        })
    }
}

// ------------------------------------------------------ compare and select

/// A comparison; results are `U8` 0/1 tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// a == b
    Eq,
    /// a != b
    Ne,
    /// a < b
    Lt,
    /// a <= b
    Le,
    /// a > b
    Gt,
    /// a >= b
    Ge,
}

impl CmpOp {
    /// Evaluates the comparison (NaN compares unequal to everything, as IEEE).
    #[inline(always)]
    pub fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// Binds `$f` to a comparison closure over `$T`, one arm per `CmpOp`, so
/// the comparison is monomorphised (no per-element dispatch).
macro_rules! with_cmp {
    ($op:expr, $T:ty, $f:ident => $body:expr) => {
        match $op {
            CmpOp::Eq => {
                let $f = |x: $T, y: $T| (x == y) as u8;
                $body
            }
            CmpOp::Ne => {
                let $f = |x: $T, y: $T| (x != y) as u8;
                $body
            }
            CmpOp::Lt => {
                let $f = |x: $T, y: $T| (x < y) as u8;
                $body
            }
            CmpOp::Le => {
                let $f = |x: $T, y: $T| (x <= y) as u8;
                $body
            }
            CmpOp::Gt => {
                let $f = |x: $T, y: $T| (x > y) as u8;
                $body
            }
            CmpOp::Ge => {
                let $f = |x: $T, y: $T| (x >= y) as u8;
                $body
            }
        }
    };
}

impl ExecContext {
    /// `a op b` elementwise with broadcasting; output `U8` (1 where true).
    /// Dtypes must match; f32, f64 and the integer types are supported.
    pub fn compare(&self, a: &RawTensor, b: &RawTensor, op: CmpOp) -> Result<RawTensor> {
        const OP: &str = "compare";
        same_dtype(OP, a, b)?;
        crate::dispatch_select!(a.dtype(), OP, T => {
            with_cmp!(op, T, f => map2::<T, T, u8>(self, OP, a, b, f))
        })
    }

    /// `a op s` elementwise; output `U8`. For float tensors `s` is first
    /// rounded to the element type (as PyTorch); integers compare exactly in f64.
    pub fn compare_scalar(&self, a: &RawTensor, s: f64, op: CmpOp) -> Result<RawTensor> {
        const OP: &str = "compare_scalar";
        crate::dispatch_select!(a.dtype(), OP, T => {
            if T::DTYPE.is_float() {
                let sv = T::from_f64(s);
                with_cmp!(op, T, f => map1::<T, u8>(self, a, move |v| f(v, sv)))
            } else {
                with_cmp!(op, f64, f => map1::<T, u8>(self, a, move |v: T| f(v.to_f64(), s)))
            }
        })
    }

    /// `cond ? a : b` elementwise, broadcasting all three; `cond` is `U8`
    /// (nonzero = true), `a` and `b` share a dtype.
    pub fn where_cond(&self, cond: &RawTensor, a: &RawTensor, b: &RawTensor) -> Result<RawTensor> {
        const OP: &str = "where_cond";
        expect_dtype(OP, cond, DType::U8)?;
        same_dtype(OP, a, b)?;
        crate::dispatch_select!(a.dtype(), OP, T => {
            map3::<u8, T, T, T>(self, OP, cond, a, b, |m, u, v| if m != 0 { u } else { v })
        })
    }

    /// `x` with `value` wherever `mask` (U8, broadcast to x's shape) is nonzero.
    pub fn masked_fill(&self, x: &RawTensor, mask: &RawTensor, value: f64) -> Result<RawTensor> {
        const OP: &str = "masked_fill";
        expect_dtype(OP, mask, DType::U8)?;
        crate::dispatch_select!(x.dtype(), OP, T => {
            let v = T::from_f64(value);
            map2_to::<T, u8, T>(self, OP, x, mask, x.shape(), move |u, m| if m != 0 { v } else { u })
        })
    }
}

// -------------------------------------------------------------- reference
