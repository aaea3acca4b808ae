//! Loading and saving named tensors (a model's state dict) as safetensors.
//!
//! Load protocol: (1) map every file key through the prefix rules; (2) match
//! keys to the model's names and check shape and dtype, collecting missing,
//! unexpected and mismatched keys; (3) strict: any of those is one error;
//! (4) read and convert every matched tensor into a fresh pooled buffer;
//! (5) only then assign them all, all or nothing (every target's value slot
//! locked first, so a released or busy target fails the load before any is
//! written). A failure at any step leaves the model exactly as it was.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use fucina_core::{DType, RawTensor};
use safetensors::tensor::TensorView;

use super::file::{st_name, SafetensorsFile};
use super::fs::write_atomic;
use super::StateDictError;
use crate::error::{KeyMismatch, Result};
use crate::Tensor;

/// Which stored dtypes may load into a parameter of another dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DtypePolicy {
    /// The stored dtype must equal the parameter's.
    Exact,
    /// Exact, or a float widened without loss: f16/bf16 into f32/f64, f32
    /// into f64 (the default).
    #[default]
    Widen,
    /// Any float into any float (narrowing rounds to nearest); integers
    /// still must match exactly.
    AnyFloat,
}

impl DtypePolicy {
    fn allows(self, stored: DType, param: DType) -> bool {
        if stored == param {
            return true;
        }
        match self {
            DtypePolicy::Exact => false,
            DtypePolicy::Widen => matches!(
                (stored, param),
                (DType::F16 | DType::BF16, DType::F32 | DType::F64) | (DType::F32, DType::F64)
            ),
            DtypePolicy::AnyFloat => stored.is_float() && param.is_float(),
        }
    }
}

/// How [`load_state_dict`] matches a file to a model.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadOptions {
    /// Reject the load when any key is missing, unexpected or mismatched
    /// (default `true`). When `false`, what fits is loaded and the rest is
    /// reported in [`LoadReport`].
    pub strict: bool,
    /// Key rewrites `(file_prefix, model_prefix)`, tried in order: the first
    /// whose `file_prefix` starts a file key replaces that prefix with
    /// `model_prefix`. `("bert.", "")` strips `bert.`; `("", "encoder.")`
    /// adds one.
    pub prefix_map: Vec<(String, String)>,
    /// Which stored dtypes convert into the parameter's.
    pub dtype: DtypePolicy,
}

impl Default for LoadOptions {
    /// Strict, no key rewriting, [`DtypePolicy::Widen`].
    fn default() -> LoadOptions {
        LoadOptions {
            strict: true,
            prefix_map: Vec::new(),
            dtype: DtypePolicy::default(),
        }
    }
}

impl LoadOptions {
    /// Strict, no key rewriting, [`DtypePolicy::Widen`].
    pub fn new() -> LoadOptions {
        LoadOptions::default()
    }

    /// Sets strictness (default strict).
    pub fn strict(mut self, strict: bool) -> LoadOptions {
        self.strict = strict;
        self
    }

    /// Adds a key rewrite: file keys starting with `from` have it replaced by `to`.
    pub fn map_prefix(mut self, from: impl Into<String>, to: impl Into<String>) -> LoadOptions {
        self.prefix_map.push((from.into(), to.into()));
        self
    }

    /// Sets the dtype policy.
    pub fn dtype_policy(mut self, policy: DtypePolicy) -> LoadOptions {
        self.dtype = policy;
        self
    }

    fn map_key(&self, key: &str) -> String {
        for (from, to) in &self.prefix_map {
            if let Some(rest) = key.strip_prefix(from.as_str()) {
                return format!("{to}{rest}");
            }
        }
        key.to_string()
    }
}

/// What a load did: the keys loaded and, for a non-strict load, what did not fit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadReport {
    /// Model names that were assigned.
    pub loaded: Vec<String>,
    /// Model names the file lacks (left unchanged).
    pub missing: Vec<String>,
    /// File keys, as stored, that name no model tensor (ignored).
    pub unexpected: Vec<String>,
    /// Keys whose shape or dtype do not fit (left unchanged).
    pub mismatched: Vec<KeyMismatch>,
}

impl LoadReport {
    /// Whether every model name was loaded and every file key used.
    pub fn is_complete(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.mismatched.is_empty()
    }
}

/// How [`save_state_dict`] stores tensors.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SaveOptions {
    /// Store every float tensor in this float dtype (e.g. `BF16` to halve a
    /// f32 checkpoint; rounding to nearest even). `None` keeps each dtype.
    pub float_dtype: Option<DType>,
    /// The file's `__metadata__` entries.
    pub metadata: BTreeMap<String, String>,
}

/// Loads the tensors of the safetensors file `path` into the named leaves
/// `params` (see the module docs for the protocol and [`LoadOptions`]).
///
/// ```
/// use fucina_autograd::io::{load_state_dict, save_state_dict, LoadOptions, SaveOptions};
/// use fucina_autograd::Tensor;
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let w = Tensor::variable(&ctx, &[1.0f32, 2.0], &[2])?;
/// let path = std::env::temp_dir().join(format!("fucina-doc-sd-{}.safetensors", std::process::id()));
/// save_state_dict(&path, &[("bert.w".to_string(), w.clone())], &SaveOptions::default())?;
/// let v = Tensor::variable(&ctx, &[0.0f32, 0.0], &[2])?;
/// let report = load_state_dict(&path, &[("w".to_string(), v.clone())],
///                              &LoadOptions::new().map_prefix("bert.", ""))?;
/// assert_eq!(report.loaded, ["w"]);
/// assert_eq!(v.to_vec::<f32>()?, [1.0, 2.0]);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
pub fn load_state_dict(
    path: &Path,
    params: &[(String, Tensor)],
    opts: &LoadOptions,
) -> Result<LoadReport> {
    let file = SafetensorsFile::open(path)?;
    load_state_dict_from(&file, params, opts)
}

/// [`load_state_dict`] from bytes in memory; `label` names them in errors.
pub fn load_state_dict_bytes(
    label: impl Into<PathBuf>,
    bytes: &[u8],
    params: &[(String, Tensor)],
    opts: &LoadOptions,
) -> Result<LoadReport> {
    let file = SafetensorsFile::from_bytes(label, bytes)?;
    load_state_dict_from(&file, params, opts)
}

/// [`load_state_dict`] from an already opened file.
pub fn load_state_dict_from(
    file: &SafetensorsFile<'_>,
    params: &[(String, Tensor)],
    opts: &LoadOptions,
) -> Result<LoadReport> {
    let path = file.path();
    // (1) model name -> file key, rejecting two file keys that map to one name.
    let mut by_name: HashMap<String, &str> = HashMap::with_capacity(file.len());
    for key in file.names() {
        let mapped = opts.map_key(key);
        if let Some(prev) = by_name.insert(mapped.clone(), key) {
            return Err(StateDictError::Tensor {
                file: path.to_path_buf(),
                tensor: key.to_string(),
                message: format!("maps to `{mapped}`, as `{prev}` does"),
            }
            .into());
        }
    }
    // (2) match.
    let mut report = LoadReport::default();
    let mut used: HashMap<&str, ()> = HashMap::with_capacity(params.len());
    let mut matched: Vec<(usize, &str)> = Vec::with_capacity(params.len());
    for (i, (name, t)) in params.iter().enumerate() {
        if params[..i].iter().any(|(n, _)| n == name) {
            return Err(StateDictError::Tensor {
                file: path.to_path_buf(),
                tensor: name.clone(),
                message: "the model names this tensor twice".into(),
            }
            .into());
        }
        let Some(&key) = by_name.get(name) else {
            report.missing.push(name.clone());
            continue;
        };
        used.insert(key, ());
        let info = file.info(key).ok_or_else(|| StateDictError::Tensor {
            file: path.to_path_buf(),
            tensor: key.to_string(),
            message: "vanished from the header".into(),
        })?;
        let dtype_ok = info.dtype.is_some_and(|d| opts.dtype.allows(d, t.dtype()));
        if !dtype_ok || info.shape != t.shape() {
            report.mismatched.push(KeyMismatch {
                key: name.clone(),
                file_key: key.to_string(),
                file_dtype: info.dtype_name.clone(),
                file_shape: info.shape.clone(),
                param_dtype: t.dtype(),
                param_shape: t.shape().to_vec(),
            });
            continue;
        }
        matched.push((i, key));
    }
    report.unexpected = file
        .names()
        .filter(|k| !used.contains_key(k))
        .map(str::to_string)
        .collect();
    // (3) strict.
    if opts.strict && !report.is_complete() {
        return Err(StateDictError::Keys {
            file: path.to_path_buf(),
            missing: report.missing,
            unexpected: report.unexpected,
            mismatched: report.mismatched,
        }
        .into());
    }
    // (4) stage.
    let mut staged: Vec<(usize, RawTensor)> = Vec::with_capacity(matched.len());
    for &(i, key) in &matched {
        let t = &params[i].1;
        staged.push((i, file.read_as(t.ctx(), key, t.dtype())?));
    }
    // (5) assign, all or nothing: a released or busy target fails the whole
    // load before any target is written.
    let loaded: Vec<String> = staged.iter().map(|(i, _)| params[*i].0.clone()).collect();
    Tensor::set_values(
        staged
            .into_iter()
            .map(|(i, raw)| (&params[i].1, raw))
            .collect(),
    )
    .map_err(|b| -> crate::Error {
        let (k, e) = *b;
        StateDictError::Tensor {
            file: path.to_path_buf(),
            tensor: loaded[k].clone(),
            message: format!("cannot be assigned ({e}); nothing was loaded"),
        }
        .into()
    })?;
    report.loaded = loaded;
    Ok(report)
}

/// The named tensors as safetensors bytes (`label` names the file in errors).
pub fn state_dict_bytes(
    label: &Path,
    params: &[(String, Tensor)],
    opts: &SaveOptions,
) -> Result<Vec<u8>> {
    let save_err = |name: &str, message: String| StateDictError::Save {
        file: label.to_path_buf(),
        tensor: name.to_string(),
        message,
    };
    if let Some(d) = opts.float_dtype {
        if !d.is_float() {
            return Err(save_err("*", format!("float_dtype {d} is not a float dtype")).into());
        }
    }
    let mut data: Vec<(&str, Vec<usize>, DType, RawTensor)> = Vec::with_capacity(params.len());
    for (i, (name, t)) in params.iter().enumerate() {
        if params[..i].iter().any(|(n, _)| n == name) {
            return Err(save_err(name, "the name appears twice".into()).into());
        }
        let raw = t.raw()?;
        let dt = match opts.float_dtype {
            Some(d) if raw.dtype().is_float() => d,
            _ => raw.dtype(),
        };
        let raw = t.ctx().to_dtype(&raw, dt)?;
        let raw = t.ctx().contiguous(&raw)?;
        data.push((name, raw.shape().to_vec(), dt, raw));
    }
    let mut views = Vec::with_capacity(data.len());
    for (name, shape, dt, raw) in &data {
        let bytes = fucina_core::dispatch_any!(*dt, T => bytemuck::cast_slice::<T, u8>(raw.as_slice::<T>()?));
        let view = TensorView::new(st_name(*dt), shape.clone(), bytes)
            .map_err(|e| save_err(name, e.to_string()))?;
        views.push((name.to_string(), view));
    }
    let meta = if opts.metadata.is_empty() {
        None
    } else {
        Some(opts.metadata.clone().into_iter().collect())
    };
    safetensors::serialize(views, &meta).map_err(|e| {
        StateDictError::Format {
            file: label.to_path_buf(),
            message: format!("serialising: {e}"),
        }
        .into()
    })
}

/// Writes the named tensors to `path` as safetensors, atomically (a reader
/// sees the old file or the whole new one).
pub fn save_state_dict(path: &Path, params: &[(String, Tensor)], opts: &SaveOptions) -> Result<()> {
    write_atomic(path, &state_dict_bytes(path, params, opts)?)
}
