//! What the examples' two training runs (`gpt_train.rs`, `llm_finetune.rs`)
//! share: the context `--threads` asks for, the progress bar with the lines
//! printed beside it, and the part of their reports every run has.

use fucina_core::ExecContext;
use fucina_train::progress::{Progress, ProgressMode};

use crate::error::Result;

/// The context of `threads` workers (0: `FUCINA_NUM_THREADS` or every core).
pub fn context(threads: usize) -> Result<ExecContext> {
    Ok(if threads == 0 {
        ExecContext::new()?
    } else {
        ExecContext::with_threads(threads)?
    })
}

/// A run's progress bar and whether the run prints.
pub struct RunProgress {
    /// The bar (stepped by the loop, its clock paused for evaluations and saves).
    pub bar: Progress,
    print: bool,
}

impl RunProgress {
    /// The bar of a run of `steps` steps (a resumed run moves it on with
    /// `bar.start_at`): hidden unless `print`; else plain lines with `plain`,
    /// or a bar when stderr is a terminal; updated every quarter of
    /// `eval_every` steps.
    pub fn new(print: bool, plain: bool, eval_every: u64, steps: u64) -> RunProgress {
        let every = (eval_every / 4).max(1);
        let mode = if !print {
            ProgressMode::Hidden
        } else if plain {
            ProgressMode::Plain { every }
        } else {
            ProgressMode::auto(every)
        };
        RunProgress {
            bar: Progress::new(steps, mode),
            print,
        }
    }

    /// Prints `line` (above the bar) when the run prints.
    pub fn say(&self, line: &str) {
        if self.print {
            self.bar.println(line);
        }
    }
}

/// What every run reports, whatever it trained.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Training loss of step `i + 1` at index `i` (resumed steps included).
    pub losses: Vec<f32>,
    /// `(step, validation loss)` at each evaluation.
    pub val: Vec<(u64, f64)>,
    /// The last step this run took.
    pub last_step: u64,
    /// Wall time of this process's training steps, seconds.
    pub train_secs: f64,
    /// The generated text (empty when the run stopped early).
    pub sample: String,
}
