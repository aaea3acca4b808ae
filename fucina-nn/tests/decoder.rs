//! The decoder families at tiny sizes without fixtures: whole-model
//! gradcheck in f64 (Llama with GQA and llama3 RoPE, Qwen3 with q/k norms,
//! GPT-2), `save_pretrained` → `from_pretrained` giving the same logits
//! (single file and sharded), checkpoint names, and every bad input of the
//! decoder issue as a structured error naming the file and the field or key.

mod common;

use common::max_abs_diff;
use std::path::{Path, PathBuf};

use fucina_autograd::io::{save_state_dict, SaveOptions};
use fucina_autograd::{GradcheckOpts, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::gradcheck::gradcheck_module_with;
use fucina_nn::hf::DecoderConfig;
use fucina_nn::{CausalLm, GenerateOptions, Module};
use serde_json::{json, Value};

fn cfg(v: Value) -> DecoderConfig {
    DecoderConfig::from_json(Path::new("config.json"), &v).unwrap()
}

fn llama() -> Value {
    json!({"model_type": "llama", "vocab_size": 13, "hidden_size": 8, "intermediate_size": 12,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 16, "rms_norm_eps": 1e-6, "initializer_range": 0.5,
        "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
            "high_freq_factor": 2.0, "original_max_position_embeddings": 8}})
}

fn qwen3() -> Value {
    json!({"model_type": "qwen3", "vocab_size": 11, "hidden_size": 8, "intermediate_size": 10,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 6,
        "max_position_embeddings": 16, "initializer_range": 0.5, "tie_word_embeddings": true})
}

fn gpt2() -> Value {
    json!({"model_type": "gpt2", "vocab_size": 11, "n_embd": 8, "n_layer": 2, "n_head": 2,
        "n_positions": 12, "initializer_range": 0.5, "embd_pdrop": 0.0, "resid_pdrop": 0.0})
}

/// A fresh llama (seed 5) saved to `tmp(name)`: the model and the directory.
fn saved_llama(ctx: &ExecContext, name: &str) -> (CausalLm, PathBuf) {
    let lm = CausalLm::new(ctx, &cfg(llama()), DType::F32, 5).unwrap();
    let dir = tmp(name);
    lm.save_pretrained(&dir).unwrap();
    (lm, dir)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fucina-decoder-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn gradcheck(config: Value) {
    let ctx = ExecContext::with_threads(1).unwrap();
    let c = cfg(config);
    let lm = CausalLm::new(&ctx, &c, DType::F64, 7).unwrap();
    let ids = Tensor::constant(&ctx, &[1i64, 4, 2, 9, 0, 3, 5, 8], &[2, 4]).unwrap();
    let mask = Tensor::constant(&ctx, &[1u8, 1, 1, 1, 0, 1, 1, 1], &[2, 4]).unwrap();
    let report = gradcheck_module_with(
        &lm,
        &[],
        |m: &CausalLm, _| {
            let logits = m.forward(&ids, Some(&mask))?;
            m.loss(&logits, &ids)
        },
        &GradcheckOpts::default(),
    )
    .unwrap();
    assert!(report.checked > 0);
}

#[test]
fn gradcheck_llama_gqa_llama3_rope_f64() {
    gradcheck(llama());
}

#[test]
fn gradcheck_qwen3_qk_norm_tied_f64() {
    gradcheck(qwen3());
}

#[test]
fn gradcheck_gpt2_f64() {
    gradcheck(gpt2());
}

#[test]
fn names_are_the_checkpoints() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let lm = CausalLm::new(&ctx, &cfg(qwen3()), DType::F32, 0).unwrap();
    let names: Vec<String> = lm.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names[0], "model.embed_tokens.weight");
    assert!(names.contains(&"model.layers.0.self_attn.q_norm.weight".to_string()));
    assert!(names.contains(&"model.layers.0.mlp.gate_proj.weight".to_string()));
    assert!(
        !names.iter().any(|n| n.starts_with("lm_head")),
        "tied: no head"
    );
    let lm = CausalLm::new(&ctx, &cfg(gpt2()), DType::F32, 0).unwrap();
    let names: Vec<String> = lm.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        &names[..2],
        ["transformer.wte.weight", "transformer.wpe.weight"]
    );
    assert!(names.contains(&"transformer.h.1.attn.c_attn.bias".to_string()));
    assert_eq!(names.last().unwrap(), "transformer.ln_f.bias");
}

fn logits_of(lm: &CausalLm) -> Vec<f64> {
    let ctx = lm.ctx();
    let ids = Tensor::constant(ctx, &[1i64, 4, 2, 9, 0, 3], &[2, 3]).unwrap();
    lm.forward(&ids, None).unwrap().to_vec_f64().unwrap()
}

#[test]
fn save_pretrained_round_trips_every_family() {
    let ctx = ExecContext::with_threads(1).unwrap();
    for (name, c) in [("llama", llama()), ("qwen3", qwen3()), ("gpt2", gpt2())] {
        let lm = CausalLm::new(&ctx, &cfg(c), DType::F32, 3).unwrap();
        let dir = tmp(&format!("save-{name}"));
        lm.save_pretrained(&dir).unwrap();
        let back = CausalLm::from_pretrained(&ctx, &dir, DType::F32).unwrap();
        assert_eq!(back.config, lm.config, "{name}: config round trip");
        assert_eq!(logits_of(&back), logits_of(&lm), "{name}: same logits");
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// Splits a saved model into two shards with an index.
fn shard(dir: &Path, ctx: &ExecContext) {
    let lm = CausalLm::from_pretrained(ctx, dir, DType::F32).unwrap();
    let tensors = lm.checkpoint_tensors().unwrap();
    let (a, b) = tensors.split_at(tensors.len() / 2);
    let opts = SaveOptions::default();
    save_state_dict(&dir.join("model-00001-of-00002.safetensors"), a, &opts).unwrap();
    save_state_dict(&dir.join("model-00002-of-00002.safetensors"), b, &opts).unwrap();
    let mut map = serde_json::Map::new();
    for (n, _) in a {
        map.insert(n.clone(), json!("model-00001-of-00002.safetensors"));
    }
    for (n, _) in b {
        map.insert(n.clone(), json!("model-00002-of-00002.safetensors"));
    }
    let index = json!({"metadata": {}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
}

fn err_of(dir: &Path, ctx: &ExecContext) -> String {
    match CausalLm::from_pretrained(ctx, dir, DType::F32) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn sharded_checkpoints_load_and_fail_cleanly() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let (lm, dir) = saved_llama(&ctx, "sharded");
    shard(&dir, &ctx);
    let back = CausalLm::from_pretrained(&ctx, &dir, DType::F32).unwrap();
    assert_eq!(logits_of(&back), logits_of(&lm));
    drop(back);

    // A missing shard: the index names a file that is not there.
    let s2 = dir.join("model-00002-of-00002.safetensors");
    let bytes = std::fs::read(&s2).unwrap();
    std::fs::remove_file(&s2).unwrap();
    let e = err_of(&dir, &ctx);
    assert!(
        e.contains("model.safetensors.index.json") && e.contains("model-00002-of-00002"),
        "{e}"
    );

    // A truncated shard.
    std::fs::write(&s2, &bytes[..bytes.len() / 2]).unwrap();
    let e = err_of(&dir, &ctx);
    assert!(e.contains("model-00002-of-00002"), "{e}");

    // The index places a key in a shard that lacks it.
    std::fs::write(&s2, &bytes).unwrap();
    let ip = dir.join("model.safetensors.index.json");
    let mut index: Value = serde_json::from_str(&std::fs::read_to_string(&ip).unwrap()).unwrap();
    let map = index["weight_map"].as_object_mut().unwrap();
    let key = map.keys().next().unwrap().clone();
    let other = if map[&key] == "model-00001-of-00002.safetensors" {
        "model-00002-of-00002.safetensors"
    } else {
        "model-00001-of-00002.safetensors"
    };
    map.insert(key.clone(), json!(other));
    std::fs::write(&ip, index.to_string()).unwrap();
    let e = err_of(&dir, &ctx);
    assert!(e.contains(&key), "{e}");

    // An index naming a path outside the directory.
    map_set(&ip, &key, "../elsewhere.safetensors");
    let e = err_of(&dir, &ctx);
    assert!(e.contains("elsewhere"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

fn map_set(ip: &Path, key: &str, file: &str) {
    let mut index: Value = serde_json::from_str(&std::fs::read_to_string(ip).unwrap()).unwrap();
    index["weight_map"][key] = json!(file);
    std::fs::write(ip, index.to_string()).unwrap();
}

#[test]
fn wrong_shape_and_unused_tensor_name_the_key() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let (lm, dir) = saved_llama(&ctx, "shape");
    // A config whose MLP is wider than the file's.
    let mut c: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    c["intermediate_size"] = json!(14);
    std::fs::write(dir.join("config.json"), c.to_string()).unwrap();
    let e = err_of(&dir, &ctx);
    assert!(
        e.contains("model.safetensors") && e.contains("gate_proj.weight") && e.contains("shape"),
        "{e}"
    );
    // A tensor the model does not use.
    c["intermediate_size"] = json!(12);
    std::fs::write(dir.join("config.json"), c.to_string()).unwrap();
    let mut tensors = lm.checkpoint_tensors().unwrap();
    tensors.push((
        "model.extra.weight".into(),
        Tensor::zeros(&ctx, DType::F32, &[2]).unwrap(),
    ));
    save_state_dict(
        &dir.join("model.safetensors"),
        &tensors,
        &SaveOptions::default(),
    )
    .unwrap();
    let e = err_of(&dir, &ctx);
    assert!(e.contains("model.extra.weight"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

fn config_err(v: Value) -> String {
    DecoderConfig::from_json(Path::new("/m/config.json"), &v)
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_configs_name_the_file_and_field() {
    // A base config, the keys set (`None`: removed), and what the error must name.
    type Case = (
        Value,
        Vec<(&'static str, Option<Value>)>,
        &'static [&'static str],
    );
    let cases: Vec<Case> = vec![
        (
            llama(),
            vec![("model_type", Some(json!("falcon")))],
            &["/m/config.json", "`model_type` `falcon`"],
        ),
        (
            llama(),
            vec![(
                "rope_scaling",
                Some(json!({"rope_type": "yarn", "factor": 2.0})),
            )],
            &["rope_scaling", "yarn"],
        ),
        (
            llama(),
            vec![("hidden_size", Some(json!(10)))],
            &["hidden_size", "num_attention_heads"],
        ),
        (
            gpt2(),
            vec![("n_embd", Some(json!(9)))],
            &["n_embd", "n_head"],
        ),
        (
            llama(),
            vec![("num_key_value_heads", Some(json!(3)))],
            &["num_key_value_heads", "does not divide"],
        ),
        (
            llama(),
            vec![("vocab_size", Some(json!(1u64 << 40)))],
            &["vocab_size"],
        ),
        (
            llama(),
            vec![
                ("num_hidden_layers", Some(json!(1 << 20))),
                ("hidden_size", Some(json!(1 << 16))),
            ],
            &["parameters"],
        ),
        (
            llama(),
            vec![("sliding_window", Some(json!(4096)))],
            &["sliding_window"],
        ),
        (llama(), vec![("vocab_size", None)], &["vocab_size"]),
    ];
    for (mut c, edits, names) in cases {
        for (key, value) in edits {
            match value {
                Some(v) => c[key] = v,
                None => {
                    c.as_object_mut().unwrap().remove(key);
                }
            }
        }
        let e = config_err(c);
        assert!(names.iter().all(|n| e.contains(n)), "{e}");
    }
}

#[test]
fn config_files_that_are_not_regular_files_are_refused() {
    let e = DecoderConfig::from_file(Path::new("/dev/zero"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/dev/zero") && e.contains("not a regular file"),
        "{e}"
    );
    let dir = tmp("nodir");
    let e = CausalLm::from_pretrained(&ExecContext::with_threads(1).unwrap(), &dir, DType::F32)
        .unwrap_err()
        .to_string();
    assert!(e.contains("config.json"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn generate_is_seeded_and_checks_its_arguments() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let lm = CausalLm::new(&ctx, &cfg(llama()), DType::F32, 1).unwrap();
    let sampled = GenerateOptions {
        sampling: fucina_nn::Sampling::Sample {
            temperature: 0.9,
            top_k: 5,
            top_p: 0.9,
            seed: 4,
        },
        ..GenerateOptions::greedy(6)
    };
    let a = lm.generate(&[vec![1, 2], vec![3, 4, 5]], &sampled).unwrap();
    let b = lm.generate(&[vec![1, 2], vec![3, 4, 5]], &sampled).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.tokens[1].len(), 6);
    // A budget past max_position_embeddings, an id out of the vocabulary, an empty prompt.
    assert!(lm
        .generate(&[vec![1; 10]], &GenerateOptions::greedy(10))
        .is_err());
    assert!(lm
        .generate(&[vec![13]], &GenerateOptions::greedy(1))
        .is_err());
    assert!(lm.generate(&[vec![]], &GenerateOptions::greedy(1)).is_err());
    // Stops at eos.
    let first = lm
        .generate(&[vec![1, 2]], &GenerateOptions::greedy(1))
        .unwrap()
        .tokens[0][0];
    let opts = GenerateOptions {
        eos_token_ids: vec![first],
        ..GenerateOptions::greedy(6)
    };
    assert_eq!(
        lm.generate(&[vec![1, 2]], &opts).unwrap().tokens[0],
        vec![first]
    );
}

/// The models `saved_models_load_in_transformers` checks: each family's tiny
/// config, fresh from seed 11, in f32.
fn saved_models() -> Vec<(&'static str, CausalLm)> {
    let ctx = ExecContext::with_threads(1).unwrap();
    [("llama", llama()), ("qwen3", qwen3()), ("gpt2", gpt2())]
        .into_iter()
        .map(|(n, c)| (n, CausalLm::new(&ctx, &cfg(c), DType::F32, 11).unwrap()))
        .collect()
}

/// The ids whose logits the golden holds.
const SAVED_IDS: [i64; 6] = [1, 4, 2, 9, 0, 3];

/// Writes the models to `$FUCINA_SAVE_DIR/<family>` for
/// `tools/check_save_pretrained.py` (run by it; ignored otherwise).
#[test]
#[ignore]
fn write_saved_models() {
    let root = PathBuf::from(std::env::var("FUCINA_SAVE_DIR").expect("FUCINA_SAVE_DIR"));
    for (name, lm) in saved_models() {
        lm.save_pretrained(&root.join(name)).unwrap();
    }
}

/// `save_pretrained` → transformers' `AutoModelForCausalLM.from_pretrained`
/// → logits equal to fucina's within 1e-6 of the largest (the golden is transformers'
/// output on the saved directories, `tools/check_save_pretrained.py`).
#[test]
fn saved_models_load_in_transformers() {
    let golden: Value = serde_json::from_str(include_str!("goldens/save_pretrained.json")).unwrap();
    for (name, lm) in saved_models() {
        let ids = Tensor::constant(lm.ctx(), &SAVED_IDS, &[2, 3]).unwrap();
        let got = lm.forward(&ids, None).unwrap().to_vec_f64().unwrap();
        let want: Vec<f64> = golden[name]["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(got.len(), want.len(), "{name}");
        // Relative to the largest logit, as every golden comparison here.
        let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let worst = max_abs_diff(&got, &want);
        assert!(
            worst <= 1e-6 * scale,
            "{name}: transformers' logits differ by {worst:e} (largest {scale})"
        );
    }
}
