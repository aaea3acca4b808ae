//! Training checkpoints: a directory `root/step-NNNNNN/` holding
//! `model.safetensors`, `optimizer.safetensors` and `trainer_state.json`.
//!
//! Commit protocol: each payload is written to a temporary name, fsync'd
//! and renamed, and the marker `trainer_state.json` is written last the same
//! way. Re-saving a step that already has a marker never touches its files:
//! the new checkpoint is written in full into `step-NNNNNN.tmp-<tag>/`, then
//! the old directory is renamed to `step-NNNNNN.old-<tag>/`, the new one to
//! `step-NNNNNN/`, and the old one removed; if that stops between the two
//! renames, [`find_latest`] takes the complete sibling (new first), so a
//! complete checkpoint of the step exists at every instant. The marker holds
//! the [`TrainerState`] and, under `payload`, each payload file's size and
//! FNV-1a 64 checksum ([`fnv1a64`]). A directory without a marker is
//! incomplete; one whose marker does not parse or whose payload does not
//! match it is damaged. [`load_latest`] skips both (the reasons are in
//! [`find_latest`]'s [`LatestCheckpoint::skipped`]) and falls back to the
//! newest complete, verified checkpoint, so a crash at any point, or a
//! payload truncated afterwards, leaves the previous checkpoint usable.
//!
//! Model weights go through [`fucina_autograd::io`], the workspace's one
//! state-dict implementation: strict (a missing, unexpected or mismatched
//! tensor is one error listing them), read through a memory map, every error
//! naming the file and the tensor, and a failed load changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fucina_autograd::io::{self as sdio, LoadOptions, SaveOptions};
use fucina_autograd::Tensor;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::io::{sync_dir, write_atomic};
use crate::optimizer::Optimizer;

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

/// Size and checksum of one payload file, as recorded in the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    /// Length in bytes.
    pub bytes: u64,
    /// [`fnv1a64`] of the contents, as 16 lowercase hex digits in the JSON.
    #[serde(with = "hex_u64")]
    pub fnv1a64: u64,
}

impl FileDigest {
    /// The digest of `data`.
    pub fn of(data: &[u8]) -> FileDigest {
        FileDigest {
            bytes: data.len() as u64,
            fnv1a64: fnv1a64(data),
        }
    }
}

mod hex_u64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:016x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        u64::from_str_radix(&s, 16).map_err(serde::de::Error::custom)
    }
}

/// FNV-1a, 64-bit (Fowler–Noll–Vo; offset basis 0xcbf29ce484222325, prime
/// 0x100000001b3): each byte is XORed into the state, which is then
/// multiplied by the prime. Not cryptographic: it detects truncation, torn
/// writes and bit rot in checkpoint payloads, which is all the marker needs,
/// with no dependency. About 1 GB/s, so verifying a 90 MB model costs ~0.1 s.
pub fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The marker's JSON: the trainer state's fields plus the payload digests.
#[derive(Serialize, Deserialize)]
struct Marker {
    #[serde(flatten)]
    state: TrainerState,
    payload: BTreeMap<String, FileDigest>,
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
    /// Loads the model weights into `params`, strictly (see [`load_model`]).
    pub fn load_model(&self, params: &[(String, Tensor)]) -> Result<()> {
        load_model(&self.dir.join(MODEL_FILE), params)
    }

    /// Loads the optimizer state into `opt`.
    pub fn load_optimizer(&self, opt: &mut dyn Optimizer) -> Result<()> {
        opt.load(&self.dir.join(OPTIMIZER_FILE))
    }
}

/// A checkpoint directory [`find_latest`] passed over, and why.
#[derive(Debug)]
pub struct SkippedCheckpoint {
    /// The directory.
    pub dir: PathBuf,
    /// Why: [`Error::IncompleteCheckpoint`] (no marker), or the marker or
    /// payload error that names the file.
    pub reason: Error,
}

/// What [`find_latest`] found: the newest usable checkpoint and the newer
/// directories it skipped.
#[derive(Debug)]
pub struct LatestCheckpoint {
    /// The newest complete, verified checkpoint, if any.
    pub checkpoint: Option<Checkpoint>,
    /// Step directories newer than it that were skipped, newest first.
    pub skipped: Vec<SkippedCheckpoint>,
}

#[cfg(feature = "fault-injection")]
mod fault {
    use std::cell::Cell;
    use std::path::Path;

    use crate::error::{Error, Result};

    thread_local! {
        static FAULT: Cell<Option<(&'static str, FaultAction)>> = const { Cell::new(None) };
    }

    /// What an injected fault does (tests of crash safety; feature `fault-injection`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum FaultAction {
        /// Return [`Error::Injected`] at the point.
        Fail,
        /// Create `ready_file` in the checkpoint root, then sleep forever (a parent kills us).
        Hang,
    }

    /// Arms a fault at a named point of [`save_checkpoint`](super::save_checkpoint)
    /// on this thread: `"before_model"`, `"after_model"`, `"after_optimizer"`;
    /// when re-saving a step that has a marker, also `"after_stage"` (the new
    /// checkpoint complete beside the old) and `"after_swap_out"` (the old one
    /// renamed aside, the new one not yet in its place).
    /// `None` disarms.
    pub fn inject_fault(fault: Option<(&'static str, FaultAction)>) {
        FAULT.with(|f| f.set(fault));
    }

    pub(super) fn fault_point(point: &'static str, root: &Path) -> Result<()> {
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
}

#[cfg(feature = "fault-injection")]
pub use fault::{inject_fault, FaultAction};

#[cfg(feature = "fault-injection")]
use fault::fault_point;

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
fn fault_point(_point: &'static str, _root: &Path) -> Result<()> {
    Ok(())
}

/// The directory name of the checkpoint at `step`.
pub fn step_dir_name(step: u64) -> String {
    format!("step-{step:06}")
}

/// The label naming in-memory model bytes in errors.
const MEMORY_LABEL: &str = "<model bytes>";

/// The named parameters as safetensors bytes (each in its own dtype).
pub fn model_bytes(params: &[(String, Tensor)]) -> Result<Vec<u8>> {
    Ok(sdio::state_dict_bytes(
        Path::new(MEMORY_LABEL),
        params,
        &SaveOptions::default(),
    )?)
}

/// Writes the named parameters to `path` as safetensors (atomically).
pub fn save_model(path: &Path, params: &[(String, Tensor)]) -> Result<()> {
    Ok(sdio::save_state_dict(
        path,
        params,
        &SaveOptions::default(),
    )?)
}

/// The load a checkpoint makes: strict, dtypes exact (a resume is bit-exact).
fn strict_exact() -> LoadOptions {
    LoadOptions::new().dtype_policy(sdio::DtypePolicy::Exact)
}

/// Loads weights from safetensors bytes into the named parameters: every
/// name present with the same shape and dtype and no tensor left over, or
/// one error listing what does not fit; nothing changes unless all fit.
pub fn load_model_bytes(bytes: &[u8], params: &[(String, Tensor)]) -> Result<()> {
    sdio::load_state_dict_bytes(MEMORY_LABEL, bytes, params, &strict_exact())?;
    Ok(())
}

/// Loads weights from a safetensors file (see [`load_model_bytes`]).
pub fn load_model(path: &Path, params: &[(String, Tensor)]) -> Result<()> {
    sdio::load_state_dict(path, params, &strict_exact())?;
    Ok(())
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
    let name = step_dir_name(state.step);
    let dir = root.join(&name);
    // Serialise everything before touching any file.
    let model = model_bytes(params)?;
    let optim = opt.state_bytes()?;
    let marker_json = Marker {
        state: state.clone(),
        payload: [
            (MODEL_FILE.to_string(), FileDigest::of(&model)),
            (OPTIMIZER_FILE.to_string(), FileDigest::of(&optim)),
        ]
        .into_iter()
        .collect(),
    };
    let json = serde_json::to_vec_pretty(&marker_json)?;
    std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
    if !dir.join(TRAINER_STATE_FILE).exists() {
        // Nothing complete to keep: write in place, marker last.
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        sync_dir(root)?;
        write_payload(root, &dir, &model, &optim, &json)?;
        // Best effort: a failure to tidy never fails a save that landed.
        let _ = remove_stale_saves(root);
        return Ok(dir);
    }
    // Re-saving a step that has a marker: the old checkpoint stays complete
    // and valid until the new one is. The new one is written in full into a
    // sibling staging directory, then swapped in with two renames; in the
    // window between them `find_latest` takes either of the two (both are
    // complete) from their sibling names.
    let tag = unique_tag();
    let _in_flight = InFlight::register(&tag);
    let staging = root.join(format!("{name}.{STAGING}{tag}"));
    let old = root.join(format!("{name}.{REPLACED}{tag}"));
    std::fs::create_dir(&staging).map_err(|e| Error::io(&staging, e))?;
    sync_dir(root)?;
    if let Err(e) = write_payload(root, &staging, &model, &optim, &json) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    fault_point("after_stage", root)?;
    std::fs::rename(&dir, &old).map_err(|e| Error::io(&dir, e))?;
    sync_dir(root)?;
    fault_point("after_swap_out", root)?;
    std::fs::rename(&staging, &dir).map_err(|e| Error::io(&staging, e))?;
    sync_dir(root)?;
    std::fs::remove_dir_all(&old).map_err(|e| Error::io(&old, e))?;
    sync_dir(root)?;
    drop(_in_flight);
    let _ = remove_stale_saves(root);
    Ok(dir)
}

/// The tags of this process's re-saves now running (their staging and
/// replaced directories are not stale).
static IN_FLIGHT: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());

/// Registers a re-save's tag while it runs.
struct InFlight(String);

impl InFlight {
    fn register(tag: &str) -> InFlight {
        IN_FLIGHT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tag.to_string());
        InFlight(tag.to_string())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.0);
    }
}

/// Whether process `pid` may still be running (Linux: `/proc/<pid>`
/// exists; elsewhere always assumed).
fn may_be_alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

/// Deletes what interrupted re-saves left under `root` — the staging
/// (`step-N.tmp-<pid>-<n>`) and replaced (`step-N.old-<pid>-<n>`)
/// directories of a save that failed in this process or of a process that
/// is gone — once `step-N` itself is complete again; returns what it
/// deleted. A sibling of a save still running (here or in a live process)
/// and the siblings of a step whose directory is missing (`find_latest`
/// may need them) are kept. `save_checkpoint` calls it after every save.
pub fn remove_stale_saves(root: &Path) -> Result<Vec<PathBuf>> {
    let mut gone = Vec::new();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(gone),
        Err(e) => return Err(Error::io(root, e)),
    };
    let me = std::process::id();
    for e in entries {
        let e = e.map_err(|err| Error::io(root, err))?;
        let name = e.file_name();
        let Some((step, tag)) = name
            .to_str()
            .and_then(|s| s.strip_prefix("step-"))
            .and_then(|s| s.split_once('.'))
            .and_then(|(n, rest)| {
                let tag = rest
                    .strip_prefix(STAGING)
                    .or_else(|| rest.strip_prefix(REPLACED))?;
                Some((n.parse::<u64>().ok()?, tag.to_string()))
            })
        else {
            continue;
        };
        let Some(pid) = tag.split_once('-').and_then(|(p, _)| p.parse::<u32>().ok()) else {
            continue;
        };
        let running = if pid == me {
            IN_FLIGHT
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&tag)
        } else {
            may_be_alive(pid)
        };
        if running
            || !matches!(
                load_checkpoint(&root.join(step_dir_name(step))),
                Ok(Some(_))
            )
        {
            continue;
        }
        let path = e.path();
        std::fs::remove_dir_all(&path).map_err(|err| Error::io(&path, err))?;
        gone.push(path);
    }
    if !gone.is_empty() {
        sync_dir(root)?;
    }
    Ok(gone)
}

/// The payload files, then the marker, into `dir` (each atomically).
fn write_payload(root: &Path, dir: &Path, model: &[u8], optim: &[u8], json: &[u8]) -> Result<()> {
    fault_point("before_model", root)?;
    write_atomic(&dir.join(MODEL_FILE), model)?;
    fault_point("after_model", root)?;
    write_atomic(&dir.join(OPTIMIZER_FILE), optim)?;
    fault_point("after_optimizer", root)?;
    write_atomic(&dir.join(TRAINER_STATE_FILE), json)
}

/// The name part of a re-save's staging directory, `step-NNNNNN.tmp-<tag>`.
const STAGING: &str = "tmp-";
/// The name part of the checkpoint a re-save replaces, `step-NNNNNN.old-<tag>`.
const REPLACED: &str = "old-";

/// `<pid>-<n>`: unique to one save in this process.
fn unique_tag() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Reads and verifies the checkpoint in `dir`: `Ok(None)` when it has no
/// marker (an incomplete save); an error naming the file when the marker
/// does not parse or a payload file is missing or does not match the size
/// and checksum the marker records.
pub fn load_checkpoint(dir: &Path) -> Result<Option<Checkpoint>> {
    let marker = dir.join(TRAINER_STATE_FILE);
    let bytes = match std::fs::read(&marker) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&marker, e)),
    };
    let m: Marker = serde_json::from_slice(&bytes).map_err(|e| Error::BadCheckpoint {
        file: marker.clone(),
        reason: format!("the marker does not parse: {e}"),
    })?;
    for name in [MODEL_FILE, OPTIMIZER_FILE] {
        let file = dir.join(name);
        let Some(want) = m.payload.get(name) else {
            return Err(Error::BadCheckpoint {
                file: marker,
                reason: format!("the marker records no size and checksum for `{name}`"),
            });
        };
        verify_payload(&file, want)?;
    }
    Ok(Some(Checkpoint {
        dir: dir.to_path_buf(),
        state: m.state,
    }))
}

/// Checks a payload file's size, then its checksum, against the marker's record.
fn verify_payload(file: &Path, want: &FileDigest) -> Result<()> {
    // Through a memory map: no heap copy of a large payload.
    let data = sdio::map_file(file)?;
    let got = FileDigest::of(&data);
    let bad = |reason: String| {
        Err(Error::BadCheckpoint {
            file: file.to_path_buf(),
            reason,
        })
    };
    if got.bytes != want.bytes {
        return bad(format!(
            "{} bytes, the marker records {} (truncated or replaced)",
            got.bytes, want.bytes
        ));
    }
    if got.fnv1a64 != want.fnv1a64 {
        return bad(format!(
            "checksum {:016x}, the marker records {:016x} (corrupted)",
            got.fnv1a64, want.fnv1a64
        ));
    }
    Ok(())
}

/// The newest complete, verified checkpoint under `root` (by step number),
/// or `None` when there is none (or `root` does not exist). Directories
/// without a marker, with a malformed marker or with a payload that fails
/// verification are skipped (see [`find_latest`] for the reasons), as are
/// entries named like step directories that are not directories.
pub fn load_latest(root: &Path) -> Result<Option<Checkpoint>> {
    Ok(find_latest(root)?.checkpoint)
}

/// [`load_latest`], also returning every newer step directory it skipped
/// and why. Errors only when `root` itself cannot be listed.
pub fn find_latest(root: &Path) -> Result<LatestCheckpoint> {
    let mut found = LatestCheckpoint {
        checkpoint: None,
        skipped: Vec::new(),
    };
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(Error::io(root, e)),
    };
    let mut steps: Vec<(u64, PathBuf)> = Vec::new();
    // Siblings of a step a re-save was swapping when it stopped: staged (new)
    // first, then replaced (old).
    let mut siblings: BTreeMap<u64, Vec<(bool, PathBuf)>> = BTreeMap::new();
    for e in entries {
        let e = e.map_err(|err| Error::io(root, err))?;
        let name = e.file_name();
        let Some(num) = name.to_str().and_then(|s| s.strip_prefix("step-")) else {
            continue;
        };
        let path = e.path();
        // Follows symlinks: a link to a checkpoint directory counts.
        if !path.is_dir() {
            continue;
        }
        match num.split_once('.') {
            None => {
                if let Ok(n) = num.parse::<u64>() {
                    steps.push((n, path));
                }
            }
            Some((n, rest)) => {
                let replaced = rest.starts_with(REPLACED);
                if let (Ok(n), true) = (n.parse::<u64>(), replaced || rest.starts_with(STAGING)) {
                    siblings.entry(n).or_default().push((replaced, path));
                }
            }
        }
    }
    // A step whose directory is missing but has a sibling is a candidate.
    for &n in siblings.keys() {
        if !steps.iter().any(|s| s.0 == n) {
            steps.push((n, root.join(step_dir_name(n))));
        }
    }
    steps.sort_by_key(|s| std::cmp::Reverse(s.0));
    for (n, dir) in steps {
        if !dir.is_dir() {
            // Mid-swap: the first complete sibling, the new one first.
            let mut sib = siblings.remove(&n).unwrap_or_default();
            sib.sort();
            if let Some(c) = sib
                .into_iter()
                .find_map(|(_, d)| load_checkpoint(&d).ok().flatten())
            {
                found.checkpoint = Some(c);
                break;
            }
            continue;
        }
        match load_checkpoint(&dir) {
            Ok(Some(c)) => {
                found.checkpoint = Some(c);
                break;
            }
            Ok(None) => found.skipped.push(SkippedCheckpoint {
                reason: Error::IncompleteCheckpoint { dir: dir.clone() },
                dir,
            }),
            Err(reason) => found.skipped.push(SkippedCheckpoint { dir, reason }),
        }
    }
    Ok(found)
}
