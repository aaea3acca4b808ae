//! The `tiny` and `mlp` training workloads of `reference/torch_workloads.py`,
//! reproduced exactly on fucina-nn's [`Mlp`]: same layers, PyTorch's
//! `nn.Linear` init (kaiming-uniform, bound 1/√fan_in for weights and biases,
//! which is `Mlp::new`'s), same batch, AdamW(lr 1e-3, weight decay 0.01), and the
//! same step (see [`super::train`]).
//!
//! - tiny: 2 → 64 → 64 → 3, tanh, batch 64 (overhead-bound);
//! - mlp: 784 → 512 → 512 → 10, ReLU, batch 128.
//!
//! Inputs are N(0, 1) and labels uniform from a seeded SplitMix64 (torch's
//! generator differs; shapes and distributions are the same).

use fucina::Result;
use fucina_autograd::{CrossEntropyOpts, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext};
use fucina_nn::{Activation, Init, Mlp, Module};
use fucina_optim::AdamW;

use super::train::{adamw, train_step};

/// An MLP train step with its data and AdamW optimizer.
pub struct MlpTrain {
    ctx: ExecContext,
    /// The model.
    pub model: Mlp,
    x: Tensor,
    y: Tensor,
    opt: AdamW,
    /// The loss of the last step.
    pub last_loss: f64,
}

impl MlpTrain {
    /// An MLP with layer widths `dims` (input first), `batch` rows, `classes = dims.last()`;
    /// weights from `Init` seed `seed`, data from SplitMix64 seed `seed`.
    pub fn new(
        ctx: &ExecContext,
        dims: &[usize],
        act: Activation,
        batch: usize,
        seed: u64,
    ) -> Result<MlpTrain> {
        let model = Mlp::new(&mut Init::new(ctx, DType::F32, seed), dims, act)?;
        let mut rng = SplitMix64::new(seed);
        let d_in = dims[0];
        let classes = dims.last().copied().unwrap_or(1).max(1);
        let xv: Vec<f32> = (0..batch * d_in)
            .map(|_| rng.next_normal() as f32)
            .collect();
        let yv: Vec<i64> = (0..batch)
            .map(|_| rng.below(classes as u64) as i64)
            .collect();
        let opt = adamw(model.parameters(), 1e-3, 0.01)?;
        Ok(MlpTrain {
            ctx: ctx.clone(),
            model,
            x: Tensor::constant(ctx, &xv, &[batch, d_in])?,
            y: Tensor::constant(ctx, &yv, &[batch])?,
            opt,
            last_loss: f64::NAN,
        })
    }

    /// `tiny`: 2 → 64 → 64 → 3, tanh, batch 64.
    pub fn tiny(ctx: &ExecContext) -> Result<MlpTrain> {
        Self::new(ctx, &[2, 64, 64, 3], Activation::Tanh, 64, 0)
    }

    /// `mlp`: 784 → 512 → 512 → 10, ReLU, batch 128.
    pub fn mlp(ctx: &ExecContext) -> Result<MlpTrain> {
        Self::new(ctx, &[784, 512, 512, 10], Activation::Relu, 128, 0)
    }

    /// One step: zero_grad + forward + cross-entropy + backward + AdamW step.
    pub fn train_step(&mut self) -> Result<()> {
        let (model, x, y) = (&self.model, &self.x, &self.y);
        self.last_loss = train_step(&self.ctx, &mut self.opt, || {
            Ok(model
                .forward(x)?
                .cross_entropy(y, CrossEntropyOpts::default())?)
        })?;
        Ok(())
    }
}

impl crate::Workload for MlpTrain {
    fn step(&mut self) -> Result<()> {
        self.train_step()
    }
}
