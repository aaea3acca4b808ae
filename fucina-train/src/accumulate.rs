//! Gradient accumulation: K micro-batches whose gradients sum into the
//! leaves as one batch of K times the size would give.
//!
//! For a loss that is a mean over equal-sized micro-batches,
//! `L = (1/K) Σₖ Lₖ`, so `∂L/∂θ = Σₖ ∂(Lₖ/K)/∂θ`: each micro-batch's loss is
//! scaled by `1/K` and backpropagated; the leaves' gradients add up
//! (backward accumulates, as PyTorch's does) and the optimizer steps once.
//! By hand it is three lines:
//!
//! ```text
//! for k in 0..K { let loss = model_loss(k)?; loss.div_scalar(K as f64)?.backward()?; }
//! opt.step()?;
//! opt.zero_grad();
//! ```

use fucina_autograd::Tensor;

use crate::error::{Error, Result};

/// Runs `micro(k)` for `k in 0..steps`, backpropagating each returned loss
/// divided by `steps`; returns the mean of the losses (the full batch's
/// loss). The caller zeroes the gradients before and steps after.
///
/// ```
/// use fucina_autograd::Tensor;
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let w = Tensor::variable(&ctx, &[2.0f64], &[1])?;
/// let xs = [1.0f64, 3.0];
/// let loss = fucina_train::accumulate_gradients(2, |k| {
///     let x = Tensor::constant(&ctx, &[xs[k]], &[1])?;
///     Ok(w.mul(&x)?.sum_all()?)
/// })?;
/// assert_eq!(loss, 4.0); // (2·1 + 2·3) / 2
/// assert_eq!(w.grad().unwrap().to_vec::<f64>()?, [2.0]); // (1 + 3) / 2
/// # Ok::<(), fucina_train::Error>(())
/// ```
pub fn accumulate_gradients(
    steps: usize,
    mut micro: impl FnMut(usize) -> Result<Tensor>,
) -> Result<f64> {
    if steps == 0 {
        return Err(Error::config(
            "accumulate_gradients",
            "steps must be positive",
        ));
    }
    let scale = 1.0 / steps as f64;
    let mut total = 0.0;
    for k in 0..steps {
        let loss = micro(k)?;
        if loss.numel() != 1 {
            return Err(Error::config(
                "accumulate_gradients",
                format!(
                    "micro-batch {k}'s loss has shape {:?}, not a scalar",
                    loss.shape()
                ),
            ));
        }
        total += loss.to_vec_f64()?[0];
        loss.div_scalar(steps as f64)?.backward()?;
    }
    Ok(total * scale)
}
