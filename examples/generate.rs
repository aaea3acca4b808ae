//! Text generation with a Hugging Face decoder (GPT-2, Llama, Qwen2, Qwen3)
//! from its directory (`config.json`, `model.safetensors` or shards,
//! `tokenizer.json`, `generation_config.json`):
//!
//! ```sh
//! cargo run --release --example generate -- --model DIR --prompt "To be" --max-new-tokens 32
//! cargo run --release --example generate -- --model DIR --prompt-ids 1,2,3 --greedy
//! cargo run --release --example generate -- --model DIR --prompt "O" --temperature 0.8 --top-k 20 --top-p 0.95 --seed 7
//! ```
//!
//! Prints the generated text (when the directory has a tokenizer), then one
//! JSON line `{"prompt_ids": [...], "generated_ids": [...], "tokens_per_s": ...}`.
//! Generation stops at the checkpoint's eos token or after `--max-new-tokens`.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use fucina_core::{DType, ExecContext};
use fucina_examples::{exit_on_error, Error, Result};
use fucina_nn::hf::{GenerationConfig, Tokenizer};
use fucina_nn::{CausalLm, GenerateOptions, Sampling};

/// Generate text with a Hugging Face decoder LLM.
#[derive(Parser, Debug)]
#[command(name = "generate", version)]
struct Args {
    /// The model directory (config.json, model.safetensors, tokenizer.json)
    #[arg(long)]
    model: PathBuf,
    /// The prompt text (needs the directory's tokenizer.json)
    #[arg(long, conflicts_with = "prompt_ids")]
    prompt: Option<String>,
    /// The prompt as token ids, comma-separated (e.g. 1,2,3)
    #[arg(long, value_delimiter = ',')]
    prompt_ids: Option<Vec<i64>>,
    /// The most tokens to generate
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// Always take the most likely token (the default unless a sampling flag is given)
    #[arg(long, conflicts_with_all = ["temperature", "top_k", "top_p"])]
    greedy: bool,
    /// Sampling temperature (> 0)
    #[arg(long)]
    temperature: Option<f64>,
    /// Sample from the k most likely tokens (0: all)
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample from the smallest set of tokens whose probability exceeds p, in (0, 1]
    #[arg(long)]
    top_p: Option<f64>,
    /// Seed of the sampling draws
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Compute in f64 instead of f32
    #[arg(long)]
    f64: bool,
    /// Worker threads (0: FUCINA_NUM_THREADS or every core)
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

fn run() -> Result<()> {
    let args = Args::parse();
    if !args.model.join("config.json").is_file() {
        return Err(Error::arg(
            "--model",
            format!("{} has no config.json", args.model.display()),
        ));
    }
    let tokenizer_path = args.model.join("tokenizer.json");
    let tokenizer = if tokenizer_path.is_file() {
        Some(Tokenizer::from_file(&tokenizer_path)?)
    } else {
        None
    };
    let prompt_ids: Vec<i64> = match (&args.prompt, &args.prompt_ids) {
        (Some(text), None) => {
            let Some(tok) = &tokenizer else {
                return Err(Error::arg(
                    "--prompt",
                    "the model directory has no tokenizer.json: use --prompt-ids",
                ));
            };
            tok.encode(text, true)?.into_iter().map(i64::from).collect()
        }
        (None, Some(ids)) => ids.clone(),
        _ => {
            return Err(Error::arg(
                "--prompt",
                "give --prompt TEXT or --prompt-ids 1,2,3",
            ))
        }
    };
    if prompt_ids.is_empty() {
        return Err(Error::arg("--prompt", "the prompt has no tokens"));
    }
    let sampling = if args.greedy
        || (args.temperature.is_none() && args.top_k.is_none() && args.top_p.is_none())
    {
        Sampling::Greedy
    } else {
        Sampling::Sample {
            temperature: args.temperature.unwrap_or(1.0),
            top_k: args.top_k.unwrap_or(0),
            top_p: args.top_p.unwrap_or(1.0),
            seed: args.seed,
        }
    };
    if let Err(e) = sampling.validate() {
        return Err(Error::arg("--temperature/--top-p", e.to_string()));
    }
    let ctx = if args.threads == 0 {
        ExecContext::new()?
    } else {
        ExecContext::with_threads(args.threads)?
    };
    let dtype = if args.f64 { DType::F64 } else { DType::F32 };
    let lm = CausalLm::from_pretrained(&ctx, &args.model, dtype)?;
    let gen = GenerationConfig::from_dir(&args.model)?;
    let eos = if gen.eos_token_ids.is_empty() {
        lm.config.eos_token_ids.clone()
    } else {
        gen.eos_token_ids.clone()
    };
    let pad = gen
        .pad_token_id
        .or(lm.config.pad_token_id)
        .or(eos.first().copied())
        .unwrap_or(0);
    let opts = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        sampling,
        eos_token_ids: eos,
        pad_token_id: pad,
    };
    let start = Instant::now();
    let out = lm.generate(std::slice::from_ref(&prompt_ids), &opts)?;
    let secs = start.elapsed().as_secs_f64();
    let generated = &out.tokens[0];
    if let Some(tok) = &tokenizer {
        let ids: Vec<u32> = prompt_ids
            .iter()
            .chain(generated)
            .map(|&i| i as u32)
            .collect();
        println!("{}", tok.decode(&ids, true)?);
    }
    let tps = if secs > 0.0 {
        generated.len() as f64 / secs
    } else {
        0.0
    };
    println!(
        "{}",
        serde_json::json!({"prompt_ids": prompt_ids, "generated_ids": generated, "tokens_per_s": tps})
    );
    Ok(())
}

fn main() {
    exit_on_error(run());
}
