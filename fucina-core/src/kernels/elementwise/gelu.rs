//! The two GELU forms, forward and backward, with their transcendentals vectorised:
//! contiguous runs are cut into blocks of [`BLOCK`]; each block's erf goes through
//! `kernels::simd::erf_in_place` (AVX2, bitwise `libm::erf`) and each block's exp through
//! [`ExpSlice`] (f32: `kernels::simd::exp_f32_in_place`, bitwise `f32::exp`). The rest of each
//! formula is the op table's own helpers (`unary_ops.rs`: `gelu_erf_*`, `gelu_tanh_*`,
//! `sigmoid_*`), which the table's `f` / `df` are written with, so every output is bit for
//! bit the table kernel's `f(x)` / `gy·df(x)`; strided runs use `f` / `df` per element.
//!
//! Each element is computed on its own in the map engine's fixed chunks, so results never
//! depend on the thread count. The block machinery (`BLOCK`, `ExpSlice`, `sigmoid_block`,
//! `backward_row`) also serves SiLU (`elementwise/silu.rs`).

use super::pointwise::{GeluErf, GeluTanh, Pointwise};
use super::unary_ops::{
    gelu_erf_arg, gelu_erf_dy, gelu_erf_pdf_arg, gelu_erf_y, gelu_tanh_a, gelu_tanh_da,
    gelu_tanh_dy, gelu_tanh_y, sigmoid_exp_arg,
};
use crate::dtype::Float;
use crate::error::Result;
use crate::exec::ExecContext;
use crate::kernels::map::{map1_runs, map2_runs, Plan, CHUNK, PAR_THRESHOLD};
use crate::kernels::simd::{erf_in_place, exp_f32_in_place};
use crate::tensor::RawTensor;

/// Elements per block (stack buffers).
pub(super) const BLOCK: usize = 256;

/// `e^x` over a slice, bit for bit `Float::exp` per element.
pub(super) trait ExpSlice: Float {
    /// `x[i] = e^x[i]`.
    fn exp_in_place(x: &mut [Self]);
}

impl ExpSlice for f32 {
    #[inline]
    fn exp_in_place(x: &mut [f32]) {
        exp_f32_in_place(x);
    }
}

impl ExpSlice for f64 {
    #[inline]
    fn exp_in_place(x: &mut [f64]) {
        for v in x {
            *v = v.exp();
        }
    }
}

/// `e[i] = erf(x[i]/√2)` as `Float::erf` computes it (argument rounded to `T`, widened to
/// f64, result rounded back); `e.len() == x.len() ≤ BLOCK`.
#[inline]
fn erf_block<T: Float>(x: &[T], e: &mut [T]) {
    let mut buf = [0.0f64; BLOCK];
    let b = &mut buf[..x.len()];
    for (b, &v) in b.iter_mut().zip(x) {
        *b = gelu_erf_arg(v).to_f64();
    }
    erf_in_place(b);
    for (e, &b) in e.iter_mut().zip(b.iter()) {
        *e = T::from_f64(b);
    }
}

/// For one block `xc`: `e` = its erfs (as [`erf_block`]) and `g` = `exp` of its
/// `gelu_erf_pdf_arg`s (the erf GELU's derivative needs both).
#[inline(always)]
fn erf_pdf_block<T: ExpSlice>(xc: &[T], e: &mut [T], g: &mut [T]) {
    erf_block(xc, e);
    for (g, &v) in g.iter_mut().zip(xc) {
        *g = gelu_erf_pdf_arg(v);
    }
    T::exp_in_place(g);
}

/// For one block `xc`: `a = arg(x)` (the tanh GELU's sigmoid argument, or its backward's)
/// and `e = exp(sigmoid_exp_arg(a))`.
#[inline(always)]
pub(super) fn sigmoid_block<T: ExpSlice>(xc: &[T], a: &mut [T], e: &mut [T], arg: impl Fn(T) -> T) {
    for ((a, e), &v) in a.iter_mut().zip(e.iter_mut()).zip(xc) {
        *a = arg(v);
        *e = sigmoid_exp_arg(*a);
    }
    T::exp_in_place(e);
}

/// `y[i] = gelu_erf(x[i])` over one contiguous run.
fn erf_forward_row<T: Float>(x: &[T], y: &mut [T]) {
    let mut e = [T::ZERO; BLOCK];
    for (xc, yc) in x.chunks(BLOCK).zip(y.chunks_mut(BLOCK)) {
        let e = &mut e[..xc.len()];
        erf_block(xc, e);
        for ((o, &v), &e) in yc.iter_mut().zip(xc).zip(e.iter()) {
            *o = gelu_erf_y(v, e);
        }
    }
}

/// The erf/tanh fast paths' blocked row loop over `x` and two operand runs `p`, `q` (each
/// given as its `BLOCK`-sized chunks): `block(xc, a, b)` fills the two scratch blocks of
/// each block `xc` of `x` (the variant's block step), then `each(x[i], a[i], b[i], p[i],
/// q[i])` runs per element. Inlined, so each caller's loop stays its own.
#[inline(always)]
fn blocked_row<T: Float, P: IntoIterator, Q: IntoIterator>(
    x: &[T],
    p: impl Iterator<Item = P>,
    q: impl Iterator<Item = Q>,
    block: impl Fn(&[T], &mut [T], &mut [T]),
    each: impl Fn(T, T, T, P::Item, Q::Item),
) {
    let (mut a, mut b) = ([T::ZERO; BLOCK], [T::ZERO; BLOCK]);
    for ((xc, pc), qc) in x.chunks(BLOCK).zip(p).zip(q) {
        let (a, b) = (&mut a[..xc.len()], &mut b[..xc.len()]);
        block(xc, a, b);
        for ((pe, qe), (&v, (&a, &b))) in pc
            .into_iter()
            .zip(qc)
            .zip(xc.iter().zip(a.iter().zip(b.iter())))
        {
            each(v, a, b, pe, qe);
        }
    }
}

/// `gx[i] = gy[i]·dy(x[i], a[i], b[i])` over one contiguous run of each, as
/// [`blocked_row`] with the variant's `block` step.
#[inline(always)]
pub(super) fn backward_row<T: Float>(
    x: &[T],
    gy: &[T],
    gx: &mut [T],
    block: impl Fn(&[T], &mut [T], &mut [T]),
    dy: impl Fn(T, T, T) -> T,
) {
    let (gc, oc) = (gy.chunks(BLOCK), gx.chunks_mut(BLOCK));
    // gx = gy · f'(x), as the generic unary backward.
    blocked_row(x, gc, oc, block, |v, a, b, &gy, o: &mut T| {
        *o = gy * dy(v, a, b)
    });
}

/// `gx[i] = gy[i]·gelu_erf'(x[i])` over one contiguous run of each.
fn erf_backward_row<T: ExpSlice>(x: &[T], gy: &[T], gx: &mut [T]) {
    backward_row(x, gy, gx, erf_pdf_block, gelu_erf_dy);
}

/// `y[i] = gelu_erf(x[i])` and `d[i] = gelu_erf'(x[i])` over one contiguous run: the erf
/// computed once for both.
fn erf_both_row<T: ExpSlice>(x: &[T], y: &mut [T], d: &mut [T]) {
    let (yc, dc) = (y.chunks_mut(BLOCK), d.chunks_mut(BLOCK));
    blocked_row(x, yc, dc, erf_pdf_block, |v, e, g, y: &mut T, d: &mut T| {
        *y = gelu_erf_y(v, e);
        *d = gelu_erf_dy(v, e, g);
    });
}

/// `y[i] = gelu_tanh(x[i])` over one contiguous run.
fn tanh_forward_row<T: ExpSlice>(x: &[T], y: &mut [T]) {
    let (mut a, mut e) = ([T::ZERO; BLOCK], [T::ZERO; BLOCK]);
    for (xc, yc) in x.chunks(BLOCK).zip(y.chunks_mut(BLOCK)) {
        let (a, e) = (&mut a[..xc.len()], &mut e[..xc.len()]);
        sigmoid_block(xc, a, e, gelu_tanh_a);
        for ((o, &v), (&a, &e)) in yc.iter_mut().zip(xc).zip(a.iter().zip(e.iter())) {
            *o = gelu_tanh_y(v, a, e);
        }
    }
}

/// `gx[i] = gy[i]·gelu_tanh'(x[i])` over one contiguous run of each.
fn tanh_backward_row<T: ExpSlice>(x: &[T], gy: &[T], gx: &mut [T]) {
    let block = |xc: &[T], a: &mut [T], e: &mut [T]| sigmoid_block(xc, a, e, gelu_tanh_da);
    backward_row(x, gy, gx, block, gelu_tanh_dy);
}

/// The `forward:` and `backward:` hooks of one GELU variant `$K` (the table's kernel
/// struct), over its row functions: `$fwd(ctx, x)` is `f(x)` as a fresh contiguous tensor
/// (`x` of any strides), `$bwd(ctx, x, gy)` is `gx = gy·f'(x)` (`x` and `gy` of one shape,
/// any strides), fresh and contiguous; strided runs go through `$K`'s own `f` and `df`.
macro_rules! gelu_hooks {
    ($name:literal, $K:ident: $fwd:ident($fwd_row:ident), $bwd:ident($bwd_row:ident)) => {
        #[doc = concat!("`", $name, "(x)` as a fresh contiguous tensor; `x` may have any strides.")]
        pub(super) fn $fwd<T: ExpSlice>(ctx: &ExecContext, x: &RawTensor) -> Result<RawTensor> {
            map1_runs::<T, T>(ctx, x, $fwd_row::<T>, |v| $K.f(v))
        }

        #[doc = concat!("`gx = gy·", $name, "'(x)` (`x` and `gy` of one shape, any strides), fresh and contiguous.")]
        pub(super) fn $bwd<T: ExpSlice>(
            ctx: &ExecContext,
            x: &RawTensor,
            gy: &RawTensor,
        ) -> Result<RawTensor> {
            map2_runs::<T, T, T>(ctx, x, gy, $bwd_row::<T>, |v, g| g * $K.df(v))
        }
    };
}
gelu_hooks!("gelu_erf", GeluErf: erf_forward(erf_forward_row), erf_backward(erf_backward_row));
gelu_hooks!("gelu_tanh", GeluTanh: tanh_forward(tanh_forward_row), tanh_backward(tanh_backward_row));

/// `(gelu_erf(x), gelu_erf'(x))` as fresh contiguous tensors, in one pass that computes each
/// erf once; `x` may have any strides. Bit for bit `GeluErf.f` and `GeluErf.df`.
pub(super) fn erf_forward_with_derivative<T: ExpSlice>(
    ctx: &ExecContext,
    x: &RawTensor,
) -> Result<(RawTensor, RawTensor)> {
    let mut y = ctx.empty(T::DTYPE, x.shape())?;
    let mut d = ctx.empty(T::DTYPE, x.shape())?;
    let xs = x.storage::<T>()?;
    let plan = Plan::new(x.shape(), [(x.strides(), x.offset())]);
    let [si] = plan.inner_strides();
    let n = x.numel();
    let (ys, ds) = (y.as_mut_slice::<T>()?, d.as_mut_slice::<T>()?);
    ctx.par_zip_chunks_mut(
        (ys, ds),
        CHUNK,
        n.div_ceil(CHUNK),
        n >= PAR_THRESHOLD,
        |c, (yc, dc)| {
            let start = c * CHUNK;
            plan.for_rows(start, start + yc.len(), |[ox], pos, len| {
                let r = pos - start..pos - start + len;
                let (yr, dr) = (&mut yc[r.clone()], &mut dc[r]);
                if si == 1 {
                    erf_both_row(&xs[ox..ox + len], yr, dr);
                } else {
                    for (j, (y, d)) in yr.iter_mut().zip(dr.iter_mut()).enumerate() {
                        let v = xs[ox + j * si];
                        (*y, *d) = (GeluErf.f(v), GeluErf.df(v));
                    }
                }
            })
        },
    );
    Ok((y, d))
}
