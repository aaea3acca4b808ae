//! How an update rule declares its config: one table per rule
//! ([`hyperparams!`]) gives the documented struct, its PyTorch-default
//! constructor and its ranges ([`Hyperparams`]); `hyperparam_glue!` turns
//! those into the [`Algorithm`](crate::Algorithm) trait's `NAME`, `lr`,
//! `set_lr`, `validate`.
//!
//! Invariant: `validate` checks the ranges in the table's `validate:` order,
//! then the rules that tie several values together
//! ([`Hyperparams::cross_checks`]), and names the optimizer in every error.

use crate::error::{Error, Result};

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
/// `validate` checks. [`hyperparams!`] implements it from the table.
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

/// One update rule's config, declared once as a table:
///
/// ```text
/// hyperparams! {
///     /// The struct's docs.
///     pub struct SgdConfig {
///         /// A field's docs.
///         momentum: f64 = 0.0, in NonNegative;     // field: type = default, range
///         betas: (f64, f64) = (0.9, 0.999),        // a tuple: one range for its
///             each (beta1, beta2) in HalfOpen(0.0, 1.0); // parts, each named
///         nesterov: bool = false;                  // no range
///     }
///     validate: lr, momentum; then nesterov_rule; // the ranges' check order, then
///                                                  //   methods `fn(&self) -> Result<()>`
///     /// The constructor's docs.
///     pub fn new(lr);                              // the defaults, `lr` given
/// }
/// ```
///
/// gives the struct (every field public, deriving what
/// [`Algorithm`](crate::Algorithm) needs), the constructor (or, written
/// `impl Default;`, a `Default` with every default given) and its
/// [`Hyperparams`]: `bounds` in the `validate:` order, which must name every
/// range exactly once (a range left out is an unused variable, denied), and
/// `cross_checks` calling the `then` methods in order.
macro_rules! hyperparams {
    (@init $Name:ident { $($field:ident: $default:expr),* }
        $(#[$cmeta:meta])* pub fn $ctor:ident($lr:ident);) => {
        impl $Name {
            $(#[$cmeta])*
            pub fn $ctor($lr: f64) -> Self {
                $Name { $($field: $default),* }
            }
        }
    };
    (@init $Name:ident { $($field:ident: $default:expr),* } impl $Default:ident;) => {
        impl $Default for $Name {
            fn default() -> Self {
                $Name { $($field: $default),* }
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub struct $Name:ident {
            $(
                $(#[$fmeta:meta])*
                $field:ident: $ty:ty = $default:expr
                    $(, in $bound:ident $(($($barg:expr),+))?)?
                    $(, each ($($part:ident),+) in $pbound:ident $(($($parg:expr),+))?)?
                ;
            )*
        }
        validate: $($checked:ident),+; $(then $($rule:ident),+;)?
        $($(#[$cmeta:meta])* pub fn $ctor:ident($lr:ident);)?
        $(impl $Default:ident;)?
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        pub struct $Name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        $crate::algo::config::hyperparams!(@init $Name { $($field: $default),* }
            $($(#[$cmeta])* pub fn $ctor($lr);)? $(impl $Default;)?);

        impl $crate::algo::config::Hyperparams for $Name {
            #[deny(unused_variables)]
            fn bounds(&self) -> Vec<(&'static str, f64, $crate::algo::config::Bound)> {
                use $crate::algo::config::Bound;
                $(
                    $(let $field = (
                        stringify!($field),
                        self.$field,
                        Bound::$bound $(($($barg),+))?,
                    );)?
                    $(
                        let bound = Bound::$pbound $(($($parg),+))?;
                        let ($($part),+) = self.$field;
                        $(let $part = (stringify!($part), $part, bound);)+
                    )?
                )*
                vec![$($checked),+]
            }

            $(fn cross_checks(&self) -> $crate::error::Result<()> {
                $(self.$rule()?;)+
                Ok(())
            })?
        }
    };
}
pub(crate) use hyperparams;

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
            $crate::algo::config::check_bounds(
                $name,
                &$crate::algo::config::Hyperparams::bounds(self),
            )?;
            $crate::algo::config::Hyperparams::cross_checks(self)
        }
    };
}
pub(crate) use hyperparam_glue;
