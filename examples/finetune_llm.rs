//! Fine-tune a Hugging Face decoder LLM (GPT-2, Llama, Qwen2, Qwen3) on a
//! CPU: LoRA adapters in PEFT's format by default, every weight with
//! `--full`; validation loss before and after, checkpoints with bit-exact
//! `--resume`, the adapter (and with `--merge` a merged model), the loss
//! curve, and a generated sample at the end.
//!
//! ```sh
//! cargo run --release --example finetune_llm -- --model DIR
//! cargo run --release --example finetune_llm -- --model DIR --data prompts.jsonl --full
//! ```
//!
//! The library side (`fucina_examples::llm_finetune`) holds the run, so
//! tests drive it at a tiny size.

use clap::Parser;
use fucina_examples::exit_on_error;
use fucina_examples::llm_args::FinetuneArgs;
use fucina_examples::llm_finetune::finetune_llm;

fn main() {
    exit_on_error((|| {
        let args = FinetuneArgs::parse();
        let r = finetune_llm(&args, true)?;
        println!(
            "validation loss {:.4} -> {}; {} of {} parameters trained; {:.1} s training, peak RSS {:.0} MiB",
            r.val_before,
            r.val_after.map_or("(stopped early)".to_string(), |v| format!("{v:.4}")),
            r.trainable,
            r.total,
            r.run.train_secs,
            r.peak_rss_mib
        );
        if !r.run.sample.is_empty() {
            println!("--- sample ---\n{}", r.run.sample);
        }
        Ok(())
    })());
}
