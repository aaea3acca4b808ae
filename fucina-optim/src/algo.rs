//! The update rules, one file each (`sgd`, `adam`, `lion`, `rmsprop`,
//! `muon`), and what they share: the [`Algorithm`] trait the generic
//! [`Optim`](crate::Optim) runs, and the hyperparameter glue.
//!
//! The glue: a config's learning rate is its `lr` field, and its
//! hyperparameters are listed once with their valid ranges
//! (`Hyperparams::bounds`); `hyperparam_glue!` turns that list into the
//! trait's `NAME`, `lr`, `set_lr` and `validate`, so an update rule writes
//! only its ranges, its buffers and its update. Invariant: `validate` checks
//! the ranges in list order, then the rules that tie several values together
//! (`Hyperparams::cross_checks`), and names the optimizer in every error.

pub mod adam;
pub mod lion;
pub mod muon;
pub mod rmsprop;
pub mod sgd;

use std::fmt::Debug;

use fucina_core::{DType, ExecContext, RawTensor};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::kernel::Buf;

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
    /// Updates one parameter in place, as [`Update`] describes.
    fn update(&self, u: Update<'_>) -> Result<()>;
}

/// What one parameter's update is handed: `lr_factor` is the schedule's
/// factor for this step, `step` the parameter's step count including this
/// one (1 on its first update), `param` and `grad` contiguous with the same
/// shape and dtype, `bufs` laid out as [`Algorithm::buffers`] says.
pub struct Update<'a> {
    /// The context the parameter lives in.
    pub ctx: &'a ExecContext,
    /// The schedule's factor on the base learning rate.
    pub lr_factor: f64,
    /// The parameter's step count, this one included.
    pub step: u64,
    /// The parameter, updated in place.
    pub param: &'a mut RawTensor,
    /// Its gradient.
    pub grad: &'a RawTensor,
    /// Its state buffers.
    pub bufs: &'a mut [Buf],
}

/// The error for a parameter whose state holds `got` buffers where
/// `optimizer` expects `expected`.
pub(crate) fn wrong_buffer_count(
    optimizer: &str,
    got: usize,
    expected: impl std::fmt::Display,
) -> Error {
    Error::StateMismatch(format!(
        "{optimizer}: {got} state buffers, expected {expected}"
    ))
}

/// The range a hyperparameter must lie in. NaN lies in none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Bound {
    /// Finite and ≥ 0.
    NonNegative,
    /// Finite.
    Finite,
    /// In `[lo, hi)`.
    HalfOpen(f64, f64),
    /// In `[lo, hi]`.
    Closed(f64, f64),
}

impl Bound {
    /// `None` when `value` lies in the range, else what it must satisfy.
    fn violation(self, value: f64) -> Option<String> {
        let (ok, must) = match self {
            Bound::NonNegative => (
                value.is_finite() && value >= 0.0,
                "be finite and ≥ 0".into(),
            ),
            Bound::Finite => (value.is_finite(), "be finite".into()),
            Bound::HalfOpen(lo, hi) => (value >= lo && value < hi, format!("lie in [{lo}, {hi})")),
            Bound::Closed(lo, hi) => (value >= lo && value <= hi, format!("lie in [{lo}, {hi}]")),
        };
        (!ok).then_some(must)
    }
}

/// A config's hyperparameters with their ranges: what `hyperparam_glue!`'s
/// `validate` checks.
pub(crate) trait Hyperparams {
    /// Every scalar hyperparameter (the learning rate included) with its
    /// range, in the order they are checked.
    fn bounds(&self) -> Vec<(&'static str, f64, Bound)>;
    /// Rules over several hyperparameters, checked after the ranges.
    fn cross_checks(&self) -> Result<()> {
        Ok(())
    }
}

/// `Ok` when every hyperparameter lies in its range, else an
/// [`Error::InvalidConfig`] of `optimizer` naming the first that does not.
pub(crate) fn check_bounds(
    optimizer: &'static str,
    bounds: &[(&'static str, f64, Bound)],
) -> Result<()> {
    for &(name, value, bound) in bounds {
        if let Some(must) = bound.violation(value) {
            return Err(Error::config(
                optimizer,
                format!("{name} {value} must {must}"),
            ));
        }
    }
    Ok(())
}

/// The shared part of an `impl Algorithm`: `NAME`, `lr` and `set_lr` over
/// the config's `lr` field, and `validate` over its [`Hyperparams`].
macro_rules! hyperparam_glue {
    ($name:literal) => {
        const NAME: &'static str = $name;

        fn lr(&self) -> f64 {
            self.lr
        }

        fn set_lr(&mut self, lr: f64) {
            self.lr = lr;
        }

        fn validate(&self) -> $crate::error::Result<()> {
            $crate::algo::check_bounds($name, &$crate::algo::Hyperparams::bounds(self))?;
            $crate::algo::Hyperparams::cross_checks(self)
        }
    };
}
pub(crate) use hyperparam_glue;
