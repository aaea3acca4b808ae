//! Gradient clipping: by global L2 norm over many parameters, and by value.
//!
//! The norm accumulates in f64 over fixed chunks combined in a fixed order,
//! so it is bitwise identical for any thread count. Parameters without a
//! gradient are skipped. Gradients are scaled in place when their buffer is
//! not shared, else through a fresh copy. Clipping is all or nothing: every
//! copy is made before any gradient changes, so a failed call (out of
//! memory) leaves every gradient as it was.

use fucina_autograd::Tensor;
use fucina_core::{Element, ExecContext, Float, RawTensor};

use crate::error::{Error, Result};
use crate::kernel::CHUNK;

/// Σ x² of a contiguous slice in f64: per-chunk partials summed in chunk order.
fn sum_squares<T: Float>(ctx: &ExecContext, x: &[T]) -> f64 {
    let n_chunks = x.len().div_ceil(CHUNK);
    let mut partial = vec![0.0f64; n_chunks];
    // Chunk c owns partial[c].
    ctx.par_chunks_mut(&mut partial, 1, x.len() > CHUNK, |c, slot| {
        slot[0] = x[c * CHUNK..((c + 1) * CHUNK).min(x.len())]
            .iter()
            .map(|&v| {
                let v = v.to_f64();
                v * v
            })
            .sum();
    });
    partial.iter().sum()
}

/// The global L2 norm of the gradients of `params` (f64 accumulation).
pub fn grad_norm(params: &[Tensor]) -> Result<f64> {
    let mut total = 0.0f64;
    for p in params {
        let Some(g) = p.grad_raw() else { continue };
        let g = p.ctx().contiguous(&g)?;
        total += fucina_core::dispatch_float!(g.dtype(), "grad_norm", T => {
            Ok::<f64, fucina_core::Error>(sum_squares(p.ctx(), g.as_slice::<T>()?))
        })?;
    }
    Ok(total.sqrt())
}

/// True when every gradient of `params` is finite (no NaN, no infinity);
/// parameters without a gradient count as finite. Use it (or
/// [`crate::Optimizer::step_if_finite`]) to skip an update after a step whose
/// loss or gradients overflowed, as PyTorch's `GradScaler` skips one.
///
/// ```
/// use fucina_autograd::Tensor;
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let a = Tensor::variable(&ctx, &[0.0f32; 2], &[2])?;
/// a.set_grad(Some(ctx.from_slice(&[3.0f32, 4.0], &[2])?))?;
/// assert!(fucina_optim::grads_are_finite(&[a.clone()])?);
/// a.set_grad(Some(ctx.from_slice(&[3.0f32, f32::INFINITY], &[2])?))?;
/// assert!(!fucina_optim::grads_are_finite(&[a])?);
/// # Ok::<(), fucina_optim::Error>(())
/// ```
pub fn grads_are_finite(params: &[Tensor]) -> Result<bool> {
    for p in params {
        let Some(g) = p.grad_raw() else { continue };
        if !fucina_autograd::all_finite(p.ctx(), &g)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Phase 1 of a gradient rewrite: for each parameter of `params` with a
/// gradient, its index and a private copy when the gradient's buffer is
/// shared with another view or strided (else `None`: it is rewritten in
/// place). Checks the dtypes and allocates the copies; changes nothing.
fn prepare_grads(params: &[Tensor]) -> Result<Vec<(usize, Option<RawTensor>)>> {
    let mut out = Vec::with_capacity(params.len());
    for (i, p) in params.iter().enumerate() {
        let Some(g) = p.grad_raw() else { continue };
        if !g.dtype().is_compute_float() {
            return Err(Error::Core(fucina_core::Error::UnsupportedDType {
                op: "clip_grad",
                dtype: g.dtype(),
            }));
        }
        if p.is_released() {
            return Err(fucina_autograd::Error::TensorReleased.into());
        }
        // The slot holds one reference and `g` another: more is a view elsewhere.
        let copy = if g.buffer().ref_count() > 2 || !g.is_contiguous() {
            Some(p.ctx().copy(&g)?)
        } else {
            None
        };
        out.push((i, copy));
    }
    Ok(out)
}

/// Phase 2: applies `f(i)` to the elements of each prepared gradient, in
/// place (the copies were made in phase 1, so nothing here allocates).
fn rewrite_grads<F: Fn(f64) -> f64 + Sync + Send + Copy>(
    params: &[Tensor],
    prepared: Vec<(usize, Option<RawTensor>)>,
    f: impl Fn(usize) -> F,
) -> Result<()> {
    for (i, copy) in prepared {
        let p = &params[i];
        let mut g = match copy {
            Some(c) => c,
            None => {
                let Some(g) = p.grad_raw() else { continue };
                // Dropping the slot's reference makes `g` the only one.
                p.set_grad(None)?;
                g
            }
        };
        let ctx = p.ctx().clone();
        let fi = f(i);
        let r = fucina_core::dispatch_float!(g.dtype(), "clip_grad", T => {
            let s = g.as_mut_slice::<T>()?;
            let n = s.len();
            ctx.par_chunks_mut(s, CHUNK, n > CHUNK, |_, d| {
                for v in d {
                    *v = T::from_f64(fi(v.to_f64()));
                }
            });
            Ok::<(), fucina_core::Error>(())
        });
        p.set_grad(Some(g))?;
        r?;
    }
    Ok(())
}

/// Scales all gradients so that their global L2 norm is at most `max_norm`,
/// and returns the norm **before** clipping (PyTorch's `clip_grad_norm_`).
///
/// `total = √(Σ‖g‖²)` over every parameter (f64); when `total > max_norm`
/// each gradient is multiplied by `max_norm / (total + 1e-6)`, in its own
/// dtype. A non-finite total is returned without touching the gradients
/// (skip that step). Order in a step: backward → clip → step → zero_grad.
///
/// ```
/// use fucina_autograd::Tensor;
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let a = Tensor::variable(&ctx, &[0.0f32; 2], &[2])?;
/// a.set_grad(Some(ctx.from_slice(&[3.0f32, 4.0], &[2])?))?;
/// let norm = fucina_optim::clip_grad_norm(&[a.clone()], 1.0)?;
/// assert_eq!(norm, 5.0);
/// let g = a.grad().unwrap().to_vec::<f32>()?;
/// assert!((g[0] - 0.6).abs() < 1e-6 && (g[1] - 0.8).abs() < 1e-6);
/// # Ok::<(), fucina_optim::Error>(())
/// ```
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64) -> Result<f64> {
    if !(max_norm.is_finite() && max_norm >= 0.0) {
        return Err(Error::config(
            "clip_grad_norm",
            format!("max_norm {max_norm} must be finite and ≥ 0"),
        ));
    }
    let total = grad_norm(params)?;
    if total.is_finite() && total > max_norm {
        let coef = max_norm / (total + 1e-6);
        // All or nothing: every copy a shared gradient needs is made before
        // any gradient is scaled.
        let prepared = prepare_grads(params)?;
        rewrite_grads(params, prepared, |i| {
            // f32 gradients scale by the f32-rounded coefficient, as in PyTorch.
            let c = if params[i].dtype() == fucina_core::DType::F32 {
                coef as f32 as f64
            } else {
                coef
            };
            move |g| g * c
        })?;
    }
    Ok(total)
}

/// Clamps every gradient element into `[-clip, clip]` (PyTorch's `clip_grad_value_`).
///
/// ```
/// use fucina_autograd::Tensor;
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let a = Tensor::variable(&ctx, &[0.0f64; 3], &[3])?;
/// a.set_grad(Some(ctx.from_slice(&[-3.0f64, 0.5, 9.0], &[3])?))?;
/// fucina_optim::clip_grad_value(&[a.clone()], 1.0)?;
/// assert_eq!(a.grad().unwrap().to_vec::<f64>()?, vec![-1.0, 0.5, 1.0]);
/// # Ok::<(), fucina_optim::Error>(())
/// ```
pub fn clip_grad_value(params: &[Tensor], clip: f64) -> Result<()> {
    if !(clip.is_finite() && clip >= 0.0) {
        return Err(Error::config(
            "clip_grad_value",
            format!("clip {clip} must be finite and ≥ 0"),
        ));
    }
    let prepared = prepare_grads(params)?;
    rewrite_grads(params, prepared, |_| {
        move |g: f64| if g.is_nan() { g } else { g.clamp(-clip, clip) }
    })
}
