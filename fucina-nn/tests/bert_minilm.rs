//! The BERT encoder against PyTorch on the real all-MiniLM-L6-v2: strict
//! load of its `model.safetensors` (every tensor used, pooler and
//! `position_ids` included), then the mean-pooled output of a padded batch
//! (three lengths, attention mask applied, two token types) matches
//! transformers' `BertModel` within 1e-4 (f32) and 1e-10 (f64), and the
//! pooler within 1e-10 (f64). Golden: `tools/gen_minilm_goldens.py`.
//! Skips with one line when the weights are absent (see `common/minilm.rs`).

#[path = "common/minilm.rs"]
mod minilm_common;

mod common;

use common::max_abs_diff;
use fucina_autograd::{no_grad, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::{mean_pool, BertModel};
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    ids: Vec<Vec<i64>>,
    mask: Vec<Vec<u8>>,
    token_type_ids: Vec<Vec<i64>>,
    hidden: usize,
    mean_pooled_f32: Vec<f64>,
    mean_pooled_f64: Vec<f64>,
    pooler_f64: Vec<f64>,
}

fn golden() -> Golden {
    let text = include_str!("goldens/minilm.json");
    serde_json::from_str(text).expect("minilm.json parses")
}

fn flat<T: Copy>(rows: &[Vec<T>]) -> Vec<T> {
    rows.iter().flatten().copied().collect()
}

/// The golden with this model's mean-pooled output and pooler output in
/// `dtype`; `None` when the weights are absent.
fn run(dtype: DType) -> Option<(Golden, Vec<f64>, Vec<f64>)> {
    let dir = minilm_common::minilm_dir("bert_minilm")?;
    let g = golden();
    let ctx = ExecContext::with_threads(2).unwrap();
    let (b, t) = (g.ids.len(), g.ids[0].len());
    let out = {
        let model = BertModel::from_pretrained(&ctx, &dir, dtype).unwrap();
        assert!(model.pooler.is_some(), "the file has a pooler");
        assert_eq!(model.encoder.layer.len(), 6);
        let ids = Tensor::constant(&ctx, &flat(&g.ids), &[b, t]).unwrap();
        let mask = Tensor::constant(&ctx, &flat(&g.mask), &[b, t]).unwrap();
        let types = Tensor::constant(&ctx, &flat(&g.token_type_ids), &[b, t]).unwrap();
        let _ng = no_grad();
        let h = model.forward(&ids, Some(&mask), Some(&types)).unwrap();
        let pooled = mean_pool(&h, &mask).unwrap();
        assert_eq!(pooled.shape(), &[b, g.hidden]);
        let pooler = model.pool(&h).unwrap();
        (pooled.to_vec_f64().unwrap(), pooler.to_vec_f64().unwrap())
    };
    assert_eq!(ctx.stats().outstanding, 0);
    Some((g, out.0, out.1))
}

#[test]
fn minilm_f32_matches_torch_within_1e_4() {
    let Some((g, pooled, _)) = run(DType::F32) else {
        return;
    };
    let err = max_abs_diff(&pooled, &g.mean_pooled_f32);
    println!("f32 mean-pooled max abs err vs torch f32: {err:e}");
    assert!(err <= 1e-4, "f32 max abs err {err:e}");
}

#[test]
fn minilm_f64_matches_torch_within_1e_10() {
    let Some((g, pooled, pooler)) = run(DType::F64) else {
        return;
    };
    let err = max_abs_diff(&pooled, &g.mean_pooled_f64);
    let perr = max_abs_diff(&pooler, &g.pooler_f64);
    println!("f64 mean-pooled max abs err {err:e}, pooler {perr:e}");
    assert!(err <= 1e-10, "f64 max abs err {err:e}");
    assert!(perr <= 1e-10, "f64 pooler max abs err {perr:e}");
}

#[test]
fn minilm_loads_strictly_and_a_missing_pooler_is_an_error() {
    let Some(dir) = minilm_common::minilm_dir("bert_minilm") else {
        return;
    };
    let ctx = ExecContext::with_threads(1).unwrap();
    let model = BertModel::from_pretrained(&ctx, &dir, DType::F32).unwrap();
    let file = fucina_autograd::SafetensorsFile::open(&dir.join("model.safetensors")).unwrap();
    // Every tensor of the file is a parameter or the position-id buffer.
    assert_eq!(model.checkpoint_tensors().len(), file.len());
    // A model built without a pooler does not accept the file strictly:
    // the pooler's tensors are unexpected, named in one error.
    let cfg = model.config.clone();
    let mut init = fucina_nn::Init::new(&ctx, DType::F32, 0);
    let bare = BertModel::new(&mut init, &cfg, false).unwrap();
    let before = bare
        .embeddings
        .word_embeddings
        .weight
        .to_vec::<f32>()
        .unwrap();
    let err = bare
        .load_safetensors(
            &dir.join("model.safetensors"),
            &fucina_autograd::LoadOptions::new(),
        )
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("pooler.dense.weight") && msg.contains("model.safetensors"),
        "{msg}"
    );
    assert_eq!(
        bare.embeddings
            .word_embeddings
            .weight
            .to_vec::<f32>()
            .unwrap(),
        before
    );
    drop((model, bare, file));
    assert_eq!(ctx.stats().outstanding, 0);
}
