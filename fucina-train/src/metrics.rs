//! A metrics logger: every scalar goes to `metrics.jsonl` (one JSON object
//! per line: `step`, `tag`, `value` — a number, or the string `"NaN"`,
//! `"Infinity"` or `"-Infinity"` — and `wall_time`) and to a TensorBoard
//! event file (`events.out.tfevents.<secs>.<host>.<pid>.<n>`) in the run
//! directory, which `tensorboard --logdir` reads. Both are flushed on
//! [`MetricsLogger::flush`] and on drop.
//!
//! Histograms go to the event file only (TensorBoard's Histograms and
//! Distributions tabs): any values with [`MetricsLogger::histogram`], or,
//! once [`MetricsLogger::histograms_every`] turned them on, every
//! parameter's weights (`weights/<name>`) and gradient (`grads/<name>`)
//! with [`MetricsLogger::parameter_histograms`].

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use fucina_autograd::Tensor;

use crate::error::{Error, Result};
use crate::tensorboard::{self, Histogram};

/// Buckets of a histogram unless [`MetricsLogger::histogram_bins`] says otherwise.
pub const DEFAULT_BINS: usize = 30;

/// Writes scalars to JSONL and TensorBoard.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("fucina-doc-metrics-{}", std::process::id()));
/// let mut log = fucina_train::MetricsLogger::create(&dir)?;
/// log.scalar("train/loss", 1, 2.5)?;
/// log.flush()?;
/// let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
/// assert!(text.contains("\"tag\":\"train/loss\""));
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), fucina_train::Error>(())
/// ```
pub struct MetricsLogger {
    jsonl: BufWriter<File>,
    events: BufWriter<File>,
    jsonl_path: PathBuf,
    events_path: PathBuf,
    histogram_every: Option<u64>,
    bins: usize,
}

static FILE_COUNTER: AtomicU64 = AtomicU64::new(0);

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl MetricsLogger {
    /// Creates `dir` (if needed), appends to its `metrics.jsonl` and starts
    /// a new event file there.
    pub fn create(dir: &Path) -> Result<MetricsLogger> {
        std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, e.to_string()))?;
        let jsonl_path = dir.join("metrics.jsonl");
        let jsonl = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&jsonl_path)
            .map_err(|e| Error::file(&jsonl_path, e.to_string()))?;
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
        let t = now();
        let events_path = dir.join(format!(
            "events.out.tfevents.{}.{host}.{}.{}",
            t as u64,
            std::process::id(),
            FILE_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let events =
            File::create(&events_path).map_err(|e| Error::file(&events_path, e.to_string()))?;
        let mut log = MetricsLogger {
            jsonl: BufWriter::new(jsonl),
            events: BufWriter::new(events),
            jsonl_path,
            events_path,
            histogram_every: None,
            bins: DEFAULT_BINS,
        };
        let first = tensorboard::record(&tensorboard::file_version_event(t));
        log.write_events(&first)?;
        Ok(log)
    }

    /// The event file's path.
    pub fn event_file(&self) -> &Path {
        &self.events_path
    }

    fn write_events(&mut self, bytes: &[u8]) -> Result<()> {
        self.events
            .write_all(bytes)
            .map_err(|e| Error::file(&self.events_path, e.to_string()))
    }

    /// Turns on [`MetricsLogger::parameter_histograms`] at every step that
    /// is a multiple of `every` (0 turns them off again).
    pub fn histograms_every(mut self, every: u64) -> MetricsLogger {
        self.histogram_every = (every > 0).then_some(every);
        self
    }

    /// Buckets per histogram (default [`DEFAULT_BINS`]); 0 is an error.
    pub fn histogram_bins(mut self, bins: usize) -> Result<MetricsLogger> {
        if bins == 0 {
            return Err(Error::config(
                "MetricsLogger",
                "histogram_bins must be at least 1",
            ));
        }
        self.bins = bins;
        Ok(self)
    }

    fn step_i64(step: u64) -> Result<i64> {
        i64::try_from(step).map_err(|_| {
            Error::config(
                "MetricsLogger",
                format!("step {step} does not fit TensorBoard's int64"),
            )
        })
    }

    /// Logs a histogram of `values` under `tag` at `step`: equal-width
    /// buckets over their range, with their count, sum and sum of squares.
    /// No values, or a NaN or infinite one, is an error naming the tag.
    pub fn histogram(&mut self, tag: &str, step: u64, values: &[f64]) -> Result<()> {
        let step = Self::step_i64(step)?;
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::config(
                "MetricsLogger",
                format!(
                    "histogram `{tag}`: value {i} is {} (histograms take finite values)",
                    values[i]
                ),
            ));
        }
        let h = Histogram::of(values, self.bins).ok_or_else(|| {
            Error::config("MetricsLogger", format!("histogram `{tag}` has no values"))
        })?;
        let rec = tensorboard::record(&tensorboard::histogram_event(now(), step, tag, &h));
        self.write_events(&rec)
    }

    /// When histograms are on and `step` is due, logs `weights/<name>` of
    /// every parameter and `grads/<name>` of each that has a gradient;
    /// returns whether it did. Call it after backward and before
    /// `zero_grad` to see the gradients.
    pub fn parameter_histograms(&mut self, step: u64, params: &[(String, Tensor)]) -> Result<bool> {
        match self.histogram_every {
            Some(every) if step.is_multiple_of(every) => {}
            _ => return Ok(false),
        }
        for (name, p) in params {
            self.histogram(&format!("weights/{name}"), step, &p.to_vec_f64()?)?;
            if let Some(g) = p.grad() {
                self.histogram(&format!("grads/{name}"), step, &g.to_vec_f64()?)?;
            }
        }
        Ok(true)
    }

    /// Logs `value` under `tag` at `step` (TensorBoard stores it as f32).
    pub fn scalar(&mut self, tag: &str, step: u64, value: f64) -> Result<()> {
        let t = now();
        let step_i = Self::step_i64(step)?;
        // JSON has no NaN or infinity: those are written as the strings
        // "NaN", "Infinity" and "-Infinity" (what Python's json reads back).
        let v = if value.is_finite() {
            serde_json::json!(value)
        } else if value.is_nan() {
            serde_json::json!("NaN")
        } else if value > 0.0 {
            serde_json::json!("Infinity")
        } else {
            serde_json::json!("-Infinity")
        };
        let line = serde_json::json!({"step": step, "tag": tag, "value": v, "wall_time": t});
        writeln!(self.jsonl, "{line}").map_err(|e| Error::file(&self.jsonl_path, e.to_string()))?;
        let step = step_i;
        let rec = tensorboard::record(&tensorboard::scalar_event(t, step, tag, value as f32));
        self.write_events(&rec)
    }

    /// Writes everything buffered to disk.
    pub fn flush(&mut self) -> Result<()> {
        self.jsonl
            .flush()
            .map_err(|e| Error::file(&self.jsonl_path, e.to_string()))?;
        self.events
            .flush()
            .map_err(|e| Error::file(&self.events_path, e.to_string()))
    }
}

impl Drop for MetricsLogger {
    fn drop(&mut self) {
        // Errors here have no one to go to; call `flush` to see them.
        let _ = self.flush();
    }
}
