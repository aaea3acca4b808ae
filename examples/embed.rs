//! Sentence embeddings with all-MiniLM-L6-v2, the numbers
//! sentence-transformers gives (mean pooling over the attention mask, then
//! L2 normalisation):
//!
//! ```sh
//! bash scripts/fetch-minilm.sh          # once: the model into $FUCINA_CACHE
//! cargo run --release --example embed -- "first sentence" "second sentence"
//! cargo run --release --example embed -- --file sentences.txt   # one per line
//! ```
//!
//! Prints one JSON line per sentence, `{"text": ..., "embedding": [384
//! floats]}`, then the cosine-similarity matrix.

use std::path::PathBuf;

use clap::Parser;
use fucina_core::ExecContext;
use fucina_examples::minilm::{cosine, model_dir, SentenceEncoder};
use fucina_examples::{exit_on_error, Error, Result};

/// Embed sentences with all-MiniLM-L6-v2 (fetched by scripts/fetch-minilm.sh).
#[derive(Parser, Debug)]
#[command(name = "embed", version)]
struct Args {
    /// Sentences to embed
    sentences: Vec<String>,
    /// Also read sentences from this file, one per line (blank lines skipped)
    #[arg(long)]
    file: Option<PathBuf>,
    /// The model directory (default: $FUCINA_CACHE/all-MiniLM-L6-v2, FUCINA_CACHE defaulting to ~/.cache/fucina)
    #[arg(long)]
    model: Option<PathBuf>,
    /// Sentences per forward pass
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Worker threads (0: FUCINA_NUM_THREADS or every core)
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

fn run() -> Result<()> {
    let args = Args::parse();
    let mut texts = args.sentences.clone();
    if let Some(f) = &args.file {
        let s = std::fs::read_to_string(f).map_err(|e| Error::io(f, e))?;
        texts.extend(s.lines().filter(|l| !l.trim().is_empty()).map(String::from));
    }
    if texts.is_empty() {
        return Err(Error::arg(
            "SENTENCES",
            "give at least one sentence (or --file with one sentence per line)",
        ));
    }
    if args.batch_size == 0 {
        return Err(Error::arg("--batch-size", "must be positive"));
    }
    let ctx = if args.threads == 0 {
        ExecContext::new()?
    } else {
        ExecContext::with_threads(args.threads)?
    };
    let dir = args.model.clone().unwrap_or_else(model_dir);
    let enc = SentenceEncoder::load(&ctx, &dir)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let emb = enc.embed(&refs, args.batch_size)?;
    for (t, e) in texts.iter().zip(&emb) {
        println!("{}", serde_json::json!({ "text": t, "embedding": e }));
    }
    println!("cosine similarity:");
    for (i, a) in emb.iter().enumerate() {
        let row: Vec<String> = emb
            .iter()
            .map(|b| format!("{:7.4}", cosine(a, b)))
            .collect();
        println!("  [{i}] {}", row.join(" "));
    }
    Ok(())
}

fn main() {
    exit_on_error(run());
}
