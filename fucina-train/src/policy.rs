//! Checkpoint policies: keep the last N step directories, keep the best by
//! a metric, and early stopping with patience. They decide; the caller
//! saves (`fucina_optim::save_checkpoint`) and asks [`KeepLast::prune`]
//! which old step directories to delete.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The file `fucina_optim::save_checkpoint` writes last into a step
/// directory: its presence marks the checkpoint complete.
const MARKER: &str = "trainer_state.json";

/// Whether a smaller or a larger metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Smaller is better (a loss).
    Min,
    /// Larger is better (an accuracy).
    Max,
}

impl Mode {
    /// True when `value` improves on `best` by more than `min_delta`.
    fn improves(self, value: f64, best: f64, min_delta: f64) -> bool {
        match self {
            Mode::Min => value < best - min_delta,
            Mode::Max => value > best + min_delta,
        }
    }
}

/// Tracks the best value of a metric and the step it came at.
#[derive(Clone, Debug)]
pub struct KeepBest {
    mode: Mode,
    best: Option<(u64, f64)>,
}

impl KeepBest {
    /// A tracker for `mode`.
    pub fn new(mode: Mode) -> KeepBest {
        KeepBest { mode, best: None }
    }

    /// Records `value` at `step`; true when it is the new best (a NaN is
    /// never best).
    pub fn observe(&mut self, step: u64, value: f64) -> bool {
        if value.is_nan() {
            return false;
        }
        let better = match self.best {
            None => true,
            Some((_, b)) => self.mode.improves(value, b, 0.0),
        };
        if better {
            self.best = Some((step, value));
        }
        better
    }

    /// The best `(step, value)` so far.
    pub fn best(&self) -> Option<(u64, f64)> {
        self.best
    }
}

/// Stops when the metric has not improved by more than `min_delta` for
/// `patience` observations in a row (Keras' and Lightning's rule: with
/// patience 2, the second stale value stops).
#[derive(Clone, Debug)]
pub struct EarlyStopping {
    mode: Mode,
    patience: usize,
    min_delta: f64,
    best: Option<f64>,
    bad: usize,
}

impl EarlyStopping {
    /// Errors on a negative or NaN `min_delta`.
    pub fn new(mode: Mode, patience: usize, min_delta: f64) -> Result<EarlyStopping> {
        if min_delta.is_nan() || min_delta < 0.0 {
            return Err(Error::config(
                "EarlyStopping",
                format!("min_delta must be >= 0, got {min_delta}"),
            ));
        }
        Ok(EarlyStopping {
            mode,
            patience,
            min_delta,
            best: None,
            bad: 0,
        })
    }

    /// Records a value; true when training should stop now. A NaN counts
    /// as no improvement.
    pub fn observe(&mut self, value: f64) -> bool {
        let improved = !value.is_nan()
            && match self.best {
                None => true,
                Some(b) => self.mode.improves(value, b, self.min_delta),
            };
        if improved {
            self.best = Some(value);
            self.bad = 0;
        } else {
            self.bad += 1;
        }
        self.bad >= self.patience.max(1)
    }

    /// Observations in a row without improvement.
    pub fn stale(&self) -> usize {
        self.bad
    }
}

/// Keeps the newest `n` complete step directories (`step-NNNNNN` with the
/// `trainer_state.json` marker `fucina_optim::save_checkpoint` writes last)
/// plus any protected one (the best), deleting the older complete ones.
/// Incomplete directories (a crash mid-save) are never counted and never
/// deleted here: `fucina_optim::find_latest` skips them.
#[derive(Clone, Debug)]
pub struct KeepLast {
    n: usize,
}

impl KeepLast {
    /// Errors when `n` is 0 (nothing could be resumed).
    pub fn new(n: usize) -> Result<KeepLast> {
        if n == 0 {
            return Err(Error::config("KeepLast", "n must be at least 1"));
        }
        Ok(KeepLast { n })
    }

    /// The step directories under `root` this policy deletes, oldest first
    /// (the newest `n` and the step `protect` are kept).
    pub fn to_delete(&self, root: &Path, protect: Option<u64>) -> Result<Vec<PathBuf>> {
        let mut steps = step_dirs(root)?;
        steps.sort();
        let keep_from = steps.len().saturating_sub(self.n);
        Ok(steps[..keep_from]
            .iter()
            .filter(|(s, _)| Some(*s) != protect)
            .map(|(_, p)| p.clone())
            .collect())
    }

    /// Deletes what [`KeepLast::to_delete`] lists; returns it.
    pub fn prune(&self, root: &Path, protect: Option<u64>) -> Result<Vec<PathBuf>> {
        let gone = self.to_delete(root, protect)?;
        for d in &gone {
            std::fs::remove_dir_all(d).map_err(|e| Error::file(d, e.to_string()))?;
        }
        Ok(gone)
    }
}

/// `(step, path)` of every complete `step-<digits>` directory under `root`.
fn step_dirs(root: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::file(root, e.to_string())),
    };
    for e in rd {
        let e = e.map_err(|e| Error::file(root, e.to_string()))?;
        let name = e.file_name();
        let Some(digits) = name.to_str().and_then(|n| n.strip_prefix("step-")) else {
            continue;
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            continue; // staging or temporary directories
        }
        let complete = e.path().join(MARKER).is_file();
        if let (Ok(step), true) = (digits.parse::<u64>(), complete) {
            out.push((step, e.path()));
        }
    }
    Ok(out)
}
