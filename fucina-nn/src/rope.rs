//! Rotary position embedding tables in Hugging Face's layout: `RopeScaling`
//! (the `rope_scaling` field of a `config.json`: default, linear, llama3),
//! `inv_freq` exactly as transformers computes it, and `Rope`, the
//! `[max_positions, head_dim/2]` cos/sin tables applied through autograd's
//! fused `Tensor::rope` (rotate-half convention).
//!
//! Numerics: transformers computes `inv_freq`, the angles `position · inv_freq`
//! and their cos/sin in float32. F32 tables replicate that step by step
//! ([`inv_freq_f32`], the angle rounded to f32, its cos/sin computed in f64
//! and rounded), so they match `LlamaRotaryEmbedding` to within an f32 ulp or
//! two; F64 tables compute everything in f64 ([`inv_freq`]).

use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext, Float};
use serde_json::Value;

use crate::buffer::Buffer;
use crate::error::{Error, Result};

/// The frequency scaling of a rotary embedding (HF's `rope_scaling`).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// No scaling: `inv_freq[i] = theta^(−2i/d)`.
    Default,
    /// Position interpolation: every frequency divided by `factor`.
    Linear {
        /// The divisor of every frequency (> 0).
        factor: f64,
    },
    /// Llama 3.1's scaling ([`Llama3Scaling`]).
    Llama3(Llama3Scaling),
}

/// Llama 3.1's scaling: wavelengths above `original_max_position_embeddings /
/// low_freq_factor` are divided by `factor`, those below
/// `original_max_position_embeddings / high_freq_factor` are kept, and the band
/// between is interpolated smoothly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Scaling {
    /// The divisor of the low frequencies (> 0).
    pub factor: f64,
    /// Sets the long-wavelength threshold (> 0, < `high_freq_factor`).
    pub low_freq_factor: f64,
    /// Sets the short-wavelength threshold (> `low_freq_factor`).
    pub high_freq_factor: f64,
    /// The context length the model was pretrained with (> 0).
    pub original_max_position_embeddings: usize,
}

const SUPPORTED: &str = "supported: default, linear, llama3";

/// The field `name` of `obj` as a finite number > 0.
fn positive(obj: &serde_json::Map<String, Value>, kind: &str, name: &str) -> Result<f64> {
    let v = obj.get(name).ok_or_else(|| {
        Error::config(
            "RopeScaling",
            format!("rope_scaling type `{kind}` needs the field `{name}`"),
        )
    })?;
    match v.as_f64() {
        Some(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(Error::config(
            "RopeScaling",
            format!("rope_scaling field `{name}` must be a finite number > 0, got {v}"),
        )),
    }
}

impl RopeScaling {
    /// Parses HF `config.json`'s `rope_scaling` field: absent or `null` is
    /// [`RopeScaling::Default`]; an object names its type in `rope_type` (or
    /// the legacy `type`), one of `default`, `linear` (`factor`) and `llama3`
    /// (`factor`, `low_freq_factor`, `high_freq_factor`,
    /// `original_max_position_embeddings`); other fields are ignored.
    ///
    /// Errors: [`Error::InvalidConfig`] naming an unsupported type, or a
    /// missing or invalid field.
    ///
    /// ```
    /// use fucina_nn::RopeScaling;
    /// let v = serde_json::json!({"rope_type": "linear", "factor": 2.0});
    /// assert_eq!(RopeScaling::from_hf(Some(&v))?, RopeScaling::Linear { factor: 2.0 });
    /// assert_eq!(RopeScaling::from_hf(None)?, RopeScaling::Default);
    /// let yarn = serde_json::json!({"type": "yarn", "factor": 4.0});
    /// assert!(RopeScaling::from_hf(Some(&yarn)).unwrap_err().to_string().contains("`yarn`"));
    /// # Ok::<(), fucina_nn::Error>(())
    /// ```
    pub fn from_hf(value: Option<&Value>) -> Result<RopeScaling> {
        let obj = match value {
            None | Some(Value::Null) => return Ok(RopeScaling::Default),
            Some(Value::Object(obj)) => obj,
            Some(other) => {
                return Err(Error::config(
                    "RopeScaling",
                    format!("rope_scaling must be an object or null, got {other}"),
                ))
            }
        };
        let kind = match obj.get("rope_type").or_else(|| obj.get("type")) {
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                return Err(Error::config(
                    "RopeScaling",
                    format!("rope_scaling field `rope_type` must be a string, got {other}"),
                ))
            }
            None => {
                return Err(Error::config(
                    "RopeScaling",
                    "rope_scaling has no `rope_type` (or legacy `type`) field",
                ))
            }
        };
        let scaling = match kind {
            "default" => RopeScaling::Default,
            "linear" => RopeScaling::Linear {
                factor: positive(obj, kind, "factor")?,
            },
            "llama3" => {
                let field = "original_max_position_embeddings";
                let v = obj.get(field).ok_or_else(|| {
                    Error::config(
                        "RopeScaling",
                        format!("rope_scaling type `llama3` needs the field `{field}`"),
                    )
                })?;
                let original = v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| {
                        Error::config(
                            "RopeScaling",
                            format!("rope_scaling field `{field}` must be an integer > 0, got {v}"),
                        )
                    })?;
                RopeScaling::Llama3(Llama3Scaling {
                    factor: positive(obj, kind, "factor")?,
                    low_freq_factor: positive(obj, kind, "low_freq_factor")?,
                    high_freq_factor: positive(obj, kind, "high_freq_factor")?,
                    original_max_position_embeddings: original,
                })
            }
            other => {
                return Err(Error::config(
                    "RopeScaling",
                    format!("rope_scaling type `{other}` is not supported ({SUPPORTED})"),
                ))
            }
        };
        scaling.validate()?;
        Ok(scaling)
    }

    /// Checks the parameters: factors finite and > 0, llama3's
    /// `low_freq_factor < high_freq_factor` (the smooth band's denominator)
    /// and `original_max_position_embeddings > 0`.
    pub fn validate(&self) -> Result<()> {
        match self {
            RopeScaling::Default => Ok(()),
            RopeScaling::Linear { factor } => check_positive("factor", *factor),
            RopeScaling::Llama3(p) => p.validate(),
        }
    }

    /// The `rope_scaling` value of a config (null for the default): what
    /// [`RopeScaling::from_hf`] reads back to the same value.
    pub fn to_hf(&self) -> Value {
        match *self {
            RopeScaling::Default => Value::Null,
            RopeScaling::Linear { factor } => {
                serde_json::json!({"rope_type": "linear", "factor": factor})
            }
            RopeScaling::Llama3(p) => serde_json::json!({
                "rope_type": "llama3",
                "factor": p.factor,
                "low_freq_factor": p.low_freq_factor,
                "high_freq_factor": p.high_freq_factor,
                "original_max_position_embeddings": p.original_max_position_embeddings,
            }),
        }
    }

    /// The base frequencies `base` (`theta^(−2i/d)`) scaled, in `T`: each
    /// parameter is an f64 (a Python scalar in transformers) rounded to `T`
    /// where it meets the frequencies, every step after that in `T` (so in
    /// f64 every step is f64, in f32 these are transformers' float32 ops).
    fn scale<T: Float>(&self, base: Vec<T>) -> Vec<T> {
        match *self {
            RopeScaling::Default => base,
            RopeScaling::Linear { factor } => {
                let factor = T::from_f64(factor);
                base.into_iter().map(|f| f / factor).collect()
            }
            RopeScaling::Llama3(p) => p.scale(base),
        }
    }
}

/// `Ok` when `v` is finite and > 0, else the error naming `rope_scaling`'s field `name`.
fn check_positive(name: &str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::config(
            "RopeScaling",
            format!("rope_scaling field `{name}` must be a finite number > 0, got {v}"),
        ))
    }
}

impl Llama3Scaling {
    /// [`RopeScaling::validate`] for llama3.
    fn validate(&self) -> Result<()> {
        check_positive("factor", self.factor)?;
        check_positive("low_freq_factor", self.low_freq_factor)?;
        check_positive("high_freq_factor", self.high_freq_factor)?;
        let (low, high) = (self.low_freq_factor, self.high_freq_factor);
        if low >= high {
            return Err(Error::config(
                "RopeScaling",
                format!(
                    "rope_scaling field `low_freq_factor` ({low}) must be \
                     below `high_freq_factor` ({high})"
                ),
            ));
        }
        if self.original_max_position_embeddings == 0 {
            return Err(Error::config(
                "RopeScaling",
                "rope_scaling field `original_max_position_embeddings` must be > 0",
            ));
        }
        Ok(())
    }

    /// `_compute_llama3_parameters` over `base`, as [`RopeScaling::scale`] rounds.
    fn scale<T: Float>(&self, base: Vec<T>) -> Vec<T> {
        let old64 = self.original_max_position_embeddings as f64;
        let low_wavelen = T::from_f64(old64 / self.low_freq_factor);
        let high_wavelen = T::from_f64(old64 / self.high_freq_factor);
        let band = T::from_f64(self.high_freq_factor - self.low_freq_factor);
        let (old, factor) = (T::from_f64(old64), T::from_f64(self.factor));
        let low = T::from_f64(self.low_freq_factor);
        let two_pi = T::from_f64(2.0 * std::f64::consts::PI);
        base.into_iter()
            .map(|f| {
                let wavelen = two_pi / f;
                let scaled = if wavelen > low_wavelen { f / factor } else { f };
                if wavelen >= high_wavelen && wavelen <= low_wavelen {
                    let smooth = (old / wavelen - low) / band;
                    (T::ONE - smooth) * scaled / factor + smooth * scaled
                } else {
                    scaled
                }
            })
            .collect()
    }
}

/// The `head_dim / 2` inverse frequencies in f64, as transformers'
/// `_compute_default_rope_parameters` (`1 / theta^(2i/d)`), linear scaling
/// (divided by `factor`) and `_compute_llama3_parameters` compute them, with
/// every step in f64. Expects an even `head_dim` and a validated `scaling`
/// ([`Rope::new`] checks both).
pub fn inv_freq(head_dim: usize, theta: f64, scaling: &RopeScaling) -> Vec<f64> {
    let d = head_dim as f64;
    let base: Vec<f64> = (0..head_dim / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f64 / d))
        .collect();
    scaling.scale(base)
}

/// The inverse frequencies as transformers computes them in float32, op by
/// op: the exponent `2i / d` in f32, `theta^e` rounded to f32, its f32
/// reciprocal, then the scaling with its Python scalars rounded to f32 and
/// every tensor op in f32. Same preconditions as [`inv_freq`].
pub fn inv_freq_f32(head_dim: usize, theta: f64, scaling: &RopeScaling) -> Vec<f32> {
    let d = head_dim as f32;
    let th = theta as f32 as f64;
    let base: Vec<f32> = (0..head_dim / 2)
        .map(|i| {
            let e = (2 * i) as f32 / d;
            1.0f32 / (th.powf(e as f64) as f32)
        })
        .collect();
    scaling.scale(base)
}

/// Rotary embedding tables: `cos` and `sin` of shape `[max_positions,
/// head_dim/2]` (row `p` holds `cos(p · inv_freq)`: HF's full-width table is
/// `cat(row, row)`), constants of the requested dtype, held as
/// non-persistent [`Buffer`]s (recomputed from the config, never saved:
/// transformers' `inv_freq` is non-persistent too).
#[derive(Clone, Debug, crate::Module)]
pub struct Rope {
    /// `cos(p · inv_freq[i])`, `[max_positions, head_dim/2]`.
    pub cos: Buffer,
    /// `sin(p · inv_freq[i])`, `[max_positions, head_dim/2]`.
    pub sin: Buffer,
    #[module(skip)]
    head_dim: usize,
    #[module(skip)]
    max_positions: usize,
}

impl Rope {
    /// The tables for `head_dim` (even, > 0) and positions `0..max_positions`
    /// (> 0), base `theta` (finite, > 0), scaled by `scaling`, in `dtype`
    /// (F32: transformers' float32 arithmetic, see the module doc; F64: all in f64).
    ///
    /// Errors: [`Error::InvalidConfig`] naming the field for a bad size, theta,
    /// dtype or scaling, or a table size that overflows.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// use fucina_core::{DType, ExecContext};
    /// use fucina_nn::{Rope, RopeScaling};
    /// let ctx = ExecContext::with_threads(1)?;
    /// let rope = Rope::new(&ctx, DType::F32, 8, 16, 10000.0, &RopeScaling::Default)?;
    /// assert_eq!(rope.cos.shape(), &[16, 4]);
    /// let x = Tensor::randn(&ctx, DType::F32, &[1, 3, 2, 8], 0)?; // [B, T, H, D]
    /// let pos = Tensor::constant(&ctx, &[0i64, 1, 2], &[1, 3])?;
    /// assert_eq!(rope.apply(&x, &pos)?.shape(), &[1, 3, 2, 8]);
    /// # Ok::<(), fucina_nn::Error>(())
    /// ```
    pub fn new(
        ctx: &ExecContext,
        dtype: DType,
        head_dim: usize,
        max_positions: usize,
        theta: f64,
        scaling: &RopeScaling,
    ) -> Result<Rope> {
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(Error::config(
                "Rope",
                format!("head_dim must be even and > 0, got {head_dim}"),
            ));
        }
        if max_positions == 0 {
            return Err(Error::config("Rope", "max_positions must be > 0, got 0"));
        }
        if !(theta.is_finite() && theta > 0.0) {
            return Err(Error::config(
                "Rope",
                format!("theta must be finite and > 0, got {theta}"),
            ));
        }
        scaling.validate()?;
        let half = head_dim / 2;
        let n = max_positions.checked_mul(half).ok_or_else(|| {
            Error::config(
                "Rope",
                format!("a table of {max_positions} x {half} elements overflows usize"),
            )
        })?;
        let (cos, sin) = match dtype {
            DType::F32 => {
                let inv = inv_freq_f32(head_dim, theta, scaling);
                let (mut c, mut s) = (reserve::<f32>(n)?, reserve::<f32>(n)?);
                for p in 0..max_positions {
                    for &f in &inv {
                        let a = (p as f32 * f) as f64;
                        c.push(a.cos() as f32);
                        s.push(a.sin() as f32);
                    }
                }
                let shape = [max_positions, half];
                (
                    Tensor::constant(ctx, &c, &shape)?,
                    Tensor::constant(ctx, &s, &shape)?,
                )
            }
            DType::F64 => {
                let inv = inv_freq(head_dim, theta, scaling);
                let (mut c, mut s) = (reserve::<f64>(n)?, reserve::<f64>(n)?);
                for p in 0..max_positions {
                    for &f in &inv {
                        let a = p as f64 * f;
                        c.push(a.cos());
                        s.push(a.sin());
                    }
                }
                let shape = [max_positions, half];
                (
                    Tensor::constant(ctx, &c, &shape)?,
                    Tensor::constant(ctx, &s, &shape)?,
                )
            }
            other => {
                return Err(Error::config(
                    "Rope",
                    format!("dtype must be F32 or F64, got {other}"),
                ))
            }
        };
        Ok(Rope {
            cos: Buffer::non_persistent(cos)?,
            sin: Buffer::non_persistent(sin)?,
            head_dim,
            max_positions,
        })
    }

    /// The head dim `D` the tables were built for.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// The number of positions the tables cover.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// Rotates `x` (`[B, T, H, D]`, `D = head_dim`, the tables' dtype) by the
    /// angles of `positions` (I64 `[B, T]`, each below `max_positions`):
    /// autograd's fused [`Tensor::rope`], differentiable in `x`.
    pub fn apply(&self, x: &Tensor, positions: &Tensor) -> Result<Tensor> {
        if x.shape().len() != 4 || x.shape()[3] != self.head_dim {
            return Err(Error::input(
                "Rope",
                format!("expected x of shape [B, T, H, {}]", self.head_dim),
                x.shape(),
            ));
        }
        Ok(x.rope(self.cos.tensor(), self.sin.tensor(), positions)?)
    }
}

/// An empty vector with room for `n` elements, or an error (never an abort).
fn reserve<T>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::config("Rope", format!("cannot allocate a table of {n} elements")))?;
    Ok(v)
}
