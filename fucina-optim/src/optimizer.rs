//! The [`Optimizer`] trait, parameter groups, and the generic [`Optim`] that
//! runs any update rule ([`Algorithm`]) over groups of parameters.
//!
//! Invariants: a parameter belongs to one group only; its state buffers are
//! created lazily on its first step with a gradient (as in PyTorch) and have
//! exactly its element count; the global step counter drives the schedules,
//! the per-parameter step counter drives bias corrections.

use std::fmt::Debug;
use std::path::Path;

use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext, RawTensor};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::kernel::Buf;
use crate::schedule::Schedule;

/// An update rule with its hyperparameters (the config of one parameter group).
///
/// Implemented by [`SgdConfig`](crate::SgdConfig), [`AdamConfig`](crate::AdamConfig),
/// [`RmsPropConfig`](crate::RmsPropConfig), [`LionConfig`](crate::LionConfig) and
/// [`MuonConfig`](crate::MuonConfig); implement it to add an optimizer that gets
/// groups, schedules, state files and checkpoints for free.
pub trait Algorithm: Clone + Debug + PartialEq + Serialize + DeserializeOwned + 'static {
    /// The optimizer's name (written into and checked against state files).
    const NAME: &'static str;
    /// The base learning rate.
    fn lr(&self) -> f64;
    /// Sets the base learning rate.
    fn set_lr(&mut self, lr: f64);
    /// Checks the hyperparameters.
    fn validate(&self) -> Result<()>;
    /// The state buffers a parameter of this shape and dtype needs: names and storage dtypes.
    fn buffers(&self, shape: &[usize], dtype: DType) -> Vec<(&'static str, DType)>;
    /// Updates one parameter in place. `lr_factor` is the schedule's factor for this
    /// step, `step` the parameter's step count including this one (1 on its first
    /// update), `param` and `grad` contiguous with the same shape and dtype, `bufs`
    /// laid out as [`Algorithm::buffers`] says.
    fn update(
        &self,
        ctx: &ExecContext,
        lr_factor: f64,
        step: u64,
        param: &mut RawTensor,
        grad: &RawTensor,
        bufs: &mut [Buf],
    ) -> Result<()>;
}

/// `Ok` when every `(name, value)` is finite and ≥ 0, else an [`Error::InvalidConfig`]
/// of `optimizer` naming the first that is not.
pub(crate) fn non_negative(optimizer: &'static str, values: &[(&str, f64)]) -> Result<()> {
    match values.iter().find(|(_, x)| !(x.is_finite() && *x >= 0.0)) {
        Some((name, x)) => Err(Error::config(
            optimizer,
            format!("{name} {x} must be finite and ≥ 0"),
        )),
        None => Ok(()),
    }
}

/// `Ok` when `value` lies in `[lo, hi)` (`[lo, hi]` when `inclusive`), else an
/// [`Error::InvalidConfig`] of `optimizer` naming it. NaN lies nowhere.
pub(crate) fn within(
    optimizer: &'static str,
    name: &str,
    value: f64,
    (lo, hi): (f64, f64),
    inclusive: bool,
) -> Result<()> {
    let upper = if inclusive { value <= hi } else { value < hi };
    if value >= lo && upper {
        return Ok(());
    }
    let close = if inclusive { ']' } else { ')' };
    Err(Error::config(
        optimizer,
        format!("{name} {value} must lie in [{lo}, {hi}{close}"),
    ))
}

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

/// The state of one parameter: its step count and its buffers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParamState {
    /// Updates applied to this parameter so far.
    pub step: u64,
    /// The buffers, in [`Algorithm::buffers`] order (empty before the first update).
    pub bufs: Vec<Buf>,
}

/// An optimizer: updates parameters from their gradients.
///
/// Object safe, so a training loop can hold a `Box<dyn Optimizer>`.
/// Order in a step: `backward` → (clip) → [`Optimizer::step`] → [`Optimizer::zero_grad`].
pub trait Optimizer {
    /// The update rule's name (`"sgd"`, `"adam"`, ...).
    fn name(&self) -> &'static str;
    /// Applies one update to every parameter that has a gradient.
    fn step(&mut self) -> Result<()>;
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
/// aliases: [`Sgd`](crate::Sgd), [`Adam`](crate::Adam), [`AdamW`](crate::AdamW),
/// [`RmsProp`](crate::RmsProp), [`Lion`](crate::Lion), [`Muon`](crate::Muon).
#[derive(Debug)]
pub struct Optim<A: Algorithm> {
    pub(crate) groups: Vec<ParamGroup<A>>,
    pub(crate) state: Vec<Vec<ParamState>>,
    pub(crate) steps: u64,
}

impl<A: Algorithm> Optim<A> {
    /// An optimizer over `groups`. Errors on invalid hyperparameters or
    /// schedules, non-float parameters, or a parameter listed twice.
    pub fn new(groups: Vec<ParamGroup<A>>) -> Result<Self> {
        let mut seen: Vec<&Tensor> = Vec::new();
        for g in &groups {
            g.config.validate()?;
            g.schedule.validate()?;
            for p in &g.params {
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

    fn step_param(&mut self, gi: usize, pi: usize) -> Result<()> {
        let group = &self.groups[gi];
        let p = &group.params[pi];
        let Some(grad) = p.grad_raw() else {
            return Ok(());
        };
        let ctx = p.ctx().clone();
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
        let st = &mut self.state[gi][pi];
        if st.bufs.is_empty() {
            let specs = group.config.buffers(p.shape(), p.dtype());
            let mut bufs = Vec::with_capacity(specs.len());
            for (name, dt) in specs {
                bufs.push(Buf::zeros(dt, p.numel()).ok_or_else(|| {
                    Error::config(A::NAME, format!("buffer `{name}` cannot be stored as {dt}"))
                })?);
            }
            st.bufs = bufs;
        }
        let factor = group.schedule.factor(self.steps);
        let mut value = p.value_mut()?;
        group
            .config
            .update(&ctx, factor, st.step + 1, &mut value, &grad, &mut st.bufs)?;
        st.step += 1;
        Ok(())
    }
}

impl<A: Algorithm> Optimizer for Optim<A> {
    fn name(&self) -> &'static str {
        A::NAME
    }

    fn step(&mut self) -> Result<()> {
        for gi in 0..self.groups.len() {
            for pi in 0..self.groups[gi].params.len() {
                self.step_param(gi, pi)?;
            }
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
        crate::state::to_bytes(self)
    }

    fn load_state_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        crate::state::load_bytes(self, bytes)
    }
}
