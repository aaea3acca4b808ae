//! LoRA (low-rank adaptation) on frozen `Linear` layers, by Hugging Face
//! PEFT's rules (peft 0.21.2) and in its file format: the adapter layer,
//! merging, and attaching adapters to any [`Module`] by path. The config and
//! its path rules are in `lora/config.rs`, the adapter files in
//! `lora/files.rs`.
//!
//! An adapter on a `Linear` of `in → out` holds `lora_A.weight [r, in]` and
//! `lora_B.weight [out, r]`; the layer computes `W·x + b + scale·B(A(dropout(x)))`
//! with `scale = alpha / r` (`alpha / √r` with `use_rslora`). Fresh adapters
//! follow `init_lora_weights`: `true` (A kaiming-uniform with a = √5, B zero,
//! so the initial delta is exactly zero), `"gaussian"` (A ~ N(0, 1/r²), B
//! zero) or `false` (A and B both `nn.Linear`'s kaiming-uniform), drawn from
//! the [`Init`]'s seed.
//!
//! [`apply_lora`] walks every module of the model by dotted path (PEFT's
//! `check_target_module_exists`): a path excluded by `exclude_modules` or
//! lying inside a `modules_to_save` module is skipped; otherwise it is a
//! target when `target_modules` (a list: the path equals an entry or ends
//! with `.entry`; a string: a regex over the whole path; `"all-linear"`: every
//! linear but [`Module::output_head`]) selects it. A selected module that is
//! not a `Linear` is an error (PEFT's "not supported"). Every
//! `modules_to_save` module (its path ends with an entry, PEFT's plain
//! `endswith`) gets trainable copies of its parameters in place of the
//! originals (PEFT's `ModulesToSaveWrapper` deep copy), which are frozen and
//! left untouched; [`remove_lora`] keeps the trained copies, as PEFT's
//! `unload()` does. Everything else is frozen, so only adapter and saved
//! parameters train. A tied output head has no module of its own here (it
//! reads the embedding's tensor): a `modules_to_save` entry naming it, or
//! the embedding it shares, is an error that says to untie it first
//! (`CausalLm::untie_lm_head`, which gives the head a copy of the embedding,
//! so a saved copy of either side leaves the other on the original, as in
//! PEFT).
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
//! with PEFT's key names (`base_model.model.<path>.lora_A.weight`, and
//! `base_model.model.<path>.<param>` for a saved module: PEFT drops its
//! `modules_to_save.<adapter>` part) and `adapter_config.json` with PEFT's
//! fields, so an adapter trained here loads in Python's `peft`
//! (`PeftModel.from_pretrained`) and one trained there loads here.
//! Supported: `peft_type = "LORA"`, `bias = "none"`, no DoRA, no per-module
//! rank or alpha patterns, no `layers_to_transform`.

mod config;
mod files;

pub use config::{
    Check, InitLoraWeights, LoraConfig, LoraInit, Matcher, TargetModules, ALL_LINEAR,
};
pub use files::{adapter_state_dict, load_adapter, save_adapter};

use std::sync::{Mutex, MutexGuard};

use fucina_autograd::{no_grad, RawTensor, Tensor};
use fucina_core::kernels::elementwise::BinaryOp;
use fucina_core::DType;

use super::Linear;
use crate::dropout::Dropout;
use crate::error::{Error, Result};
use crate::init::{Dist, Init};
use crate::module::{for_each_mut, Module, OutputHead};

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

/// The merge state of an adapter behind a lock, so a [`Linear`] (and every
/// model holding one) is `Sync`: a model shared with an evaluation thread
/// never sees a half-written slot. Cloning copies the state.
#[derive(Debug, Default)]
struct MergeSlot(Mutex<Option<Merged>>);

impl MergeSlot {
    /// The slot; a panic while it was held left no partial write (each
    /// writer assigns the whole `Option`), so a poisoned lock is still valid.
    fn lock(&self) -> MutexGuard<'_, Option<Merged>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Clone for MergeSlot {
    fn clone(&self) -> Self {
        MergeSlot(Mutex::new(self.lock().clone()))
    }
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
    original: MergeSlot,
}

impl LoraAdapter {
    /// A fresh adapter for a `in → out` layer, drawn as `how` says (PEFT's
    /// `reset_lora_parameters`; [`LoraInit::Default`]: A kaiming-uniform, B
    /// zero): A first, then B, then the dropout's seed, one stream each.
    pub fn new(
        init: &mut Init,
        in_features: usize,
        out_features: usize,
        r: usize,
        scale: f64,
        dropout: f64,
        how: LoraInit,
    ) -> Result<LoraAdapter> {
        if r == 0 {
            return Err(Error::config("LoraAdapter", "r must be positive"));
        }
        // nn.Linear's kaiming_uniform(a = √5) is uniform on ±1/√fan_in.
        let a_dist = match how {
            LoraInit::Default | LoraInit::Random => Dist::kaiming_uniform(in_features),
            // PEFT: nn.init.normal_(A, std = 1 / r).
            LoraInit::Gaussian => Dist::normal(1.0 / r as f64),
        };
        let b_dist = match how {
            LoraInit::Default | LoraInit::Gaussian => Dist::Zeros,
            // Not reset: B keeps nn.Linear(r, out)'s default, fan_in = r.
            LoraInit::Random => Dist::kaiming_uniform(r),
        };
        let a = init.param(&[r, in_features], a_dist)?;
        let b = init.param(&[out_features, r], b_dist)?;
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
            original: MergeSlot::default(),
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
        self.original.lock().is_some()
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
        *l.original.lock() = Some(Merged { original, merged });
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
            let state = l.original.lock();
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
        *l.original.lock() = None;
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

/// What kind of module a path of the model holds, for the rules.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// A `Linear`: its sizes and whether an adapter is attached.
    Linear { i: usize, o: usize, adapted: bool },
    /// Part of an attached adapter (never a target: PEFT skips adapter internals).
    AdapterPart,
    /// Any other module.
    Other,
}

/// Every module of `model` by path, parents first, with its kind; the root
/// (`""`) is left out, as PEFT skips it.
fn modules<M: Module + ?Sized>(model: &M) -> Vec<(String, Kind)> {
    let mut out: Vec<(String, Kind)> = Vec::new();
    let mut adapted: Vec<String> = Vec::new();
    model.visit_modules("", &mut |path, any| {
        let inside = adapted.iter().any(|p| path.starts_with(&format!("{p}.")));
        let kind = if inside || any.is::<LoraAdapter>() || any.is::<LoraWeight>() {
            Kind::AdapterPart
        } else if let Some(l) = any.downcast_ref::<Linear>() {
            if l.lora.is_some() {
                adapted.push(path.to_string());
            }
            Kind::Linear {
                i: l.in_features(),
                o: l.out_features(),
                adapted: l.lora.is_some(),
            }
        } else {
            Kind::Other
        };
        if !path.is_empty() {
            out.push((path.to_string(), kind));
        }
    });
    out
}

/// Up to 24 names, then how many more.
fn listed(names: &[String]) -> String {
    const SHOWN: usize = 24;
    let head: Vec<&String> = names.iter().take(SHOWN).collect();
    if names.len() > SHOWN {
        format!("{head:?} and {} more", names.len() - SHOWN)
    } else {
        format!("{head:?}")
    }
}

/// The linears a config adapts and the modules it saves whole, as PEFT's
/// rules pick them; checked, nothing changed.
struct Plan {
    /// `(path, in, out)` of each target, in visit order.
    targets: Vec<(String, usize, usize)>,
    /// The `modules_to_save` module paths (none inside another).
    saved: Vec<String>,
}

fn plan<M: Module + ?Sized>(model: &M, config: &LoraConfig) -> Result<Plan> {
    const W: &str = "apply_lora";
    let m = config.matcher()?;
    let mods = modules(model);
    let head = model.output_head();
    let (mut targets, mut excluded, mut unmatched) = (Vec::new(), 0usize, 0usize);
    for (path, kind) in &mods {
        if *kind == Kind::AdapterPart {
            continue;
        }
        match (m.check(path), kind) {
            (Check::Excluded, _) => excluded += 1,
            (Check::Target, Kind::Linear { .. })
                if m.is_all_linear() && head.as_ref().is_some_and(|h| &h.path == path) =>
            {
                unmatched += 1
            }
            (Check::Target, Kind::Linear { i, o, adapted }) => {
                if *adapted {
                    return Err(Error::config(W, format!("`{path}` already has a LoRA adapter")));
                }
                targets.push((path.clone(), *i, *o));
            }
            (Check::Target, _) if m.is_all_linear() => unmatched += 1,
            (Check::Target, _) => {
                return Err(Error::config(
                    W,
                    format!(
                        "`{path}` matches target_modules {} but is not a linear layer (LoRA adapts `Linear` only)",
                        json(&config.target_modules)
                    ),
                ))
            }
            (Check::Unmatched, _) => unmatched += 1,
        }
    }
    if targets.is_empty() {
        let linears: Vec<String> = mods
            .iter()
            .filter(|(_, k)| matches!(k, Kind::Linear { .. }))
            .map(|(p, _)| p.clone())
            .collect();
        let all_excluded = excluded > 0 && unmatched == 0;
        let why = if all_excluded {
            "every module was excluded (check target_modules, exclude_modules and modules_to_save)"
        } else {
            "no linear layer matches"
        };
        let names = match &config.target_modules {
            // Names usually are last components: list those.
            TargetModules::Names(_) => {
                let mut last: Vec<String> = Vec::new();
                for p in &linears {
                    let l = p.rsplit('.').next().unwrap_or(p).to_string();
                    if !last.contains(&l) {
                        last.push(l);
                    }
                }
                format!("the model's linear layers are named {}", listed(&last))
            }
            // A regex matches whole paths: list those.
            TargetModules::Pattern(_) => {
                format!("the model's linear layers are {}", listed(&linears))
            }
        };
        return Err(Error::config(
            W,
            format!(
                "{why}: target_modules {}; {names}",
                json(&config.target_modules)
            ),
        ));
    }
    let mut saved: Vec<String> = Vec::new();
    for entry in m.saved() {
        let hits: Vec<&String> = mods
            .iter()
            .filter(|(p, k)| *k != Kind::AdapterPart && p.ends_with(entry.as_str()))
            .map(|(p, _)| p)
            .collect();
        if hits.is_empty() {
            let msg = match &head {
                Some(OutputHead {
                    path: h,
                    tied_to: Some(e),
                }) if h.ends_with(entry.as_str()) => format!(
                    "modules_to_save `{entry}` names the output head `{h}`, which is tied to \
                     `{e}` here and has no module of its own: untie it first \
                     (`CausalLm::untie_lm_head`, which gives it a copy of the embedding, as \
                     PEFT's copy of a tied `lm_head` does)"
                ),
                _ => {
                    let top: Vec<String> = mods
                        .iter()
                        .filter(|(p, k)| *k != Kind::AdapterPart && !p.contains('.'))
                        .map(|(p, _)| p.clone())
                        .collect();
                    format!(
                        "modules_to_save `{entry}` matches no module (a module is saved when its \
                         path ends with the entry); the model's top-level modules are {}",
                        listed(&top)
                    )
                }
            };
            return Err(Error::config(W, msg));
        }
        for p in hits {
            let inside = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}."));
            // PEFT copies the saved module only, so a tied head keeps the
            // original weight; here the head reads the module's own tensor.
            if let Some(OutputHead {
                path: h,
                tied_to: Some(e),
            }) = &head
            {
                if inside(e, p) || inside(p, e) {
                    return Err(Error::config(
                        W,
                        format!(
                            "modules_to_save `{entry}` selects `{p}`, whose weight the tied output \
                             head `{h}` shares: PEFT trains a copy for `{p}` only and keeps the head \
                             on the original; untie the head first (`CausalLm::untie_lm_head`) to \
                             get exactly that"
                        ),
                    ));
                }
            }
            if let Some((q, _)) = mods
                .iter()
                .find(|(q, k)| inside(q, p) && matches!(k, Kind::Linear { adapted: true, .. }))
            {
                return Err(Error::config(
                    W,
                    format!("modules_to_save `{entry}`: `{q}` already has a LoRA adapter"),
                ));
            }
            if !saved.iter().any(|s| inside(p, s)) {
                saved.retain(|s| !inside(s, p));
                saved.push(p.clone());
            }
        }
    }
    Ok(Plan { targets, saved })
}

/// A value as compact JSON (how the config file spells it).
fn json(t: &TargetModules) -> String {
    serde_json::to_string(t).unwrap_or_else(|_| format!("{t:?}"))
}

/// Whether parameter `name` lies inside one of the module paths `saved`.
fn under(name: &str, saved: &[String]) -> bool {
    saved.iter().any(|s| name.starts_with(&format!("{s}.")))
}

/// The module paths `config`'s `modules_to_save` selects in `model`.
pub(crate) fn saved_paths<M: Module + ?Sized>(
    model: &M,
    config: &LoraConfig,
) -> Result<Vec<String>> {
    if config.modules_to_save.as_ref().is_none_or(|m| m.is_empty()) {
        return Ok(Vec::new());
    }
    let m = config.matcher()?;
    let mods = modules(model);
    let mut saved: Vec<String> = Vec::new();
    for (p, k) in &mods {
        if *k != Kind::AdapterPart && m.saves(p).is_some() {
            let inside = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}."));
            if !saved.iter().any(|s| inside(p, s)) {
                saved.retain(|s| !inside(s, p));
                saved.push(p.clone());
            }
        }
    }
    Ok(saved)
}

/// PEFT's `"all-linear"` expansion: every linear's path (adapted or not)
/// except the model's output head, sorted (PEFT writes this set, before
/// `exclude_modules` applies, as `target_modules` of the saved config).
pub(crate) fn all_linear_paths<M: Module + ?Sized>(model: &M) -> Vec<String> {
    let head = model.output_head().map(|h| h.path);
    let mut paths: Vec<String> = modules(model)
        .into_iter()
        .filter(|(p, k)| matches!(k, Kind::Linear { .. }) && head.as_ref() != Some(p))
        .map(|(p, _)| p)
        .collect();
    paths.sort();
    paths
}

/// What [`apply`] changed, so a failed load can undo it.
pub(crate) struct Applied {
    /// The adapted linears.
    pub(crate) targets: Vec<String>,
    /// `(name, original)` of every parameter a saved module's copy replaced.
    pub(crate) originals: Vec<(String, Tensor)>,
}

impl Applied {
    /// Detaches the adapters and puts the original parameters back.
    pub(crate) fn undo<M: Module + ?Sized>(self, model: &mut M) {
        for_each_mut(model, |path: &str, lin: &mut Linear| {
            if self.targets.iter().any(|t| t == path) {
                lin.lora = None;
            }
        });
        model.visit_params_mut("", &mut |name, t| {
            if let Some((_, o)) = self.originals.iter().find(|(n, _)| n == name) {
                *t = o.clone();
            }
        });
    }
}

/// Attaches a fresh adapter (drawn as `init_lora_weights` says) to every
/// linear of `model` that `config` targets, gives every `modules_to_save`
/// module trainable copies of its parameters, freezes every other parameter,
/// and returns the adapted paths. An error (and no change) when nothing
/// matches, a `modules_to_save` entry matches no module, a selected module
/// is not a linear, or a target already has an adapter.
pub fn apply_lora<M: Module>(
    model: &mut M,
    config: &LoraConfig,
    init: &mut Init,
) -> Result<Vec<String>> {
    Ok(apply(model, config, init)?.targets)
}

pub(crate) fn apply<M: Module + ?Sized>(
    model: &mut M,
    config: &LoraConfig,
    init: &mut Init,
) -> Result<Applied> {
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
    let how = config.init_lora_weights.resolve()?;
    let plan = plan(&*model, config)?;
    // Build every adapter and copy first, then attach them (no partial application).
    let mut adapters = Vec::with_capacity(plan.targets.len());
    for (_, i, o) in &plan.targets {
        adapters.push(LoraAdapter::new(
            init,
            *i,
            *o,
            config.r,
            config.scale(),
            config.lora_dropout,
            how,
        )?);
    }
    // One copy per distinct tensor (a tensor tied inside a saved module stays tied to its copy).
    let mut copies: Vec<(Tensor, Tensor)> = Vec::new();
    let mut err = None;
    model.visit_params("", &mut |name, t| {
        if err.is_some() || !under(name, &plan.saved) || copies.iter().any(|(o, _)| o.same_as(t)) {
            return;
        }
        let copy = t
            .raw()
            .and_then(|raw| Ok(t.ctx().copy(&raw)?))
            .and_then(|raw| Tensor::from_raw(t.ctx(), raw, true));
        match copy {
            Ok(c) => copies.push((t.clone(), c)),
            Err(e) => err = Some(e),
        }
    });
    if let Some(e) = err {
        return Err(e.into());
    }
    let mut it = adapters.into_iter();
    for_each_mut(model, |path: &str, lin: &mut Linear| {
        if plan.targets.iter().any(|(t, _, _)| t == path) {
            lin.lora = it.next();
        }
    });
    let mut originals = Vec::new();
    model.visit_params_mut("", &mut |name, t| {
        if !under(name, &plan.saved) {
            return;
        }
        if let Some((o, c)) = copies.iter().find(|(o, _)| o.same_as(t)) {
            originals.push((name.to_string(), o.clone()));
            *t = c.clone();
        }
    });
    // Parameters are leaves; these cannot fail.
    for (o, _) in &copies {
        let _ = o.set_requires_grad(false);
    }
    model.visit_params("", &mut |name, t| {
        let adapter = name.contains("lora_A.") || name.contains("lora_B.");
        let _ = t.set_requires_grad(adapter || under(name, &plan.saved));
    });
    Ok(Applied {
        targets: plan.targets.into_iter().map(|(p, _, _)| p).collect(),
        originals,
    })
}

/// Detaches every adapter (unmerging merged ones first); base parameters
/// stay frozen, and a `modules_to_save` module keeps its trained copies
/// (PEFT's `unload()` returns the saved copy). Returns how many adapters
/// were removed.
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

/// Merges every adapter into its base weight and detaches the adapters
/// (PEFT's `merge_and_unload`): the model is then the plain base
/// architecture with the merged weights, and `save_pretrained` writes the
/// family's own keys only. Returns how many adapters were folded in. On an
/// error nothing changes (merged adapters are unmerged again).
pub fn merge_and_unload<M: Module>(model: &mut M) -> Result<usize> {
    if let Err(e) = merge_lora(model) {
        unmerge_lora(model)?;
        return Err(e);
    }
    let mut n = 0;
    for_each_mut(model, |_: &str, lin: &mut Linear| {
        if lin.lora.take().is_some() {
            n += 1;
        }
    });
    Ok(n)
}
