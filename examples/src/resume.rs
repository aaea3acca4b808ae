//! Bit-exact `--resume` for the examples' training loops: the newest
//! complete checkpoint under a root, checked to come from the same run
//! (its identity: data, model and training knobs), loaded into the model
//! and the optimizer, with the loss and validation histories the run keeps
//! in `trainer_state.json` (`extra.run`, `extra.losses`, `extra.val`).

use std::fmt::Debug;
use std::path::Path;

use fucina_autograd::Tensor;
use fucina_optim::{load_latest, Optimizer};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// What a resumed run takes back from its checkpoint.
#[derive(Debug, Clone)]
pub struct Resumed {
    /// The step the checkpoint was taken after.
    pub step: u64,
    /// Training loss of step `i + 1` at index `i`.
    pub losses: Vec<f32>,
    /// `(step, validation loss)` at each evaluation.
    pub val: Vec<(u64, f64)>,
}

/// Loads the newest complete checkpoint under `root` into `named` and
/// `opt`, after checking that a run with `identity` made it; an error
/// naming the directory when there is none, it came from another run, or
/// its histories do not match its step (then nothing was loaded into the
/// model unless the identity matched; the optimizer's load is all or
/// nothing).
pub fn resume_latest<I: DeserializeOwned + PartialEq + Debug>(
    root: &Path,
    identity: &I,
    named: &[(String, Tensor)],
    opt: &mut dyn Optimizer,
) -> Result<Resumed> {
    let ck = load_latest(root)?.ok_or_else(|| Error::Resume {
        dir: root.to_path_buf(),
        msg: "no complete checkpoint there (run without --resume first)".into(),
    })?;
    let err = |msg: String| Error::Resume {
        dir: ck.dir.clone(),
        msg,
    };
    let saved: I = serde_json::from_value(ck.state.extra["run"].clone())
        .map_err(|e| err(format!("trainer_state.json has no valid run identity: {e}")))?;
    if &saved != identity {
        return Err(err(format!(
            "it was made by a different run (data, model or training knobs differ):\n  checkpoint: {saved:?}\n  this run:   {identity:?}"
        )));
    }
    let losses: Vec<f32> = serde_json::from_value(ck.state.extra["losses"].clone())
        .map_err(|e| err(format!("bad loss history: {e}")))?;
    let val: Vec<(u64, f64)> = serde_json::from_value(ck.state.extra["val"].clone())
        .map_err(|e| err(format!("bad validation history: {e}")))?;
    if losses.len() as u64 != ck.state.step || ck.state.data_position != ck.state.step {
        return Err(err("inconsistent trainer state".into()));
    }
    ck.load_model(named)?;
    ck.load_optimizer(opt)?;
    Ok(Resumed {
        step: ck.state.step,
        losses,
        val,
    })
}
