//! THE table of unary pointwise ops: each op is declared here once — its
//! `UnaryOp` variant and parameters (with the example values its gradcheck
//! row uses), name, `Tensor` method, saved value, gradcheck domain, kernel
//! forward `f` and derivative `df`, scalar reference `ref_f` / `ref_df`, and
//! PyTorch name. [`for_each_unary_op!`](crate::for_each_unary_op) hands the
//! table to a generator macro; the generators produce the `UnaryOp` enum, its
//! dispatch and names (`elementwise.rs`), the kernel structs (`pointwise.rs`),
//! the reference (`reference.rs`), the autograd methods
//! (`fucina-autograd/src/ops/elementwise.rs`), the gradcheck rows
//! (`fucina-autograd/src/suite.rs`) and `fucina-nn`'s `Activation`
//! (`fucina-nn/src/activation.rs`, from the `activation:` hooks). Adding an op: one entry here plus its
//! torch lambda in `tools/gen_op_goldens.py` (see CONTRIBUTING.md).
//!
//! Kernel bodies (`f`, `df`) expand in `pointwise.rs` (helpers `c`, `sign`, `sigmoid`,
//! the constants below); reference bodies (`ref_f`, `ref_df`) expand in
//! `reference.rs` (helpers `c`, `sign`, `sigmoid_ref`, `cosh_ref`), where parameters
//! are f64. `df` reads the saved value (x or y = f(x) per `saved`); `ref_df`
//! is always written in terms of the input x. Every derivative carries its math.

use crate::dtype::Float;

/// Where an op's gradcheck and torch-golden inputs are drawn from (away from
/// its kinks and poles).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Domain {
    /// Uniform in [-1.5, 1.5).
    Float,
    /// Uniform in ±[0.1, 1.5) (away from a kink at 0).
    NonZero,
    /// Uniform in [lo, hi).
    Range(f64, f64),
}

pub(super) const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
pub(super) const GELU_C: f64 = 0.044_715;
pub(super) const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// GELU-erf's erf argument: u = x/√2 (as x·(1/√2) in the element type).
#[inline(always)]
pub(super) fn gelu_erf_arg<T: Float>(x: T) -> T {
    x * c::<T>(std::f64::consts::FRAC_1_SQRT_2)
}

/// GELU-erf's forward from x and e = erf(x/√2): 0.5x(1 + e).
#[inline(always)]
pub(super) fn gelu_erf_y<T: Float>(x: T, e: T) -> T {
    c::<T>(0.5) * x * (T::ONE + e)
}

/// σ(a)'s exp argument −|a| (so e^{-|a|} never overflows).
#[inline(always)]
pub(super) fn sigmoid_exp_arg<T: Float>(a: T) -> T {
    -a.abs()
}

/// e^{-|a|}: σ(a)'s one exp.
#[inline(always)]
pub(super) fn sigmoid_exp<T: Float>(a: T) -> T {
    sigmoid_exp_arg(a).exp()
}

/// σ(a) from a and e = e^{-|a|}, stable both ways: 1/(1+e) for a ≥ 0, else e/(1+e).
#[inline(always)]
pub(super) fn sigmoid_from_exp<T: Float>(a: T, e: T) -> T {
    if a >= T::ZERO {
        T::ONE / (T::ONE + e)
    } else {
        e / (T::ONE + e)
    }
}

/// SiLU's forward from x and e = e^{-|x|}: x·σ(x).
#[inline(always)]
pub(super) fn silu_y<T: Float>(x: T, e: T) -> T {
    x * sigmoid_from_exp(x, e)
}

/// SiLU's derivative from x and e = e^{-|x|}, with s = σ(x): s(1 + x(1 − s)).
#[inline(always)]
pub(super) fn silu_dy<T: Float>(x: T, e: T) -> T {
    let s = sigmoid_from_exp(x, e);
    s * (T::ONE + x * (T::ONE - s))
}

/// GELU-erf's Gaussian exponent: −x²/2 (as −0.5·x·x).
#[inline(always)]
pub(super) fn gelu_erf_pdf_arg<T: Float>(x: T) -> T {
    c::<T>(-0.5) * x * x
}

/// GELU-erf's derivative from x, e = erf(x/√2) and g = e^{-x²/2} (`gelu_erf_pdf_arg`):
/// d/dx xΦ(x) = Φ(x) + x·φ(x), Φ = 0.5(1 + e), φ = g/√(2π).
#[inline(always)]
pub(super) fn gelu_erf_dy<T: Float>(x: T, e: T, g: T) -> T {
    let cdf = c::<T>(0.5) * (T::ONE + e);
    let pdf = c::<T>(FRAC_1_SQRT_2PI) * g;
    cdf + x * pdf
}

/// GELU-tanh's forward sigmoid argument a = 2u, u = k(x + 0.044715·x·x·x), k = √(2/π).
#[inline(always)]
pub(super) fn gelu_tanh_a<T: Float>(x: T) -> T {
    let u = c::<T>(SQRT_2_OVER_PI) * (x + c::<T>(GELU_C) * x * x * x);
    u + u
}

/// GELU-tanh's forward from x, a = [`gelu_tanh_a`] and e = e^{-|a|}: x·σ(a).
#[inline(always)]
pub(super) fn gelu_tanh_y<T: Float>(x: T, a: T, e: T) -> T {
    x * sigmoid_from_exp(a, e)
}

/// GELU-tanh's backward sigmoid argument a = 2u, u = k(x + 0.044715·x²·x) (x² rounded
/// first, as the derivative reuses it).
#[inline(always)]
pub(super) fn gelu_tanh_da<T: Float>(x: T) -> T {
    let x2 = x * x;
    let u = c::<T>(SQRT_2_OVER_PI) * (x + c::<T>(GELU_C) * x2 * x);
    u + u
}

/// GELU-tanh's derivative from x, a = [`gelu_tanh_da`] and e = e^{-|a|}, with s = σ(a):
/// s + 2x·s(1−s)·k(1 + 3·0.044715x²).
#[inline(always)]
pub(super) fn gelu_tanh_dy<T: Float>(x: T, a: T, e: T) -> T {
    let s = sigmoid_from_exp(a, e);
    let du = c::<T>(SQRT_2_OVER_PI) * (T::ONE + c::<T>(3.0 * GELU_C) * (x * x));
    s + (x + x) * s * (T::ONE - s) * du
}

/// Maps a parameter's declared type (f64) to its kernel struct's field type,
/// the element type `T` (`<f64 as KernelParam<T>>::Field` is `T`).
pub trait KernelParam<T> {
    /// The field type.
    type Field;
}
impl<T> KernelParam<T> for f64 {
    type Field = T;
}

/// `v` converted to the element type (a scalar constant in an op's body).
#[inline(always)]
pub(super) fn c<T: Float>(v: f64) -> T {
    T::from_f64(v)
}

/// sign(x) ∈ {-1, 0, 1}, with ±0 and NaN giving themselves (kernel and reference).
#[inline(always)]
pub(super) fn sign<T: Float>(x: T) -> T {
    if x > T::ZERO {
        T::ONE
    } else if x < T::ZERO {
        -T::ONE
    } else {
        x
    }
}

/// Calls the generator macro `$cb` with every unary pointwise op of the table.
///
/// The `@parse` arm (at the end) is the one place the entry grammar is written:
/// it parses each entry once and calls `$cb!` with the entries in a normalised
/// form, one brace group each of fixed bracketed fields, so a generator matches
/// that short form (skipping the fields it does not read as `$_:tt`):
///
/// ```text
/// { [docs] Variant [(param: f64 = example, ..)] "name" method Saved [Domain expr]
///   [|x| f] [|s| df] [|x| ref_f] [|x| ref_df] "torch"
///   [cond => Kernel] [forward fn] [backward fn] [with_derivative fn] [Activation (aliases)] }
/// ```
///
/// The last five are the entry's optional hooks (`[]` where it has none):
/// - `special: cond => Kernel`: when `cond` holds for the parameters, the op
///   runs as that kernel struct (`pow_scalar(2)` as `Square`);
/// - `forward:` / `backward:` a generic fn (`fn::<T>(ctx, x)` / `(ctx, saved, gy)`)
///   computing bit for bit what `f` / `gy·df` give, vectorised;
/// - `with_derivative:` a fn giving `(f(x), f'(x))` in one pass; a training
///   forward then keeps f'(x) instead of x ([`UnaryOp::keeps_derivative`](crate::kernels::elementwise::UnaryOp::keeps_derivative));
/// - `activation: Name ("alias", ..)`: a `fucina_nn::Activation` variant
///   (serde name its snake case, plus the aliases).
#[macro_export]
macro_rules! for_each_unary_op {
    ($cb:ident) => {
        $crate::for_each_unary_op! { @parse $cb;
            /// −x.
            Neg {
                name: "neg", method: neg, saved: Nothing, domain: Float,
                f: |x| -x,
                // d/dx (-x) = -1
                df: |_| -T::ONE,
                ref_f: |x| -x,
                ref_df: |_| -T::ONE,
                torch: "torch.neg",
            }
            /// |x| (gradient 0 at 0, as PyTorch).
            Abs {
                name: "abs", method: abs, saved: Input, domain: NonZero,
                f: |x| x.abs(),
                // d/dx |x| = sign(x); sign(0) = 0, as PyTorch.
                df: |x| if x > T::ZERO {
                    T::ONE
                } else if x < T::ZERO {
                    -T::ONE
                } else {
                    T::ZERO
                },
                ref_f: |x| x.abs(),
                ref_df: |x| if x == T::ZERO {
                    T::ZERO
                } else if x > T::ZERO {
                    T::ONE
                } else {
                    -T::ONE
                },
                torch: "torch.abs",
            }
            /// √x.
            Sqrt {
                name: "sqrt", method: sqrt, saved: Output, domain: Range(0.5, 2.0),
                f: |x| x.sqrt(),
                // d/dx √x = 0.5/√x = 0.5/y
                df: |y| c::<T>(0.5) / y,
                ref_f: |x| x.sqrt(),
                ref_df: |x| c::<T>(0.5) / x.sqrt(),
                torch: "torch.sqrt",
            }
            /// 1/√x.
            Rsqrt {
                name: "rsqrt", method: rsqrt, saved: Output, domain: Range(0.5, 2.0),
                f: |x| T::ONE / x.sqrt(),
                // d/dx x^{-1/2} = -0.5·x^{-3/2} = -0.5·y³
                df: |y| c::<T>(-0.5) * y * y * y,
                ref_f: |x| T::ONE / x.sqrt(),
                ref_df: |x| c::<T>(-0.5) / (x * x.sqrt()),
                torch: "torch.rsqrt",
            }
            /// eˣ.
            Exp {
                name: "exp", method: exp, saved: Output, domain: Float,
                f: |x| x.exp(),
                // d/dx eˣ = eˣ = y
                df: |y| y,
                ref_f: |x| x.exp(),
                ref_df: |x| x.exp(),
                torch: "torch.exp",
            }
            /// ln x.
            Log {
                name: "log", method: log, saved: Input, domain: Range(0.5, 2.0),
                f: |x| x.ln(),
                // d/dx ln x = 1/x
                df: |x| T::ONE / x,
                ref_f: |x| x.ln(),
                ref_df: |x| T::ONE / x,
                torch: "torch.log",
            }
            /// ln(1 + x).
            Log1p {
                name: "log1p", method: log1p, saved: Input, domain: Range(0.0, 2.0),
                f: |x| x.ln_1p(),
                // d/dx ln(1+x) = 1/(1+x)
                df: |x| T::ONE / (T::ONE + x),
                ref_f: |x| x.ln_1p(),
                ref_df: |x| T::ONE / (T::ONE + x),
                torch: "torch.log1p",
            }
            /// sin x.
            Sin {
                name: "sin", method: sin, saved: Input, domain: Float,
                f: |x| x.sin(),
                // d/dx sin x = cos x
                df: |x| x.cos(),
                ref_f: |x| x.sin(),
                ref_df: |x| x.cos(),
                torch: "torch.sin",
            }
            /// cos x.
            Cos {
                name: "cos", method: cos, saved: Input, domain: Float,
                f: |x| x.cos(),
                // d/dx cos x = -sin x
                df: |x| -x.sin(),
                ref_f: |x| x.cos(),
                ref_df: |x| -x.sin(),
                torch: "torch.cos",
            }
            /// tanh x.
            Tanh {
                name: "tanh", method: tanh, saved: Output, domain: Float,
                f: |x| x.tanh(),
                // d/dx tanh x = 1 - tanh²x = 1 - y²  (reference: 1/cosh²x)
                df: |y| T::ONE - y * y,
                ref_f: |x| x.tanh(),
                ref_df: |x| {
                    let ch = x.cosh_ref();
                    T::ONE / (ch * ch)
                },
                torch: "torch.tanh",
                // f32: contiguous runs through the AVX2 loop (`vmath::tanh_f32`, this `f`).
                forward: tanh_forward,
                activation: Tanh,
            }
            /// 1 / (1 + e⁻ˣ), numerically stable.
            Sigmoid {
                name: "sigmoid", method: sigmoid, saved: Output, domain: Float,
                f: |x| sigmoid(x),
                // d/dx σ(x) = σ(x)(1-σ(x)) = y(1-y)
                df: |y| y * (T::ONE - y),
                ref_f: |x| sigmoid_ref(x),
                ref_df: |x| {
                    let s = sigmoid_ref(x);
                    s * (T::ONE - s)
                },
                torch: "torch.sigmoid",
                activation: Sigmoid,
            }
            /// max(x, 0) (relu'(0) = 0, as PyTorch).
            Relu {
                name: "relu", method: relu, saved: Output, domain: NonZero,
                // NaN propagates (NaN < 0 is false).
                f: |x| if x < T::ZERO { T::ZERO } else { x },
                // d/dx relu(x) = x > 0 ? 1 : 0 (relu'(0) = 0, as PyTorch); y > 0 iff x > 0.
                df: |y| if y > T::ZERO { T::ONE } else { T::ZERO },
                ref_f: |x| if x < T::ZERO { T::ZERO } else { x },
                ref_df: |x| if x > T::ZERO { T::ONE } else { T::ZERO },
                torch: "torch.relu",
                activation: Relu,
            }
            /// x for x > 0, else slope·x (gradient `slope` at 0).
            LeakyRelu(slope: f64 = 0.1) {
                name: "leaky_relu", method: leaky_relu, saved: Input, domain: NonZero,
                f: |x| if x > T::ZERO { x } else { x * slope },
                // d/dx = x > 0 ? 1 : slope (so the gradient at 0 is `slope`, as PyTorch).
                df: |x| if x > T::ZERO { T::ONE } else { slope },
                ref_f: |x| if x > T::ZERO { x } else { x * c::<T>(slope) },
                ref_df: |x| if x > T::ZERO { T::ONE } else { c::<T>(slope) },
                torch: "torch.nn.functional.leaky_relu",
            }
            /// x for x > 0, else α(eˣ − 1).
            Elu(alpha: f64 = 1.0) {
                name: "elu", method: elu, saved: Input, domain: NonZero,
                f: |x| if x > T::ZERO { x } else { alpha * (x.exp() - T::ONE) },
                // d/dx = x > 0 ? 1 : α·eˣ (at 0 the left branch: α).
                df: |x| if x > T::ZERO { T::ONE } else { alpha * x.exp() },
                ref_f: |x| if x > T::ZERO { x } else { c::<T>(alpha) * (x.exp() - T::ONE) },
                ref_df: |x| if x > T::ZERO { T::ONE } else { c::<T>(alpha) * x.exp() },
                torch: "torch.nn.functional.elu",
            }
            /// GELU, tanh approximation (PyTorch `approximate="tanh"`):
            /// 0.5x(1+tanh(√(2/π)(x+0.044715x³))).
            GeluTanh {
                name: "gelu_tanh", method: gelu, saved: Input, domain: Float,
                // 0.5x(1+tanh u) with u = k(x + 0.044715x³), k = √(2/π). Since
                // 1 + tanh u = 2σ(2u), this is x·σ(2u): one exp instead of tanh, and no
                // cancellation in 1 + tanh u for negative x. The bodies live in
                // `gelu_tanh_*` (below the constants), shared with the row kernels of
                // `elementwise/gelu.rs` that vectorise the exp.
                f: |x| {
                    let a = super::unary_ops::gelu_tanh_a(x);
                    super::unary_ops::gelu_tanh_y(x, a, sigmoid_exp(a))
                },
                // With t = tanh u and s = σ(2u) (so 1+t = 2s, 1-t² = 4s(1-s)):
                // d/dx = 0.5(1+t) + 0.5x(1-t²)·k(1 + 3·0.044715x²) = s + 2x·s(1-s)·k(1 + 3·0.044715x²)
                df: |x| {
                    let a = super::unary_ops::gelu_tanh_da(x);
                    super::unary_ops::gelu_tanh_dy(x, a, sigmoid_exp(a))
                },
                ref_f: |x| {
                    let inner = c::<T>(SQRT_2_OVER_PI) * (x + c::<T>(GELU_C) * x * x * x);
                    c::<T>(0.5) * x * (T::ONE + inner.tanh())
                },
                ref_df: |x| {
                    let k = c::<T>(SQRT_2_OVER_PI);
                    let u = k * (x + c::<T>(GELU_C) * x * x * x);
                    let ch = u.cosh_ref();
                    let sech2 = T::ONE / (ch * ch);
                    c::<T>(0.5) * (T::ONE + u.tanh())
                        + c::<T>(0.5) * x * sech2 * k * (T::ONE + c::<T>(3.0 * GELU_C) * x * x)
                },
                torch: "torch.nn.functional.gelu",
                // The exp vectorised (`elementwise/gelu.rs`), bit for bit `f` / `df`.
                forward: gelu::tanh_forward,
                backward: gelu::tanh_backward,
                activation: GeluTanh("gelu_new", "gelu_pytorch_tanh"),
            }
            /// GELU, exact erf form: 0.5x(1+erf(x/√2)).
            GeluErf {
                name: "gelu_erf", method: gelu_erf, saved: Input, domain: Float,
                // The bodies live in `gelu_erf_y` / `gelu_erf_dy` (below the constants),
                // shared with the row kernels of `elementwise/gelu.rs` that vectorise
                // the erf: the same operations in the same order, so the same bits.
                f: |x| super::unary_ops::gelu_erf_y(x, super::unary_ops::gelu_erf_arg(x).erf()),
                // d/dx xΦ(x) = Φ(x) + x·φ(x), Φ = 0.5(1+erf(x/√2)), φ = e^{-x²/2}/√(2π)
                df: |x| super::unary_ops::gelu_erf_dy(
                    x,
                    super::unary_ops::gelu_erf_arg(x).erf(),
                    super::unary_ops::gelu_erf_pdf_arg(x).exp(),
                ),
                ref_f: |x| c::<T>(0.5) * x * (T::ONE + (x * c::<T>(std::f64::consts::FRAC_1_SQRT_2)).erf()),
                ref_df: |x| {
                    let cdf = c::<T>(0.5) * (T::ONE + (x / c::<T>(std::f64::consts::SQRT_2)).erf());
                    cdf + x * (-(x * x) / c::<T>(2.0)).exp()
                        / c::<T>((2.0 * std::f64::consts::PI).sqrt())
                },
                torch: "torch.nn.functional.gelu",
                // The erf vectorised (`elementwise/gelu.rs`), bit for bit `f` / `df`; one pass
                // computes each erf once for f and f', so a training forward keeps f'.
                forward: gelu::erf_forward,
                backward: gelu::erf_backward,
                with_derivative: gelu::erf_forward_with_derivative,
                activation: Gelu,
            }
            /// x·sigmoid(x).
            Silu {
                name: "silu", method: silu, saved: Input, domain: Float,
                f: |x| super::unary_ops::silu_y(x, sigmoid_exp(x)),
                // d/dx xσ(x) = σ(x)(1 + x(1-σ(x)))
                df: |x| super::unary_ops::silu_dy(x, sigmoid_exp(x)),
                ref_f: |x| x * sigmoid_ref(x),
                ref_df: |x| {
                    let s = sigmoid_ref(x);
                    s + x * s * (T::ONE - s)
                },
                torch: "torch.nn.functional.silu",
                // The exp vectorised (`elementwise/silu.rs`), bit for bit `f` / `df`.
                forward: silu::forward,
                backward: silu::backward,
                activation: Silu("swish"),
            }
            /// ln(1 + eˣ) (PyTorch: beta 1, threshold 20: x > 20 gives x).
            Softplus {
                name: "softplus", method: softplus, saved: Input, domain: Float,
                f: |x| if x > c::<T>(20.0) { x } else { x.exp().ln_1p() },
                // d/dx = x > 20 ? 1 : σ(x)   (d/dx ln(1+eˣ) = eˣ/(1+eˣ))
                df: |x| if x > c::<T>(20.0) { T::ONE } else { sigmoid(x) },
                ref_f: |x| if x > c::<T>(20.0) { x } else { x.exp().ln_1p() },
                ref_df: |x| if x > c::<T>(20.0) { T::ONE } else { x.exp() / (T::ONE + x.exp()) },
                torch: "torch.nn.functional.softplus",
                activation: Softplus,
            }
            /// x·tanh(softplus(x)) (Mish).
            Mish {
                name: "mish", method: mish, saved: Input, domain: Float,
                f: |x| x * x.exp().ln_1p().tanh(),
                // With t = tanh(softplus x) and softplus'(x) = σ(x):
                // d/dx x·t = t + x·(1 − t²)·σ(x)
                df: |x| {
                    let t = x.exp().ln_1p().tanh();
                    t + x * (T::ONE - t * t) * sigmoid(x)
                },
                ref_f: |x| x * x.exp().ln_1p().tanh(),
                ref_df: |x| {
                    let sp = x.exp().ln_1p();
                    let ch = sp.cosh_ref();
                    sp.tanh() + x * sigmoid_ref(x) / (ch * ch)
                },
                torch: "torch.nn.functional.mish",
                activation: Mish,
            }
            /// x·min(max(x + 3, 0), 6)/6 (hard swish).
            Hardswish {
                name: "hardswish", method: hardswish, saved: Input, domain: Float,
                f: |x| x * (x + c::<T>(3.0)).max(T::ZERO).min(c::<T>(6.0)) / c::<T>(6.0),
                // d/dx = x < −3 ? 0 : (x ≤ 3 ? x/3 + 1/2 : 1); at the kinks PyTorch's
                // branches: −1/2 at x = −3, 3/2 at x = 3.
                df: |x| if x < c::<T>(-3.0) {
                    T::ZERO
                } else if x <= c::<T>(3.0) {
                    x / c::<T>(3.0) + c::<T>(0.5)
                } else {
                    T::ONE
                },
                ref_f: |x| x * (x + c::<T>(3.0)).max(T::ZERO).min(c::<T>(6.0)) / c::<T>(6.0),
                ref_df: |x| if x < c::<T>(-3.0) {
                    T::ZERO
                } else if x > c::<T>(3.0) {
                    T::ONE
                } else {
                    (c::<T>(2.0) * x + c::<T>(3.0)) / c::<T>(6.0)
                },
                torch: "torch.nn.functional.hardswish",
                activation: Hardswish,
            }
            /// ln σ(x) = −softplus(−x), computed stably as min(x, 0) − ln(1 + e^{−|x|}).
            LogSigmoid {
                name: "logsigmoid", method: logsigmoid, saved: Input, domain: Float,
                f: |x| x.min(T::ZERO) - (-x.abs()).exp().ln_1p(),
                // d/dx ln σ(x) = σ'(x)/σ(x) = 1 − σ(x) = σ(−x)
                df: |x| sigmoid(-x),
                ref_f: |x| if x < T::ZERO {
                    x - x.exp().ln_1p()
                } else {
                    T::ZERO - (-x).exp().ln_1p()
                },
                ref_df: |x| T::ONE / (T::ONE + x.exp()),
                torch: "torch.nn.functional.logsigmoid",
            }
            /// x².
            Square {
                name: "square", method: square, saved: Input, domain: Float,
                f: |x| x * x,
                // d/dx x² = 2x
                df: |x| x + x,
                ref_f: |x| x * x,
                ref_df: |x| c::<T>(2.0) * x,
                torch: "torch.square",
            }
            /// 1/x.
            Recip {
                name: "recip", method: recip, saved: Output, domain: Range(0.5, 2.0),
                f: |x| T::ONE / x,
                // d/dx 1/x = -1/x² = -y²
                df: |y| -(y * y),
                ref_f: |x| T::ONE / x,
                ref_df: |x| -T::ONE / (x * x),
                torch: "torch.reciprocal",
            }
            /// sign(x) ∈ {-1, 0, 1}; ±0 and NaN map to themselves (zero gradient, as PyTorch).
            Sign {
                name: "sign", method: sign, saved: Input, domain: NonZero,
                f: |x| sign(x),
                // sign is piecewise constant: zero gradient everywhere (as PyTorch).
                df: |_| T::ZERO,
                ref_f: |x| sign(x),
                ref_df: |_| T::ZERO,
                torch: "torch.sign",
            }
            /// x + s.
            AddScalar(s: f64 = 0.5) {
                name: "add_scalar", method: add_scalar, saved: Nothing, domain: Float,
                f: |x| x + s,
                // d/dx (x + s) = 1
                df: |_| T::ONE,
                ref_f: |x| x + c::<T>(s),
                ref_df: |_| T::ONE,
                torch: "torch.add",
            }
            /// x · s.
            MulScalar(s: f64 = -1.5) {
                name: "mul_scalar", method: mul_scalar, saved: Nothing, domain: Float,
                f: |x| x * s,
                // d/dx (s·x) = s
                df: |_| s,
                ref_f: |x| x * c::<T>(s),
                ref_df: |_| c::<T>(s),
                torch: "torch.mul",
            }
            /// xᵖ for a scalar exponent.
            PowScalar(p: f64 = 2.5) {
                name: "pow_scalar", method: pow_scalar, saved: Input, domain: Range(0.5, 2.0),
                f: |x| x.powf(p),
                // d/dx xᵖ = p·x^(p-1); exactly 0 when p == 0 (as PyTorch).
                df: |x| if p == T::ZERO { T::ZERO } else { p * x.powf(p - T::ONE) },
                ref_f: |x| if p == 2.0 { x * x } else { x.powf(c::<T>(p)) },
                ref_df: |x| if p == 0.0 {
                    T::ZERO
                } else {
                    c::<T>(p) * x.powf(c::<T>(p - 1.0))
                },
                torch: "torch.pow",
                // x² is common (norms, losses): x·x is exact and far cheaper than powf.
                special: p == 2.0 => Square,
            }
            /// s − x.
            RSubScalar(s: f64 = 0.5) {
                name: "rsub_scalar", method: rsub_scalar, saved: Nothing, domain: Float,
                f: |x| s - x,
                // d/dx (s - x) = -1
                df: |_| -T::ONE,
                ref_f: |x| c::<T>(s) - x,
                ref_df: |_| -T::ONE,
                torch: "torch.sub",
            }
            /// s / x.
            RDivScalar(s: f64 = 2.0) {
                name: "rdiv_scalar", method: rdiv_scalar, saved: Input, domain: Range(0.5, 2.0),
                f: |x| s / x,
                // d/dx (s/x) = -s/x²
                df: |x| -s / (x * x),
                ref_f: |x| c::<T>(s) / x,
                ref_df: |x| -c::<T>(s) / (x * x),
                torch: "torch.div",
            }
            /// min(max(x, lo), hi); the gradient passes where lo ≤ x ≤ hi (inclusive,
            /// as PyTorch). NaN passes through.
            Clamp(lo: f64 = -1.0, hi: f64 = 1.0) {
                name: "clamp", method: clamp, saved: Input, domain: Float,
                // NaN passes through (both comparisons are false).
                f: |x| if x < lo {
                    lo
                } else if x > hi {
                    hi
                } else {
                    x
                },
                // d/dx = lo <= x <= hi ? 1 : 0 (inclusive bounds, as PyTorch).
                df: |x| if x >= lo && x <= hi { T::ONE } else { T::ZERO },
                ref_f: |x| if x.is_nan() { x } else { x.max(c::<T>(lo)).min(c::<T>(hi)) },
                ref_df: |x| if x >= c::<T>(lo) && x <= c::<T>(hi) { T::ONE } else { T::ZERO },
                torch: "torch.clamp",
            }
        }
    };
    (@parse $cb:ident; $(
        $(#[doc = $doc:literal])*
        $V:ident $( ( $($p:ident : $pt:ty = $a:expr),+ ) )? {
            name: $name:literal, method: $method:ident, saved: $saved:ident,
            domain: $dom:ident $( ( $($dv:expr),+ ) )?,
            f: |$x:ident| $f:expr,
            df: |$s:pat_param| $df:expr,
            ref_f: |$rx:ident| $rf:expr,
            ref_df: |$rdx:pat_param| $rdf:expr,
            torch: $torch:literal,
            $( special: $cond:expr => $K:expr, )?
            $( forward: $($fwd:ident)::+, )?
            $( backward: $($bwd:ident)::+, )?
            $( with_derivative: $($wd:ident)::+, )?
            $( activation: $Act:ident $( ( $($alias:literal),+ ) )?, )?
        }
    )*) => {
        $cb! { $( {
            [$(#[doc = $doc])*] $V [$( ( $($p: $pt = $a),+ ) )?]
            $name $method $saved [$crate::kernels::elementwise::Domain::$dom $( ( $($dv),+ ) )?]
            [|$x| $f] [|$s| $df] [|$rx| $rf] [|$rdx| $rdf] $torch
            [$( $cond => $K )?] [$( $($fwd)::+ )?] [$( $($bwd)::+ )?] [$( $($wd)::+ )?]
            [$( $Act $( ( $($alias),+ ) )? )?]
        } )* }
    };
}
