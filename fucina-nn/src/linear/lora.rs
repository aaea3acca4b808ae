//! LoRA (low-rank adaptation) on frozen `Linear` layers, in Hugging Face
//! PEFT's layout and file format.
//!
//! An adapter on a `Linear` of `in → out` holds `lora_A.weight [r, in]`
//! (kaiming-uniform, PyTorch's `nn.Linear` default, as PEFT) and
//! `lora_B.weight [out, r]` (zeros, so the initial delta is exactly zero);
//! the layer computes `W·x + b + scale·B(A(dropout(x)))` with
//! `scale = alpha / r` (`alpha / √r` with `use_rslora`). [`apply_lora`]
//! attaches adapters to the linears of any [`Module`] (found with
//! `module::for_each_mut`) whose dotted path matches a target (PEFT's rule:
//! the path equals the target or ends with `.target`) and freezes everything
//! else, so only adapter parameters train.
//!
//! Merging adds `scale·B·A` into the base weight and keeps the original
//! weight tensor, so unmerging restores it bit for bit (subtracting the
//! delta back would not: floating-point addition does not round-trip). If
//! the base weight was replaced while merged, unmerging subtracts the delta
//! that was added from the new weight instead of restoring the stale copy.
//!
//! A bf16/f16 base (frozen, see `CausalLm::store_frozen_weights`) takes
//! adapters in the compute dtype: they are made in the [`Init`]'s dtype,
//! which must be f32 or f64, never the weight's. Merging into a bf16/f16
//! weight is computed in f32 (`widen(W) + scale·B·A`) and rounded once to
//! the weight's dtype (round-to-nearest-even), so the merged forward differs
//! from the unmerged one by that rounding; unmerging restores the original
//! weight bit for bit.
//!
//! Files ([`save_adapter`], [`load_adapter`]): `adapter_model.safetensors`
//! with PEFT's key names (`base_model.model.<path>.lora_A.weight`) and
//! `adapter_config.json` with PEFT's fields, so an adapter trained here loads
//! in Python's `peft` (`PeftModel.from_pretrained`) and one trained there
//! loads here. Supported: `peft_type = "LORA"`, a list of target modules,
//! `bias = "none"`, no DoRA, no per-module rank or alpha patterns.

use std::cell::RefCell;
use std::path::Path;

use fucina_autograd::io::{self as sdio, LoadOptions, SaveOptions};
use fucina_autograd::{no_grad, RawTensor, Tensor};
use fucina_core::kernels::elementwise::BinaryOp;
use fucina_core::DType;
use serde::{Deserialize, Serialize};

use super::Linear;
use crate::dropout::Dropout;
use crate::error::{Error, Result};
use crate::init::{Dist, Init};
use crate::module::{for_each_mut, Module};

/// The key prefix PEFT gives every adapter tensor of a `PeftModel`.
pub const PEFT_PREFIX: &str = "base_model.model.";
/// PEFT's adapter weights file name.
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";
/// PEFT's adapter config file name.
pub const ADAPTER_CONFIG: &str = "adapter_config.json";
/// The PEFT release whose `adapter_config.json` fields [`LoraConfig::new`] writes.
pub const PEFT_FORMAT_VERSION: &str = "0.21.2";

/// One LoRA matrix (`lora_A` or `lora_B`), a bias-free linear map.
#[derive(Clone, Debug, crate::Module)]
pub struct LoraWeight {
    /// `[r, in]` for A, `[out, r]` for B.
    pub weight: Tensor,
}

/// What [`Linear::merge_lora`] keeps to undo itself.
#[derive(Clone, Debug)]
struct Merged {
    /// The weight before the merge (restored bit for bit when unchanged).
    original: RawTensor,
    /// The weight the merge set: `original + scale·B·A`.
    merged: RawTensor,
}

/// The adapter attached to a [`Linear`] (its `lora` field).
#[derive(Clone, Debug, crate::Module)]
pub struct LoraAdapter {
    /// `lora_A.weight [r, in]`.
    #[module(rename = "lora_A")]
    pub lora_a: LoraWeight,
    /// `lora_B.weight [out, r]`.
    #[module(rename = "lora_B")]
    pub lora_b: LoraWeight,
    /// Dropout on the adapter's input (when `lora_dropout > 0`).
    pub dropout: Option<Dropout>,
    /// `alpha / r` (or `alpha / √r`).
    #[module(skip)]
    pub scale: f64,
    /// While merged: the base weight from before [`Linear::merge_lora`] and
    /// the merged weight it set.
    #[module(skip)]
    original: RefCell<Option<Merged>>,
}

impl LoraAdapter {
    /// A fresh adapter for a `in → out` layer: A kaiming-uniform, B zero.
    pub fn new(
        init: &mut Init,
        in_features: usize,
        out_features: usize,
        r: usize,
        scale: f64,
        dropout: f64,
    ) -> Result<LoraAdapter> {
        if r == 0 {
            return Err(Error::config("LoraAdapter", "r must be positive"));
        }
        let a = init.param(&[r, in_features], Dist::kaiming_uniform(in_features))?;
        let b = init.param(&[out_features, r], Dist::Zeros)?;
        let dropout = if dropout > 0.0 {
            Some(Dropout::new(init, dropout)?)
        } else {
            None
        };
        Ok(LoraAdapter {
            lora_a: LoraWeight { weight: a },
            lora_b: LoraWeight { weight: b },
            dropout,
            scale,
            original: RefCell::new(None),
        })
    }

    /// The rank.
    pub fn r(&self) -> usize {
        self.lora_a.weight.shape()[0]
    }

    /// `scale·B(A(dropout(x)))` for `x [..., in]`.
    pub fn delta(&self, x: &Tensor) -> Result<Tensor> {
        let h = match &self.dropout {
            Some(d) => d.forward(x)?,
            None => x.clone(),
        };
        let h = h
            .linear(&self.lora_a.weight, None)?
            .linear(&self.lora_b.weight, None)?;
        Ok(h.mul_scalar(self.scale)?)
    }

    /// Whether the delta is merged into the base weight.
    pub fn is_merged(&self) -> bool {
        self.original.borrow().is_some()
    }
}

impl Linear {
    /// Adds `scale·B·A` into `weight` (PEFT's `merge`), keeping the
    /// original weight; the forward then skips the adapter. An error when
    /// no adapter is attached or it is merged already.
    pub fn merge_lora(&self) -> Result<()> {
        let Some(l) = &self.lora else {
            return Err(Error::config(
                "Linear",
                "merge_lora: no LoRA adapter attached",
            ));
        };
        if l.is_merged() {
            return Err(Error::config("Linear", "merge_lora: already merged"));
        }
        let merged = {
            let _ng = no_grad();
            let delta = l
                .lora_b
                .weight
                .matmul(&l.lora_a.weight)?
                .mul_scalar(l.scale)?;
            let w = self.weight.raw()?;
            if w.dtype() == delta.dtype() {
                self.weight.add(&delta)?.raw()?
            } else {
                // A bf16/f16 base: the sum in the adapter's dtype, rounded once.
                let ctx = self.weight.ctx();
                let sum = widened(ctx, &w, delta.dtype())?;
                let sum = ctx.binary(&sum, &delta.raw()?, BinaryOp::Add)?;
                ctx.to_dtype(&sum, w.dtype())?
            }
        };
        let original = self.weight.raw()?;
        self.weight.set_value(merged.clone_view())?;
        *l.original.borrow_mut() = Some(Merged { original, merged });
        Ok(())
    }

    /// Takes the merged delta back out of the weight. When the weight is
    /// still the one [`Linear::merge_lora`] set, the weight from before the
    /// merge is restored bit for bit; when it was replaced meanwhile (new
    /// base weights loaded or assigned), the delta the merge added is
    /// subtracted from the current weight (PEFT's `unmerge`), so the new
    /// base is kept rather than overwritten by the stale pre-merge copy.
    pub fn unmerge_lora(&self) -> Result<()> {
        let Some(l) = &self.lora else {
            return Err(Error::config(
                "Linear",
                "unmerge_lora: no LoRA adapter attached",
            ));
        };
        let restored = {
            let state = l.original.borrow();
            let Some(m) = state.as_ref() else {
                return Err(Error::config("Linear", "unmerge_lora: not merged"));
            };
            let current = self.weight.raw()?;
            let ctx = self.weight.ctx();
            if same_bits(ctx, &current, &m.merged)? {
                m.original.clone_view()
            } else {
                // current − (merged − original): exactly the delta added (in
                // the adapter's dtype for a bf16/f16 base, rounded once).
                let dt = l.lora_a.weight.dtype();
                let (cur, mer, ori) = (
                    widened(ctx, &current, dt)?,
                    widened(ctx, &m.merged, dt)?,
                    widened(ctx, &m.original, dt)?,
                );
                let delta = ctx.binary(&mer, &ori, BinaryOp::Sub)?;
                let back = ctx.binary(&cur, &delta, BinaryOp::Sub)?;
                if back.dtype() == current.dtype() {
                    back
                } else {
                    ctx.to_dtype(&back, current.dtype())?
                }
            }
        };
        self.weight.set_value(restored)?;
        *l.original.borrow_mut() = None;
        Ok(())
    }
}

/// `t` in `dtype` (a view of it when it already is; a bf16/f16 weight
/// widened exactly, for merging only).
fn widened(ctx: &fucina_core::ExecContext, t: &RawTensor, dtype: DType) -> Result<RawTensor> {
    if t.dtype() == dtype {
        return Ok(t.clone_view());
    }
    Ok(ctx.to_dtype(t, dtype)?)
}

/// Whether two tensors of one shape and dtype hold the same bytes.
fn same_bits(ctx: &fucina_core::ExecContext, a: &RawTensor, b: &RawTensor) -> Result<bool> {
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return Ok(false);
    }
    if a.buffer().same_as(b.buffer()) && a.offset() == b.offset() && a.strides() == b.strides() {
        return Ok(true);
    }
    let (a, b) = (ctx.contiguous(a)?, ctx.contiguous(b)?);
    Ok(a.as_bytes()? == b.as_bytes()?)
}

/// A LoRA configuration, serialised as PEFT's `adapter_config.json`. The
/// fields fucina reads are typed; every other PEFT field is kept in
/// `other` and written back unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// Must be `"LORA"`.
    pub peft_type: String,
    /// The rank.
    pub r: usize,
    /// The scaling numerator.
    pub lora_alpha: f64,
    /// Dropout on the adapter input.
    pub lora_dropout: f64,
    /// Module names: a linear is adapted when its path equals one or ends
    /// with `.` + one (PEFT's rule).
    pub target_modules: Vec<String>,
    /// Must be `"none"` (no bias adapters).
    pub bias: String,
    /// Must be `false` (PyTorch's `[out, in]` weight layout).
    pub fan_in_fan_out: bool,
    /// `scale = alpha / √r` instead of `alpha / r`.
    #[serde(default)]
    pub use_rslora: bool,
    /// Must be `false`.
    #[serde(default)]
    pub use_dora: bool,
    /// Must be empty.
    #[serde(default)]
    pub rank_pattern: serde_json::Map<String, serde_json::Value>,
    /// Must be empty.
    #[serde(default)]
    pub alpha_pattern: serde_json::Map<String, serde_json::Value>,
    /// Every other PEFT field, kept as read.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

impl LoraConfig {
    /// A config with PEFT's defaults for every other field (as PEFT
    /// [`PEFT_FORMAT_VERSION`] writes them for a bare `BertModel`).
    pub fn new(r: usize, lora_alpha: f64, target_modules: &[&str]) -> LoraConfig {
        use serde_json::{json, Value};
        let other: serde_json::Map<String, Value> = [
            ("alora_invocation_tokens", Value::Null),
            ("arrow_config", Value::Null),
            ("auto_mapping", Value::Null),
            ("base_model_name_or_path", Value::Null),
            ("corda_config", Value::Null),
            ("ensure_weight_tying", json!(false)),
            ("eva_config", Value::Null),
            ("exclude_modules", Value::Null),
            ("inference_mode", json!(true)),
            ("init_lora_weights", json!(true)),
            ("kasa_config", Value::Null),
            ("layer_replication", Value::Null),
            ("layers_pattern", Value::Null),
            ("layers_to_transform", Value::Null),
            ("loftq_config", json!({})),
            ("lora_bias", json!(false)),
            ("lora_ga_config", Value::Null),
            ("megatron_config", Value::Null),
            ("megatron_core", json!("megatron.core")),
            ("modules_to_save", Value::Null),
            ("monteclora_config", Value::Null),
            ("peft_version", json!(PEFT_FORMAT_VERSION)),
            ("qalora_group_size", json!(16)),
            ("revision", Value::Null),
            ("target_parameters", Value::Null),
            ("task_type", Value::Null),
            ("trainable_token_indices", Value::Null),
            ("use_bdlora", Value::Null),
            ("use_qalora", json!(false)),
            ("velora_config", Value::Null),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        LoraConfig {
            peft_type: "LORA".into(),
            r,
            lora_alpha,
            lora_dropout: 0.0,
            target_modules: target_modules.iter().map(|s| s.to_string()).collect(),
            bias: "none".into(),
            fan_in_fan_out: false,
            use_rslora: false,
            use_dora: false,
            rank_pattern: Default::default(),
            alpha_pattern: Default::default(),
            other,
        }
    }

    /// Sets the adapter dropout.
    pub fn with_dropout(mut self, p: f64) -> LoraConfig {
        self.lora_dropout = p;
        self
    }

    /// `alpha / r`, or `alpha / √r` with `use_rslora`.
    pub fn scale(&self) -> f64 {
        if self.use_rslora {
            self.lora_alpha / (self.r as f64).sqrt()
        } else {
            self.lora_alpha / self.r as f64
        }
    }

    /// Whether the linear at `path` is a target (PEFT's rule).
    pub fn targets(&self, path: &str) -> bool {
        self.target_modules
            .iter()
            .any(|t| path == t || path.ends_with(&format!(".{t}")))
    }

    /// Rejects what fucina does not implement, naming the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::config("LoraConfig", msg));
        if self.peft_type != "LORA" {
            return bad(format!("peft_type `{}` is not LORA", self.peft_type));
        }
        if self.r == 0 {
            return bad("r must be positive".into());
        }
        if !self.lora_alpha.is_finite() {
            return bad(format!("lora_alpha {} is not finite", self.lora_alpha));
        }
        if !(0.0..1.0).contains(&self.lora_dropout) {
            return bad(format!("lora_dropout {} not in [0, 1)", self.lora_dropout));
        }
        if self.target_modules.is_empty() {
            return bad("target_modules is empty".into());
        }
        if self.bias != "none" {
            return bad(format!(
                "bias `{}` is not supported (only \"none\")",
                self.bias
            ));
        }
        if self.fan_in_fan_out {
            return bad("fan_in_fan_out = true is not supported".into());
        }
        if self.use_dora {
            return bad("use_dora = true is not supported".into());
        }
        if !self.rank_pattern.is_empty() || !self.alpha_pattern.is_empty() {
            return bad("rank_pattern / alpha_pattern are not supported".into());
        }
        for key in ["layers_to_transform", "modules_to_save", "exclude_modules"] {
            if self.other.get(key).is_some_and(|v| !v.is_null()) {
                return bad(format!("{key} is not supported"));
            }
        }
        Ok(())
    }

    /// Reads and validates an `adapter_config.json`.
    pub fn from_file(path: &Path) -> Result<LoraConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::File {
            file: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        let c: LoraConfig = serde_json::from_str(&text).map_err(|e| Error::File {
            file: path.to_path_buf(),
            msg: format!("not a PEFT LoRA adapter_config.json: {e}"),
        })?;
        c.validate().map_err(|e| Error::File {
            file: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        Ok(c)
    }
}

/// Attaches a fresh adapter (A kaiming-uniform, B zero) to every linear
/// of `model` that `config` targets, freezes every other parameter, and
/// returns the adapted paths. An error (and no change) when nothing matches
/// or a target already has an adapter.
pub fn apply_lora<M: Module>(
    model: &mut M,
    config: &LoraConfig,
    init: &mut Init,
) -> Result<Vec<String>> {
    config.validate()?;
    if !init.dtype().is_compute_float() {
        return Err(Error::config(
            "apply_lora",
            format!(
                "adapters are made in the Init's dtype, which must be the compute dtype (f32 or f64), got {}; a bf16/f16 base takes f32 adapters",
                init.dtype()
            ),
        ));
    }
    let mut targets: Vec<String> = Vec::new();
    let mut clash: Option<String> = None;
    for_each_mut(model, |path: &str, lin: &mut Linear| {
        if config.targets(path) {
            if lin.lora.is_some() && clash.is_none() {
                clash = Some(path.to_string());
            }
            targets.push(path.to_string());
        }
    });
    if let Some(p) = clash {
        return Err(Error::config(
            "apply_lora",
            format!("`{p}` already has a LoRA adapter"),
        ));
    }
    if targets.is_empty() {
        // Name what exists: the distinct last components of every linear
        // layer's path (what `target_modules` entries usually are).
        let mut names: Vec<String> = Vec::new();
        crate::module::for_each(&*model, |path: &str, _: &Linear| {
            let last = path.rsplit('.').next().unwrap_or(path).to_string();
            if !names.contains(&last) {
                names.push(last);
            }
        });
        return Err(Error::config(
            "apply_lora",
            format!(
                "no linear layer matches target_modules {:?}; the model's linear layers are named {:?}",
                config.target_modules, names
            ),
        ));
    }
    // Build every adapter first, then attach them (no partial application).
    let mut adapters = Vec::with_capacity(targets.len());
    let mut shapes = Vec::with_capacity(targets.len());
    for_each_mut(model, |path: &str, lin: &mut Linear| {
        if config.targets(path) {
            shapes.push((lin.in_features(), lin.out_features()));
        }
    });
    for (i, o) in shapes {
        adapters.push(LoraAdapter::new(
            init,
            i,
            o,
            config.r,
            config.scale(),
            config.lora_dropout,
        )?);
    }
    let mut it = adapters.into_iter();
    for_each_mut(model, |path: &str, lin: &mut Linear| {
        if config.targets(path) {
            lin.lora = it.next();
        }
    });
    model.visit_params("", &mut |name, t| {
        let adapter = name.contains("lora_A.") || name.contains("lora_B.");
        // Parameters are leaves; this cannot fail.
        let _ = t.set_requires_grad(adapter);
    });
    Ok(targets)
}

/// Detaches every adapter (unmerging merged ones first); base parameters
/// stay frozen. Returns how many were removed.
pub fn remove_lora<M: Module>(model: &mut M) -> Result<usize> {
    let mut n = 0;
    let mut err = None;
    for_each_mut(model, |_: &str, lin: &mut Linear| {
        if let Some(l) = &lin.lora {
            if l.is_merged() {
                if let Err(e) = lin.unmerge_lora() {
                    err.get_or_insert(e);
                    return;
                }
            }
            lin.lora = None;
            n += 1;
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

/// Merges every attached adapter into its base weight.
pub fn merge_lora<M: Module>(model: &mut M) -> Result<()> {
    let mut res = Ok(());
    for_each_mut(model, |_: &str, lin: &mut Linear| {
        if res.is_ok() && lin.lora.is_some() {
            res = lin.merge_lora();
        }
    });
    res
}

/// Restores every merged base weight bit for bit.
pub fn unmerge_lora<M: Module>(model: &mut M) -> Result<()> {
    let mut res = Ok(());
    for_each_mut(model, |_: &str, lin: &mut Linear| {
        if res.is_ok() && lin.lora.as_ref().is_some_and(|l| l.is_merged()) {
            res = lin.unmerge_lora();
        }
    });
    res
}

/// The adapter parameters of `model` under PEFT's key names.
pub fn adapter_state_dict<M: Module>(model: &M) -> Vec<(String, Tensor)> {
    model
        .named_parameters()
        .into_iter()
        .filter(|(n, _)| n.contains("lora_A.") || n.contains("lora_B."))
        .map(|(n, t)| (format!("{PEFT_PREFIX}{n}"), t))
        .collect()
}

/// Writes `dir/adapter_model.safetensors` (adapter tensors, PEFT names) and
/// `dir/adapter_config.json`, each atomically.
pub fn save_adapter<M: Module>(model: &M, config: &LoraConfig, dir: &Path) -> Result<()> {
    config.validate()?;
    let sd = adapter_state_dict(model);
    if sd.is_empty() {
        return Err(Error::config(
            "save_adapter",
            "the model has no LoRA adapter",
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::File {
        file: dir.to_path_buf(),
        msg: e.to_string(),
    })?;
    let opts = SaveOptions {
        metadata: [("format".to_string(), "pt".to_string())]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    sdio::save_state_dict(&dir.join(ADAPTER_WEIGHTS), &sd, &opts)?;
    let json = serde_json::to_vec_pretty(config).map_err(|e| Error::File {
        file: dir.join(ADAPTER_CONFIG),
        msg: e.to_string(),
    })?;
    sdio::write_atomic(&dir.join(ADAPTER_CONFIG), &json)?;
    Ok(())
}

/// Reads a PEFT adapter directory, attaches its adapters to `model` (see
/// [`apply_lora`]) and loads their weights strictly (every tensor of the
/// file used, none missing). On any error the new adapters are removed
/// again and every parameter's `requires_grad` is restored. New adapters'
/// dropout starts in training mode, as new modules do: call `eval()` for
/// inference.
pub fn load_adapter<M: Module>(model: &mut M, dir: &Path, init: &mut Init) -> Result<LoraConfig> {
    let config = LoraConfig::from_file(&dir.join(ADAPTER_CONFIG))?;
    let flags: Vec<(Tensor, bool)> = model
        .named_parameters()
        .into_iter()
        .map(|(_, t)| {
            let g = t.requires_grad();
            (t, g)
        })
        .collect();
    // apply_lora changes nothing when it fails.
    let targets = apply_lora(model, &config, init)?;
    let sd: Vec<(String, Tensor)> = adapter_state_dict(model);
    if let Err(e) = sdio::load_state_dict(&dir.join(ADAPTER_WEIGHTS), &sd, &LoadOptions::new()) {
        drop(sd);
        for_each_mut(model, |path: &str, lin: &mut Linear| {
            if targets.iter().any(|t| t == path) {
                lin.lora = None;
            }
        });
        for (t, g) in flags {
            let _ = t.set_requires_grad(g);
        }
        return Err(e.into());
    }
    Ok(config)
}
