//! The `tiny` and `mlp` training workloads of `reference/torch_workloads.py`,
//! reproduced exactly: same layers, PyTorch `nn.Linear` init (kaiming-uniform,
//! bound 1/√fan_in for weights and biases), same batch, AdamW(lr 1e-3,
//! weight decay 0.01), and the same step: zero_grad + forward + cross-entropy
//! + backward + optimizer step, with one exec scope per step.
//!
//! - tiny: 2 → 64 → 64 → 3, tanh, batch 64 (overhead-bound);
//! - mlp: 784 → 512 → 512 → 10, ReLU, batch 128.
//!
//! Inputs are N(0, 1) and labels uniform from a seeded SplitMix64 (torch's
//! generator differs; shapes and distributions are the same).

use fucina_autograd::{CrossEntropyOpts, ScopeExt, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::ExecContext;
use fucina_optim::{AdamConfig, AdamW, Optimizer, Result};

/// Activation between the linear layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// `nn.Tanh`.
    Tanh,
    /// `nn.ReLU`.
    Relu,
}

/// An MLP train step with its data and AdamW optimizer.
pub struct MlpTrain {
    ctx: ExecContext,
    layers: Vec<(Tensor, Tensor)>,
    act: Act,
    x: Tensor,
    y: Tensor,
    opt: AdamW,
    /// The loss of the last step.
    pub last_loss: f64,
}

impl MlpTrain {
    /// An MLP with layer widths `dims` (input first), `batch` rows, `classes = dims.last()`.
    pub fn new(
        ctx: &ExecContext,
        dims: &[usize],
        act: Act,
        batch: usize,
        seed: u64,
    ) -> Result<MlpTrain> {
        let mut rng = SplitMix64::new(seed);
        let mut layers = Vec::new();
        for w in dims.windows(2) {
            let (fan_in, fan_out) = (w[0], w[1]);
            let bound = 1.0 / (fan_in as f64).sqrt();
            let wv: Vec<f32> = rng
                .vec_uniform(fan_in * fan_out, -bound, bound)
                .iter()
                .map(|&v| v as f32)
                .collect();
            let bv: Vec<f32> = rng
                .vec_uniform(fan_out, -bound, bound)
                .iter()
                .map(|&v| v as f32)
                .collect();
            layers.push((
                Tensor::variable(ctx, &wv, &[fan_out, fan_in])?,
                Tensor::variable(ctx, &bv, &[fan_out])?,
            ));
        }
        let d_in = dims[0];
        let classes = *dims.last().unwrap_or(&1);
        let xv: Vec<f32> = (0..batch * d_in)
            .map(|_| rng.next_normal() as f32)
            .collect();
        let yv: Vec<i64> = (0..batch)
            .map(|_| rng.below(classes as u64) as i64)
            .collect();
        let params: Vec<Tensor> = layers
            .iter()
            .flat_map(|(w, b)| [w.clone(), b.clone()])
            .collect();
        let opt = AdamW::single(params, AdamConfig::adamw(1e-3))?;
        Ok(MlpTrain {
            ctx: ctx.clone(),
            layers,
            act,
            x: Tensor::constant(ctx, &xv, &[batch, d_in])?,
            y: Tensor::constant(ctx, &yv, &[batch])?,
            opt,
            last_loss: f64::NAN,
        })
    }

    /// `tiny`: 2 → 64 → 64 → 3, tanh, batch 64.
    pub fn tiny(ctx: &ExecContext) -> Result<MlpTrain> {
        Self::new(ctx, &[2, 64, 64, 3], Act::Tanh, 64, 0)
    }

    /// `mlp`: 784 → 512 → 512 → 10, ReLU, batch 128.
    pub fn mlp(ctx: &ExecContext) -> Result<MlpTrain> {
        Self::new(ctx, &[784, 512, 512, 10], Act::Relu, 128, 0)
    }

    /// One step: zero_grad + forward + loss + backward + AdamW step.
    pub fn train_step(&mut self) -> Result<()> {
        self.opt.zero_grad();
        {
            let _scope = self.ctx.scope();
            let mut h = self.x.clone();
            for (i, (w, b)) in self.layers.iter().enumerate() {
                h = h.linear(w, Some(b))?;
                if i + 1 < self.layers.len() {
                    h = match self.act {
                        Act::Tanh => h.tanh()?,
                        Act::Relu => h.relu()?,
                    };
                }
            }
            let loss = h.cross_entropy(&self.y, CrossEntropyOpts::default())?;
            loss.backward()?;
            self.last_loss = loss.item()?;
        }
        self.opt.step()
    }
}

impl crate::Workload for MlpTrain {
    fn step(&mut self) -> fucina_core::Result<()> {
        self.train_step().map_err(core_error)
    }
}

/// An optimizer/autograd error as the bench's core error.
pub fn core_error(e: fucina_optim::Error) -> fucina_core::Error {
    match e {
        fucina_optim::Error::Core(e)
        | fucina_optim::Error::Autograd(fucina_autograd::Error::Core(e)) => e,
        other => fucina_core::Error::InvalidArgument {
            op: "train step",
            msg: other.to_string(),
        },
    }
}
