//! Fuzzing the config readers with numbers anywhere in the integer range
//! (docs/RELIABILITY.md): every numeric field of a BERT, Llama, Qwen2,
//! Qwen3 or GPT-2 `config.json` and of a PEFT `adapter_config.json`, one to
//! three at a time, set to an edge of the range (0, ±1, 2³¹, 2³², 2⁴⁰,
//! 2⁵³ + 1, i64::MIN, u64::MAX, …), a random 64-bit value or a huge float.
//! Each case parses the file, validates it and, when it passes, builds the
//! model (and attaches the adapters) under a 16 MiB pool limit and runs a
//! forward pass: every case
//! must end in `Ok` or a clean `Err` — never a panic, an abort or an
//! allocation outside the pool's limit — and leave no pool buffer behind.
//! `FUZZ_NUMBER_CASES` raises the count (CI: 3,000 per family).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext};
use fucina_nn::hf::DecoderConfig;
use fucina_nn::{apply_lora, BertConfig, BertModel, CausalLm, Init, LoraConfig};
use serde_json::{json, Value};

const POOL_LIMIT: usize = 16 << 20;

fn cases() -> usize {
    std::env::var("FUZZ_NUMBER_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000)
}

fn bert() -> Value {
    json!({"model_type": "bert", "vocab_size": 11, "hidden_size": 8, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 12, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 8, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute", "initializer_range": 0.02, "pad_token_id": 0})
}

fn decoders() -> Vec<Value> {
    vec![
        json!({"model_type": "llama", "vocab_size": 13, "hidden_size": 8, "intermediate_size": 12,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 16, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
            "bos_token_id": 1, "eos_token_id": [1, 2], "pad_token_id": 0,
            "initializer_range": 0.02, "tie_word_embeddings": false}),
        json!({"model_type": "qwen3", "vocab_size": 11, "hidden_size": 8, "intermediate_size": 10,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 6, "max_position_embeddings": 16, "use_sliding_window": false,
            "sliding_window": 4096, "max_window_layers": 1,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}),
        json!({"model_type": "qwen2", "vocab_size": 11, "hidden_size": 8, "intermediate_size": 10,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
            "max_position_embeddings": 16, "rope_scaling": {"type": "linear", "factor": 2.0}}),
        json!({"model_type": "gpt2", "vocab_size": 11, "n_embd": 8, "n_layer": 2, "n_head": 2,
            "n_positions": 12, "n_inner": 16, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "bos_token_id": 0, "eos_token_id": 0}),
    ]
}

fn adapter() -> Value {
    let mut v = serde_json::to_value(LoraConfig::new(4, 8.0, &["q_proj", "v_proj"])).unwrap();
    v["lora_dropout"] = json!(0.1);
    v
}

/// The paths (object keys and array indices) of every number in `v`.
fn number_paths(v: &Value, here: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Number(_) => out.push(here.clone()),
        Value::Object(m) => {
            for (k, x) in m {
                here.push(json!(k));
                number_paths(x, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                here.push(json!(i));
                number_paths(x, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Value]) -> &'a mut Value {
    path.iter().fold(v, |v, k| match k {
        Value::String(s) => &mut v[s.as_str()],
        Value::Number(i) => &mut v[i.as_u64().unwrap() as usize],
        _ => unreachable!(),
    })
}

/// A number from anywhere in the integer range, or a huge or odd float.
fn number(rng: &mut SplitMix64) -> Value {
    let edges: [Value; 22] = [
        json!(0),
        json!(1),
        json!(2),
        json!(3),
        json!(-1),
        json!(-2),
        json!(i32::MAX),
        json!(1u64 << 31),
        json!(1u64 << 32),
        json!((1u64 << 32) + 1),
        json!(1u64 << 40),
        json!((1u64 << 53) + 1),
        json!(1u64 << 62),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(u64::MAX - 1),
        json!(1e300),
        json!(-1e300),
        json!(-0.0),
        json!(1.5),
        json!(f64::MIN_POSITIVE),
    ];
    match rng.next_u64() % 4 {
        0 | 1 => edges[(rng.next_u64() % edges.len() as u64) as usize].clone(),
        2 => json!(rng.next_u64()),
        _ => json!(rng.next_u64() as i64 >> (rng.next_u64() % 64)),
    }
}

/// Runs `build` on `cases` mutations of `base`; panics (failing the test)
/// on a panic inside, naming the mutated file.
fn fuzz(name: &str, base: &Value, seed: u64, build: &dyn Fn(&ExecContext, &Value) -> bool) {
    let mut paths = Vec::new();
    number_paths(base, &mut Vec::new(), &mut paths);
    assert!(!paths.is_empty());
    let mut rng = SplitMix64::new(seed);
    let ctx = ExecContext::with_threads(1).unwrap();
    ctx.pool().set_memory_limit(Some(POOL_LIMIT));
    let (mut built, mut rejected) = (0, 0);
    for _ in 0..cases() {
        let mut v = base.clone();
        for _ in 0..1 + rng.next_u64() % 3 {
            let p = &paths[(rng.next_u64() % paths.len() as u64) as usize];
            *at(&mut v, p) = number(&mut rng);
        }
        match catch_unwind(AssertUnwindSafe(|| build(&ctx, &v))) {
            Ok(true) => built += 1,
            Ok(false) => rejected += 1,
            Err(_) => panic!("{name}: panicked on {v}"),
        }
        assert_eq!(
            ctx.stats().outstanding,
            0,
            "{name}: pool buffers left by {v}"
        );
    }
    eprintln!(
        "{name}: {} cases, {built} built, {rejected} rejected",
        cases()
    );
}

#[test]
fn decoder_configs_with_any_integer_never_panic() {
    for (i, base) in decoders().iter().enumerate() {
        let name = base["model_type"].as_str().unwrap().to_string();
        fuzz(&name, base, 0xC0F1 + i as u64, &|ctx, v| {
            let Ok(c) = DecoderConfig::from_json(Path::new("fuzz/config.json"), v) else {
                return false;
            };
            if c.validate().is_err() {
                return false;
            }
            let Ok(lm) = CausalLm::new(ctx, &c, DType::F32, 0) else {
                return false;
            };
            // A built model also runs (or refuses cleanly) a forward pass.
            let ids: Vec<i64> = (0..3).map(|i| i % c.vocab_size as i64).collect();
            let ids = fucina_autograd::Tensor::constant(ctx, &ids, &[1, 3]).unwrap();
            let _ = lm.forward(&ids, None);
            true
        });
    }
}

#[test]
fn bert_configs_with_any_integer_never_panic() {
    fuzz("bert", &bert(), 0xBE27, &|ctx, v| {
        let Ok(c) = serde_json::from_value::<BertConfig>(v.clone()) else {
            return false;
        };
        if c.validate().is_err() {
            return false;
        }
        let Ok(m) = BertModel::new(&mut Init::new(ctx, DType::F32, 0), &c, true) else {
            return false;
        };
        let ids: Vec<i64> = (0..3).map(|i| i % c.vocab_size as i64).collect();
        let ids = fucina_autograd::Tensor::constant(ctx, &ids, &[1, 3]).unwrap();
        let _ = m.forward(&ids, None, None);
        true
    });
}

#[test]
fn adapter_configs_with_any_integer_never_panic() {
    let ctx0 = ExecContext::with_threads(1).unwrap();
    let base_cfg = DecoderConfig::from_json(Path::new("fuzz/config.json"), &decoders()[0]).unwrap();
    drop(ctx0);
    let dir = std::env::temp_dir().join(format!("fucina-fuzz-adapter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("adapter_config.json");
    fuzz("adapter_config", &adapter(), 0xADA7, &|ctx, v| {
        // Through the file reader, as `load_adapter` reads it.
        std::fs::write(&file, serde_json::to_vec(v).unwrap()).unwrap();
        let Ok(cfg) = LoraConfig::from_file(&file) else {
            return false;
        };
        let Ok(mut lm) = CausalLm::new(ctx, &base_cfg, DType::F32, 0) else {
            return false;
        };
        apply_lora(&mut lm, &cfg, &mut Init::new(ctx, DType::F32, 0)).is_ok()
    });
    std::fs::remove_dir_all(&dir).ok();
}
