//! Rotary position embedding in Hugging Face's rotate-half convention:
//! `rope(x) = x·cos + rotate_half(x)·sin`, `rotate_half([x₁, x₂]) = [−x₂, x₁]`
//! over the last axis (head width D, halves of D/2), with angles
//! `position · inv_freq` from `rope_theta` and `rope_scaling` (`default`,
//! `linear`, `llama3`; any other type is an error naming it).
//!
//! The tables are buffers of the model (recomputed from the config, never
//! saved). [`Rope::apply`] is composed from differentiable ops (an index
//! of the tables by position, products, a concat), so its backward is
//! theirs: `gx = g·cos + rotate_halfᵀ(g·sin)`, `rotate_halfᵀ([a, b]) = [b, −a]`.
//!
//! Numerics follow transformers: for f32 models the inverse frequencies
//! are rounded to f32 and the angles formed in f32, as
//! `LlamaRotaryEmbedding` does; f64 models compute everything in f64.

use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use serde_json::{json, Value};

use crate::error::{Error, Result};

/// `rope_scaling` of a Hugging Face config.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    Default,
    /// Positions divided by `factor` (all frequencies over `factor`).
    Linear {
        /// The scale.
        factor: f64,
    },
    /// Llama 3.1's frequency-dependent scaling.
    Llama3 {
        /// Low frequencies are divided by this.
        factor: f64,
        /// Wavelengths above `original / low_freq_factor` are scaled fully.
        low_freq_factor: f64,
        /// Wavelengths below `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was trained with.
        original_max_position_embeddings: usize,
    },
}

impl RopeScaling {
    /// Parses `rope_scaling` (or transformers v5's `rope_parameters`):
    /// absent or null is [`RopeScaling::Default`]; the type is `rope_type`
    /// (or the legacy `type`).
    pub fn from_hf(v: Option<&Value>) -> Result<RopeScaling> {
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(RopeScaling::Default);
        };
        let err = |msg: String| Error::config("RopeScaling", msg);
        let Some(obj) = v.as_object() else {
            return Err(err(format!("must be an object or null, got {v}")));
        };
        let ty = obj
            .get("rope_type")
            .or_else(|| obj.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let num = |name: &str| -> Result<f64> {
            obj.get(name)
                .and_then(Value::as_f64)
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| err(format!("`{name}` is missing or not a positive number")))
        };
        Ok(match ty {
            "default" => RopeScaling::Default,
            "linear" => RopeScaling::Linear {
                factor: num("factor")?,
            },
            "llama3" => {
                let (low, high) = (num("low_freq_factor")?, num("high_freq_factor")?);
                if high <= low {
                    return Err(err(format!(
                        "`high_freq_factor` {high} must exceed `low_freq_factor` {low}"
                    )));
                }
                let orig = num("original_max_position_embeddings")?;
                if orig.fract() != 0.0 || orig > (1u64 << 32) as f64 {
                    return Err(err(format!(
                        "`original_max_position_embeddings` {orig} is not a position count"
                    )));
                }
                RopeScaling::Llama3 {
                    factor: num("factor")?,
                    low_freq_factor: low,
                    high_freq_factor: high,
                    original_max_position_embeddings: orig as usize,
                }
            }
            other => {
                return Err(err(format!(
                "rope_scaling type `{other}` is not supported (supported: default, linear, llama3)"
            )))
            }
        })
    }

    /// The `rope_scaling` value of a config (null for the default).
    pub fn to_hf(&self) -> Value {
        match *self {
            RopeScaling::Default => Value::Null,
            RopeScaling::Linear { factor } => json!({"rope_type": "linear", "factor": factor}),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => json!({
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings,
            }),
        }
    }
}

/// The inverse frequencies `[D/2]`: `1 / θ^(2i/D)`, then scaled
/// (transformers' `_compute_default_rope_parameters`, linear and
/// `_compute_llama3_parameters`).
pub fn inv_freq(head_dim: usize, theta: f64, scaling: &RopeScaling) -> Vec<f64> {
    let base: Vec<f64> = (0..head_dim / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f64 / head_dim as f64))
        .collect();
    match *scaling {
        RopeScaling::Default => base,
        RopeScaling::Linear { factor } => base.into_iter().map(|f| f / factor).collect(),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let orig = original_max_position_embeddings as f64;
            let low_wavelen = orig / low_freq_factor;
            let high_wavelen = orig / high_freq_factor;
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen > low_wavelen {
                        f / factor
                    } else if wavelen < high_wavelen {
                        f
                    } else {
                        let smooth = (orig / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
    }
}

/// RoPE's cos and sin tables `[max_positions, D]` (each row `[c, c]`, the
/// half-width angles repeated, as transformers' `cat(freqs, freqs)`).
#[derive(Debug)]
pub struct Rope {
    /// `cos(position · inv_freq)`, halves repeated.
    pub cos: Tensor,
    /// `sin(position · inv_freq)`, halves repeated.
    pub sin: Tensor,
    head_dim: usize,
}

impl Rope {
    /// The tables for head width `head_dim` (even) and positions
    /// `0..max_positions`, in `dtype` (f32 or f64).
    pub fn new(
        ctx: &ExecContext,
        dtype: DType,
        head_dim: usize,
        max_positions: usize,
        theta: f64,
        scaling: &RopeScaling,
    ) -> Result<Rope> {
        if head_dim == 0 || !head_dim.is_multiple_of(2) || max_positions == 0 {
            return Err(Error::config(
                "Rope",
                format!("head_dim {head_dim} must be even and positive, max_positions {max_positions} positive"),
            ));
        }
        let n = fucina_core::shape::numel_of("Rope", &[max_positions, head_dim])?;
        let inv = inv_freq(head_dim, theta, scaling);
        let (mut cos, mut sin) = (
            fucina_core::tensor::try_vec_with_capacity::<f64>(n)?,
            fucina_core::tensor::try_vec_with_capacity::<f64>(n)?,
        );
        for p in 0..max_positions {
            let row: Vec<f64> = match dtype {
                // transformers: f32 inv_freq, f32 product, then cos/sin.
                DType::F32 => inv
                    .iter()
                    .map(|&f| ((p as f32) * (f as f32)) as f64)
                    .collect(),
                _ => inv.iter().map(|&f| p as f64 * f).collect(),
            };
            // Both halves of a row hold the same angles (transformers' cat(freqs, freqs)).
            for _ in 0..2 {
                cos.extend(row.iter().map(|a| a.cos()));
                sin.extend(row.iter().map(|a| a.sin()));
            }
        }
        let shape = [max_positions, head_dim];
        let make = |v: &[f64]| -> Result<Tensor> {
            let raw = ctx.to_dtype(&ctx.from_slice(v, &shape)?, dtype)?;
            Ok(Tensor::from_raw(ctx, raw, false))
        };
        Ok(Rope {
            cos: make(&cos)?,
            sin: make(&sin)?,
            head_dim,
        })
    }

    /// The head width.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// The longest position + 1.
    pub fn max_positions(&self) -> usize {
        self.cos.shape()[0]
    }

    /// Rotates `x [B, T, H, D]` by the angles of `positions` (integer `[B, T]`).
    pub fn apply(&self, x: &Tensor, positions: &Tensor) -> Result<Tensor> {
        let s = x.shape();
        if x.rank() != 4 || s[3] != self.head_dim || positions.shape() != &s[..2] {
            return Err(Error::input(
                "Rope",
                format!(
                    "x must be [B, T, H, {}] and positions [B, T] (positions {:?})",
                    self.head_dim,
                    positions.shape()
                ),
                s,
            ));
        }
        let (b, t, d) = (s[0], s[1], s[3]);
        let idx = positions.reshape([(b * t) as isize])?;
        let shape = [b as isize, t as isize, 1, d as isize];
        let cos = self.cos.index_select(0, &idx)?.reshape(shape)?;
        let sin = self.sin.index_select(0, &idx)?.reshape(shape)?;
        let h = d / 2;
        let x1 = x.narrow(3, 0, h)?;
        let x2 = x.narrow(3, h, h)?;
        let rot = Tensor::concat(&[&x2.neg()?, &x1], 3)?;
        Ok(x.mul(&cos)?.add(&rot.mul(&sin)?)?)
    }
}
