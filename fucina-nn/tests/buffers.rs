//! Module buffers: RoPE's tables, BERT's `position_ids` and the dropout
//! counters are listed by `named_buffers`, never by `named_parameters` (so
//! never by an optimizer); the persistent ones are in `state_dict` and a
//! state dict saved mid-run resumes the same dropout masks; the Hugging Face
//! checkpoint tensors hold only what transformers' files hold.

use std::path::Path;

use fucina_autograd::{LoadOptions, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::hf::DecoderConfig;
use fucina_nn::{BertModel, CausalLm, Gpt, GptConfig, Init, Module, StateDict};
use serde_json::json;

#[path = "common/tiny.rs"]
mod tiny_models;

fn names(v: Vec<(String, Tensor)>) -> Vec<String> {
    v.into_iter().map(|(n, _)| n).collect()
}

fn llama(ctx: &ExecContext) -> CausalLm {
    let c = DecoderConfig::from_json(
        Path::new("config.json"),
        &json!({"model_type": "llama", "vocab_size": 13, "hidden_size": 8,
            "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 16}),
    )
    .unwrap();
    CausalLm::new(ctx, &c, DType::F32, 3).unwrap()
}

#[test]
fn decoder_buffers_are_listed_apart_from_parameters() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let lm = llama(&ctx);
        let buffers = names(lm.named_buffers());
        assert!(
            buffers.contains(&"rotary_emb.cos".to_string()),
            "{buffers:?}"
        );
        assert!(
            buffers.contains(&"rotary_emb.sin".to_string()),
            "{buffers:?}"
        );
        assert!(buffers.contains(&"model.layers.1.self_attn.dropout.calls".to_string()));
        let params = names(lm.named_parameters());
        assert!(params.iter().all(|p| !buffers.contains(p)));
        assert_eq!(lm.parameters().len(), params.len());
        // The state dict: parameters, then the persistent buffers (the
        // dropout counters), never RoPE's recomputed tables.
        let state = names(lm.state_dict());
        assert_eq!(state[..params.len()], params[..]);
        assert!(state[params.len()..].iter().all(|n| n.ends_with(".calls")));
        assert!(state.contains(&"model.layers.1.self_attn.dropout.calls".to_string()));
        assert!(state.iter().all(|n| !n.starts_with("rotary_emb")));
        // What transformers' files hold: no buffer of fucina's own.
        let ckpt = names(lm.checkpoint_tensors().unwrap());
        assert!(ckpt
            .iter()
            .all(|n| !n.ends_with(".calls") && !n.contains("rotary_emb")));
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn bert_position_ids_is_a_persistent_buffer() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let cfg = tiny_models::tiny_bert(1);
        let bert = BertModel::new(&mut Init::new(&ctx, DType::F32, 1), &cfg, false).unwrap();
        let buffers = names(bert.named_buffers());
        let pos = "embeddings.position_ids".to_string();
        assert!(buffers.contains(&pos), "{buffers:?}");
        assert!(names(bert.state_dict()).contains(&pos));
        assert!(!names(bert.named_parameters()).contains(&pos));
        assert!(bert
            .trainable_parameters()
            .iter()
            .all(|p| p.dtype() != DType::I64));
        let ckpt = names(bert.checkpoint_tensors());
        assert_eq!(ckpt.last().unwrap(), "embeddings.position_ids");
        assert!(ckpt.iter().all(|n| !n.ends_with(".calls")));
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

fn gpt(ctx: &ExecContext) -> Gpt {
    let cfg = GptConfig {
        vocab_size: 11,
        block_size: 8,
        n_layer: 2,
        n_head: 2,
        n_embd: 8,
        dropout: 0.2,
        ..GptConfig::default()
    };
    Gpt::new(&mut Init::new(ctx, DType::F32, 5), &cfg).unwrap()
}

#[test]
fn dropout_counters_resume_through_the_state_dict() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let path = std::env::temp_dir().join(format!("fucina-buffers-{}.st", std::process::id()));
    {
        let idx = Tensor::constant(&ctx, &[1i64, 4, 2, 9, 0, 3, 5, 8], &[2, 4]).unwrap();
        let a = gpt(&ctx);
        for _ in 0..3 {
            a.forward(&idx).unwrap();
        }
        assert_eq!(a.drop.calls().unwrap(), 3);
        a.save_state_dict(&path).unwrap();
        let resumed = gpt(&ctx);
        resumed.load_state_dict(&path, &LoadOptions::new()).unwrap();
        assert_eq!(resumed.drop.calls().unwrap(), 3);
        let fresh = gpt(&ctx);
        let next = a.forward(&idx).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(
            resumed.forward(&idx).unwrap().to_vec::<f32>().unwrap(),
            next
        );
        // Without the counters the masks restart: a different result.
        assert_ne!(fresh.forward(&idx).unwrap().to_vec::<f32>().unwrap(), next);
    }
    std::fs::remove_file(&path).ok();
    assert_eq!(ctx.stats().outstanding, 0);
}
