//! A character-level GPT trained from scratch on Shakespeare — the README's
//! main command:
//!
//! ```sh
//! cargo run --release --example train_gpt
//! cargo run --release --example train_gpt -- --help   # every knob
//! cargo run --release --example train_gpt -- --arch llama --save-hf runs/llama-char/hf --out runs/llama-char
//! ```
//!
//! Prints the unigram baseline, the validation loss as it trains and at the
//! end, a generated sample, and pool/RSS memory over the run; writes the
//! loss curve (`loss.png`), `losses.tsv`, `metrics.jsonl` with a
//! TensorBoard event file, `sample.txt` and checkpoints to `--out` (default
//! `runs/train_gpt`), and with `--save-hf DIR` a Hugging Face model
//! directory. The loop lives in `fucina_examples::gpt_train`.

use clap::Parser;
use fucina_examples::gpt_train::{train_gpt, TrainGptArgs};
use fucina_examples::{exit_on_error, Result};

fn run() -> Result<()> {
    let args = TrainGptArgs::parse();
    let r = train_gpt(&args, true)?;
    if r.run.last_step < args.steps {
        println!(
            "stopped after step {} of {} (checkpoint in {}); continue with --resume",
            r.run.last_step,
            args.steps,
            args.out.join("checkpoints").display()
        );
        return Ok(());
    }
    println!(
        "\n--- sample (temperature {}, top-k {}) ---",
        args.temperature, args.top_k
    );
    println!("{}", r.run.sample);
    println!("---");
    if let (Some(first), Some(last)) = (r.mem.first(), r.mem.last()) {
        let max_rss = r.mem.iter().map(|m| m.rss_mib).fold(f64::NAN, f64::max);
        println!(
            "memory: pool outstanding {} at step {} and {} at step {}; live {:.1} -> {:.1} MiB; RSS {:.0} -> {:.0} MiB (max {:.0})",
            first.outstanding,
            first.step,
            last.outstanding,
            last.step,
            first.live_bytes as f64 / 1048576.0,
            last.live_bytes as f64 / 1048576.0,
            first.rss_mib,
            last.rss_mib,
            max_rss
        );
    }
    println!(
        "{} parameters, {:.1} s training ({:.0} tokens/s)",
        r.num_params, r.run.train_secs, r.tokens_per_sec
    );
    println!("wrote {}", args.out.join("loss.png").display());
    println!("unigram baseline: {:.4} nats", r.unigram);
    if let Some(v) = r.final_val {
        println!("final validation loss (all of the held-out text): {v:.4} nats");
    }
    Ok(())
}

fn main() {
    exit_on_error(run());
}
