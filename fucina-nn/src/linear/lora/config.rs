//! `LoraConfig`: PEFT's `adapter_config.json` as a serde struct, its
//! validation, and PEFT's rules for which module paths it targets,
//! excludes and saves whole (`check_target_module_exists` and
//! `_set_trainable` in peft 0.21.2), compiled once into a [`Matcher`].
//!
//! Invariant: a config that passes [`LoraConfig::validate`] compiles into a
//! matcher (every regex it holds is valid), and every field fucina does not
//! implement that would change the math is an error naming the field.

use std::path::Path;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::PEFT_FORMAT_VERSION;
use crate::error::{Error, Result};

/// `target_modules` / `exclude_modules`: a list of names or one pattern,
/// as PEFT reads either a JSON list or a JSON string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TargetModules {
    /// Names: a module is selected when its dotted path equals one, or ends
    /// with `.` + one (`"q_proj"` selects `model.layers.0.self_attn.q_proj`).
    Names(Vec<String>),
    /// A regular expression that must match the whole dotted path (PEFT's
    /// `re.fullmatch`), e.g. `r".*\.layers\.1\.self_attn\.(q|v)_proj"`. As
    /// `target_modules`, `"all-linear"` (any case) instead selects every
    /// linear layer except the model's output head ([`crate::Module::output_head`],
    /// PEFT's `_maybe_include_all_linear_layers`).
    Pattern(String),
}

impl TargetModules {
    /// Names from string slices.
    pub fn names(names: &[&str]) -> TargetModules {
        TargetModules::Names(names.iter().map(|s| s.to_string()).collect())
    }

    /// Whether this is PEFT's `"all-linear"` shorthand.
    pub fn is_all_linear(&self) -> bool {
        matches!(self, TargetModules::Pattern(p) if p.to_lowercase() == ALL_LINEAR)
    }
}

/// PEFT's shorthand for every linear layer but the output head.
pub const ALL_LINEAR: &str = "all-linear";

/// `init_lora_weights`: how a fresh adapter is drawn (from fucina's seed,
/// through [`crate::Init`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum InitLoraWeights {
    /// `true` (PEFT's default): A kaiming-uniform with a = √5 (uniform on
    /// `±1/√in`), B zero. `false`: neither is reset, so both keep
    /// `nn.Linear`'s default init: A uniform on `±1/√in`, B uniform on
    /// `±1/√r` (a non-zero initial delta).
    Bool(bool),
    /// `"gaussian"` (any case): A ~ N(0, (1/r)²) (PEFT's `std = 1 / r`),
    /// B zero. Other names (PiSSA, OLoRA, LoftQ, EVA, ...) change the base
    /// weights or need data and are refused by [`LoraConfig::validate`].
    Name(String),
}

impl Default for InitLoraWeights {
    fn default() -> Self {
        InitLoraWeights::Bool(true)
    }
}

/// The init an adapter is drawn with, as [`InitLoraWeights`] resolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoraInit {
    /// A kaiming-uniform, B zero (`init_lora_weights = true`).
    Default,
    /// A ~ N(0, 1/r²), B zero (`"gaussian"`).
    Gaussian,
    /// A and B both kaiming-uniform (`false`).
    Random,
}

impl InitLoraWeights {
    /// The init, or an error naming the field and the value.
    pub fn resolve(&self) -> Result<LoraInit> {
        match self {
            InitLoraWeights::Bool(true) => Ok(LoraInit::Default),
            InitLoraWeights::Bool(false) => Ok(LoraInit::Random),
            InitLoraWeights::Name(n) if n.to_lowercase() == "gaussian" => Ok(LoraInit::Gaussian),
            InitLoraWeights::Name(n) => Err(Error::config(
                "LoraConfig",
                format!("init_lora_weights `{n}` is not supported (true, false or \"gaussian\")"),
            )),
        }
    }
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
    /// The linear layers to adapt: names, a regex or `"all-linear"`.
    pub target_modules: TargetModules,
    /// Modules never adapted, even when targeted: names or a regex.
    #[serde(default)]
    pub exclude_modules: Option<TargetModules>,
    /// Modules trained whole (a trainable copy replaces their parameters)
    /// and saved in the adapter file: a module is one when its dotted path
    /// ends with an entry (PEFT's plain `endswith`, no dot required).
    #[serde(default)]
    pub modules_to_save: Option<Vec<String>>,
    /// How fresh adapters are drawn.
    #[serde(default)]
    pub init_lora_weights: InitLoraWeights,
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
        Self::with_targets(r, lora_alpha, TargetModules::names(target_modules))
    }

    /// [`LoraConfig::new`] with any [`TargetModules`] (a regex, `"all-linear"`).
    pub fn with_targets(r: usize, lora_alpha: f64, target_modules: TargetModules) -> LoraConfig {
        use serde_json::{json, Value};
        let other: serde_json::Map<String, Value> = [
            ("alora_invocation_tokens", Value::Null),
            ("arrow_config", Value::Null),
            ("auto_mapping", Value::Null),
            ("base_model_name_or_path", Value::Null),
            ("corda_config", Value::Null),
            ("ensure_weight_tying", json!(false)),
            ("eva_config", Value::Null),
            ("inference_mode", json!(true)),
            ("kasa_config", Value::Null),
            ("layer_replication", Value::Null),
            ("layers_pattern", Value::Null),
            ("layers_to_transform", Value::Null),
            ("loftq_config", json!({})),
            ("lora_bias", json!(false)),
            ("lora_ga_config", Value::Null),
            ("megatron_config", Value::Null),
            ("megatron_core", json!("megatron.core")),
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
            target_modules,
            exclude_modules: None,
            modules_to_save: None,
            init_lora_weights: InitLoraWeights::default(),
            bias: "none".into(),
            fan_in_fan_out: false,
            use_rslora: false,
            use_dora: false,
            rank_pattern: Default::default(),
            alpha_pattern: Default::default(),
            other,
        }
    }

    crate::setters! {
        /// Sets the adapter dropout.
        with_dropout(p: f64) => lora_dropout,
        /// Sets `use_rslora` (scale `alpha / √r`).
        with_rslora(on: bool) => use_rslora,
        /// Sets `init_lora_weights`.
        with_init(init: InitLoraWeights) => init_lora_weights,
    }

    /// Sets `modules_to_save`.
    pub fn with_modules_to_save(mut self, names: &[&str]) -> LoraConfig {
        self.modules_to_save = Some(names.iter().map(|s| s.to_string()).collect());
        self
    }

    /// Sets `exclude_modules`.
    pub fn with_exclude(mut self, exclude: TargetModules) -> LoraConfig {
        self.exclude_modules = Some(exclude);
        self
    }

    /// `alpha / r`, or `alpha / √r` with `use_rslora` (PEFT's `scaling`).
    pub fn scale(&self) -> f64 {
        if self.use_rslora {
            self.lora_alpha / (self.r as f64).sqrt()
        } else {
            self.lora_alpha / self.r as f64
        }
    }

    /// Whether the module at `path` is a LoRA target (PEFT's rule, with
    /// `exclude_modules` and `modules_to_save` taking precedence;
    /// `"all-linear"` needs the model, so it answers `false` here: use
    /// [`crate::linear::lora::apply_lora`]). An invalid regex answers `false`.
    pub fn targets(&self, path: &str) -> bool {
        self.matcher()
            .is_ok_and(|m| !m.is_all_linear() && m.check(path) == Check::Target)
    }

    /// The compiled matcher (an error names the field of a bad regex).
    pub fn matcher(&self) -> Result<Matcher> {
        Matcher::new(self)
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
        if matches!(&self.target_modules, TargetModules::Names(v) if v.is_empty()) {
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
        self.init_lora_weights.resolve()?;
        // Fields that change the math when set (null, false or {} is PEFT's off).
        for key in [
            "layers_to_transform",
            "layer_replication",
            "target_parameters",
            "trainable_token_indices",
            "alora_invocation_tokens",
            "use_bdlora",
            "arrow_config",
            "kasa_config",
            "monteclora_config",
            "velora_config",
        ] {
            if self.other.get(key).is_some_and(|v| !v.is_null()) {
                return bad(format!("{key} is not supported"));
            }
        }
        for key in ["lora_bias", "use_qalora", "ensure_weight_tying"] {
            if self
                .other
                .get(key)
                .is_some_and(|v| v.as_bool() == Some(true))
            {
                return bad(format!("{key} = true is not supported"));
            }
        }
        if let Some(m) = &self.modules_to_save {
            if m.iter().any(|s| s.is_empty()) {
                return bad("modules_to_save has an empty name".into());
            }
        }
        self.matcher().map(|_| ())
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

/// What PEFT's rules say about one module path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Excluded (by `exclude_modules`, or inside a `modules_to_save` module).
    Excluded,
    /// Targeted by `target_modules`.
    Target,
    /// Neither.
    Unmatched,
}

/// How a `target_modules` / `exclude_modules` value selects paths.
#[derive(Debug, Clone)]
enum Rule {
    Names(Vec<String>),
    Regex(Regex),
    AllLinear,
}

impl Rule {
    fn new(t: &TargetModules, field: &str, all_linear: bool) -> Result<Rule> {
        Ok(match t {
            _ if all_linear && t.is_all_linear() => Rule::AllLinear,
            TargetModules::Names(v) => Rule::Names(v.clone()),
            TargetModules::Pattern(p) => Rule::Regex(full_regex(p, field)?),
        })
    }

    /// PEFT's match: a name equal to the path or a `.name` suffix; a regex
    /// over the whole path. `AllLinear` is resolved by the caller.
    fn matches(&self, path: &str) -> bool {
        match self {
            Rule::Names(v) => v
                .iter()
                .any(|t| path == t || path.ends_with(&format!(".{t}"))),
            Rule::Regex(r) => r.is_match(path),
            Rule::AllLinear => false,
        }
    }
}

/// `pattern` as a regex that must match a whole path (Python's
/// `re.fullmatch`); an invalid one is an error naming `field`.
fn full_regex(pattern: &str, field: &str) -> Result<Regex> {
    Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
        Error::config(
            "LoraConfig",
            format!("{field}: `{pattern}` is not a valid regular expression: {e}"),
        )
    })
}

/// A config's path rules, compiled.
#[derive(Debug, Clone)]
pub struct Matcher {
    target: Rule,
    exclude: Option<Rule>,
    /// PEFT keeps adapters out of a saved module with
    /// `re.match(rf"(^|.*\.){m}($|\..*)", key)`: the module and everything inside it.
    inside_saved: Vec<Regex>,
    saved: Vec<String>,
}

impl Matcher {
    fn new(c: &LoraConfig) -> Result<Matcher> {
        let target = Rule::new(&c.target_modules, "target_modules", true)?;
        let exclude = match &c.exclude_modules {
            Some(e) => Some(Rule::new(e, "exclude_modules", false)?),
            None => None,
        };
        let saved = c.modules_to_save.clone().unwrap_or_default();
        let inside_saved = saved
            .iter()
            .map(|m| {
                Regex::new(&format!(r"^(?:^|.*\.){m}(?:$|\..*)")).map_err(|e| {
                    Error::config(
                        "LoraConfig",
                        format!("modules_to_save: `{m}` does not form a valid pattern: {e}"),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Matcher {
            target,
            exclude,
            inside_saved,
            saved,
        })
    }

    /// Whether the target is `"all-linear"`.
    pub fn is_all_linear(&self) -> bool {
        matches!(self.target, Rule::AllLinear)
    }

    /// PEFT's `check_target_module_exists` for `path`: exclusions first,
    /// then the targets. With `"all-linear"` a non-excluded path answers
    /// [`Check::Target`]; the caller keeps only linears that are not the
    /// output head.
    pub fn check(&self, path: &str) -> Check {
        if self.exclude.as_ref().is_some_and(|e| e.matches(path))
            || self.inside_saved.iter().any(|r| r.is_match(path))
        {
            return Check::Excluded;
        }
        if self.is_all_linear() || self.target.matches(path) {
            Check::Target
        } else {
            Check::Unmatched
        }
    }

    /// The `modules_to_save` entries.
    pub fn saved(&self) -> &[String] {
        &self.saved
    }

    /// The first `modules_to_save` entry that selects the module at `path`
    /// (PEFT's `_set_trainable`: `path.endswith(entry)`).
    pub fn saves(&self, path: &str) -> Option<&str> {
        if path.is_empty() {
            return None;
        }
        self.saved
            .iter()
            .find(|m| path.ends_with(m.as_str()))
            .map(|m| m.as_str())
    }
}
