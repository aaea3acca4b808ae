//! Learning-rate schedules as pure functions of the step.
//!
//! A [`Schedule`] maps the 0-based index of an optimizer step to a factor
//! that multiplies a group's base learning rate. It holds no state, so a
//! resumed run recomputes exactly the same rates (PyTorch's `LambdaLR` with
//! the same lambda gives the same numbers).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A learning-rate schedule: `lr(step) = base_lr × factor(step)`, where `step`
/// counts the optimizer steps already taken (0 for the first step).
///
/// ```
/// use fucina_optim::Schedule;
/// let s = Schedule::WarmupCosine { warmup: 10, total: 110, min_factor: 0.1 };
/// assert_eq!(s.factor(0), 0.1);          // (0 + 1) / 10
/// assert_eq!(s.factor(9), 1.0);          // end of warmup
/// assert!((s.factor(60) - 0.55).abs() < 1e-12); // half way down the cosine
/// assert_eq!(s.factor(1000), 0.1);       // the floor
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Schedule {
    /// Factor 1 at every step.
    #[default]
    Constant,
    /// `(step + 1) / warmup` during the warmup, then 1.
    LinearWarmup {
        /// Steps of warmup (≥ 1).
        warmup: u64,
    },
    /// Linear warmup, then a cosine from 1 down to `min_factor` at `total`,
    /// then `min_factor`: `min + (1 − min)·½(1 + cos(π·t))`,
    /// `t = min((step − warmup)/(total − warmup), 1)`.
    WarmupCosine {
        /// Steps of warmup (0 for none).
        warmup: u64,
        /// The step at which the floor is reached (> warmup).
        total: u64,
        /// The floor, as a fraction of the base rate (0 ≤ min_factor ≤ 1).
        min_factor: f64,
    },
    /// `gamma^(step / step_size)` (integer division; PyTorch's `StepLR`).
    StepDecay {
        /// Steps between decays (≥ 1).
        step_size: u64,
        /// Multiplier per decay.
        gamma: f64,
    },
    /// A straight line from `start_factor` at step 0 to `end_factor` at
    /// `total`, then constant (PyTorch's `LinearLR`, closed form).
    LinearDecay {
        /// Factor at step 0.
        start_factor: f64,
        /// Factor from `total` on.
        end_factor: f64,
        /// Steps of the ramp (≥ 1).
        total: u64,
    },
}

impl Schedule {
    /// The factor for the optimizer step with 0-based index `step`.
    pub fn factor(&self, step: u64) -> f64 {
        match *self {
            Schedule::Constant => 1.0,
            Schedule::LinearWarmup { warmup } => {
                if step < warmup {
                    (step + 1) as f64 / warmup as f64
                } else {
                    1.0
                }
            }
            Schedule::WarmupCosine {
                warmup,
                total,
                min_factor,
            } => {
                if step < warmup {
                    (step + 1) as f64 / warmup as f64
                } else {
                    let t = ((step - warmup) as f64 / total.saturating_sub(warmup).max(1) as f64)
                        .min(1.0);
                    min_factor + (1.0 - min_factor) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
                }
            }
            Schedule::StepDecay { step_size, gamma } => {
                gamma.powi((step / step_size.max(1)).min(i32::MAX as u64) as i32)
            }
            Schedule::LinearDecay {
                start_factor,
                end_factor,
                total,
            } => {
                let t = step.min(total) as f64 / total.max(1) as f64;
                start_factor + (end_factor - start_factor) * t
            }
        }
    }

    /// Checks the parameters (called when a schedule is attached).
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::config("schedule", msg));
        match *self {
            Schedule::Constant => Ok(()),
            Schedule::LinearWarmup { warmup: 0 } => bad("linear warmup needs warmup ≥ 1".into()),
            Schedule::LinearWarmup { .. } => Ok(()),
            Schedule::WarmupCosine {
                warmup,
                total,
                min_factor,
            } => {
                if total <= warmup {
                    bad(format!(
                        "warmup-cosine needs total ({total}) > warmup ({warmup})"
                    ))
                } else if !(0.0..=1.0).contains(&min_factor) {
                    bad(format!(
                        "warmup-cosine min_factor {min_factor} outside [0, 1]"
                    ))
                } else {
                    Ok(())
                }
            }
            Schedule::StepDecay { step_size, gamma } => {
                if step_size == 0 || !gamma.is_finite() || gamma < 0.0 {
                    bad(format!(
                        "step decay needs step_size ≥ 1 and gamma ≥ 0 (got {step_size}, {gamma})"
                    ))
                } else {
                    Ok(())
                }
            }
            Schedule::LinearDecay {
                start_factor,
                end_factor,
                total,
            } => {
                if total == 0
                    || !start_factor.is_finite()
                    || !end_factor.is_finite()
                    || start_factor < 0.0
                    || end_factor < 0.0
                {
                    bad(format!(
                        "linear decay needs total ≥ 1 and finite factors ≥ 0 (got {start_factor} → {end_factor} over {total})"
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }
}
