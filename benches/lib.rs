//! Shared helpers for fucina benchmarks: the workload registry, the timing loop and the
//! JSON line format of `reference/torch_workloads.py` (same keys, same rounding).
//!
//! A workload is built once (inputs, model, optimizer) and then stepped; timing covers
//! `step()` only. New workloads are modules under `src/workloads/` registered in
//! [`workloads::build`]. Errors are the umbrella `fucina::Error`, which every crate's
//! error converts into.

use std::time::Instant;

use fucina::Result;
use fucina_core::ExecContext;

#[path = "src/materialising.rs"]
pub mod materialising;
#[path = "src/mfu.rs"]
pub mod mfu;
#[path = "src/workloads/mod.rs"]
pub mod workloads;

/// One benchmarkable workload: built once, then stepped repeatedly.
pub trait Workload {
    /// Runs one step (for gemm: one product; for training workloads: one optimizer step).
    fn step(&mut self) -> Result<()>;
    /// Floating point operations per step, when meaningful (reported as GFLOP/s).
    fn flops(&self) -> Option<f64> {
        None
    }
    /// The shapes of a transformer training step, for tokens/s and MFU.
    fn shape(&self) -> Option<mfu::TransformerShape> {
        None
    }
}

/// Timing of one workload.
#[derive(Clone, Debug)]
pub struct Timing {
    /// Median step time in milliseconds.
    pub median_ms: f64,
    /// Fastest step in milliseconds.
    pub min_ms: f64,
    /// Timed steps.
    pub steps: usize,
}

/// Runs `warmup` untimed steps then `steps` timed ones.
pub fn time_workload(w: &mut dyn Workload, steps: usize, warmup: usize) -> Result<Timing> {
    for _ in 0..warmup {
        w.step()?;
    }
    let mut times = Vec::with_capacity(steps);
    for _ in 0..steps {
        let t0 = Instant::now();
        w.step()?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Timing {
        median_ms: median(&mut times),
        min_ms: times.iter().copied().fold(f64::INFINITY, f64::min),
        steps,
    })
}

/// The median (mean of the two middle values for an even count, as Python's `statistics.median`).
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Peak resident set size of this process in MiB (Linux `VmHWM`; 0 where unavailable).
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn round_to(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}

/// The JSON line `torch_workloads.py` prints, with `"framework": "fucina"`.
pub fn json_line(name: &str, threads: usize, t: &Timing, flops: Option<f64>) -> String {
    let mut s = format!(
        "{{\"workload\": {}, \"framework\": \"fucina\", \"version\": {}, \"threads\": {threads}, \
         \"median_ms\": {}, \"min_ms\": {}, \"steps\": {}, \"peak_rss_mb\": {}",
        serde_json::Value::from(name),
        serde_json::Value::from(env!("CARGO_PKG_VERSION")),
        round_to(t.median_ms, 4),
        round_to(t.min_ms, 4),
        t.steps,
        round_to(peak_rss_mb(), 1),
    );
    if let Some(f) = flops {
        s.push_str(&format!(
            ", \"gflops\": {}",
            round_to(f / (t.median_ms * 1e-3) / 1e9, 1)
        ));
    }
    s.push('}');
    s
}

/// [`json_line`] plus, for a transformer step, `tokens_per_s`, the model
/// FLOPs' rate `model_gflops` and `mfu` (that rate over `peak_gflops`, the
/// machine's FMA peak; see [`mfu`]).
pub fn json_line_mfu(
    name: &str,
    threads: usize,
    t: &Timing,
    flops: Option<f64>,
    shape: Option<&mfu::TransformerShape>,
    peak_gflops: Option<f64>,
) -> String {
    let mut s = json_line(name, threads, t, flops);
    if let Some(sh) = shape {
        s.pop();
        let secs = t.median_ms * 1e-3;
        let model = sh.train_flops() / secs / 1e9;
        s.push_str(&format!(
            ", \"tokens_per_s\": {}, \"model_gflops\": {}",
            round_to(sh.tokens() as f64 / secs, 1),
            round_to(model, 1)
        ));
        if let Some(p) = peak_gflops {
            s.push_str(&format!(
                ", \"peak_gflops\": {}, \"mfu\": {}",
                round_to(p, 1),
                round_to(model / p, 4)
            ));
        }
        s.push('}');
    }
    s
}

/// Builds a context with `threads` workers (the bench's `--threads`).
pub fn context(threads: usize) -> Result<ExecContext> {
    Ok(ExecContext::with_threads(threads)?)
}
