//! Training checkpoints: a directory `root/step-NNNNNN/` holding
//! `model.safetensors`, `optimizer.safetensors` and `trainer_state.json`.
//!
//! Commit protocol: the marker `trainer_state.json` is deleted first (when
//! overwriting), each payload is written to a temporary name, fsync'd and
//! renamed, and the marker is written last the same way. A directory without
//! a marker is incomplete and [`load_latest`] skips it, so a crash at any
//! point leaves the previous complete checkpoint as the latest.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fucina_autograd::Tensor;
use fucina_core::{Element, RawTensor};
use safetensors::tensor::{SafeTensors, TensorView};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::io::{sync_dir, write_atomic};
use crate::optimizer::Optimizer;
use crate::state::{from_st_dtype, st_dtype};

/// File name of the model weights in a checkpoint directory.
pub const MODEL_FILE: &str = "model.safetensors";
/// File name of the optimizer state in a checkpoint directory.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// File name of the trainer state: the commit marker, written last.
pub const TRAINER_STATE_FILE: &str = "trainer_state.json";

/// Where the training loop stands: everything besides weights and optimizer
/// state that a bit-exact resume needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TrainerState {
    /// Optimizer steps taken.
    pub step: u64,
    /// Named RNG seeds (data shuffling, dropout, ...).
    pub seeds: BTreeMap<String, u64>,
    /// Position in the data stream (samples or batches consumed: the loop's choice).
    pub data_position: u64,
    /// The learning rate of the last step (for logs; the optimizer file is authoritative).
    pub lr: f64,
    /// Anything else the loop wants back (metrics, config).
    #[serde(default)]
    pub extra: serde_json::Value,
}

/// A complete checkpoint found on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Its directory.
    pub dir: PathBuf,
    /// The trainer state read from its marker.
    pub state: TrainerState,
}

impl Checkpoint {
    /// Loads the model weights into `params` (see [`load_model`]).
    pub fn load_model(&self, params: &[(String, Tensor)]) -> Result<()> {
        load_model(&self.dir.join(MODEL_FILE), params)
    }

    /// Loads the optimizer state into `opt`.
    pub fn load_optimizer(&self, opt: &mut dyn Optimizer) -> Result<()> {
        opt.load(&self.dir.join(OPTIMIZER_FILE))
    }
}

thread_local! {
    static FAULT: Cell<Option<(&'static str, FaultAction)>> = const { Cell::new(None) };
}

/// What an injected fault does (tests of crash safety).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Return [`Error::Injected`] at the point.
    Fail,
    /// Create `ready_file` in the checkpoint root, then sleep forever (a parent kills us).
    Hang,
}

/// Arms a fault at a named point of [`save_checkpoint`] on this thread:
/// `"before_model"`, `"after_model"`, `"after_optimizer"`. `None` disarms.
#[doc(hidden)]
pub fn inject_fault(fault: Option<(&'static str, FaultAction)>) {
    FAULT.with(|f| f.set(fault));
}

fn fault_point(point: &'static str, root: &Path) -> Result<()> {
    match FAULT.with(|f| f.get()) {
        Some((p, FaultAction::Fail)) if p == point => Err(Error::Injected(point)),
        Some((p, FaultAction::Hang)) if p == point => {
            let _ = std::fs::write(root.join("ready_file"), point);
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        _ => Ok(()),
    }
}

/// The directory name of the checkpoint at `step`.
pub fn step_dir_name(step: u64) -> String {
    format!("step-{step:06}")
}

/// The bytes of a contiguous tensor (little-endian, as safetensors stores them).
fn raw_bytes(t: &RawTensor) -> Result<Vec<u8>> {
    Ok(
        fucina_core::dispatch_any!(t.dtype(), T => bytemuck::cast_slice::<T, u8>(t.as_slice::<T>()?).to_vec()),
    )
}

/// The named parameters as safetensors bytes.
pub fn model_bytes(params: &[(String, Tensor)]) -> Result<Vec<u8>> {
    let mut data = Vec::with_capacity(params.len());
    for (name, t) in params {
        let raw = t.raw()?;
        let raw = t.ctx().contiguous(&raw)?;
        data.push((
            name.clone(),
            raw.shape().to_vec(),
            raw.dtype(),
            raw_bytes(&raw)?,
        ));
    }
    let mut views = Vec::with_capacity(data.len());
    for (name, shape, dt, bytes) in &data {
        let sd = st_dtype(*dt).ok_or_else(|| Error::StateMismatch(format!("dtype {dt}")))?;
        views.push((name.clone(), TensorView::new(sd, shape.clone(), bytes)?));
    }
    if let Some(dup) = params
        .iter()
        .enumerate()
        .find(|(i, (n, _))| params[..*i].iter().any(|(m, _)| m == n))
    {
        return Err(Error::StateMismatch(format!(
            "parameter name `{}` appears twice",
            dup.1 .0
        )));
    }
    Ok(safetensors::serialize(views, &None)?)
}

/// Writes the named parameters to `path` as safetensors (atomically).
pub fn save_model(path: &Path, params: &[(String, Tensor)]) -> Result<()> {
    write_atomic(path, &model_bytes(params)?)
}

/// Loads weights from safetensors bytes into the named parameters. Every name
/// must be present with the same shape and dtype; nothing changes unless all fit.
pub fn load_model_bytes(bytes: &[u8], params: &[(String, Tensor)]) -> Result<()> {
    let st = SafeTensors::deserialize(bytes)?;
    let mut staged = Vec::with_capacity(params.len());
    for (name, t) in params {
        let v = st
            .tensor(name)
            .map_err(|_| Error::StateMismatch(format!("no tensor `{name}` in the model file")))?;
        let dt = from_st_dtype(v.dtype());
        if dt != Some(t.dtype()) || v.shape() != t.shape() {
            return Err(Error::StateMismatch(format!(
                "`{name}`: file has {:?} {:?}, parameter is {} {:?}",
                v.dtype(),
                v.shape(),
                t.dtype(),
                t.shape()
            )));
        }
        let data = v.data();
        let raw = fucina_core::dispatch_any!(t.dtype(), T => {
            let mut vals = vec![<T as Element>::from_f64(0.0); t.numel()];
            let dst = bytemuck::cast_slice_mut::<T, u8>(&mut vals);
            if dst.len() != data.len() {
                return Err(Error::StateMismatch(format!("`{name}`: {} bytes, expected {}", data.len(), dst.len())));
            }
            dst.copy_from_slice(data);
            t.ctx().from_slice(&vals, t.shape())?
        });
        staged.push(raw);
    }
    for ((_, t), raw) in params.iter().zip(staged) {
        t.set_value(raw)?;
    }
    Ok(())
}

/// Loads weights from a safetensors file (see [`load_model_bytes`]).
pub fn load_model(path: &Path, params: &[(String, Tensor)]) -> Result<()> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    load_model_bytes(&bytes, params)
}

/// Saves a complete checkpoint to `root/step-NNNNNN/` and returns that directory.
///
/// ```
/// use fucina_autograd::Tensor;
/// use fucina_optim::{load_latest, save_checkpoint, Optimizer, Sgd, SgdConfig, TrainerState};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let w = Tensor::variable(&ctx, &[1.0f32, 2.0], &[2])?;
/// let params = vec![("w".to_string(), w.clone())];
/// let opt = Sgd::single(vec![w.clone()], SgdConfig::new(0.1))?;
/// let root = std::env::temp_dir().join(format!("fucina-doc-ckpt-{}", std::process::id()));
/// let state = TrainerState { step: 7, ..Default::default() };
/// save_checkpoint(&root, &params, &opt, &state)?;
/// let ck = load_latest(&root)?.expect("a checkpoint");
/// assert_eq!(ck.state.step, 7);
/// ck.load_model(&params)?;
/// # std::fs::remove_dir_all(&root).ok();
/// # Ok::<(), fucina_optim::Error>(())
/// ```
pub fn save_checkpoint(
    root: &Path,
    params: &[(String, Tensor)],
    opt: &dyn Optimizer,
    state: &TrainerState,
) -> Result<PathBuf> {
    let dir = root.join(step_dir_name(state.step));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    sync_dir(root)?;
    let marker = dir.join(TRAINER_STATE_FILE);
    if marker.exists() {
        std::fs::remove_file(&marker).map_err(|e| Error::io(&marker, e))?;
        sync_dir(&dir)?;
    }
    // Serialise everything before touching the payload files.
    let model = model_bytes(params)?;
    let optim = opt.state_bytes()?;
    let json = serde_json::to_vec_pretty(state)?;
    fault_point("before_model", root)?;
    write_atomic(&dir.join(MODEL_FILE), &model)?;
    fault_point("after_model", root)?;
    write_atomic(&dir.join(OPTIMIZER_FILE), &optim)?;
    fault_point("after_optimizer", root)?;
    write_atomic(&marker, &json)?;
    Ok(dir)
}

/// Reads the checkpoint in `dir` if it is complete (marker parses, payloads present).
pub fn load_checkpoint(dir: &Path) -> Result<Option<Checkpoint>> {
    let marker = dir.join(TRAINER_STATE_FILE);
    let bytes = match std::fs::read(&marker) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&marker, e)),
    };
    let Ok(state) = serde_json::from_slice::<TrainerState>(&bytes) else {
        return Ok(None);
    };
    if !dir.join(MODEL_FILE).is_file() || !dir.join(OPTIMIZER_FILE).is_file() {
        return Ok(None);
    }
    Ok(Some(Checkpoint {
        dir: dir.to_path_buf(),
        state,
    }))
}

/// The newest complete checkpoint under `root` (by step number), or `None`
/// when there is none (or `root` does not exist). Incomplete directories
/// (no marker, e.g. a save that crashed) are skipped.
pub fn load_latest(root: &Path) -> Result<Option<Checkpoint>> {
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(root, e)),
    };
    let mut steps: Vec<(u64, PathBuf)> = Vec::new();
    for e in entries {
        let e = e.map_err(|err| Error::io(root, err))?;
        let name = e.file_name();
        let Some(num) = name.to_str().and_then(|s| s.strip_prefix("step-")) else {
            continue;
        };
        if let Ok(n) = num.parse::<u64>() {
            steps.push((n, e.path()));
        }
    }
    steps.sort_by_key(|s| std::cmp::Reverse(s.0));
    for (_, dir) in steps {
        if let Some(c) = load_checkpoint(&dir)? {
            return Ok(Some(c));
        }
    }
    Ok(None)
}
