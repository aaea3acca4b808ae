//! Parameter initialisation from the counter-based RNG.
//!
//! An [`Init`] hands out one random stream per parameter from a running
//! counter: the `k`-th parameter created through it draws element `i` from
//! `rng::at(rng::at(seed, k), i)` (uniform) or `rng::normal(...)` (Box–Muller).
//! Every parameter consumes one stream whatever its distribution, so the
//! same seed and the same construction order give the same weights — on any
//! thread count, since generation is a host-side pure function of
//! `(seed, k, i)`. Defaults follow PyTorch: kaiming-uniform for `Linear`
//! (bound `1/√fan_in` for weight and bias), N(0, 1) for `Embedding`, ones and
//! zeros for norms.

use fucina_autograd::Tensor;
use fucina_core::shape::checked_numel;
use fucina_core::{rng, DType, ExecContext};

use crate::error::{Error, Result};

/// A distribution to fill a parameter from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// Every element `value`.
    Constant(f64),
    /// Uniform on `[low, high)`.
    Uniform {
        /// Lower bound.
        low: f64,
        /// Upper bound.
        high: f64,
    },
    /// Normal with this mean and standard deviation.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation (≥ 0).
        std: f64,
    },
}

impl Dist {
    /// PyTorch's `nn.Linear` default (kaiming-uniform with a = √5, which
    /// reduces to) uniform on `±1/√fan_in`; also its bias default.
    pub fn kaiming_uniform(fan_in: usize) -> Dist {
        let b = 1.0 / (fan_in.max(1) as f64).sqrt();
        Dist::Uniform { low: -b, high: b }
    }

    /// N(0, std²).
    pub fn normal(std: f64) -> Dist {
        Dist::Normal { mean: 0.0, std }
    }

    fn validate(&self) -> Result<()> {
        let ok = match *self {
            Dist::Zeros | Dist::Ones => true,
            Dist::Constant(v) => v.is_finite(),
            Dist::Uniform { low, high } => low.is_finite() && high.is_finite() && low <= high,
            Dist::Normal { mean, std } => mean.is_finite() && std.is_finite() && std >= 0.0,
        };
        if ok {
            Ok(())
        } else {
            Err(Error::config(
                "Dist",
                format!("invalid distribution {self:?}"),
            ))
        }
    }

    /// Element `i` of a stream seeded with `stream`.
    fn sample(&self, stream: u64, i: u64) -> f64 {
        match *self {
            Dist::Zeros => 0.0,
            Dist::Ones => 1.0,
            Dist::Constant(v) => v,
            Dist::Uniform { low, high } => low + (high - low) * rng::uniform(stream, i),
            Dist::Normal { mean, std } => mean + std * rng::normal(stream, i),
        }
    }
}

/// The parameter factory layers are built with: a context, a float dtype,
/// a seed and a running counter (one random stream per parameter).
///
/// ```
/// use fucina_nn::{Dist, Init};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mut a = Init::new(&ctx, fucina_core::DType::F64, 7);
/// let mut b = Init::new(&ctx, fucina_core::DType::F64, 7);
/// let x = a.param(&[2, 3], Dist::normal(0.02)).unwrap();
/// let y = b.param(&[2, 3], Dist::normal(0.02)).unwrap();
/// assert_eq!(x.to_vec::<f64>().unwrap(), y.to_vec::<f64>().unwrap());
/// assert!(x.requires_grad());
/// ```
#[derive(Clone, Debug)]
pub struct Init {
    ctx: ExecContext,
    dtype: DType,
    seed: u64,
    counter: u64,
}

impl Init {
    /// A factory on `ctx` making `dtype` parameters (f32 or f64) from `seed`.
    pub fn new(ctx: &ExecContext, dtype: DType, seed: u64) -> Init {
        Init {
            ctx: ctx.clone(),
            dtype,
            seed,
            counter: 0,
        }
    }

    /// The context parameters are made on.
    pub fn ctx(&self) -> &ExecContext {
        &self.ctx
    }

    /// The parameters' dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// How many streams were handed out so far.
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// The next stream's seed (`rng::at(seed, counter)`); advances the counter.
    /// Layers with randomness of their own (dropout) take theirs from here.
    pub fn next_seed(&mut self) -> u64 {
        let s = rng::at(self.seed, self.counter);
        self.counter += 1;
        s
    }

    /// A new parameter (a leaf that requires a gradient) of `shape` filled
    /// from `dist` with the next stream.
    pub fn param(&mut self, shape: &[usize], dist: Dist) -> Result<Tensor> {
        dist.validate()?;
        checked_numel(shape).ok_or_else(|| {
            Error::config(
                "Init",
                format!("shape {shape:?} overflows the element count"),
            )
        })?;
        let stream = self.next_seed();
        // The pool first (under its limit, a clean error when it cannot
        // grow), then the values drawn straight into it: no host copy.
        let raw = match self.dtype {
            DType::F32 | DType::F64 => {
                let mut raw = self.ctx.zeros(self.dtype, shape)?;
                if self.dtype == DType::F32 {
                    for (i, x) in raw.as_mut_slice::<f32>()?.iter_mut().enumerate() {
                        *x = dist.sample(stream, i as u64) as f32;
                    }
                } else {
                    for (i, x) in raw.as_mut_slice::<f64>()?.iter_mut().enumerate() {
                        *x = dist.sample(stream, i as u64);
                    }
                }
                raw
            }
            other => {
                return Err(Error::config(
                    "Init",
                    format!("parameters must be f32 or f64, got {other:?}"),
                ))
            }
        };
        Ok(Tensor::from_raw(&self.ctx, raw, true)?)
    }
}
