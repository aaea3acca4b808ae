//! What the training workloads share: their AdamW, the token workloads' random
//! ids, and the training step, in `torch_workloads.py`'s order: zero_grad
//! (gradients dropped, PyTorch's `set_to_none=True`) + forward + loss + backward +
//! optimizer step.
//!
//! The forward, loss and backward run inside one exec scope, which owns the step's
//! intermediates and returns them to the pool when it closes, before the optimizer
//! step; the parameters and their gradients (leaves) outlive it.

use fucina::Result;
use fucina_autograd::{ScopeExt, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::ExecContext;
use fucina_optim::{AdamConfig, AdamW, Optimizer};

/// AdamW over `params` (one group, decay on every parameter, as
/// `torch.optim.AdamW(model.parameters(), lr, weight_decay)`; PyTorch's other
/// defaults: betas (0.9, 0.999), eps 1e-8).
pub fn adamw(params: Vec<Tensor>, lr: f64, weight_decay: f64) -> Result<AdamW> {
    Ok(AdamW::single(
        params,
        AdamConfig {
            weight_decay,
            ..AdamConfig::adamw(lr)
        },
    )?)
}

/// The inputs and targets of a token workload: two draws of `n` ids below
/// `vocab` from one SplitMix64 seeded 0, inputs first.
pub fn random_ids(n: usize, vocab: usize) -> (Vec<i64>, Vec<i64>) {
    let mut rng = SplitMix64::new(0);
    let mut ids = || -> Vec<i64> { (0..n).map(|_| rng.below(vocab as u64) as i64).collect() };
    (ids(), ids())
}

/// One step: drops `opt`'s gradients, runs `loss` (forward + loss) and its
/// backward in a scope, then `opt.step()`. Returns the loss, read before the update.
pub fn train_step(
    ctx: &ExecContext,
    opt: &mut dyn Optimizer,
    loss: impl FnOnce() -> Result<Tensor>,
) -> Result<f64> {
    opt.zero_grad();
    let value = {
        let _scope = ctx.scope();
        let l = loss()?;
        l.backward()?;
        l.item()?
    };
    opt.step()?;
    Ok(value)
}
