//! LoRA against Hugging Face PEFT (`tools/gen_peft_goldens.py`: a tiny
//! random BERT, an adapter saved by `peft` with random non-zero B, and the
//! adapted model's output), plus the adapter's own invariants: zero initial
//! delta, merge equals adapter within 1e-6, unmerge restores bits, only
//! adapter parameters get gradients, fucina's saved adapter has PEFT's key
//! names and config fields, and a failed load changes nothing.

mod common;

use common::{f32_bits, max_abs_diff};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{no_grad, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::linear::lora::{merge_lora, unmerge_lora, ADAPTER_CONFIG, ADAPTER_WEIGHTS};
use fucina_nn::{apply_lora, load_adapter, save_adapter, BertModel, Init, LoraConfig, Module};
use serde::Deserialize;

#[path = "common/lora.rs"]
mod lora_common;

fn goldens() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/peft")
}

#[derive(Deserialize)]
struct Expected {
    ids: Vec<Vec<i64>>,
    mask: Vec<Vec<u8>>,
    shape: Vec<usize>,
    last_hidden_state: Vec<f64>,
}

fn expected() -> Expected {
    serde_json::from_str(&std::fs::read_to_string(goldens().join("expected.json")).unwrap())
        .unwrap()
}

fn base(ctx: &ExecContext) -> BertModel {
    BertModel::from_pretrained(ctx, &goldens().join("base"), DType::F32).unwrap()
}

fn forward(model: &BertModel, e: &Expected) -> Vec<f64> {
    let ctx = model.embeddings.position_ids.ctx().clone();
    let (b, t) = (e.ids.len(), e.ids[0].len());
    let ids: Vec<i64> = e.ids.iter().flatten().copied().collect();
    let mask: Vec<u8> = e.mask.iter().flatten().copied().collect();
    let ids = Tensor::constant(&ctx, &ids, &[b, t]).unwrap();
    let mask = Tensor::constant(&ctx, &mask, &[b, t]).unwrap();
    let _ng = no_grad();
    let h = model.forward(&ids, Some(&mask), None).unwrap();
    assert_eq!(h.shape(), e.shape.as_slice());
    h.to_vec_f64().unwrap()
}

fn weight_bits(model: &BertModel) -> Vec<Vec<u32>> {
    model
        .named_parameters()
        .iter()
        .filter(|(n, _)| !n.contains("lora_"))
        .map(|(_, t)| f32_bits(t))
        .collect()
}

/// Runs `test` on a fresh base model (with its adapter-free output and an
/// `Init` seeded `seed`) in a `TestCtx`, which checks when it drops that no
/// buffer is left outstanding.
fn with_base(seed: u64, test: impl FnOnce(&ExecContext, &Expected, BertModel, Vec<f64>, Init)) {
    let ctx = TestCtx::with_threads(1).unwrap();
    let e = expected();
    let model = base(&ctx);
    let plain = forward(&model, &e);
    let init = Init::new(&ctx, DType::F32, seed);
    test(&ctx, &e, model, plain, init);
}

#[test]
fn peft_adapter_loads_and_matches_peft_within_1e_5() {
    with_base(3, |_, e, mut model, plain, mut init| {
        let cfg = load_adapter(&mut model, &goldens().join("adapter"), &mut init).unwrap();
        assert_eq!((cfg.r, cfg.lora_alpha, cfg.scale()), (4, 8.0, 2.0));
        model.eval();
        let got = forward(&model, e);
        let err = max_abs_diff(&got, &e.last_hidden_state);
        println!("LoRA vs peft max abs err {err:e}");
        assert!(err <= 1e-5, "max abs err {err:e}");
        // The adapter matters: the output moved well beyond the tolerance.
        assert!(max_abs_diff(&plain, &e.last_hidden_state) > 1e-2);
        // Merged: the same output within 1e-6; unmerged: base weights bit-exact.
        let before = weight_bits(&model);
        merge_lora(&mut model).unwrap();
        assert_ne!(weight_bits(&model), before);
        let merged = forward(&model, e);
        let merr = max_abs_diff(&merged, &got);
        assert!(merr <= 1e-6, "merged vs adapter {merr:e}");
        unmerge_lora(&mut model).unwrap();
        assert_eq!(weight_bits(&model), before);
        assert_eq!(forward(&model, e), got);
    });
}

#[test]
fn fresh_adapter_has_zero_delta_and_only_adapters_get_gradients() {
    with_base(5, |ctx, e, mut model, plain, mut init| {
        let cfg = LoraConfig::new(2, 4.0, &["query", "value"]).with_dropout(0.1);
        let paths = apply_lora(&mut model, &cfg, &mut init).unwrap();
        assert_eq!(paths.len(), 4);
        assert_eq!(paths[0], "encoder.layer.0.attention.self.query");
        model.eval();
        assert_eq!(
            forward(&model, e),
            plain,
            "B = 0: the initial delta is exactly zero"
        );
        let trainable: Vec<String> = model
            .named_parameters()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(trainable.len(), 8);
        assert!(trainable
            .iter()
            .all(|n| n.contains(".lora_A.") || n.contains(".lora_B.")));
        model.train();
        let ids = Tensor::constant(ctx, &[2i64, 17, 33, 5], &[1, 4]).unwrap();
        let loss = model
            .forward(&ids, None, None)
            .unwrap()
            .square()
            .unwrap()
            .mean_all()
            .unwrap();
        loss.backward().unwrap();
        drop(loss);
        for (n, t) in model.named_parameters() {
            let adapter = n.contains("lora_");
            assert_eq!(t.grad().is_some(), adapter, "{n}");
        }
    });
}

fn json_keys(path: &Path) -> BTreeSet<String> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn saved_adapter_has_peft_key_names_and_config_fields_and_round_trips() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let e = expected();
    let out = std::env::temp_dir().join(format!("fucina-lora-save-{}", std::process::id()));
    {
        let mut model = base(&ctx);
        let mut init = Init::new(&ctx, DType::F32, 9);
        let cfg =
            LoraConfig::new(4, 8.0, &["value", "query", "intermediate.dense"]).with_dropout(0.1);
        apply_lora(&mut model, &cfg, &mut init).unwrap();
        // Make B non-zero so the round trip is observable.
        lora_common::set_lora_b(&model, |i| (i as f32 * 0.37).sin() * 0.1);
        model.eval();
        let want = forward(&model, &e);
        save_adapter(&model, &cfg, &out).unwrap();
        // Same tensor names as peft's file, same config fields as peft's config.
        let mine = fucina_autograd::SafetensorsFile::open(&out.join(ADAPTER_WEIGHTS)).unwrap();
        let peft = fucina_autograd::SafetensorsFile::open(
            &goldens().join("adapter").join(ADAPTER_WEIGHTS),
        )
        .unwrap();
        assert_eq!(
            mine.names().collect::<Vec<_>>(),
            peft.names().collect::<Vec<_>>()
        );
        for n in peft.names() {
            assert_eq!(
                mine.info(n).unwrap().shape,
                peft.info(n).unwrap().shape,
                "{n}"
            );
        }
        assert_eq!(
            json_keys(&out.join(ADAPTER_CONFIG)),
            json_keys(&goldens().join("adapter").join(ADAPTER_CONFIG))
        );
        drop((mine, peft));
        // A fresh base with the saved adapter gives the same output, bit for bit.
        let mut fresh = base(&ctx);
        let mut init = Init::new(&ctx, DType::F32, 11);
        let back = load_adapter(&mut fresh, &out, &mut init).unwrap();
        assert_eq!(back, cfg);
        fresh.eval();
        assert_eq!(forward(&fresh, &e), want);
    }
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn failed_adapter_load_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("fucina-lora-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = goldens().join("adapter");
    with_base(3, |ctx, e, mut model, plain, mut init| {
        let n_params = model.named_parameters().len();
        // An adapter file missing one tensor: strict error naming it.
        let peft = fucina_autograd::SafetensorsFile::open(&src.join(ADAPTER_WEIGHTS)).unwrap();
        let keep: Vec<(String, Tensor)> = peft
            .names()
            .filter(|n| !n.contains("layer.1.attention.self.value.lora_B"))
            .map(|n| {
                (
                    n.to_string(),
                    Tensor::from_raw(ctx, peft.read(ctx, n).unwrap(), false).unwrap(),
                )
            })
            .collect();
        drop(peft);
        fucina_autograd::save_state_dict(&dir.join(ADAPTER_WEIGHTS), &keep, &Default::default())
            .unwrap();
        drop(keep);
        std::fs::copy(src.join(ADAPTER_CONFIG), dir.join(ADAPTER_CONFIG)).unwrap();
        let err = load_adapter(&mut model, &dir, &mut init)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("layer.1.attention.self.value.lora_B.weight")
                && err.contains(ADAPTER_WEIGHTS),
            "{err}"
        );
        assert_eq!(
            model.named_parameters().len(),
            n_params,
            "adapters removed again"
        );
        assert!(model
            .named_parameters()
            .iter()
            .all(|(_, t)| t.requires_grad()));
        assert_eq!(forward(&model, e), plain);
        // A config fucina does not implement names the file and field.
        let edit = ("\"use_dora\": false", "\"use_dora\": true");
        let err = lora_common::edited_config_error(&mut model, &mut init, &src, &dir, edit);
        assert!(
            err.contains(ADAPTER_CONFIG) && err.contains("use_dora"),
            "{err}"
        );
        assert_eq!(model.named_parameters().len(), n_params);
    });
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn lora_applies_to_any_module_by_path_gpt() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let cfg = fucina_nn::GptConfig {
            vocab_size: 13,
            block_size: 8,
            n_layer: 2,
            n_head: 2,
            n_embd: 8,
            dropout: 0.0,
            bias: true,
            tied_head: true,
            ln_eps: 1e-5,
            init_std: 0.02,
            residual_scaling: true,
        };
        let mut init = Init::new(&ctx, DType::F32, 4);
        let mut gpt = fucina_nn::Gpt::new(&mut init, &cfg).unwrap();
        let idx = Tensor::constant(&ctx, &[1i64, 4, 2, 7], &[1, 4]).unwrap();
        let before = gpt.forward(&idx).unwrap().to_vec::<f32>().unwrap();
        let paths = apply_lora(&mut gpt, &LoraConfig::new(2, 2.0, &["qkv"]), &mut init).unwrap();
        assert_eq!(paths.len(), 2, "{paths:?}");
        assert!(paths.iter().all(|p| p.ends_with(".qkv")));
        assert_eq!(gpt.forward(&idx).unwrap().to_vec::<f32>().unwrap(), before);
        // Nothing matches: an error, nothing attached.
        let err = apply_lora(&mut gpt, &LoraConfig::new(2, 2.0, &["nope"]), &mut init).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        // A second adapter on the same layer is refused.
        assert!(apply_lora(&mut gpt, &LoraConfig::new(2, 2.0, &["qkv"]), &mut init).is_err());
        assert_eq!(fucina_nn::linear::lora::remove_lora(&mut gpt).unwrap(), 2);
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn unmerge_after_new_base_weights_keeps_them_and_takes_out_the_delta() {
    use fucina_nn::linear::lora::{LoraAdapter, LoraInit};
    use fucina_nn::{Init, Linear};
    let ctx = ExecContext::with_threads(1).unwrap();
    let mut init = Init::new(&ctx, fucina_core::DType::F64, 3);
    let mut lin = Linear::new(&mut init, 3, 2, false).unwrap();
    let ad = LoraAdapter::new(&mut init, 3, 2, 1, 0.5, 0.0, LoraInit::Default).unwrap();
    // A non-zero B, so the delta 0.5·B·A is not zero.
    ad.lora_b
        .weight
        .set_value(ctx.from_slice(&[1.0f64, -2.0], &[2, 1]).unwrap())
        .unwrap();
    let a = ad.lora_a.weight.to_vec::<f64>().unwrap();
    lin.lora = Some(ad);
    let original = lin.weight.to_vec::<f64>().unwrap();
    // Unchanged while merged: the restore is bit-exact.
    lin.merge_lora().unwrap();
    lin.unmerge_lora().unwrap();
    assert_eq!(lin.weight.to_vec::<f64>().unwrap(), original);
    // New base weights while merged (a reload): unmerge keeps them.
    lin.merge_lora().unwrap();
    let merged = lin.weight.to_vec::<f64>().unwrap();
    let new_base = [10.0f64, 11.0, 12.0, 13.0, 14.0, 15.0];
    let delta: Vec<f64> = (0..6)
        .map(|i| 0.5 * [1.0, -2.0][i / 3] * a[i % 3])
        .collect();
    let replaced: Vec<f64> = new_base.iter().zip(&delta).map(|(w, d)| w + d).collect();
    lin.weight
        .set_value(ctx.from_slice(&replaced, &[2, 3]).unwrap())
        .unwrap();
    lin.unmerge_lora().unwrap();
    let got = lin.weight.to_vec::<f64>().unwrap();
    assert_ne!(got, original, "unmerge restored the stale pre-merge copy");
    for (g, w) in got.iter().zip(&new_base) {
        assert!((g - w).abs() < 1e-12, "{got:?} vs {new_base:?}");
    }
    assert!(!lin.lora.as_ref().unwrap().is_merged());
    assert!(lin.unmerge_lora().is_err());
    drop(merged);
}
