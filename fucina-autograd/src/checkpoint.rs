//! Activation checkpointing: run a block without recording, keep only its
//! inputs' values and its output, and re-run it (recording) inside backward.
//!
//! What is guaranteed: every tensor requiring a gradient that the block reads
//! — its inputs and whatever it captures (parameters, or non-leaf tensors
//! computed outside it) — gets bitwise the gradient the plain, unchecked run
//! gives it, and one the block never reaches gets none. The forward runs the
//! block under no-grad while the tape notes each tensor requiring a gradient
//! that an op reads (`graph::discover_captured`); the checkpoint node gets an
//! edge to each input and to each captured tensor. In backward the engine
//! recomputes the block and walks the recorded subgraph in place, adding each
//! contribution to its target in the plain run's order (`tape/engine.rs`).
//!
//! Randomness replays: a layer that draws a random stream per call (dropout)
//! takes it through [`random_draw`], which records the draws of a block's
//! forward and hands the same ones back, in order, when the block is
//! recomputed — PyTorch's `preserve_rng_state`, so a checkpointed dropout
//! applies the forward's masks and its counter advances once, as in the
//! plain run.
//!
//! The block must run the same ops on the same tensors each time it is called
//! (a recompute reaching a non-leaf the forward did not is
//! [`Error::CheckpointRecomputeMismatch`]); a checkpoint inside a block that
//! is being recomputed is [`Error::NestedCheckpointRecompute`].

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use fucina_core::{ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::grad_mode::{enable_grad, no_grad};
use crate::tape::graph::{discover_captured, record, Op, Recompute, Recomputed};
use crate::tape::scope::ExecScope;
use crate::tape::tensor::Tensor;

thread_local! {
    static RECOMPUTING: Cell<bool> = const { Cell::new(false) };
    static DRAWS: RefCell<Draws> = const { RefCell::new(Draws::Off) };
}

/// What [`random_draw`] does on this thread.
enum Draws {
    /// Outside any checkpoint: draw.
    Off,
    /// In a checkpoint's forward: draw and note.
    Record(Vec<u64>),
    /// In a recompute: hand back the forward's draws in order.
    Replay(Vec<u64>, usize),
}

/// A per-call random draw (a seed or a counter) that checkpointing
/// preserves: outside a checkpoint it is `fresh()`; in a checkpoint's
/// forward `fresh()` is noted; when that block is recomputed in backward the
/// noted values come back in the same order and `fresh` is not called (so a
/// counter it advances advances once, as in the plain run). A recompute
/// asking for more draws than the forward made is
/// [`Error::CheckpointRecomputeMismatch`].
///
/// ```
/// use fucina_autograd::checkpoint::random_draw;
/// let mut counter = 0u64;
/// let k = random_draw(|| {
///     counter += 1;
///     Ok::<u64, fucina_autograd::Error>(counter - 1)
/// })
/// .unwrap();
/// assert_eq!((k, counter), (0, 1));
/// ```
pub fn random_draw<E>(
    fresh: impl FnOnce() -> std::result::Result<u64, E>,
) -> std::result::Result<u64, E>
where
    E: From<Error>,
{
    let replayed = DRAWS.with(|d| match &mut *d.borrow_mut() {
        Draws::Replay(v, i) => Some(match v.get(*i) {
            Some(&x) => {
                *i += 1;
                Ok(x)
            }
            None => Err(Error::CheckpointRecomputeMismatch),
        }),
        _ => None,
    });
    if let Some(r) = replayed {
        return r.map_err(E::from);
    }
    let x = fresh()?;
    DRAWS.with(|d| {
        if let Draws::Record(v) = &mut *d.borrow_mut() {
            v.push(x);
        }
    });
    Ok(x)
}

/// Sets this thread's draw mode for a scope; restores the previous one on
/// drop, handing back what was recorded.
struct DrawMode {
    prev: Option<Draws>,
}

impl DrawMode {
    fn set(mode: Draws) -> DrawMode {
        DrawMode {
            prev: Some(DRAWS.with(|d| std::mem::replace(&mut *d.borrow_mut(), mode))),
        }
    }

    /// Ends the scope, returning the draws it recorded; a recording scope
    /// inside another adds its draws to the outer one too.
    fn finish(mut self) -> Vec<u64> {
        let prev = self.prev.take().unwrap_or(Draws::Off);
        let mine = DRAWS.with(|d| std::mem::replace(&mut *d.borrow_mut(), prev));
        match mine {
            Draws::Record(v) => {
                DRAWS.with(|d| {
                    if let Draws::Record(outer) = &mut *d.borrow_mut() {
                        outer.extend_from_slice(&v);
                    }
                });
                v
            }
            _ => Vec::new(),
        }
    }
}

impl Drop for DrawMode {
    fn drop(&mut self) {
        if let Some(prev) = self.prev.take() {
            DRAWS.with(|d| *d.borrow_mut() = prev);
        }
    }
}

/// A checkpointable block: maps input tensors to one output tensor. `Send +
/// Sync` because the backward node that keeps it travels with the tensors.
pub type Block = Arc<dyn Fn(&[Tensor]) -> Result<Tensor> + Send + Sync>;

struct RecomputeFlag;
impl RecomputeFlag {
    fn set() -> Result<RecomputeFlag> {
        if RECOMPUTING.with(|r| r.replace(true)) {
            return Err(Error::NestedCheckpointRecompute);
        }
        Ok(RecomputeFlag)
    }
}
impl Drop for RecomputeFlag {
    fn drop(&mut self) {
        RECOMPUTING.with(|r| r.set(false));
    }
}

/// Re-runs the block, recording, over fresh leaves holding the saved input
/// values. The engine backpropagates gy through the recorded subgraph:
/// gx_i = ∂(gy · block(x))/∂x_i for each input, and likewise for each tensor
/// the block captured, each delivered where the plain run would deliver it.
struct CheckpointBackward {
    block: Block,
    inputs: Vec<RawTensor>,
    /// The forward's [`random_draw`]s, replayed by the recompute.
    draws: Vec<u64>,
}

impl Recompute for CheckpointBackward {
    fn recompute(&self, ctx: &ExecContext, needs: &[bool]) -> Result<Recomputed> {
        let scope = ExecScope::open();
        let inputs: Vec<Tensor> = self
            .inputs
            .iter()
            .enumerate()
            .map(|(i, x)| Tensor::from_raw(ctx, x.clone(), needs.get(i).copied().unwrap_or(false)))
            .collect::<Result<_>>()?;
        let output = {
            let _flag = RecomputeFlag::set()?;
            let _grad = enable_grad();
            let _draws = DrawMode::set(Draws::Replay(self.draws.clone(), 0));
            (self.block)(&inputs)?
        };
        Ok(Recomputed {
            inputs,
            output,
            _scope: scope,
        })
    }
}

/// Runs `block(inputs)` without keeping its intermediates; backward recomputes them.
///
/// Every tensor requiring a gradient that the block reads gets bitwise the
/// gradient of the plain run `block(inputs)`: the inputs, and tensors the
/// block captures (a layer's parameters, or an intermediate computed outside
/// the block), which become inputs of the checkpoint node. A tensor the block
/// reads only under its own `no_grad` gets no gradient, as in the plain run.
/// The block must run the same ops on the same tensors every time it is called.
///
/// ```
/// use std::sync::Arc;
/// use fucina_autograd::{checkpoint, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let x = Tensor::variable(&ctx, &[0.5f64, 1.0], &[2]).unwrap();
/// let w = Tensor::variable(&ctx, &[2.0f64, -1.0], &[2]).unwrap();
/// let wc = w.clone(); // captured: it gets its gradient too
/// let y = checkpoint(Arc::new(move |xs: &[Tensor]| xs[0].mul(&wc)?.tanh()), &[&x]).unwrap();
/// y.sum_all().unwrap().backward().unwrap();
/// assert!(x.grad().is_some() && w.grad().is_some());
/// ```
pub fn checkpoint(block: Block, inputs: &[&Tensor]) -> Result<Tensor> {
    if RECOMPUTING.with(|r| r.get()) {
        return Err(Error::NestedCheckpointRecompute);
    }
    let ctx = match inputs.first() {
        Some(t) => t.ctx().clone(),
        None => {
            return Err(fucina_core::Error::InvalidArgument {
                op: "checkpoint",
                msg: "no inputs".into(),
            }
            .into())
        }
    };
    let values: Vec<RawTensor> = inputs.iter().map(|t| t.raw()).collect::<Result<_>>()?;
    let (out_value, captured, draws) = {
        let _ng = no_grad();
        let _scope = ExecScope::open();
        let consts: Vec<Tensor> = values
            .iter()
            .map(|v| Tensor::leaf(&ctx, v.clone()))
            .collect();
        let mode = DrawMode::set(Draws::Record(Vec::new()));
        let (out, mut captured) = discover_captured(|| block(&consts));
        let draws = mode.finish();
        let out = out?;
        // A block that returns a captured tensor as it is read no op on it.
        if out.requires_grad() && !captured.iter().any(|c| c.same_as(&out)) {
            captured.push(out.clone());
        }
        (out.raw()?, captured, draws)
    };
    let edges: Vec<&Tensor> = inputs.iter().copied().chain(captured.iter()).collect();
    Ok(record(&ctx, "checkpoint", out_value, &edges, move |_| {
        Op::Recompute(Box::new(CheckpointBackward {
            block,
            inputs: values,
            draws,
        }))
    }))
}
