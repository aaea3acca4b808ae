//! Checkpoints of a distributed job: rank 0 writes, every rank resumes.
//!
//! Every rank holds the same parameters and optimizer state (the gradients
//! are averaged bitwise-identically), so rank 0's copy is the job's. Saving:
//! rank 0 calls `fucina_optim::save_checkpoint` (crash-safe: marker written
//! last) and then tells every rank whether it succeeded, which is also the
//! barrier (no rank runs ahead of a checkpoint it may need). Resuming: rank
//! 0 finds the newest complete checkpoint (`fucina_optim::load_latest`),
//! reads its three files and sends their bytes to every rank; each rank
//! loads them (all or nothing: a checkpoint whose optimizer state does not
//! fit leaves the model as it was too), then all meet at a barrier. Only rank 0 needs to see the
//! checkpoint directory, so no shared file system is required.

use std::path::{Path, PathBuf};

use fucina_autograd::Tensor;
use fucina_optim::checkpoint::{MODEL_FILE, OPTIMIZER_FILE};
use fucina_optim::{Optimizer, TrainerState};

use crate::error::{Error, Result};
use crate::transport::{barrier, broadcast_bytes, Transport};

/// Rank 0 saves a checkpoint to `root/step-NNNNNN/`; every rank gets its
/// directory back, or the error (rank 0's own, [`Error::Rank0Failed`] on the
/// others). Every rank calls it at the same step.
pub fn save_checkpoint(
    t: &dyn Transport,
    root: &Path,
    params: &[(String, Tensor)],
    opt: &dyn Optimizer,
    state: &TrainerState,
) -> Result<PathBuf> {
    let what = format!("checkpoint save at step {}", state.step);
    let (outcome, status) = if t.rank() == 0 {
        match fucina_optim::save_checkpoint(root, params, opt, state) {
            Ok(dir) => {
                let msg = encode(0, &[dir.to_string_lossy().as_bytes()]);
                (Ok(dir), msg)
            }
            Err(e) => {
                let msg = encode(1, &[e.to_string().as_bytes()]);
                (Err(Error::from(e)), msg)
            }
        }
    } else {
        (Ok(PathBuf::new()), Vec::new())
    };
    let status = broadcast_bytes(t, &what, 0, &status)?;
    if t.rank() == 0 {
        return outcome;
    }
    let (code, parts) = decode(t, &what, &status)?;
    let text = String::from_utf8_lossy(parts.first().copied().unwrap_or_default()).into_owned();
    if code != 0 {
        return Err(Error::Rank0Failed {
            rank: t.rank(),
            what,
            message: text,
        });
    }
    Ok(PathBuf::from(text))
}

/// Every rank resumes from the newest complete checkpoint under `root` (as
/// rank 0 sees it): loads the model weights into `params` and the optimizer
/// state into `opt`, and returns the trainer state; `None` (nothing loaded)
/// when there is no checkpoint. Ends with a barrier.
pub fn resume(
    t: &dyn Transport,
    root: &Path,
    params: &[(String, Tensor)],
    opt: &mut dyn Optimizer,
) -> Result<Option<TrainerState>> {
    let what = "checkpoint resume";
    let blob = if t.rank() == 0 {
        match read_latest(root) {
            Ok(Some((model, optim, state))) => encode(0, &[&model, &optim, &state]),
            Ok(None) => encode(2, &[]),
            Err(e) => encode(1, &[e.to_string().as_bytes()]),
        }
    } else {
        Vec::new()
    };
    let blob = broadcast_bytes(t, what, 0, &blob)?;
    let (code, parts) = decode(t, what, &blob)?;
    let state = match (code, parts.as_slice()) {
        (0, [model, optim, state]) => Some(load_all(params, opt, model, optim, state)?),
        (2, []) => None,
        _ => {
            let text = parts.first().copied().unwrap_or_default();
            return Err(Error::Rank0Failed {
                rank: t.rank(),
                what: what.into(),
                message: String::from_utf8_lossy(text).into_owned(),
            });
        }
    };
    barrier(t, "checkpoint resume: loaded")?;
    Ok(state)
}

/// Loads a checkpoint's three parts all or nothing: the trainer state is
/// parsed first, the model load and the optimizer load each change nothing
/// when they fail, and a failed optimizer load puts back the model values
/// from before the model load (their views were kept), so `params` and
/// `opt` are either both the checkpoint's or both as they were.
fn load_all(
    params: &[(String, Tensor)],
    opt: &mut dyn Optimizer,
    model: &[u8],
    optim: &[u8],
    state: &[u8],
) -> Result<TrainerState> {
    let state = serde_json::from_slice::<TrainerState>(state).map_err(fucina_optim::Error::from)?;
    let before = params
        .iter()
        .map(|(_, t)| t.value())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    fucina_optim::load_model_bytes(model, params)?;
    if let Err(e) = opt.load_state_bytes(optim) {
        for ((_, t), v) in params.iter().zip(before) {
            // Same shape and dtype, and the load just wrote the tensor: only
            // a concurrent scope close could refuse it.
            t.set_value(v)?;
        }
        return Err(e.into());
    }
    Ok(state)
}

/// The newest complete checkpoint's files: (model, optimizer, trainer state JSON).
type Files = (Vec<u8>, Vec<u8>, Vec<u8>);

fn read_latest(root: &Path) -> Result<Option<Files>> {
    let Some(ck) = fucina_optim::load_latest(root)? else {
        return Ok(None);
    };
    let read = |name: &str| {
        let path = ck.dir.join(name);
        std::fs::read(&path).map_err(|source| fucina_optim::Error::Io { path, source })
    };
    let state = serde_json::to_vec(&ck.state).map_err(fucina_optim::Error::from)?;
    Ok(Some((read(MODEL_FILE)?, read(OPTIMIZER_FILE)?, state)))
}

/// A status byte and length-prefixed parts.
fn encode(code: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![code];
    for p in parts {
        out.extend_from_slice(&(p.len() as u64).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

fn decode<'a>(t: &dyn Transport, what: &str, blob: &'a [u8]) -> Result<(u8, Vec<&'a [u8]>)> {
    let bad = || Error::Rank0Failed {
        rank: t.rank(),
        what: what.to_string(),
        message: format!("malformed status message of {} bytes", blob.len()),
    };
    let (&code, mut rest) = blob.split_first().ok_or_else(bad)?;
    let mut parts = Vec::new();
    while !rest.is_empty() {
        if rest.len() < 8 {
            return Err(bad());
        }
        let (len, tail) = rest.split_at(8);
        let mut a = [0u8; 8];
        a.copy_from_slice(len);
        let len = usize::try_from(u64::from_le_bytes(a)).map_err(|_| bad())?;
        if tail.len() < len {
            return Err(bad());
        }
        let (part, tail) = tail.split_at(len);
        parts.push(part);
        rest = tail;
    }
    Ok((code, parts))
}
