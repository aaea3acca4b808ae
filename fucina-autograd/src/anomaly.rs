//! Anomaly mode, as `torch.autograd.detect_anomaly`: while an
//! [`AnomalyGuard`] lives on the thread that runs backward, the engine checks
//! every gradient each backward node produces, and the first NaN or infinity
//! is [`Error::Anomaly`], naming the node's op (the forward op that recorded
//! it), its tape position and the input whose gradient went bad. Leaf
//! gradients are left as they were (backward is all-or-nothing).
//!
//! Off by default: the check reads every gradient element once. The flag is a
//! thread-local depth (guards nest), like grad mode.
//!
//! [`all_finite`] is the same test as a function, for skipping an optimizer
//! step whose gradients are not finite (`fucina_optim::grads_are_finite`).

use std::cell::Cell;

use fucina_core::{DType, ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::grad_mode::DepthGuard;

thread_local! {
    static ANOMALY_DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// True while an [`AnomalyGuard`] is alive on this thread.
#[inline]
pub fn is_anomaly_enabled() -> bool {
    ANOMALY_DEPTH.with(|d| d.get() > 0)
}

/// Turns anomaly detection on for this thread until dropped (nests).
///
/// ```
/// use fucina_autograd::{detect_anomaly, Error, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let x = Tensor::variable(&ctx, &[-1.0f64, 4.0], &[2]).unwrap();
/// let loss = x.sqrt().unwrap().sum_all().unwrap(); // sqrt(-1) = NaN
/// let _anomaly = detect_anomaly();
/// match loss.backward() {
///     Err(Error::Anomaly { op, .. }) => assert_eq!(op, "sqrt"),
///     other => panic!("expected an anomaly, got {other:?}"),
/// }
/// assert!(x.grad().is_none()); // nothing was committed
/// ```
#[must_use = "anomaly detection is on only while the guard lives"]
pub struct AnomalyGuard {
    _depth: DepthGuard,
}

/// Opens an anomaly-detection region (see [`AnomalyGuard`]).
pub fn detect_anomaly() -> AnomalyGuard {
    AnomalyGuard {
        _depth: DepthGuard::enter(&ANOMALY_DEPTH),
    }
}

/// What a non-finite element is, for messages.
fn classify(x: f64) -> Option<&'static str> {
    if x.is_nan() {
        Some("NaN")
    } else if x.is_infinite() {
        Some("infinity")
    } else {
        None
    }
}

/// The first non-finite element of `t` (`"NaN"` or `"infinity"`), if any.
/// Non-float dtypes are always finite.
fn first_non_finite(ctx: &ExecContext, t: &RawTensor) -> Result<Option<&'static str>> {
    let c = ctx.contiguous(t)?;
    Ok(match c.dtype() {
        DType::F32 => c
            .as_slice::<f32>()?
            .iter()
            .find_map(|&x| classify(x as f64)),
        DType::F64 => c.as_slice::<f64>()?.iter().find_map(|&x| classify(x)),
        _ => None,
    })
}

/// True when every element of `t` is finite (no NaN, no infinity); non-float
/// dtypes are always finite.
///
/// ```
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let ok = ctx.from_slice(&[1.0f32, 2.0], &[2]).unwrap();
/// let bad = ctx.from_slice(&[1.0f32, f32::NAN], &[2]).unwrap();
/// assert!(fucina_autograd::all_finite(&ctx, &ok).unwrap());
/// assert!(!fucina_autograd::all_finite(&ctx, &bad).unwrap());
/// ```
pub fn all_finite(ctx: &ExecContext, t: &RawTensor) -> Result<bool> {
    Ok(first_non_finite(ctx, t)?.is_none())
}

/// Anomaly check of one node's outputs (`op`, recorded `seq`-th): the first
/// non-finite gradient is an error. Takes the node's name and number rather
/// than the node, so the engine calls this module and not the other way round.
pub(crate) fn check_grads(
    ctx: &ExecContext,
    op: &'static str,
    seq: u64,
    grads: &[Option<RawTensor>],
) -> Result<()> {
    for (input, g) in grads.iter().enumerate() {
        let Some(g) = g else { continue };
        if let Some(what) = first_non_finite(ctx, g)? {
            return Err(Error::Anomaly {
                op,
                seq,
                input,
                what,
                shape: g.shape().to_vec(),
            });
        }
    }
    Ok(())
}
