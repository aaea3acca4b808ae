//! The BERT encoder at tiny sizes (no download): whole-model gradcheck in
//! f64 (plain and with LoRA adapters), HF names, config parsing and
//! validation errors naming the file or field, input errors, and a state
//! dict round trip through a `bert.`-prefixed file.

use std::path::PathBuf;

use fucina_autograd::{GradcheckOpts, LoadOptions, SaveOptions, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::gradcheck::{gradcheck_module_with, ModuleGradcheckReport};
use fucina_nn::{apply_lora, mean_pool, BertConfig, BertModel, Init, LoraConfig, Module};

#[path = "common/tiny.rs"]
mod tiny_models;

#[path = "common/lora.rs"]
mod lora_common;

fn tiny() -> BertConfig {
    tiny_models::tiny_bert(2)
}

fn batch(ctx: &ExecContext) -> (Tensor, Tensor, Tensor) {
    let ids = Tensor::constant(ctx, &[1i64, 5, 7, 2, 3, 9, 0, 0], &[2, 4]).unwrap();
    let mask = Tensor::constant(ctx, &[1u8, 1, 1, 1, 1, 1, 0, 0], &[2, 4]).unwrap();
    let types = Tensor::constant(ctx, &[0i64, 0, 1, 1, 0, 0, 0, 0], &[2, 4]).unwrap();
    (ids, mask, types)
}

fn loss(m: &BertModel, ids: &Tensor, mask: &Tensor, types: &Tensor) -> fucina_nn::Result<Tensor> {
    let h = m.forward(ids, Some(mask), Some(types))?;
    let p = mean_pool(&h, mask)?;
    Ok(p.add(&m.pool(&h)?)?.tanh()?.sum_all()?)
}

/// The gradcheck of every trainable parameter of `model` (in eval mode)
/// through [`loss`] on [`batch`].
fn gradcheck_bert(ctx: &ExecContext, model: &BertModel) -> ModuleGradcheckReport {
    let (ids, mask, types) = batch(ctx);
    gradcheck_module_with(
        model,
        &[],
        |m, _| loss(m, &ids, &mask, &types),
        &GradcheckOpts::default(),
    )
    .unwrap()
}

#[test]
fn gradcheck_whole_bert_f64() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let model = BertModel::new(&mut Init::new(&ctx, DType::F64, 1), &tiny(), true).unwrap();
        model.eval();
        let rep = gradcheck_bert(&ctx, &model);
        assert_eq!(rep.tensors.len(), model.named_parameters().len());
        println!(
            "BERT gradcheck: {} elements, worst {} ({:e})",
            rep.checked, rep.worst, rep.max_abs_err
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn gradcheck_bert_with_lora_f64() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let mut init = Init::new(&ctx, DType::F64, 2);
        let mut model = BertModel::new(&mut init, &tiny(), true).unwrap();
        apply_lora(
            &mut model,
            &LoraConfig::new(2, 4.0, &["query", "dense"]),
            &mut init,
        )
        .unwrap();
        lora_common::set_lora_b(&model, |i| (i as f64 * 0.7).cos() * 0.3);
        model.eval();
        let rep = gradcheck_bert(&ctx, &model);
        // Only the adapters train: 2 layers x (query, attention.output.dense,
        // intermediate.dense, output.dense) + pooler.dense, A and B each.
        assert_eq!(rep.tensors.len(), (2 * 4 + 1) * 2);
        assert!(rep.tensors.iter().all(|n| n.contains("lora_")));
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn hugging_face_names() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let model = BertModel::new(&mut Init::new(&ctx, DType::F32, 1), &tiny(), false).unwrap();
    let names: Vec<String> = model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for want in [
        "embeddings.word_embeddings.weight",
        "embeddings.position_embeddings.weight",
        "embeddings.token_type_embeddings.weight",
        "embeddings.LayerNorm.weight",
        "encoder.layer.1.attention.self.query.weight",
        "encoder.layer.1.attention.self.key.bias",
        "encoder.layer.1.attention.self.value.weight",
        "encoder.layer.0.attention.output.dense.weight",
        "encoder.layer.0.attention.output.LayerNorm.bias",
        "encoder.layer.0.intermediate.dense.weight",
        "encoder.layer.0.output.dense.bias",
        "encoder.layer.0.output.LayerNorm.weight",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    assert_eq!(names.len(), 5 + 2 * 16);
    assert_eq!(
        model.checkpoint_tensors().last().unwrap().0,
        "embeddings.position_ids"
    );
}

#[test]
fn prefixed_state_dict_round_trips_bit_exact() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let path =
        std::env::temp_dir().join(format!("fucina-bert-sd-{}.safetensors", std::process::id()));
    {
        let a = BertModel::new(&mut Init::new(&ctx, DType::F32, 1), &tiny(), true).unwrap();
        let b = BertModel::new(&mut Init::new(&ctx, DType::F32, 2), &tiny(), true).unwrap();
        let sd: Vec<(String, Tensor)> = a
            .checkpoint_tensors()
            .into_iter()
            .map(|(n, t)| (format!("bert.{n}"), t))
            .collect();
        fucina_autograd::save_state_dict(&path, &sd, &SaveOptions::default()).unwrap();
        let rep = b.load_safetensors(&path, &LoadOptions::new()).unwrap();
        assert_eq!(rep.loaded.len(), sd.len());
        for ((_, x), (_, y)) in a
            .checkpoint_tensors()
            .iter()
            .zip(b.checkpoint_tensors().iter())
        {
            assert_eq!(x.to_vec_f64().unwrap(), y.to_vec_f64().unwrap());
        }
    }
    std::fs::remove_file(&path).ok();
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn config_and_input_errors_are_structured() {
    let dir = std::env::temp_dir().join(format!("fucina-bert-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("config.json");
    std::fs::write(&path, r#"{"hidden_size": 8}"#).unwrap();
    let e = BertConfig::from_file(&path).unwrap_err().to_string();
    assert!(e.contains("config.json") && e.contains("vocab_size"), "{e}");
    let mut c = serde_json::to_value(tiny()).unwrap();
    c["num_attention_heads"] = 3.into();
    std::fs::write(&path, c.to_string()).unwrap();
    let e = BertConfig::from_file(&path).unwrap_err().to_string();
    assert!(e.contains("num_attention_heads"), "{e}");
    c["num_attention_heads"] = 2.into();
    c["position_embedding_type"] = "relative_key".into();
    std::fs::write(&path, c.to_string()).unwrap();
    assert!(BertConfig::from_file(&path)
        .unwrap_err()
        .to_string()
        .contains("relative_key"));
    std::fs::remove_dir_all(&dir).ok();

    let ctx = ExecContext::with_threads(1).unwrap();
    let model = BertModel::new(&mut Init::new(&ctx, DType::F32, 1), &tiny(), false).unwrap();
    let long = Tensor::constant(&ctx, &[1i64; 9], &[1, 9]).unwrap();
    assert!(model
        .forward(&long, None, None)
        .unwrap_err()
        .to_string()
        .contains("T <= 8"));
    let (ids, mask, _) = batch(&ctx);
    let bad_types = Tensor::constant(&ctx, &[0i64; 4], &[1, 4]).unwrap();
    assert!(model.forward(&ids, Some(&mask), Some(&bad_types)).is_err());
    assert!(
        model
            .pool(&model.forward(&ids, None, None).unwrap())
            .is_err(),
        "no pooler"
    );
}
