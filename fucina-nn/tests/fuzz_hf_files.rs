//! Fuzzing the Hugging Face readers (docs/RELIABILITY.md): mutated
//! `config.json` files of every family, `generation_config.json` and
//! `model.safetensors.index.json` (with its shards on disk) through
//! `DecoderConfig::from_json`, `GenerationConfig::from_json` and
//! `Checkpoint::open`. Every case must return `Ok` or an `Err` — never a
//! panic — and a parsed config must pass its own validation. The mutations
//! are fucina-optim's (`tests/common/mutate.rs`), from a fixed seed.
//! `FUZZ_HF_CASES` raises the count (CI: 12,000 configs + 3,000 indexes).

#[path = "../../fucina-optim/tests/common/mutate.rs"]
mod mutate;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use fucina_core::{DType, ExecContext};
use fucina_nn::hf::{Checkpoint, DecoderConfig, GenerationConfig};
use fucina_nn::CausalLm;
use proptest::prelude::*;
use serde_json::json;

fn configs() -> Vec<Vec<u8>> {
    [
        json!({"model_type": "llama", "vocab_size": 13, "hidden_size": 8, "intermediate_size": 12,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 16, "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
            "eos_token_id": [1, 2], "tie_word_embeddings": false}),
        json!({"model_type": "qwen3", "vocab_size": 11, "hidden_size": 8, "intermediate_size": 10,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 6, "max_position_embeddings": 16, "use_sliding_window": false,
            "sliding_window": 4096, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}),
        json!({"model_type": "qwen2", "vocab_size": 11, "hidden_size": 8, "intermediate_size": 10,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
            "max_position_embeddings": 16, "rope_scaling": {"type": "linear", "factor": 2.0}}),
        json!({"model_type": "gpt2", "vocab_size": 11, "n_embd": 8, "n_layer": 2, "n_head": 2,
            "n_positions": 12, "n_inner": null, "activation_function": "gelu_new",
            "bos_token_id": 0, "eos_token_id": 0}),
    ]
    .iter()
    .map(|v| serde_json::to_vec_pretty(v).unwrap())
    .collect()
}

#[test]
fn mutated_configs_never_panic() {
    let files = configs();
    let path = Path::new("fuzz/config.json");
    let cases = mutate::env_cases("FUZZ_HF_CASES", 12_000);
    let mut runner = mutate::seeded_runner(cases, 23);
    let strategy = (
        0..files.len(),
        prop::collection::vec(mutate::mutation(), 1..4),
    );
    let (ok, rejected) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    runner
        .run(&strategy, |(which, muts)| {
            let bytes = mutate::apply(&files[which], &muts);
            let r = catch_unwind(AssertUnwindSafe(|| {
                let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
                    return (
                        false,
                        GenerationConfig::from_json(path, &serde_json::Value::Null).is_ok(),
                    );
                };
                let c = DecoderConfig::from_json(path, &v);
                if let Ok(c) = &c {
                    assert!(
                        c.validate().is_ok(),
                        "a parsed config fails its own validation: {c:?}"
                    );
                }
                let g = GenerationConfig::from_json(path, &v);
                (c.is_ok(), g.is_ok())
            }));
            let (parsed, _) = r.map_err(|_| {
                TestCaseError::fail(format!("panic on {}", String::from_utf8_lossy(&bytes)))
            })?;
            let n = if parsed { &ok } else { &rejected };
            n.set(n.get() + 1);
            Ok(())
        })
        .unwrap();
    let (ok, rejected) = (ok.get(), rejected.get());
    assert!(
        ok > 0 && rejected > 0,
        "mutations should both keep and break configs: {ok} / {rejected}"
    );
    eprintln!("fuzz_hf_files: {cases} configs, {ok} parsed, {rejected} rejected, 0 panics");
}

#[test]
fn mutated_shard_indexes_never_panic() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let dir = std::env::temp_dir().join(format!("fucina-fuzz-index-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&configs()[0]).unwrap();
    let c = DecoderConfig::from_json(Path::new("config.json"), &v).unwrap();
    let lm = CausalLm::new(&ctx, &c, DType::F32, 1).unwrap();
    let tensors = lm.checkpoint_tensors().unwrap();
    let (a, b) = tensors.split_at(tensors.len() / 2);
    let opts = fucina_autograd::SaveOptions::default();
    let mut map = serde_json::Map::new();
    for (i, part) in [a, b].iter().enumerate() {
        let name = format!("model-0000{}-of-00002.safetensors", i + 1);
        fucina_autograd::io::save_state_dict(&dir.join(&name), part, &opts).unwrap();
        for (n, _) in part.iter() {
            map.insert(n.clone(), json!(name));
        }
    }
    let index =
        serde_json::to_vec(&json!({"metadata": {"total_size": 1}, "weight_map": map})).unwrap();
    let ip = dir.join("model.safetensors.index.json");
    std::fs::write(&ip, &index).unwrap();
    assert_eq!(Checkpoint::open(&dir).unwrap().len(), tensors.len());
    let cases = mutate::env_cases("FUZZ_HF_CASES", 12_000) / 4;
    let mut runner = mutate::seeded_runner(cases, 29);
    let before = ctx.stats().outstanding;
    runner
        .run(&prop::collection::vec(mutate::mutation(), 1..4), |muts| {
            let bytes = mutate::apply(&index, &muts);
            std::fs::write(&ip, &bytes).unwrap();
            catch_unwind(AssertUnwindSafe(|| {
                let _ = Checkpoint::open(&dir);
            }))
            .map_err(|_| {
                TestCaseError::fail(format!("panic on {}", String::from_utf8_lossy(&bytes)))
            })
        })
        .unwrap();
    assert_eq!(ctx.stats().outstanding, before);
    drop((tensors, lm));
    std::fs::remove_dir_all(&dir).ok();
}
