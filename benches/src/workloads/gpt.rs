//! The `gpt` training workload of `reference/torch_workloads.py`, reproduced on
//! fucina-nn's [`Gpt`]: `CharGPT` (vocab 65, block 128, 4 layers, 4 heads, width
//! 256, pre-LN, GELU(tanh), causal attention, head tied to `wte`, nanoGPT's
//! N(0, 0.02) init with zero biases: [`GptConfig::default`]), a batch of 16
//! sequences of 128 token ids with next-token targets, AdamW(lr 3e-4, weight decay
//! 0.1) over every parameter, and the shared step (see [`super::train`]).
//!
//! Ids and targets are uniform in `[0, 65)` from a seeded SplitMix64 (torch's
//! generator differs; shapes and distributions are the same). That the step is the
//! same computation as torch's is checked from shared weights by
//! `benches/tests/gpt_steps.rs` (golden from `tools/gen_gpt_steps_golden.py`).

use fucina::Result;
use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_nn::{Gpt, GptConfig, Init, Module};
use fucina_optim::AdamW;

use crate::mfu::TransformerShape;

use super::train::{adamw, random_ids, train_step};

/// The workload's AdamW learning rate.
pub const LR: f64 = 3e-4;
/// The workload's AdamW (decoupled) weight decay.
pub const WEIGHT_DECAY: f64 = 0.1;
/// The workload's batch size.
pub const BATCH: usize = 16;
/// The workload's sequence length.
pub const SEQ: usize = 128;

/// A GPT train step with its data and AdamW optimizer.
pub struct GptTrain {
    ctx: ExecContext,
    /// The model.
    pub model: Gpt,
    idx: Tensor,
    tgt: Tensor,
    opt: AdamW,
    /// The loss of the last step (before its update).
    pub last_loss: f64,
}

impl GptTrain {
    /// The `gpt` workload: `CharGPT` with nanoGPT's init from seed 0, batch 16 × 128.
    pub fn workload(ctx: &ExecContext) -> Result<GptTrain> {
        let cfg = GptConfig::default();
        let model = Gpt::new(&mut Init::new(ctx, DType::F32, 0), &cfg)?;
        let (idx, tgt) = random_ids(BATCH * SEQ, cfg.vocab_size);
        Self::from_parts(
            ctx,
            model,
            Tensor::constant(ctx, &idx, &[BATCH, SEQ])?,
            Tensor::constant(ctx, &tgt, &[BATCH, SEQ])?,
        )
    }

    /// The workload's step over any model and data: ids and targets `[B, T]`
    /// (I64), AdamW(lr [`LR`], weight decay [`WEIGHT_DECAY`]) over every
    /// parameter of `model` (the tied head counted once, as torch's
    /// `model.parameters()`).
    pub fn from_parts(ctx: &ExecContext, model: Gpt, idx: Tensor, tgt: Tensor) -> Result<GptTrain> {
        let opt = adamw(model.parameters(), LR, WEIGHT_DECAY)?;
        Ok(GptTrain {
            ctx: ctx.clone(),
            model,
            idx,
            tgt,
            opt,
            last_loss: f64::NAN,
        })
    }

    /// One step: zero_grad + forward + cross-entropy + backward + AdamW step;
    /// returns the loss (computed before the update).
    pub fn train_step(&mut self) -> Result<f64> {
        let (model, idx, tgt) = (&self.model, &self.idx, &self.tgt);
        self.last_loss = train_step(&self.ctx, &mut self.opt, || Ok(model.loss(idx, tgt)?))?;
        Ok(self.last_loss)
    }

    /// The loss on the workload's data with the current weights, under no-grad.
    pub fn eval_loss(&self) -> Result<f64> {
        let _ng = fucina_autograd::no_grad();
        let _scope = fucina_autograd::ScopeExt::scope(&self.ctx);
        Ok(self.model.loss(&self.idx, &self.tgt)?.item()?)
    }
}

impl crate::Workload for GptTrain {
    fn step(&mut self) -> Result<()> {
        self.train_step().map(|_| ())
    }
    fn shape(&self) -> Option<TransformerShape> {
        let c = &self.model.config;
        let blocks =
            TransformerShape::multi_head(BATCH, SEQ, c.n_layer, c.n_embd, c.n_head, 4 * c.n_embd);
        Some(TransformerShape {
            vocab: c.vocab_size,
            causal: true,
            ..blocks
        })
    }
}
