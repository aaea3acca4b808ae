//! Shared by the ddp examples: the flags both take, the choice of when
//! gradients are averaged (`--sync`), one step's backward and averaging, and
//! rank 0's timing report.

#![allow(dead_code)] // each example uses its own part

pub mod mlp;

use std::time::{Duration, Instant};

use fucina_autograd::Tensor;
use fucina_distributed::mpi::{init, Mpi};
use fucina_distributed::{DataParallel, Result};

/// An example's `main`: parses the flags, starts MPI with the exchange
/// deadline `timeout(args)`, trains, and ends the job on an error (a bad flag
/// or a failed start exits with status 2, naming `name`).
pub fn main<A>(
    name: &str,
    parse: fn() -> std::result::Result<A, String>,
    timeout: fn(&A) -> Duration,
    train: fn(&Mpi, &A) -> Result<()>,
) {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("{name}: {e}");
        std::process::exit(2)
    });
    let mpi = match init() {
        Ok(m) => m.with_timeout(timeout(&args)),
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(2)
        }
    };
    let r = train(&mpi, &args);
    mpi.exit_on_error(r);
}

/// When a step averages its gradients (`--sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// After backward (`DataParallel::average_gradients`), the default.
    After,
    /// While backward runs (`DataParallel::backward_overlapped`).
    Overlap,
    /// Never: every rank trains on its own (the no-exchange baseline of the
    /// overlap measurement; the ranks drift apart).
    None,
}

/// The flags every ddp example takes.
#[derive(Debug, Clone)]
pub struct Common {
    /// `--steps N`.
    pub steps: u64,
    /// `--batch B`: samples (sequences) per rank.
    pub batch: usize,
    /// `--threads T` per rank.
    pub threads: usize,
    /// `--seed S`: the data order.
    pub seed: u64,
    /// `--bucket-kb K`: the bucket cap.
    pub bucket_kb: usize,
    /// `--log-every K`.
    pub log_every: u64,
    /// `--sync after|overlap|none`.
    pub sync: Sync,
}

impl Common {
    /// The defaults both examples share; `steps` and `batch` are theirs.
    pub fn new(steps: u64, batch: usize) -> Common {
        Common {
            steps,
            batch,
            threads: 1,
            seed: 1,
            bucket_kb: 25 * 1024,
            log_every: 10,
            sync: Sync::After,
        }
    }
}

/// Parses the command line: the common flags into `common`, every other one
/// through `other(flag, value)`, which returns false for a flag it does not
/// know (`value()` takes the flag's argument).
pub fn parse(
    common: &mut Common,
    mut other: impl FnMut(
        &str,
        &mut dyn FnMut() -> std::result::Result<String, String>,
    ) -> std::result::Result<bool, String>,
) -> std::result::Result<(), String> {
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        let c = &mut *common;
        match flag.as_str() {
            "--steps" => c.steps = num(&flag, val()?)?,
            "--batch" => c.batch = num(&flag, val()?)? as usize,
            "--threads" => c.threads = num(&flag, val()?)? as usize,
            "--seed" => c.seed = num(&flag, val()?)?,
            "--bucket-kb" => c.bucket_kb = num(&flag, val()?)? as usize,
            "--log-every" => c.log_every = num(&flag, val()?)?.max(1),
            "--sync" => {
                c.sync = match val()?.as_str() {
                    "after" => Sync::After,
                    "overlap" => Sync::Overlap,
                    "none" => Sync::None,
                    s => return Err(format!("--sync {s}: expected after, overlap or none")),
                }
            }
            f => {
                if !other(f, &mut val)? {
                    return Err(format!("unknown flag {f}"));
                }
            }
        }
    }
    Ok(())
}

/// `s` as a number, or an error naming `flag`.
pub fn num(flag: &str, s: String) -> std::result::Result<u64, String> {
    s.parse::<u64>().map_err(|e| format!("{flag} {s}: {e}"))
}

/// Backward from `loss` and the averaging `sync` asks for; returns when
/// backward ended (for `Overlap`, when the averaging did too).
pub fn backward(ddp: &DataParallel, sync: Sync, loss: &Tensor) -> Result<Instant> {
    match sync {
        Sync::Overlap => ddp.backward_overlapped(loss)?,
        Sync::After | Sync::None => loss.backward()?,
    }
    Ok(Instant::now())
}

/// The averaging after backward, when `sync` is `After`.
pub fn average_after(ddp: &DataParallel, sync: Sync) -> Result<()> {
    if sync == Sync::After {
        ddp.average_gradients()?;
    }
    Ok(())
}

/// Rank 0's step timings, for the measurements in docs/DISTRIBUTED.md.
#[derive(Default)]
pub struct Timing {
    compute: Vec<f64>,
    averaging: Vec<f64>,
    step: Vec<f64>,
}

impl Timing {
    /// One step: started at `t0`, backward done at `t1`, averaging at `t2`,
    /// optimizer step at `t3` (with `--sync overlap` the averaging is inside
    /// backward, so counted as compute).
    pub fn push(&mut self, t0: Instant, t1: Instant, t2: Instant, t3: Instant) {
        self.compute.push((t1 - t0 + (t3 - t2)).as_secs_f64());
        self.averaging.push((t2 - t1).as_secs_f64());
        self.step.push((t3 - t0).as_secs_f64());
    }

    /// Prints `timing: ...` (medians, `units` per second over `wall`
    /// seconds) and `timing minima: ...`, the lines
    /// tools/bench-distributed.sh reads.
    pub fn print(&mut self, unit: &str, units: f64, wall: f64) {
        let taken = self.step.len();
        let (ms, ma, mc) = (
            median(&mut self.step),
            median(&mut self.averaging),
            median(&mut self.compute),
        );
        println!(
            "timing: {taken} steps in {wall:.2} s, {:.0} {unit}/s; median step {:.3} ms = compute {:.3} ms + gradient averaging {:.3} ms ({:.1}% of the step)",
            units / wall,
            ms * 1e3,
            mc * 1e3,
            ma * 1e3,
            100.0 * ma / ms
        );
        // On a loaded machine the medians include preemption; the minima
        // estimate the uncontended costs (sorted by `median`, so element 0).
        println!(
            "timing minima: step {:.3} ms, compute {:.3} ms, gradient averaging {:.3} ms",
            self.step[0] * 1e3,
            self.compute[0] * 1e3,
            self.averaging[0] * 1e3
        );
    }
}

/// The median of `v` (sorting it); NaN when empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
