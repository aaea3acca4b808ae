//! The update rules, one file each (`sgd`, `adam`, `lion`, `rmsprop`,
//! `muon`), and what they share: the [`Algorithm`] trait the generic
//! [`Optim`](crate::Optim) runs, the config tables (`config`), and the
//! state-buffer plumbing of an update.
//!
//! A config is one table (`config::hyperparams!`: fields, defaults and
//! ranges), and `hyperparam_glue!` derives the trait's `NAME`, `lr`,
//! `set_lr` and `validate` from it, so an update rule writes only its table,
//! its buffers and its update. An update checks the parameter's state
//! against the rule's own list ([`Algorithm::buffers`]), binds the element
//! and storage types (`dispatch_step!`) and hands the kernel a typed
//! `Step` whose buffers it takes by name, so no rule counts, orders or types
//! its buffers by hand.

pub mod adam;
pub(crate) mod config;
pub mod lion;
pub mod muon;
pub mod rmsprop;
pub mod sgd;

use std::fmt::Debug;

use fucina_core::{DType, Element, ExecContext, RawTensor};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::kernel::{typed, Buf, BufElem};

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

impl<'a> Update<'a> {
    /// This update for `rule`, its state buffers paired with the names
    /// `rule.buffers` gives them; a count that differs is a
    /// [`Error::StateMismatch`] naming both counts.
    pub(crate) fn checked<A: Algorithm>(self, rule: &A) -> Result<Step<'a, RawTensor>> {
        let names = rule.buffers(self.param.shape(), self.param.dtype());
        if self.bufs.len() != names.len() {
            return Err(Error::StateMismatch(format!(
                "{}: {} state buffers, expected {}",
                A::NAME,
                self.bufs.len(),
                names.len()
            )));
        }
        let slots = names
            .into_iter()
            .map(|(name, _)| name)
            .zip(self.bufs.iter_mut().map(Some))
            .collect();
        Ok(Step {
            ctx: self.ctx,
            lr: rule.lr() * self.lr_factor,
            step: self.step,
            bufs: StateBufs {
                optimizer: A::NAME,
                n: self.param.numel(),
                slots,
            },
            param: self.param,
            grad: self.grad,
        })
    }
}

/// One parameter's update with its state checked against the rule's list
/// ([`Update::checked`]): `P` is the parameter and gradient as handed over
/// ([`RawTensor`]), then, after [`Step::typed`], as their elements (`[T]`),
/// what a kernel works on.
pub(crate) struct Step<'a, P: ?Sized> {
    /// The context the parameter lives in.
    pub(crate) ctx: &'a ExecContext,
    /// The scheduled learning rate: the config's times the schedule's factor.
    pub(crate) lr: f64,
    /// The parameter's step count, this one included.
    pub(crate) step: u64,
    /// The parameter, updated in place.
    pub(crate) param: &'a mut P,
    /// Its gradient.
    pub(crate) grad: &'a P,
    /// Its state buffers, by name.
    pub(crate) bufs: StateBufs<'a>,
}

impl<'a> Step<'a, RawTensor> {
    /// The step over the parameter's and gradient's elements as `T`.
    pub(crate) fn typed<T: Element>(self) -> Result<Step<'a, [T]>> {
        Ok(Step {
            ctx: self.ctx,
            lr: self.lr,
            step: self.step,
            param: self.param.as_mut_slice::<T>()?,
            grad: self.grad.as_slice::<T>()?,
            bufs: self.bufs,
        })
    }
}

/// One parameter's state buffers in an update, each under the name
/// [`Algorithm::buffers`] gives it, handed out once by name as its storage
/// type.
pub(crate) struct StateBufs<'a> {
    optimizer: &'static str,
    /// The parameter's element count (every buffer's length).
    n: usize,
    slots: Vec<(&'static str, Option<&'a mut Buf>)>,
}

impl<'a> StateBufs<'a> {
    /// The optimizer's name (in dtype errors).
    pub(crate) fn optimizer(&self) -> &'static str {
        self.optimizer
    }

    /// The storage dtype of buffer `name`, or `absent` where the config
    /// keeps no such buffer.
    pub(crate) fn dtype_or(&self, name: &str, absent: DType) -> DType {
        self.slots
            .iter()
            .find(|(s, _)| *s == name)
            .and_then(|(_, b)| b.as_ref().map(|b| b.dtype()))
            .unwrap_or(absent)
    }

    /// Buffer `name` as `M`, or `None` where the config keeps no such
    /// buffer; stored as another type or with another length than the
    /// parameter's, a [`Error::StateMismatch`].
    pub(crate) fn take_opt<M: BufElem>(&mut self, name: &str) -> Result<Option<&'a mut [M]>> {
        let (optimizer, n) = (self.optimizer, self.n);
        match self.slots.iter_mut().find(|(s, _)| *s == name) {
            Some((_, slot)) => match slot.take() {
                Some(b) => typed::<M>(b, optimizer, name, n).map(Some),
                None => Ok(None),
            },
            None => Ok(None),
        }
    }

    /// Buffer `name` as `M`, which the config keeps; missing, a
    /// [`Error::StateMismatch`].
    pub(crate) fn take<M: BufElem>(&mut self, name: &str) -> Result<&'a mut [M]> {
        let optimizer = self.optimizer;
        self.take_opt(name)?
            .ok_or_else(|| Error::StateMismatch(format!("{optimizer}: missing {optimizer} {name}")))
    }
}

/// `dispatch_step!(s: T, "exp_avg" => M, .. => body)`: runs `body` with `T`
/// bound to the checked step `s`'s element type (f32, f64) and each `M` to
/// the storage type of the state buffer named (bf16 or `T`; `T` where the
/// config keeps no such buffer), and `s` typed ([`Step::typed`]). Another
/// dtype is `dispatch_float!`'s or `dispatch_moment!`'s error.
macro_rules! dispatch_step {
    (@moments $s:ident, $T:ident, [] => $body:expr) => {
        $body
    };
    (@moments $s:ident, $T:ident, [$name:literal => $M:ident $(, $rn:literal => $RM:ident)*]
        => $body:expr) => {
        $crate::kernel::dispatch_moment!(
            $s.bufs.dtype_or($name, <$T as fucina_core::Element>::DTYPE), $T, $M =>
            $crate::algo::dispatch_step!(@moments $s, $T, [$($rn => $RM),*] => $body)
        )
    };
    ($s:ident: $T:ident $(, $name:literal => $M:ident)* => $body:expr) => {
        fucina_core::dispatch_float!($s.param.dtype(), $s.bufs.optimizer(), $T => {
            $crate::algo::dispatch_step!(@moments $s, $T, [$($name => $M),*] => {
                let $s = $s.typed::<$T>()?;
                $body
            })
        })
    };
}
pub(crate) use dispatch_step;
