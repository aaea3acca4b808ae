//! Bit-exact `--resume` for the examples' training loops: the checkpoint a
//! run saves, with the loss and validation histories it keeps in
//! `trainer_state.json` (`extra.run`, `extra.losses`, `extra.val`), and the
//! newest complete one under a root, checked to come from the same run (its
//! identity: data, model and training knobs), loaded into the model and the
//! optimizer.

use std::path::{Path, PathBuf};

use fucina_autograd::Tensor;
use fucina_optim::{load_latest, save_checkpoint, Optimizer, TrainerState};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

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
pub fn resume_latest<I: DeserializeOwned + Serialize + PartialEq>(
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
        let (saved, now) = (to_json(&saved)?, to_json(identity)?);
        return Err(err(format!(
            "it was made by a different run: {}",
            differing_fields(&saved, &now).join("; ")
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

/// Where a run checkpoints and what every checkpoint of it holds besides
/// its step: the tensors, the run's identity and its one seed.
pub struct RunCheckpoints<'a, I> {
    /// The directory the step directories go in (`OUT/checkpoints`).
    pub root: PathBuf,
    /// The tensors saved and loaded (parameters and persistent buffers).
    pub named: &'a [(String, Tensor)],
    /// What a resumed run must share with this one.
    pub identity: &'a I,
    /// The run's seed (`seeds.seed` of the trainer state).
    pub seed: u64,
}

impl<'a, I: DeserializeOwned + Serialize + PartialEq> RunCheckpoints<'a, I> {
    /// The checkpoints of a run writing to `out` (created if missing), under
    /// `out/checkpoints`.
    pub fn create(
        out: &Path,
        named: &'a [(String, Tensor)],
        identity: &'a I,
        seed: u64,
    ) -> Result<RunCheckpoints<'a, I>> {
        std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
        Ok(RunCheckpoints {
            root: out.join("checkpoints"),
            named,
            identity,
            seed,
        })
    }

    /// Where the run starts: with `resume`, [`resume_latest`] from this
    /// run's root; else step 0 with empty histories.
    pub fn start(&self, resume: bool, opt: &mut dyn Optimizer) -> Result<Resumed> {
        if !resume {
            return Ok(Resumed {
                step: 0,
                losses: Vec::new(),
                val: Vec::new(),
            });
        }
        resume_latest(&self.root, self.identity, self.named, opt)
    }

    /// Saves the checkpoint after `step`, with the histories so far, that
    /// [`resume_latest`] reads back (the data position is the step).
    pub fn save(
        &self,
        opt: &dyn Optimizer,
        step: u64,
        losses: &[f32],
        val: &[(u64, f64)],
    ) -> Result<()> {
        let state = TrainerState {
            step,
            seeds: [("seed".to_string(), self.seed)].into(),
            data_position: step,
            lr: opt.lr(0)?,
            extra: serde_json::json!({"run": self.identity, "losses": losses, "val": val}),
        };
        save_checkpoint(&self.root, self.named, opt, &state)?;
        Ok(())
    }
}

fn to_json<I: Serialize>(v: &I) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::Resume {
        dir: Default::default(),
        msg: format!("the run identity does not serialise: {e}"),
    })
}

/// The fields (dotted paths into nested objects) where `saved` and `now`
/// differ, each as `field: checkpoint X, this run Y`; a whole value when
/// they are not both objects.
pub fn differing_fields(saved: &Value, now: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_into("", saved, now, &mut out);
    if out.is_empty() {
        // Equal as JSON yet unequal as values (e.g. NaN): say so, whole.
        out.push(format!("checkpoint {saved}, this run {now}"));
    }
    out
}

fn diff_into(path: &str, saved: &Value, now: &Value, out: &mut Vec<String>) {
    match (saved, now) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                let null = Value::Null;
                diff_into(
                    &sub,
                    a.get(k).unwrap_or(&null),
                    b.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(format!("`{path}`: checkpoint {a}, this run {b}")),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::differing_fields;
    use serde_json::json;

    #[test]
    fn names_only_the_fields_that_differ() {
        let saved = json!({"lr": 0.001, "steps": 10, "model": {"n_embd": 32, "n_head": 4}});
        let now = json!({"lr": 0.01, "steps": 10, "model": {"n_embd": 32, "n_head": 8}});
        assert_eq!(
            differing_fields(&saved, &now),
            [
                "`lr`: checkpoint 0.001, this run 0.01",
                "`model.n_head`: checkpoint 4, this run 8"
            ]
        );
    }
}
