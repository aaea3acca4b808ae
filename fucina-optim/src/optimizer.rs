//! The [`Optimizer`] trait, parameter groups, and the generic [`Optim`] that
//! runs any update rule ([`Algorithm`]) over groups of parameters.
//!
//! Invariants: a parameter belongs to one group only; its state buffers are
//! created lazily on its first step with a gradient (as in PyTorch) and have
//! exactly its element count; the global step counter drives the schedules,
//! the per-parameter step counter drives bias corrections. A step is all or
//! nothing: every parameter's allocations are made before any parameter is
//! updated, so a failed step (out of memory) changes nothing.

use std::path::Path;

use fucina_autograd::Tensor;
use fucina_core::{DType, RawTensor};

pub use crate::algo::{Algorithm, Update};
use crate::error::{Error, Result};
use crate::kernel::Buf;
use crate::schedule::Schedule;
pub use crate::state::ParamState;
use crate::state::{self, GroupView};

/// A group of parameters sharing hyperparameters and a schedule.
///
/// ```
/// use fucina_autograd::Tensor;
/// use fucina_optim::{AdamConfig, AdamW, Optimizer, ParamGroup, Schedule};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let w = Tensor::variable(&ctx, &[0.5f32; 6], &[2, 3])?;
/// let b = Tensor::variable(&ctx, &[0.0f32; 2], &[2])?;
/// let cfg = AdamConfig::adamw(1e-3);
/// let opt = AdamW::new(vec![
///     ParamGroup::new(vec![w], cfg.clone()).with_schedule(Schedule::LinearWarmup { warmup: 100 }),
///     ParamGroup::new(vec![b], AdamConfig { weight_decay: 0.0, ..cfg }), // no decay on biases
/// ])?;
/// assert_eq!(opt.num_groups(), 2);
/// assert!((opt.lr(0)? - 1e-5).abs() < 1e-18);
/// # Ok::<(), fucina_optim::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ParamGroup<C> {
    /// The parameters (leaves of f32 or f64).
    pub params: Vec<Tensor>,
    /// The group's hyperparameters.
    pub config: C,
    /// The group's learning-rate schedule.
    pub schedule: Schedule,
}

impl<C> ParamGroup<C> {
    /// A group with a constant learning rate.
    pub fn new(params: Vec<Tensor>, config: C) -> Self {
        ParamGroup {
            params,
            config,
            schedule: Schedule::Constant,
        }
    }

    /// Attaches a schedule.
    pub fn with_schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = schedule;
        self
    }
}

/// An optimizer: updates parameters from their gradients.
///
/// Object safe, so a training loop can hold a `Box<dyn Optimizer>`.
/// Order in a step: `backward` → (clip) → [`Optimizer::step`] → [`Optimizer::zero_grad`].
pub trait Optimizer {
    /// The update rule's name (`"sgd"`, `"adam"`, ...).
    fn name(&self) -> &'static str;
    /// Applies one update to every parameter that has a gradient.
    ///
    /// Each parameter is updated in place through
    /// [`Tensor::update_value`](fucina_autograd::Tensor::update_value): while
    /// its update runs, the value is taken out of the tensor, so another
    /// thread that reads that parameter at that moment (`value`, `raw`,
    /// `to_vec`, or a forward that uses it) gets
    /// [`fucina_autograd::Error::ValueBusy`] instead of a half-updated
    /// value. It is never wrong data, only a refused read; a program that
    /// evaluates a model on another thread while this one trains orders the
    /// two (the evaluation between steps, as `fucina-train/tests/shared_model.rs`
    /// does) or retries the read.
    fn step(&mut self) -> Result<()>;
    /// Steps only when every parameter's gradient is finite
    /// ([`crate::grads_are_finite`]) and says whether it did. A skipped step
    /// changes nothing: parameters, optimizer state and the step count (so
    /// the schedule) stay as they were; the gradients are left for the
    /// caller to inspect, then `zero_grad` as usual.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// use fucina_optim::{Optimizer, Sgd, SgdConfig};
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let w = Tensor::variable(&ctx, &[1.0f32], &[1])?;
    /// let mut opt = Sgd::single(vec![w.clone()], SgdConfig::new(0.1))?;
    /// w.set_grad(Some(ctx.from_slice(&[f32::NAN], &[1])?))?;
    /// assert!(!opt.step_if_finite()?); // skipped
    /// assert_eq!(w.to_vec::<f32>()?, vec![1.0]);
    /// opt.zero_grad();
    /// # Ok::<(), fucina_optim::Error>(())
    /// ```
    fn step_if_finite(&mut self) -> Result<bool> {
        if crate::clip::grads_are_finite(&self.params())? {
            self.step()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }
    /// Drops every parameter's gradient (PyTorch's `set_to_none=True`).
    fn zero_grad(&self);
    /// Steps taken so far (what the schedules see).
    fn step_count(&self) -> u64;
    /// Number of parameter groups.
    fn num_groups(&self) -> usize;
    /// All parameters, group by group.
    fn params(&self) -> Vec<Tensor>;
    /// The learning rate group `group` uses at the next step (base × schedule).
    fn lr(&self, group: usize) -> Result<f64>;
    /// Sets the base learning rate of a group.
    fn set_lr(&mut self, group: usize, lr: f64) -> Result<()>;
    /// The full optimizer state (config, schedules, step counts, moments) as safetensors bytes.
    fn state_bytes(&self) -> Result<Vec<u8>>;
    /// Restores state written by [`Optimizer::state_bytes`]; validates optimizer,
    /// groups, shapes and dtypes, and changes nothing unless all of it fits.
    fn load_state_bytes(&mut self, bytes: &[u8]) -> Result<()>;
    /// One whole update from `loss` (candle's `backward_step`): drops the old
    /// gradients, runs `loss.backward()`, then [`Optimizer::step`]. For
    /// clipping or gradient accumulation between backward and step, call the
    /// three separately.
    fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        self.zero_grad();
        loss.backward()?;
        self.step()
    }
    /// Writes the state to `path` (temporary file, fsync, rename).
    fn save(&self, path: &Path) -> Result<()> {
        crate::io::write_atomic(path, &self.state_bytes()?)
    }
    /// Reads state from `path` (see [`Optimizer::load_state_bytes`]).
    fn load(&mut self, path: &Path) -> Result<()> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        self.load_state_bytes(&bytes).map_err(|e| Error::InFile {
            file: path.to_path_buf(),
            source: Box::new(e),
        })
    }
}

/// Runs an [`Algorithm`] over parameter groups. The concrete optimizers are
/// aliases: [`Sgd`](crate::Sgd), [`AdamW`](crate::AdamW) (Adam too, by its config),
/// [`RmsProp`](crate::RmsProp), [`Lion`](crate::Lion), [`Muon`](crate::Muon).
#[derive(Debug)]
pub struct Optim<A: Algorithm> {
    pub(crate) groups: Vec<ParamGroup<A>>,
    pub(crate) state: Vec<Vec<ParamState>>,
    pub(crate) steps: u64,
}

impl<A: Algorithm> Optim<A> {
    /// An optimizer over `groups`. Errors on invalid hyperparameters or
    /// schedules, non-float parameters, a parameter that does not require a
    /// gradient ([`Error::NotTrainable`]), or a parameter listed twice.
    pub fn new(groups: Vec<ParamGroup<A>>) -> Result<Self> {
        let mut seen: Vec<&Tensor> = Vec::new();
        for (gi, g) in groups.iter().enumerate() {
            g.config.validate()?;
            g.schedule.validate()?;
            for (pi, p) in g.params.iter().enumerate() {
                // Frozen first: a frozen bf16/f16 base matrix is named as frozen
                // (leave it out: `Module::trainable_parameters`), not as a dtype.
                if !p.requires_grad() {
                    return Err(Error::NotTrainable {
                        optimizer: A::NAME,
                        group: gi,
                        index: pi,
                        shape: p.shape().to_vec(),
                    });
                }
                if !matches!(p.dtype(), DType::F32 | DType::F64) {
                    return Err(Error::config(
                        A::NAME,
                        format!("parameters must be f32 or f64, got {}", p.dtype()),
                    ));
                }
                if seen.iter().any(|q| q.same_as(p)) {
                    return Err(Error::config(
                        A::NAME,
                        "a parameter appears in more than one group",
                    ));
                }
                seen.push(p);
            }
        }
        let state = groups
            .iter()
            .map(|g| vec![ParamState::default(); g.params.len()])
            .collect();
        Ok(Optim {
            groups,
            state,
            steps: 0,
        })
    }

    /// An optimizer with one group.
    pub fn single(params: Vec<Tensor>, config: A) -> Result<Self> {
        Self::new(vec![ParamGroup::new(params, config)])
    }

    /// The groups.
    pub fn groups(&self) -> &[ParamGroup<A>] {
        &self.groups
    }

    /// The config of group `group`, mutably (change hyperparameters between steps).
    pub fn config_mut(&mut self, group: usize) -> Result<&mut A> {
        let len = self.groups.len();
        self.groups
            .get_mut(group)
            .map(|g| &mut g.config)
            .ok_or(Error::NoSuchGroup { index: group, len })
    }

    /// Replaces the schedule of group `group`.
    pub fn set_schedule(&mut self, group: usize, schedule: Schedule) -> Result<()> {
        schedule.validate()?;
        let len = self.groups.len();
        self.groups
            .get_mut(group)
            .ok_or(Error::NoSuchGroup { index: group, len })?
            .schedule = schedule;
        Ok(())
    }

    /// The state of parameter `index` of group `group`.
    pub fn param_state(&self, group: usize, index: usize) -> Option<&ParamState> {
        self.state.get(group)?.get(index)
    }

    /// Phase 1 of a step for parameter `pi` of group `gi`: everything its
    /// update allocates or checks (the contiguous gradient, its moments on
    /// the first step, private copies of moments or of a value that another
    /// view shares), with nothing visible changed. `None` when it has no
    /// gradient.
    fn prepare_param(&self, gi: usize, pi: usize) -> Result<Option<Prepared>> {
        let group = &self.groups[gi];
        let p = &group.params[pi];
        let Some(grad) = p.grad_raw() else {
            return Ok(None);
        };
        let ctx = p.ctx();
        let grad = ctx.contiguous(&grad)?;
        if grad.shape() != p.shape() || grad.dtype() != p.dtype() {
            return Err(Error::StateMismatch(format!(
                "gradient {:?} {} does not fit parameter {:?} {}",
                grad.shape(),
                grad.dtype(),
                p.shape(),
                p.dtype()
            )));
        }
        let st = &self.state[gi][pi];
        let bufs = if st.bufs.is_empty() {
            let specs = group.config.buffers(p.shape(), p.dtype());
            let mut bufs = Vec::with_capacity(specs.len());
            for (name, dt) in specs {
                bufs.push(Buf::zeros(ctx, dt, p.numel()).map_err(|e| match e {
                    Error::Core(fucina_core::Error::UnsupportedDType { .. }) => {
                        Error::config(A::NAME, format!("buffer `{name}` cannot be stored as {dt}"))
                    }
                    e => e,
                })?);
            }
            Some(bufs)
        } else if st.bufs.iter().any(|b| !b.is_unique()) {
            // A clone of the state shares a moment: the update would copy it.
            Some(
                st.bufs
                    .iter()
                    .map(Buf::unique)
                    .collect::<Result<Vec<_>>>()?,
            )
        } else {
            None
        };
        // The slot holds one reference and `v` another: more means a view
        // elsewhere, and `update_value` would copy.
        let v = p.raw()?;
        let value = if v.buffer().ref_count() > 2 || !v.is_contiguous() || v.offset() != 0 {
            Some(ctx.copy(&v)?)
        } else {
            None
        };
        Ok(Some(Prepared {
            gi,
            pi,
            grad,
            bufs,
            value,
        }))
    }

    /// Phase 2: the update of one prepared parameter. Nothing here
    /// allocates, so it fails only on a broken invariant (a tensor released
    /// or updated by another thread meanwhile).
    fn commit_param(&mut self, prep: Prepared) -> Result<()> {
        let Prepared {
            gi,
            pi,
            grad,
            bufs,
            value,
        } = prep;
        let group = &self.groups[gi];
        let p = &group.params[pi];
        let ctx = p.ctx().clone();
        if let Some(v) = value {
            p.set_value(v)?;
        }
        let st = &mut self.state[gi][pi];
        if let Some(bufs) = bufs {
            st.bufs = bufs;
        }
        let factor = group.schedule.factor(self.steps);
        p.update_value(|param| {
            group.config.update(Update {
                ctx: &ctx,
                lr_factor: factor,
                step: st.step + 1,
                param,
                grad: &grad,
                bufs: &mut st.bufs,
            })
        })?;
        st.step += 1;
        Ok(())
    }
}

/// What one parameter's update needs, made before any parameter changes.
struct Prepared {
    gi: usize,
    pi: usize,
    /// The gradient, contiguous.
    grad: RawTensor,
    /// New moments (first step) or private copies of shared ones.
    bufs: Option<Vec<Buf>>,
    /// A private copy of a value another view shares.
    value: Option<RawTensor>,
}

impl<A: Algorithm> Optimizer for Optim<A> {
    fn name(&self) -> &'static str {
        A::NAME
    }

    /// All or nothing: every allocation and check of every parameter's
    /// update is made first (phase 1), and only when all succeeded are the
    /// parameters updated (phase 2, which allocates nothing). An error such
    /// as `OutOfMemory` leaves parameters, state and the step count as they
    /// were, so a retry steps each parameter once.
    fn step(&mut self) -> Result<()> {
        let mut prepared = Vec::new();
        for gi in 0..self.groups.len() {
            for pi in 0..self.groups[gi].params.len() {
                if let Some(p) = self.prepare_param(gi, pi)? {
                    prepared.push(p);
                }
            }
        }
        for p in prepared {
            self.commit_param(p)?;
        }
        self.steps += 1;
        Ok(())
    }

    fn zero_grad(&self) {
        for g in &self.groups {
            for p in &g.params {
                p.zero_grad();
            }
        }
    }

    fn step_count(&self) -> u64 {
        self.steps
    }

    fn num_groups(&self) -> usize {
        self.groups.len()
    }

    fn params(&self) -> Vec<Tensor> {
        self.groups
            .iter()
            .flat_map(|g| g.params.iter().cloned())
            .collect()
    }

    fn lr(&self, group: usize) -> Result<f64> {
        let g = self.groups.get(group).ok_or(Error::NoSuchGroup {
            index: group,
            len: self.groups.len(),
        })?;
        Ok(g.config.lr() * g.schedule.factor(self.steps))
    }

    fn set_lr(&mut self, group: usize, lr: f64) -> Result<()> {
        let cfg = self.config_mut(group)?;
        let old = cfg.lr();
        cfg.set_lr(lr);
        if let Err(e) = cfg.validate() {
            cfg.set_lr(old);
            return Err(e);
        }
        Ok(())
    }

    fn state_bytes(&self) -> Result<Vec<u8>> {
        let views: Vec<GroupView<'_, A>> = self
            .groups
            .iter()
            .zip(&self.state)
            .map(|(g, st)| GroupView {
                config: &g.config,
                schedule: g.schedule,
                params: &g.params,
                state: st,
            })
            .collect();
        state::to_bytes(self.steps, &views)
    }

    fn load_state_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        let params: Vec<&[Tensor]> = self.groups.iter().map(|g| g.params.as_slice()).collect();
        let loaded = state::load_bytes::<A>(bytes, &params)?;
        // Everything fits: commit.
        for (g, (config, schedule)) in self.groups.iter_mut().zip(loaded.groups) {
            g.config = config;
            g.schedule = schedule;
        }
        self.state = loaded.state;
        self.steps = loaded.steps;
        Ok(())
    }
}
