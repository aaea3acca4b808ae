//! The `generate` example on each decoder fixture
//! (`fucina-nn/tests/fixtures/hf/<family>`): it prints the text and a JSON
//! line whose greedy ids equal `CausalLm::generate`'s, with `--prompt` and
//! with `--prompt-ids`; bad arguments exit non-zero with a message.
//! (`cargo test` builds the examples next to the test binaries.)

use std::process::Command;

use fucina_core::{DType, ExecContext};
use fucina_nn::{CausalLm, GenerateOptions};

mod common;

use common::{fixture, json_line, run_generate};

#[test]
fn generate_runs_on_every_fixture() {
    let ctx = ExecContext::with_threads(1).unwrap();
    for family in ["gpt2", "llama", "qwen2", "qwen3"] {
        let dir = fixture(family);
        let stdout = run_generate(
            family,
            &[
                "--model",
                dir.to_str().unwrap(),
                "--prompt-ids",
                "5,17,42",
                "--max-new-tokens",
                "8",
                "--threads",
                "1",
            ],
        );
        let v = json_line(&stdout);
        assert_eq!(v["prompt_ids"], serde_json::json!([5, 17, 42]));
        assert!(v["tokens_per_s"].as_f64().unwrap() >= 0.0);
        let lm = CausalLm::from_pretrained(&ctx, &dir, DType::F32).unwrap();
        let opts = GenerateOptions {
            eos_token_ids: vec![0],
            ..GenerateOptions::greedy(8)
        };
        let want = lm.generate(&[vec![5, 17, 42]], &opts).unwrap().tokens[0].clone();
        assert_eq!(v["generated_ids"], serde_json::json!(want), "{family}");

        let stdout = run_generate(
            family,
            &[
                "--model",
                dir.to_str().unwrap(),
                "--prompt",
                "To be, or not",
                "--max-new-tokens",
                "4",
                "--temperature",
                "0.8",
                "--top-k",
                "20",
                "--top-p",
                "0.9",
                "--seed",
                "3",
            ],
        );
        assert!(stdout.starts_with("To be, or not"), "{family}: {stdout}");
        json_line(&stdout);
    }
}

#[test]
fn bad_arguments_exit_nonzero_with_a_message() {
    let dir = fixture("gpt2");
    let d = dir.to_str().unwrap();
    let cases: [&[&str]; 5] = [
        &["--model", "/nonexistent", "--prompt", "x"],
        &["--model", d],
        &["--model", d, "--prompt-ids", "999999"],
        &["--model", d, "--prompt", "x", "--top-p", "1.5"],
        &["--model", d, "--prompt", "x", "--max-new-tokens", "100000"],
    ];
    for args in cases {
        let out = Command::new(common::generate_binary())
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error"), "{args:?}: {err}");
    }
}
