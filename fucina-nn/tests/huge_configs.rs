//! A `config.json` that claims 2⁴⁰ of anything — vocabulary, width,
//! layers, heads, positions, intermediate size — is a clean error from
//! `from_pretrained` at a small peak memory: the sizes are checked against
//! the checkpoint's header (or fail in the pool) before anything is
//! allocated. Each case runs in a child process (this test binary again,
//! one case named by `FUCINA_HUGE_CASE`) so the peak RSS it reads from
//! `/proc/self/status` (`VmHWM`) is its own.

mod common;

use common::peak_kb;
use std::path::{Path, PathBuf};
use std::process::Command;

use fucina_core::{DType, ExecContext};
use fucina_nn::{BertModel, CausalLm, Init};
use serde_json::{json, Value};

const HUGE: u64 = 1 << 40;
/// The peak a failed load may reach (the bound).
const PEAK_LIMIT_KB: u64 = 100 * 1024;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf")
}

fn bert_config() -> Value {
    json!({"model_type": "bert", "vocab_size": 11, "hidden_size": 8, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 12, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 8, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute", "initializer_range": 0.02})
}

/// The cases: (family, config field).
fn cases() -> Vec<(&'static str, &'static str)> {
    let mut v = Vec::new();
    for f in [
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
        "type_vocab_size",
    ] {
        v.push(("bert", f));
    }
    for f in [
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "max_position_embeddings",
    ] {
        v.push(("llama", f));
    }
    for f in [
        "vocab_size",
        "n_embd",
        "n_layer",
        "n_head",
        "n_positions",
        "n_inner",
    ] {
        v.push(("gpt2", f));
    }
    v
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// The child: loads one family with one field set to 2⁴⁰; prints the peak.
#[test]
fn huge_config_child() {
    let Ok(case) = std::env::var("FUCINA_HUGE_CASE") else {
        return; // run by the parent only
    };
    let (family, field) = case.split_once(':').unwrap();
    let dir = PathBuf::from(std::env::var("FUCINA_HUGE_DIR").unwrap());
    let ctx = ExecContext::with_threads(1).unwrap();
    let mut cfg: Value = match family {
        "bert" => {
            let c: fucina_nn::BertConfig = serde_json::from_value(bert_config()).unwrap();
            let m = BertModel::new(&mut Init::new(&ctx, DType::F32, 0), &c, false).unwrap();
            let sd = m.checkpoint_tensors();
            fucina_autograd::save_state_dict(
                &dir.join("model.safetensors"),
                &sd,
                &fucina_autograd::SaveOptions::default(),
            )
            .unwrap();
            drop((sd, m));
            bert_config()
        }
        _ => {
            copy_dir(&fixtures().join(family), &dir);
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap()
        }
    };
    cfg[field] = json!(HUGE);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let before = peak_kb();
    let err = match family {
        "bert" => BertModel::from_pretrained(&ctx, &dir, DType::F32).map(drop),
        _ => CausalLm::from_pretrained(&ctx, &dir, DType::F32).map(drop),
    }
    .expect_err("a config claiming 2^40 must not load");
    let msg = err.to_string();
    // Each error names the field, or the checkpoint tensor whose shape or
    // presence the field decides, or (heads not dividing the width) both sizes.
    let named = msg.contains(field)
        || msg.contains("intermediate_size")
        || (msg.contains("model.safetensors")
            && (msg.contains("shape") || msg.contains("missing")))
        || msg.contains("not divisible");
    assert!(named, "{case}: {msg}");
    let peak = peak_kb();
    println!("CASE {case} peak {peak} kB (before {before} kB): {msg}");
    assert!(peak < PEAK_LIMIT_KB, "{case}: peak {peak} kB: {msg}");
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn every_huge_config_is_a_clean_error_at_a_small_peak() {
    let exe = std::env::current_exe().unwrap();
    let root = std::env::temp_dir().join(format!("fucina-huge-{}", std::process::id()));
    let mut failures = Vec::new();
    for (family, field) in cases() {
        let dir = root.join(format!("{family}-{field}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new(&exe)
            .args([
                "--exact",
                "huge_config_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("FUCINA_HUGE_CASE", format!("{family}:{field}"))
            .env("FUCINA_HUGE_DIR", &dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || !text.contains("CASE ") {
            failures.push(format!("{family}:{field}: {}\n{text}", out.status));
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}
