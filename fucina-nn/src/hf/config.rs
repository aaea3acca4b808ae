//! `config.json` of the Hugging Face decoder families, each read by its
//! `model_type` through a serde struct with transformers' field names and
//! defaults, then normalised to one [`DecoderConfig`] that the one decoder
//! ([`crate::models::decoder`]) is built from; and written back per family
//! ([`DecoderConfig::to_hf_json`]) for `save_pretrained`.
//!
//! | `model_type` | class | what differs |
//! | --- | --- | --- |
//! | `gpt2` | `GPT2LMHeadModel` | learned positions, LayerNorm, GELU (tanh) MLP, fused `c_attn`, biases, tied head |
//! | `llama`, `mistral` | `LlamaForCausalLM` | RoPE, RMSNorm, SwiGLU, GQA, no biases (`attention_bias`, `mlp_bias` optional) |
//! | `qwen2` | `Qwen2ForCausalLM` | as llama, with q/k/v biases |
//! | `qwen3` | `Qwen3ForCausalLM` | as llama, with per-head q/k RMSNorm and an explicit `head_dim` |
//!
//! Validation names the file and the field: an unknown `model_type`, an
//! unsupported `rope_scaling`, `hidden_size` not divisible by the heads, KV
//! heads not dividing the heads, a zero or absurd size, a sliding window.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use super::{file_err, read_json, GenerationConfig};
use crate::activation::Activation;
use crate::error::Result;
use crate::rope::RopeScaling;

/// The families [`DecoderConfig`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelType {
    /// GPT-2 (`GPT2LMHeadModel`).
    Gpt2,
    /// Llama 2/3, TinyLlama, SmolLM2 (`LlamaForCausalLM`).
    Llama,
    /// Mistral without a sliding window (read as Llama, written back as `mistral`).
    Mistral,
    /// Qwen2 / Qwen2.5 (`Qwen2ForCausalLM`).
    Qwen2,
    /// Qwen3 (`Qwen3ForCausalLM`).
    Qwen3,
}

impl ModelType {
    /// Every supported `model_type` string.
    pub const SUPPORTED: &'static str = "gpt2, llama, mistral, qwen2, qwen3";

    /// The `model_type` string of `config.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelType::Gpt2 => "gpt2",
            ModelType::Llama => "llama",
            ModelType::Mistral => "mistral",
            ModelType::Qwen2 => "qwen2",
            ModelType::Qwen3 => "qwen3",
        }
    }

    /// The transformers class that loads this family's checkpoints.
    pub fn architecture(self) -> &'static str {
        match self {
            ModelType::Gpt2 => "GPT2LMHeadModel",
            ModelType::Llama => "LlamaForCausalLM",
            ModelType::Mistral => "MistralForCausalLM",
            ModelType::Qwen2 => "Qwen2ForCausalLM",
            ModelType::Qwen3 => "Qwen3ForCausalLM",
        }
    }

    fn parse(s: &str) -> Option<ModelType> {
        Some(match s {
            "gpt2" => ModelType::Gpt2,
            "llama" => ModelType::Llama,
            "mistral" => ModelType::Mistral,
            "qwen2" => ModelType::Qwen2,
            "qwen3" => ModelType::Qwen3,
            _ => return None,
        })
    }
}

/// How token positions enter the model.
#[derive(Clone, Debug, PartialEq)]
pub enum Positions {
    /// A learned `[max_positions, hidden]` table added to the embeddings (GPT-2).
    Learned,
    /// Rotary embedding of q and k in every layer.
    Rope {
        /// `rope_theta`, the base of the frequencies.
        theta: f64,
        /// `rope_scaling`.
        scaling: RopeScaling,
    },
}

/// The normalisation the blocks use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormKind {
    /// LayerNorm with a bias (GPT-2).
    LayerNorm,
    /// RMSNorm with a weight only (Llama, Qwen).
    RmsNorm,
}

/// The feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MlpKind {
    /// `proj(act(fc(x)))` (GPT-2's `c_fc`, `c_proj`).
    Plain(Activation),
    /// `down(act(gate(x)) ⊙ up(x))` (SwiGLU with `silu`).
    Gated(Activation),
}

/// One decoder family's shape, normalised from its `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// The family.
    pub model_type: ModelType,
    /// Rows of the token embedding (and of the head).
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (divides `num_heads`; equal for plain multi-head attention).
    pub num_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// The longest sequence (rows of GPT-2's position table; RoPE tables).
    pub max_positions: usize,
    /// The norm.
    pub norm: NormKind,
    /// The norms' epsilon.
    pub norm_eps: f64,
    /// Learned positions or RoPE.
    pub positions: Positions,
    /// The feed-forward block.
    pub mlp: MlpKind,
    /// Biases on the q, k, v projections.
    pub qkv_bias: bool,
    /// A bias on the attention output projection.
    pub o_bias: bool,
    /// Biases in the feed-forward projections.
    pub mlp_bias: bool,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3).
    pub qk_norm: bool,
    /// The head is the token embedding's transpose (no `lm_head.weight`).
    pub tie_word_embeddings: bool,
    /// Std of the normal init of a fresh model.
    pub initializer_range: f64,
    /// GPT-2's embedding and residual dropout (`embd_pdrop`, `resid_pdrop`; training mode only).
    pub dropout: f64,
    /// `bos_token_id`, when the config names one.
    pub bos_token_id: Option<i64>,
    /// `eos_token_id` (one id or a list), when the config names any.
    pub eos_token_ids: Vec<i64>,
    /// `pad_token_id`, when the config names one.
    pub pad_token_id: Option<i64>,
}

/// The largest size any single field may take: keeps products of fields in
/// range and rejects a number meant to exhaust memory before anything is allocated.
const MAX_DIM: usize = 1 << 24;
/// The largest parameter count a config may describe (2⁴⁰ elements).
const MAX_PARAMS: u128 = 1 << 40;

/// An id or a list of ids (`eos_token_id` may be either).
#[derive(Deserialize)]
#[serde(untagged)]
enum Ids {
    One(i64),
    Many(Vec<i64>),
}

impl Ids {
    fn into_vec(self) -> Vec<i64> {
        match self {
            Ids::One(i) => vec![i],
            Ids::Many(v) => v,
        }
    }
}

#[derive(Deserialize)]
struct Gpt2Raw {
    vocab_size: usize,
    #[serde(default = "d_1024")]
    n_positions: usize,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    #[serde(default)]
    n_inner: Option<usize>,
    #[serde(default = "d_gelu_new")]
    activation_function: String,
    #[serde(default = "d_1e5")]
    layer_norm_epsilon: f64,
    #[serde(default = "d_002")]
    initializer_range: f64,
    #[serde(default = "d_true")]
    tie_word_embeddings: bool,
    #[serde(default = "d_true")]
    scale_attn_weights: bool,
    #[serde(default)]
    scale_attn_by_inverse_layer_idx: bool,
    #[serde(default)]
    reorder_and_upcast_attn: bool,
    #[serde(default = "d_01")]
    embd_pdrop: f64,
    #[serde(default = "d_01")]
    resid_pdrop: f64,
}

#[derive(Deserialize)]
struct LlamaRaw {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    #[serde(default)]
    num_key_value_heads: Option<usize>,
    #[serde(default)]
    head_dim: Option<usize>,
    #[serde(default = "d_silu")]
    hidden_act: String,
    #[serde(default = "d_2048")]
    max_position_embeddings: usize,
    #[serde(default = "d_1e6")]
    rms_norm_eps: f64,
    #[serde(default)]
    rope_theta: Option<f64>,
    #[serde(default)]
    rope_scaling: Option<Value>,
    #[serde(default)]
    rope_parameters: Option<Value>,
    #[serde(default)]
    attention_bias: Option<bool>,
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default = "d_002")]
    initializer_range: f64,
    #[serde(default = "d_1usize")]
    pretraining_tp: usize,
    #[serde(default)]
    sliding_window: Option<Value>,
    #[serde(default)]
    use_sliding_window: bool,
    #[serde(default)]
    partial_rotary_factor: Option<f64>,
}

fn d_1024() -> usize {
    1024
}
fn d_2048() -> usize {
    2048
}
fn d_1usize() -> usize {
    1
}
fn d_gelu_new() -> String {
    "gelu_new".into()
}
fn d_silu() -> String {
    "silu".into()
}
fn d_1e5() -> f64 {
    1e-5
}
fn d_1e6() -> f64 {
    1e-6
}
fn d_002() -> f64 {
    0.02
}
fn d_01() -> f64 {
    0.1
}
fn d_true() -> bool {
    true
}

/// The token ids any family's config may carry.
#[derive(Deserialize, Default)]
struct TokenIds {
    #[serde(default)]
    bos_token_id: Option<Ids>,
    #[serde(default)]
    eos_token_id: Option<Ids>,
    #[serde(default)]
    pad_token_id: Option<Ids>,
}

impl DecoderConfig {
    /// Reads and validates a `config.json`.
    pub fn from_file(path: &Path) -> Result<DecoderConfig> {
        let v = read_json(path)?;
        DecoderConfig::from_json(path, &v)
    }

    /// Parses and validates a `config.json` already read (`path` names it in errors).
    pub fn from_json(path: &Path, v: &Value) -> Result<DecoderConfig> {
        let err = |msg: String| file_err(path, msg);
        let Some(obj) = v.as_object() else {
            return Err(err("config.json must be a JSON object".into()));
        };
        let mt = match obj.get("model_type") {
            Some(Value::String(s)) => ModelType::parse(s).ok_or_else(|| {
                err(format!(
                    "`model_type` `{s}` is not supported (supported: {})",
                    ModelType::SUPPORTED
                ))
            })?,
            Some(other) => return Err(err(format!("`model_type` must be a string, got {other}"))),
            None => return Err(err("`model_type` is missing".into())),
        };
        let field_err = |e: serde_json::Error| err(format!("{}: {e}", mt.as_str()));
        let ids: TokenIds = serde_json::from_value(v.clone()).map_err(field_err)?;
        let one_id = |name: &str, ids: Option<Ids>| -> Result<Option<i64>> {
            match ids.map(Ids::into_vec) {
                None => Ok(None),
                Some(v) if v.len() == 1 => Ok(Some(v[0])),
                Some(v) if v.is_empty() => Ok(None),
                Some(_) => Err(err(format!("`{name}` must be one id"))),
            }
        };
        let bos_token_id = one_id("bos_token_id", ids.bos_token_id)?;
        let pad_token_id = one_id("pad_token_id", ids.pad_token_id)?;
        let eos_token_ids = ids.eos_token_id.map(Ids::into_vec).unwrap_or_default();
        let mut c = match mt {
            ModelType::Gpt2 => {
                let r: Gpt2Raw = serde_json::from_value(v.clone()).map_err(field_err)?;
                Self::from_gpt2(path, r)?
            }
            _ => {
                let r: LlamaRaw = serde_json::from_value(v.clone()).map_err(field_err)?;
                Self::from_llama(path, mt, r)?
            }
        };
        c.bos_token_id = bos_token_id;
        c.eos_token_ids = eos_token_ids;
        c.pad_token_id = pad_token_id;
        c.validate_at(path)?;
        Ok(c)
    }

    fn from_gpt2(path: &Path, r: Gpt2Raw) -> Result<DecoderConfig> {
        let err = |msg: String| file_err(path, msg);
        if !r.scale_attn_weights || r.scale_attn_by_inverse_layer_idx || r.reorder_and_upcast_attn {
            return Err(err(
                "gpt2: only scale_attn_weights = true, scale_attn_by_inverse_layer_idx = false \
                 and reorder_and_upcast_attn = false are supported"
                    .into(),
            ));
        }
        let act = parse_act(path, "activation_function", &r.activation_function)?;
        if r.n_head == 0 || !r.n_embd.is_multiple_of(r.n_head) {
            return Err(err(format!(
                "`n_embd` {} is not divisible by `n_head` {}",
                r.n_embd, r.n_head
            )));
        }
        if (r.embd_pdrop - r.resid_pdrop).abs() > 0.0 {
            return Err(err(format!(
                "`embd_pdrop` {} and `resid_pdrop` {} must be equal (one dropout rate)",
                r.embd_pdrop, r.resid_pdrop
            )));
        }
        Ok(DecoderConfig {
            model_type: ModelType::Gpt2,
            vocab_size: r.vocab_size,
            hidden_size: r.n_embd,
            num_layers: r.n_layer,
            num_heads: r.n_head,
            num_kv_heads: r.n_head,
            head_dim: r.n_embd / r.n_head,
            intermediate_size: r.n_inner.unwrap_or(4 * r.n_embd.min(MAX_DIM)),
            max_positions: r.n_positions,
            norm: NormKind::LayerNorm,
            norm_eps: r.layer_norm_epsilon,
            positions: Positions::Learned,
            mlp: MlpKind::Plain(act),
            qkv_bias: true,
            o_bias: true,
            mlp_bias: true,
            qk_norm: false,
            tie_word_embeddings: r.tie_word_embeddings,
            initializer_range: r.initializer_range,
            dropout: r.resid_pdrop,
            bos_token_id: None,
            eos_token_ids: Vec::new(),
            pad_token_id: None,
        })
    }

    fn from_llama(path: &Path, mt: ModelType, r: LlamaRaw) -> Result<DecoderConfig> {
        let err = |msg: String| file_err(path, msg);
        if r.pretraining_tp != 1 {
            return Err(err(format!(
                "`pretraining_tp` {} is not supported (only 1)",
                r.pretraining_tp
            )));
        }
        let window = r.sliding_window.as_ref().is_some_and(|w| !w.is_null());
        let uses_window = match mt {
            // Qwen keeps `sliding_window` set and switches it with `use_sliding_window`.
            ModelType::Qwen2 | ModelType::Qwen3 => r.use_sliding_window,
            _ => window,
        };
        if uses_window {
            return Err(err(
                "`sliding_window` attention is not supported (set it to null / use_sliding_window false)"
                    .into(),
            ));
        }
        if r.partial_rotary_factor.is_some_and(|f| f != 1.0) {
            return Err(err(
                "`partial_rotary_factor` other than 1 is not supported".into()
            ));
        }
        let act = parse_act(path, "hidden_act", &r.hidden_act)?;
        if r.head_dim.is_none()
            && (r.num_attention_heads == 0 || !r.hidden_size.is_multiple_of(r.num_attention_heads))
        {
            return Err(err(format!(
                "`hidden_size` {} is not divisible by `num_attention_heads` {}",
                r.hidden_size, r.num_attention_heads
            )));
        }
        let heads = r.num_attention_heads;
        let kv = r.num_key_value_heads.unwrap_or(heads);
        let default_head_dim = match mt {
            ModelType::Qwen3 => 128,
            _ => r.hidden_size / heads.max(1),
        };
        let head_dim = r.head_dim.unwrap_or(default_head_dim);
        // transformers v5 folds rope_theta and rope_scaling into `rope_parameters`.
        let (theta, scaling_value) = match &r.rope_parameters {
            Some(p) if !p.is_null() => {
                let theta = p.get("rope_theta").and_then(Value::as_f64).or(r.rope_theta);
                (theta, Some(p.clone()))
            }
            _ => (r.rope_theta, r.rope_scaling.clone()),
        };
        let theta = theta.unwrap_or(match mt {
            ModelType::Qwen2 | ModelType::Qwen3 => 1_000_000.0,
            _ => 10_000.0,
        });
        let scaling = RopeScaling::from_hf(scaling_value.as_ref())
            .map_err(|e| err(format!("`rope_scaling`: {e}")))?;
        let attention_bias = r.attention_bias.unwrap_or(false);
        let (qkv_bias, o_bias) = match mt {
            ModelType::Qwen2 => (true, false),
            _ => (attention_bias, attention_bias),
        };
        Ok(DecoderConfig {
            model_type: mt,
            vocab_size: r.vocab_size,
            hidden_size: r.hidden_size,
            num_layers: r.num_hidden_layers,
            num_heads: heads,
            num_kv_heads: kv,
            head_dim,
            intermediate_size: r.intermediate_size,
            max_positions: r.max_position_embeddings,
            norm: NormKind::RmsNorm,
            norm_eps: r.rms_norm_eps,
            positions: Positions::Rope { theta, scaling },
            mlp: MlpKind::Gated(act),
            qkv_bias,
            o_bias,
            mlp_bias: r.mlp_bias,
            qk_norm: mt == ModelType::Qwen3,
            tie_word_embeddings: r.tie_word_embeddings.unwrap_or(false),
            initializer_range: r.initializer_range,
            dropout: 0.0,
            bos_token_id: None,
            eos_token_ids: Vec::new(),
            pad_token_id: None,
        })
    }

    /// Checks the sizes: every one positive and at most 2²⁴, heads dividing
    /// the width (GPT-2) and KV heads dividing the heads, an even head width
    /// for RoPE, norms' epsilon and dropout in range, and at most 2⁴⁰
    /// parameters in all. Errors name the field.
    pub fn validate(&self) -> Result<()> {
        self.validate_at(Path::new("config.json"))
    }

    fn validate_at(&self, path: &Path) -> Result<()> {
        let err = |msg: String| file_err(path, msg);
        let dims = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_layers),
            ("num_attention_heads", self.num_heads),
            ("num_key_value_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_positions),
        ];
        for (name, v) in dims {
            if v == 0 || v > MAX_DIM {
                return Err(err(format!("`{name}` {v} is not in 1..={MAX_DIM}")));
            }
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(err(format!(
                "`num_key_value_heads` {} does not divide `num_attention_heads` {}",
                self.num_kv_heads, self.num_heads
            )));
        }
        if matches!(self.positions, Positions::Rope { .. }) && !self.head_dim.is_multiple_of(2) {
            return Err(err(format!(
                "`head_dim` {} must be even for RoPE",
                self.head_dim
            )));
        }
        if let Positions::Rope { theta, .. } = &self.positions {
            if !(theta.is_finite() && *theta > 1.0) {
                return Err(err(format!(
                    "`rope_theta` {theta} must be a finite number > 1"
                )));
            }
        }
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0) {
            return Err(err(format!(
                "the norm epsilon {} must be positive",
                self.norm_eps
            )));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(err(format!("dropout {} is not in [0, 1)", self.dropout)));
        }
        if !(self.initializer_range.is_finite() && self.initializer_range >= 0.0) {
            return Err(err(format!(
                "`initializer_range` {} must be finite and >= 0",
                self.initializer_range
            )));
        }
        if self.num_parameters() > MAX_PARAMS {
            return Err(err(format!(
                "the config describes {} parameters, more than 2^40",
                self.num_parameters()
            )));
        }
        Ok(())
    }

    /// The number of parameter elements the config describes (as u128: no overflow
    /// for any sizes that passed the per-field bound).
    pub fn num_parameters(&self) -> u128 {
        let u = |x: usize| x as u128;
        let (h, v, l) = (u(self.hidden_size), u(self.vocab_size), u(self.num_layers));
        let (q, kv) = (
            u(self.num_heads) * u(self.head_dim),
            u(self.num_kv_heads) * u(self.head_dim),
        );
        let f = u(self.intermediate_size);
        let norm = if self.norm == NormKind::LayerNorm {
            2 * h
        } else {
            h
        };
        let mut layer = h * (q + 2 * kv) + q * h + 2 * norm;
        layer += if self.qkv_bias { q + 2 * kv } else { 0 };
        layer += if self.o_bias { h } else { 0 };
        layer += match self.mlp {
            MlpKind::Plain(_) => 2 * h * f + if self.mlp_bias { f + h } else { 0 },
            MlpKind::Gated(_) => 3 * h * f + if self.mlp_bias { 2 * f + h } else { 0 },
        };
        if self.qk_norm {
            layer += 2 * u(self.head_dim);
        }
        let mut total = v * h + l * layer + norm;
        if self.positions == Positions::Learned {
            total += u(self.max_positions) * h;
        }
        if !self.tie_word_embeddings {
            total += v * h;
        }
        total
    }

    /// This config as the family's `config.json` (what transformers'
    /// `from_pretrained` reads back to the same model).
    pub fn to_hf_json(&self) -> Value {
        let mut v = match self.model_type {
            ModelType::Gpt2 => json!({
                "vocab_size": self.vocab_size,
                "n_positions": self.max_positions,
                "n_ctx": self.max_positions,
                "n_embd": self.hidden_size,
                "n_layer": self.num_layers,
                "n_head": self.num_heads,
                "n_inner": self.intermediate_size,
                "activation_function": act_name(self.mlp),
                "layer_norm_epsilon": self.norm_eps,
                "resid_pdrop": self.dropout,
                "embd_pdrop": self.dropout,
                "attn_pdrop": 0.0,
                "scale_attn_weights": true,
            }),
            _ => {
                let (theta, scaling) = match &self.positions {
                    Positions::Rope { theta, scaling } => (*theta, scaling.to_hf()),
                    Positions::Learned => (10_000.0, Value::Null),
                };
                let mut v = json!({
                    "vocab_size": self.vocab_size,
                    "hidden_size": self.hidden_size,
                    "intermediate_size": self.intermediate_size,
                    "num_hidden_layers": self.num_layers,
                    "num_attention_heads": self.num_heads,
                    "num_key_value_heads": self.num_kv_heads,
                    "head_dim": self.head_dim,
                    "hidden_act": act_name(self.mlp),
                    "max_position_embeddings": self.max_positions,
                    "rms_norm_eps": self.norm_eps,
                    "rope_theta": theta,
                    "rope_scaling": scaling,
                    "sliding_window": null,
                    "use_sliding_window": false,
                    "attention_dropout": 0.0,
                });
                if self.model_type != ModelType::Qwen2 {
                    v["attention_bias"] = json!(self.qkv_bias);
                }
                if matches!(self.model_type, ModelType::Llama) {
                    v["mlp_bias"] = json!(self.mlp_bias);
                    v["pretraining_tp"] = json!(1);
                }
                v
            }
        };
        v["model_type"] = json!(self.model_type.as_str());
        v["architectures"] = json!([self.model_type.architecture()]);
        v["tie_word_embeddings"] = json!(self.tie_word_embeddings);
        v["initializer_range"] = json!(self.initializer_range);
        v["torch_dtype"] = json!("float32");
        if let Value::Object(ids) = self.generation_config().to_json() {
            for (k, id) in ids {
                v[k] = id;
            }
        }
        v
    }

    /// The token ids of this config as a `generation_config.json`.
    pub fn generation_config(&self) -> GenerationConfig {
        GenerationConfig {
            bos_token_id: self.bos_token_id,
            eos_token_ids: self.eos_token_ids.clone(),
            pad_token_id: self.pad_token_id,
        }
    }

    /// The path `config.json` would have in `dir`.
    pub fn path_in(dir: &Path) -> PathBuf {
        dir.join("config.json")
    }
}

fn parse_act(path: &Path, field: &str, s: &str) -> Result<Activation> {
    let act: Activation = serde_json::from_value(Value::String(s.to_string())).map_err(|_| {
        file_err(
            path,
            format!("`{field}` `{s}` is not a supported activation"),
        )
    })?;
    Ok(act)
}

fn act_name(mlp: MlpKind) -> &'static str {
    let a = match mlp {
        MlpKind::Plain(a) | MlpKind::Gated(a) => a,
    };
    match a {
        Activation::Gelu => "gelu",
        Activation::GeluTanh => "gelu_new",
        Activation::Silu => "silu",
        Activation::Relu => "relu",
        Activation::Tanh => "tanh",
        Activation::Sigmoid => "sigmoid",
        Activation::Softplus => "softplus",
        Activation::Mish => "mish",
        Activation::Hardswish => "hardswish",
        Activation::Identity => "linear",
    }
}
