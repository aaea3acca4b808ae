//! Training progress: an indicatif bar on a terminal, plain lines (one per
//! N steps) when stderr is a file or a pipe, or nothing. The time left is
//! the median of the last [`WINDOW`] step durations times the steps left:
//! a median, so that the occasional slow step (an evaluation, a checkpoint
//! save) does not swing the estimate the way indicatif's own rate does.
//!
//! ```
//! use fucina_train::progress::{Progress, ProgressMode};
//! let mut p = Progress::new(100, ProgressMode::Hidden);
//! p.start_at(40); // a resumed run: 40 steps were done before
//! p.step("loss 1.23");
//! assert_eq!(p.position(), 41);
//! assert!(p.eta().is_some());
//! ```

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::data::{DataLoader, Dataset};

/// Step durations the estimate looks back over.
pub const WINDOW: usize = 50;

/// The durations of the most recent steps and the estimate made from them.
#[derive(Clone, Debug)]
pub struct StepTimes {
    window: VecDeque<f64>,
    cap: usize,
}

impl StepTimes {
    /// A window of the last `cap` durations (at least 1).
    pub fn new(cap: usize) -> StepTimes {
        StepTimes {
            window: VecDeque::with_capacity(cap.max(1)),
            cap: cap.max(1),
        }
    }

    /// Records one step's duration in seconds (a negative or non-finite one
    /// is ignored: it cannot come from a clock).
    pub fn record(&mut self, secs: f64) {
        if !(secs.is_finite() && secs >= 0.0) {
            return;
        }
        if self.window.len() == self.cap {
            self.window.pop_front();
        }
        self.window.push_back(secs);
    }

    /// Durations recorded and still in the window.
    pub fn len(&self) -> usize {
        self.window.len()
    }

    /// True before the first step.
    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    /// The median duration of the window in seconds (the mean of the two
    /// middle ones for an even count); `None` before the first step.
    pub fn median(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.window.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }

    /// The time `remaining` more steps take at the median duration.
    pub fn eta(&self, remaining: u64) -> Option<Duration> {
        let m = self.median()?;
        let secs = m * remaining as f64;
        Duration::try_from_secs_f64(secs).ok()
    }
}

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar on stderr (a terminal).
    Bar,
    /// One line on stderr every `every` steps (and at the last step).
    Plain {
        /// Steps between lines (at least 1).
        every: u64,
    },
    /// Nothing (tests, quiet runs).
    Hidden,
}

impl ProgressMode {
    /// A bar when stderr is a terminal, else a line every `every` steps.
    pub fn auto(every: u64) -> ProgressMode {
        if std::io::stderr().is_terminal() {
            ProgressMode::Bar
        } else {
            ProgressMode::Plain { every }
        }
    }
}

/// A time left as people read it: `1h 02m`, `3m 07s`, `42s`.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s / 60) % 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m {sec:02}s"),
        (h, m, _) => format!("{h}h {m:02}m"),
    }
}

/// A run's progress over `total` steps.
pub struct Progress {
    mode: ProgressMode,
    bar: Option<ProgressBar>,
    total: u64,
    pos: u64,
    times: StepTimes,
    last: Instant,
    started: Instant,
}

impl Progress {
    /// Progress over `total` steps, shown as `mode` says.
    pub fn new(total: u64, mode: ProgressMode) -> Progress {
        let bar = match mode {
            ProgressMode::Bar => {
                let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
                // The template is a constant: it parses, or the bar is plain.
                if let Ok(style) = ProgressStyle::with_template(
                    "{bar:32.cyan/blue} step {pos}/{len} {msg} [{elapsed} < {prefix}]",
                ) {
                    pb.set_style(style);
                }
                pb.set_prefix("?");
                Some(pb)
            }
            _ => None,
        };
        let now = Instant::now();
        Progress {
            mode,
            bar,
            total,
            pos: 0,
            times: StepTimes::new(WINDOW),
            last: now,
            started: now,
        }
    }

    /// Progress over every batch of `epochs` epochs of a loader with
    /// `batches_per_epoch` batches (a step per batch).
    pub fn for_batches(batches_per_epoch: usize, epochs: u64, mode: ProgressMode) -> Progress {
        Progress::new((batches_per_epoch as u64).saturating_mul(epochs), mode)
    }

    /// Progress over `epochs` epochs of `loader`, a step per batch.
    pub fn for_loader<D: Dataset, B: Send + 'static>(
        loader: &DataLoader<D, B>,
        epochs: u64,
        mode: ProgressMode,
    ) -> Progress {
        Progress::for_batches(loader.batches_per_epoch(), epochs, mode)
    }

    /// Starts at step `pos` (a resumed run); the clock restarts.
    pub fn start_at(&mut self, pos: u64) {
        self.pos = pos.min(self.total);
        self.last = Instant::now();
        self.started = self.last;
        if let Some(pb) = &self.bar {
            pb.set_position(self.pos);
            pb.reset_eta();
        }
    }

    /// One step done, `msg` describing it (the loss, the throughput): the
    /// step's duration joins the estimate, the bar moves, and in plain mode
    /// every `every`-th step (and the last) prints a line.
    pub fn step(&mut self, msg: &str) {
        let now = Instant::now();
        self.times
            .record(now.duration_since(self.last).as_secs_f64());
        self.last = now;
        self.pos = (self.pos + 1).min(self.total);
        let eta = self.eta().map_or_else(|| "?".to_string(), format_duration);
        match self.mode {
            ProgressMode::Bar => {
                if let Some(pb) = &self.bar {
                    pb.set_prefix(eta);
                    pb.set_message(msg.to_string());
                    pb.set_position(self.pos);
                }
            }
            ProgressMode::Plain { every } => {
                if self.pos.is_multiple_of(every.max(1)) || self.pos == self.total {
                    eprintln!(
                        "step {}/{} {msg} [{} < {eta}]",
                        self.pos,
                        self.total,
                        format_duration(self.started.elapsed())
                    );
                }
            }
            ProgressMode::Hidden => {}
        }
    }

    /// Excludes the time since the last step from the next step's duration
    /// (call after an evaluation or a save that is not part of a step).
    pub fn pause_clock(&mut self) {
        self.last = Instant::now();
    }

    /// Steps done.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Steps in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The time left: the median recent step times the steps left.
    pub fn eta(&self) -> Option<Duration> {
        self.times.eta(self.total - self.pos)
    }

    /// Prints `line` to stdout without tearing the bar.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(pb) => pb.suspend(|| println!("{line}")),
            None => println!("{line}"),
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(pb) = &self.bar {
            pb.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_windows() {
        let mut t = StepTimes::new(4);
        assert_eq!(t.median(), None);
        assert_eq!(t.eta(10), None);
        t.record(0.3);
        t.record(0.1);
        t.record(9.0); // an evaluation step: the median ignores it
        assert_eq!(t.median(), Some(0.3));
        t.record(0.2);
        assert_eq!(t.median(), Some((0.2 + 0.3) / 2.0));
        // The window keeps the last 4: 0.1 9.0 0.2 0.4 → (0.2 + 0.4) / 2.
        t.record(0.4);
        assert_eq!(t.len(), 4);
        assert_eq!(t.median(), Some((0.2 + 0.4) / 2.0));
        // Clocks never give these; they are dropped.
        t.record(f64::NAN);
        t.record(-1.0);
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn eta_is_the_median_times_the_steps_left() {
        let mut t = StepTimes::new(WINDOW);
        for d in [0.5, 0.5, 0.5, 30.0, 0.5] {
            t.record(d);
        }
        assert_eq!(t.eta(120), Some(Duration::from_secs(60)));
        assert_eq!(t.eta(0), Some(Duration::ZERO));
        // A mean would say 6.4 s a step: 12m 48s for the same 120 steps.
        assert_eq!(format_duration(t.eta(120).unwrap()), "1m 00s");
    }

    #[test]
    fn progress_counts_from_a_resumed_step_and_stops_at_the_total() {
        let mut p = Progress::new(3, ProgressMode::Hidden);
        p.start_at(1);
        p.step("a");
        p.step("b");
        assert_eq!(p.position(), 3);
        assert_eq!(p.eta(), Some(Duration::ZERO));
        p.step("past the end");
        assert_eq!(p.position(), 3);
        let p = Progress::for_batches(7, 3, ProgressMode::Hidden);
        assert_eq!(p.total(), 21);
        let opts = crate::LoaderOptions::new(4).prefetch(0);
        let loader = DataLoader::new(crate::InMemory::new((0..10u32).collect()), opts, Ok).unwrap();
        // 10 items in batches of 4, the short tail kept: 3 a epoch.
        assert_eq!(
            Progress::for_loader(&loader, 2, ProgressMode::Hidden).total(),
            6
        );
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(format_duration(Duration::from_secs(42)), "42s");
        assert_eq!(format_duration(Duration::from_secs(187)), "3m 07s");
        assert_eq!(format_duration(Duration::from_secs(3720)), "1h 02m");
    }
}
