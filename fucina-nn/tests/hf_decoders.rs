//! The Hugging Face decoder families against transformers, on the tiny
//! random-init fixtures of `tools/gen_hf_decoder_fixtures.py`
//! (`fucina-nn/tests/fixtures/hf/<family>/`): each loads strictly (llama's
//! from three shards and an index); logits, the causal-LM loss and every
//! parameter's gradient match transformers in f32 and f64 (the f64 reference
//! computed in float64 throughout, see the generator); 32 greedy tokens for a left-padded batch of two prompts
//! equal `generate(do_sample=False)`; decoding with the KV cache gives the
//! logits of recomputing the whole sequence. One test per family.

mod common;

use common::fixtures::fixture;
use common::{assert_close, count_with_prefix, f64s, i64s};
use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_nn::models::decoder::names::is_conv1d;
use fucina_nn::{CausalLm, GenerateOptions, Module};
use safetensors::SafeTensors;
use serde_json::Value;

/// Logits within 1e-5 (f32) / 1e-10 (f64), loss and gradients within
/// 1e-5 / 1e-9, relative to the reference's largest magnitude.
fn check_against_goldens(family: &str, dtype: DType) {
    let dir = fixture(family);
    let ctx = ExecContext::with_threads(2).unwrap();
    let lm = CausalLm::from_pretrained(&ctx, &dir, dtype).unwrap();
    let bytes = std::fs::read(dir.join("goldens.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (ids, shape) = i64s(&st, "input_ids");
    let d = if dtype == DType::F64 { "f64" } else { "f32" };
    let (tol_logits, tol_grad) = if dtype == DType::F64 {
        (1e-10, 1e-9)
    } else {
        (1e-5, 1e-5)
    };
    let input = Tensor::constant(&ctx, &ids, &shape).unwrap();
    let logits = lm.forward(&input, None).unwrap();
    let (want, want_shape) = f64s(&st, &format!("{d}/logits"));
    assert_eq!(logits.shape(), want_shape.as_slice());
    assert_close(
        &format!("{family} {d} logits"),
        &logits.to_vec_f64().unwrap(),
        &want,
        tol_logits,
    );
    let loss = lm.loss(&logits, &input).unwrap();
    let (want_loss, _) = f64s(&st, &format!("{d}/loss"));
    assert_close(
        &format!("{family} {d} loss"),
        &[loss.item().unwrap()],
        &want_loss,
        tol_grad,
    );
    loss.backward().unwrap();
    let params = lm.checkpoint_tensors().unwrap();
    let named = lm.named_parameters();
    let mut checked = 0;
    for ((name, _), (_, p)) in params.iter().zip(&named) {
        let key = format!("{d}/grad/{name}");
        let (want, want_shape) = f64s(&st, &key);
        let g = p
            .grad()
            .unwrap_or_else(|| panic!("{family}: `{name}` has no gradient"));
        // GPT-2's Conv1D weights are [in, out] in transformers, [out, in] here.
        let g = if is_conv1d(lm.config.model_type, name) {
            Tensor::from_raw(
                &ctx,
                ctx.contiguous(&g.raw().unwrap().transpose(0, 1).unwrap())
                    .unwrap(),
                false,
            )
            .unwrap()
        } else {
            g
        };
        assert_eq!(
            g.shape(),
            want_shape.as_slice(),
            "{family}: `{name}` gradient shape"
        );
        assert_close(
            &format!("{family} {d} grad {name}"),
            &g.to_vec_f64().unwrap(),
            &want,
            tol_grad,
        );
        checked += 1;
    }
    assert_eq!(
        checked,
        count_with_prefix(&st, &format!("{d}/grad/")),
        "{family}: every transformers gradient is checked"
    );
    drop((params, named, loss, logits, input));
    drop(lm);
}

/// 32 greedy tokens of a left-padded batch of two prompts equal transformers'.
fn check_generate(family: &str, dtype: DType) {
    let dir = fixture(family);
    let ctx = ExecContext::with_threads(2).unwrap();
    let lm = CausalLm::from_pretrained(&ctx, &dir, dtype).unwrap();
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("generate.json")).unwrap()).unwrap();
    let ids = |v: &Value| -> Vec<i64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect()
    };
    let prompts: Vec<Vec<i64>> = g["prompts"].as_array().unwrap().iter().map(ids).collect();
    let pad = g["pad_token_id"].as_i64().unwrap();
    let eos = g["eos_token_id"].as_i64().unwrap();
    let d = if dtype == DType::F64 { "f64" } else { "f32" };
    let want: Vec<Vec<i64>> = g[d]["new_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let opts = GenerateOptions {
        max_new_tokens: g["max_new_tokens"].as_u64().unwrap() as usize,
        sampling: fucina_nn::Sampling::Greedy,
        eos_token_ids: vec![eos],
        pad_token_id: pad,
    };
    let out = lm.generate(&prompts, &opts).unwrap();
    for (r, (got, want)) in out.tokens.iter().zip(&want).enumerate() {
        // transformers pads a finished row after its eos.
        let end = want
            .iter()
            .position(|&t| t == eos)
            .map_or(want.len(), |i| i + 1);
        assert_eq!(got, &want[..end], "{family} {d}: row {r} generated tokens");
    }
}

/// Decoding with the cache gives the logits of recomputing the whole
/// sequence (1e-6), token by token.
fn check_cache_matches_recompute(family: &str) {
    let dir = fixture(family);
    let ctx = ExecContext::with_threads(1).unwrap();
    let lm = CausalLm::from_pretrained(&ctx, &dir, DType::F32).unwrap();
    let _g = fucina_autograd::no_grad();
    let seq: Vec<i64> = vec![5, 17, 42, 99, 7, 250, 33, 301, 12, 64];
    let full = Tensor::constant(&ctx, &seq, &[1, seq.len()]).unwrap();
    let want = lm.forward(&full, None).unwrap().to_vec_f64().unwrap();
    let v = lm.config.vocab_size;
    let mut cache = lm.new_cache(1, seq.len()).unwrap();
    let prefill = 4;
    let h = lm
        .hidden_states(
            &Tensor::constant(&ctx, &seq[..prefill], &[1, prefill]).unwrap(),
            None,
            None,
            Some(&mut cache),
        )
        .unwrap();
    let mut got = lm.logits(&h).unwrap().to_vec_f64().unwrap();
    for t in prefill..seq.len() {
        let h = lm
            .hidden_states(
                &Tensor::constant(&ctx, &seq[t..t + 1], &[1, 1]).unwrap(),
                None,
                None,
                Some(&mut cache),
            )
            .unwrap();
        got.extend(lm.logits(&h).unwrap().to_vec_f64().unwrap());
    }
    assert_eq!(cache.len(), seq.len());
    assert_eq!(got.len(), seq.len() * v);
    assert_close(&format!("{family} cached decode"), &got, &want, 1e-6);
}

fn family(name: &str) {
    check_against_goldens(name, DType::F32);
    check_generate(name, DType::F32);
    check_cache_matches_recompute(name);
    check_against_goldens(name, DType::F64);
    check_generate(name, DType::F64);
}

#[test]
fn gpt2() {
    family("gpt2");
}

#[test]
fn llama() {
    family("llama");
}

#[test]
fn qwen2() {
    family("qwen2");
}

#[test]
fn qwen3() {
    family("qwen3");
}
