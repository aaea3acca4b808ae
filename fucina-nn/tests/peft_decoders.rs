//! PEFT LoRA on the decoder families, both ways, on the llama, qwen2 and
//! qwen3 fixtures (`tools/gen_peft_decoder_goldens.py`):
//! - an adapter saved by `peft` (`<fam>/peft_adapter/`, non-zero B) loads
//!   into fucina's `CausalLm` and gives transformers + peft's logits within
//!   1e-5;
//! - the adapter fucina saved (`<fam>/fucina_adapter/`, written by the
//!   ignored `write_fucina_adapters` below) loads in `PeftModel.from_pretrained`
//!   with logits within 1e-5 of fucina's; a fresh save today writes the same
//!   tensors bit for bit, so the committed file is what fucina writes;
//! - the same both ways for each config case (`cases()`, the script's
//!   `CASES`): a regex target with a regex exclude, `"all-linear"` with an
//!   excluded list, `use_rslora`, `init_lora_weights = "gaussian"` and
//!   `modules_to_save = ["lm_head"]` on qwen2's tied head;
//! - the init modes' draws, a saved module's round trip and rollback, and
//!   every bad config as a clear error that leaves the model unchanged.

mod common;

#[path = "common/lora.rs"]
mod lora_common;

use std::path::{Path, PathBuf};

use common::fixtures::f32_lm;
use fucina_autograd::io::SafetensorsFile;
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{no_grad, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::linear::lora::{remove_lora, LoraAdapter};
use fucina_nn::models::decoder::names::LLAMA_BLOCK_LINEARS;
use fucina_nn::{
    apply_lora, load_adapter, save_adapter, CausalLm, Init, InitLoraWeights, Linear, LoraConfig,
    Module, TargetModules,
};

const FAMILIES: [&str; 3] = ["llama", "qwen2", "qwen3"];
const TARGETS: [&str; 7] = LLAMA_BLOCK_LINEARS;

fn goldens(fam: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/goldens/peft_decoders")
        .join(fam)
}

/// `name` of the family's goldens as f64, with its shape.
fn golden(ctx: &ExecContext, fam: &str, name: &str) -> (Vec<f64>, Vec<usize>) {
    golden_in(ctx, &goldens(fam), name)
}

/// `name` of `dir/logits.safetensors` as f64, with its shape.
fn golden_in(ctx: &ExecContext, dir: &Path, name: &str) -> (Vec<f64>, Vec<usize>) {
    let f = SafetensorsFile::open(&dir.join("logits.safetensors")).unwrap();
    let t = f.read_as(ctx, name, DType::F64).unwrap();
    (ctx.to_vec::<f64>(&t).unwrap(), t.shape().to_vec())
}

/// A config case's goldens.
fn case_dir(name: &str) -> PathBuf {
    goldens("cases").join(name)
}

fn pat(p: &str) -> TargetModules {
    TargetModules::Pattern(p.to_string())
}

/// The config cases of `tools/gen_peft_decoder_goldens.py` (its `CASES`):
/// name, family, config (r 4, alpha 8 as there).
fn cases() -> Vec<(&'static str, &'static str, LoraConfig)> {
    vec![
        (
            "regex",
            "llama",
            LoraConfig::with_targets(4, 8.0, pat(r".*\.(q|v|down)_proj"))
                .with_exclude(pat(r".*\.layers\.0\.self_attn\..*")),
        ),
        (
            "all_linear",
            "qwen3",
            LoraConfig::with_targets(4, 8.0, pat("all-linear"))
                .with_exclude(TargetModules::names(&["o_proj"])),
        ),
        (
            "rslora",
            "qwen2",
            LoraConfig::new(4, 8.0, &TARGETS).with_rslora(true),
        ),
        (
            "gaussian",
            "llama",
            LoraConfig::new(4, 8.0, &["q_proj", "up_proj"])
                .with_init(InitLoraWeights::Name("gaussian".into())),
        ),
        (
            "modules_to_save",
            "qwen2",
            LoraConfig::new(4, 8.0, &["q_proj", "v_proj"]).with_modules_to_save(&["lm_head"]),
        ),
    ]
}

/// The adapted paths of a model, in visit order.
fn adapted(lm: &CausalLm) -> Vec<String> {
    let mut out = Vec::new();
    fucina_nn::module::for_each(lm, |p: &str, l: &Linear| {
        if l.lora.is_some() {
            out.push(p.to_string());
        }
    });
    out
}

/// The paths each case adapts (PEFT's rules on these fixtures).
fn expected_targets(name: &str) -> Vec<String> {
    let l = |i: usize, m: &str| format!("model.layers.{i}.{m}");
    match name {
        "regex" => vec![
            l(0, "mlp.down_proj"),
            l(1, "self_attn.q_proj"),
            l(1, "self_attn.v_proj"),
            l(1, "mlp.down_proj"),
        ],
        "all_linear" => (0..2)
            .flat_map(|i| {
                [
                    "self_attn.q_proj",
                    "self_attn.k_proj",
                    "self_attn.v_proj",
                    "mlp.gate_proj",
                    "mlp.up_proj",
                    "mlp.down_proj",
                ]
                .map(|m| l(i, m))
            })
            .collect(),
        "rslora" => (0..2)
            .flat_map(|i| {
                [
                    "self_attn.q_proj",
                    "self_attn.k_proj",
                    "self_attn.v_proj",
                    "self_attn.o_proj",
                    "mlp.gate_proj",
                    "mlp.up_proj",
                    "mlp.down_proj",
                ]
                .map(|m| l(i, m))
            })
            .collect(),
        "gaussian" => (0..2)
            .flat_map(|i| ["self_attn.q_proj", "mlp.up_proj"].map(|m| l(i, m)))
            .collect(),
        "modules_to_save" => (0..2)
            .flat_map(|i| ["self_attn.q_proj", "self_attn.v_proj"].map(|m| l(i, m)))
            .collect(),
        other => panic!("no case {other}"),
    }
}

/// Every linear but the head, sorted: what `"all-linear"` expands to.
fn all_linear_expansion(lm: &CausalLm) -> TargetModules {
    let mut out = Vec::new();
    fucina_nn::module::for_each(lm, |p: &str, _: &Linear| {
        if p != "lm_head" {
            out.push(p.to_string());
        }
    });
    out.sort();
    TargetModules::Names(out)
}

/// Sets every `lora_B` to a fixed non-zero pattern (B starts at zero).
fn pattern_b(lm: &CausalLm) {
    for (k, (name, t)) in lm.named_parameters().into_iter().enumerate() {
        if name.contains("lora_B.") {
            t.update_value(|v| {
                for (i, x) in v.as_mut_slice::<f32>()?.iter_mut().enumerate() {
                    *x = 0.2 * ((i * 7 + k * 13) as f32 * 0.37).sin();
                }
                Ok::<(), fucina_nn::Error>(())
            })
            .unwrap();
        }
    }
}

fn batch(ctx: &ExecContext, fam: &str) -> (Tensor, Tensor, Vec<u8>) {
    let f = SafetensorsFile::open(&goldens(fam).join("logits.safetensors")).unwrap();
    let ids = f.read_as(ctx, "ids", DType::I64).unwrap();
    let mask = f.read_as(ctx, "mask", DType::U8).unwrap();
    let m = ctx.to_vec::<u8>(&mask).unwrap();
    (
        Tensor::from_raw(ctx, ids, false).unwrap(),
        Tensor::from_raw(ctx, mask, false).unwrap(),
        m,
    )
}

/// The largest difference over the real (unmasked) positions.
fn max_diff(a: &[f64], b: &[f64], mask: &[u8], vocab: usize) -> f64 {
    let mut m = 0.0f64;
    for (p, &keep) in mask.iter().enumerate() {
        if keep == 1 {
            for v in 0..vocab {
                m = m.max((a[p * vocab + v] - b[p * vocab + v]).abs());
            }
        }
    }
    m
}

fn logits(lm: &CausalLm, ids: &Tensor, mask: &Tensor) -> Vec<f64> {
    let _ng = no_grad();
    lm.forward(ids, Some(mask)).unwrap().to_vec_f64().unwrap()
}

#[test]
fn peft_adapters_load_into_fucina() {
    let ctx = TestCtx::with_threads(1).unwrap();
    for fam in FAMILIES {
        let mut lm = f32_lm(&ctx, fam);
        let (ids, mask, m) = batch(&ctx, fam);
        let (base, shape) = golden(&ctx, fam, "base_logits");
        let vocab = shape[2];
        assert!(
            max_diff(&logits(&lm, &ids, &mask), &base, &m, vocab) < 1e-5,
            "{fam}: base"
        );
        let cfg = load_adapter(
            &mut lm,
            &goldens(fam).join("peft_adapter"),
            &mut Init::new(&ctx, DType::F32, 0),
        )
        .unwrap();
        assert_eq!(cfg.r, 4);
        lm.eval();
        let (want, _) = golden(&ctx, fam, "peft_logits");
        let got = logits(&lm, &ids, &mask);
        let d = max_diff(&got, &want, &m, vocab);
        assert!(d < 1e-5, "{fam}: peft adapter, max diff {d}");
        // The adapter matters: it moves the logits well past the bound.
        assert!(
            max_diff(&got, &base, &m, vocab) > 1e-3,
            "{fam}: the adapter changed nothing"
        );
    }
}

/// A fucina adapter on `fam`: LoRA r 4, alpha 8 on the seven projections,
/// A from fucina's init (seed 3), B set to a fixed non-zero pattern.
fn fucina_adapter(ctx: &ExecContext, fam: &str) -> (CausalLm, LoraConfig) {
    let mut lm = f32_lm(ctx, fam);
    let cfg = LoraConfig::new(4, 8.0, &TARGETS);
    apply_lora(&mut lm, &cfg, &mut Init::new(ctx, DType::F32, 3)).unwrap();
    pattern_b(&lm);
    lm.eval();
    (lm, cfg)
}

/// A fucina adapter for a config case: applied with seed 3, B patterned as
/// above, a saved module's copy perturbed; checks what was adapted, that a
/// fresh adapter's delta is as `init_lora_weights` says, and what trains.
fn fucina_case_adapter(ctx: &ExecContext, name: &str, fam: &str, cfg: &LoraConfig) -> CausalLm {
    let mut lm = f32_lm(ctx, fam);
    if cfg.modules_to_save.is_some() {
        assert!(lm.untie_lm_head().unwrap(), "{name}: qwen2's head is tied");
    }
    let paths = apply_lora(&mut lm, cfg, &mut Init::new(ctx, DType::F32, 3)).unwrap();
    assert_eq!(paths, expected_targets(name), "{name}");
    assert_eq!(adapted(&lm), paths, "{name}");
    let r = cfg.r as f64;
    let scale = if cfg.use_rslora {
        8.0 / r.sqrt()
    } else {
        8.0 / r
    };
    fucina_nn::module::for_each(&lm, |p: &str, l: &Linear| {
        if let Some(a) = &l.lora {
            assert_eq!(a.scale, scale, "{name}: {p}");
        }
    });
    let params = lm.named_parameters();
    // B starts at zero, A as the init says: sum(a²) / sum(var) near 1, with
    // var = 1/r² (gaussian) or 1/(3·in) (uniform on ±1/√in).
    assert!(params
        .iter()
        .filter(|(n, _)| n.contains("lora_B."))
        .all(|(_, t)| t.to_vec_f64().unwrap().iter().all(|&x| x == 0.0)));
    let (mut sq, mut var) = (0.0f64, 0.0f64);
    for (_, t) in params.iter().filter(|(n, _)| n.contains("lora_A.")) {
        let v = t.to_vec_f64().unwrap();
        sq += v.iter().map(|x| x * x).sum::<f64>();
        let each = if name == "gaussian" {
            1.0 / (r * r)
        } else {
            1.0 / (3.0 * t.shape()[1] as f64)
        };
        var += each * v.len() as f64;
    }
    assert!(
        (sq / var - 1.0).abs() < 0.15,
        "{name}: A's variance ratio {}",
        sq / var
    );
    // Only the adapters and the saved module train.
    for (n, t) in &params {
        let trains =
            n.contains("lora_") || (cfg.modules_to_save.is_some() && n == "lm_head.weight");
        assert_eq!(t.requires_grad(), trains, "{name}: {n}");
    }
    pattern_b(&lm);
    if let Some(head) = &lm.lm_head {
        if cfg.modules_to_save.is_some() {
            head.weight
                .update_value(|v| {
                    for (i, x) in v.as_mut_slice::<f32>()?.iter_mut().enumerate() {
                        *x += 0.05 * (i as f32 * 0.13).sin();
                    }
                    Ok::<(), fucina_nn::Error>(())
                })
                .unwrap();
        }
    }
    lm.eval();
    lm
}

#[test]
#[ignore = "writes tests/goldens/peft_decoders/<fam>/fucina_adapter for tools/gen_peft_decoder_goldens.py"]
fn write_fucina_adapters() {
    let ctx = ExecContext::with_threads(1).unwrap();
    for fam in FAMILIES {
        let (lm, cfg) = fucina_adapter(&ctx, fam);
        save_adapter(&lm, &cfg, &goldens(fam).join("fucina_adapter")).unwrap();
    }
    for (name, fam, cfg) in cases() {
        let lm = fucina_case_adapter(&ctx, name, fam, &cfg);
        save_adapter(&lm, &cfg, &case_dir(name).join("fucina_adapter")).unwrap();
    }
}

/// `lm`'s logits on `fam`'s batch are, within 1e-5, what peft computed
/// with fucina's adapter (`fucina_logits` of `dir`).
fn peft_ran_fucina_adapter(ctx: &ExecContext, lm: &CausalLm, fam: &str, dir: &Path, what: &str) {
    let (ids, mask, m) = batch(ctx, fam);
    let (want, shape) = golden_in(ctx, dir, "fucina_logits");
    let d = max_diff(&logits(lm, &ids, &mask), &want, &m, shape[2]);
    assert!(d < 1e-5, "{what}: fucina adapter in peft, max diff {d}");
}

/// Every tensor of `fresh` equals the committed file's, bit for bit.
fn same_tensors(ctx: &ExecContext, fresh: &Path, committed: &Path, what: &str) {
    let fresh = SafetensorsFile::open(&fresh.join("adapter_model.safetensors")).unwrap();
    let committed = SafetensorsFile::open(&committed.join("adapter_model.safetensors")).unwrap();
    assert_eq!(fresh.len(), committed.len(), "{what}");
    for name in committed.names() {
        let a = ctx
            .to_vec::<f32>(&committed.read_as(ctx, name, DType::F32).unwrap())
            .unwrap();
        let b = ctx
            .to_vec::<f32>(&fresh.read_as(ctx, name, DType::F32).unwrap())
            .unwrap();
        assert_eq!(
            committed.info(name).unwrap().shape,
            fresh.info(name).unwrap().shape,
            "{what}: {name}"
        );
        assert!(
            a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{what}: {name} differs from the committed adapter"
        );
    }
}

#[test]
fn peft_case_adapters_load_into_fucina() {
    let ctx = TestCtx::with_threads(1).unwrap();
    for (name, fam, want_cfg) in cases() {
        let mut lm = f32_lm(&ctx, fam);
        let dir = case_dir(name).join("peft_adapter");
        let mut init = Init::new(&ctx, DType::F32, 0);
        if want_cfg.modules_to_save.is_some() {
            // The tied head has no module to copy until it is untied.
            let e = load_adapter(&mut lm, &dir, &mut init)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("modules_to_save `lm_head`") && e.contains("untie_lm_head"),
                "{e}"
            );
            assert!(adapted(&lm).is_empty());
            assert!(lm.untie_lm_head().unwrap());
        }
        let cfg = load_adapter(&mut lm, &dir, &mut init).unwrap();
        assert_eq!(
            (cfg.use_rslora, &cfg.init_lora_weights, &cfg.modules_to_save),
            (
                want_cfg.use_rslora,
                &want_cfg.init_lora_weights,
                &want_cfg.modules_to_save
            ),
            "{name}"
        );
        let mut got_targets = adapted(&lm);
        let mut want = expected_targets(name);
        got_targets.sort();
        want.sort();
        assert_eq!(got_targets, want, "{name}");
        if name == "all_linear" {
            // PEFT writes the list it expanded "all-linear" to (before the exclusion).
            assert_eq!(cfg.target_modules, all_linear_expansion(&lm));
        }
        lm.eval();
        let (ids, mask, m) = batch(&ctx, fam);
        let (want, shape) = golden_in(&ctx, &case_dir(name), "peft_logits");
        let (base, _) = golden(&ctx, fam, "base_logits");
        let got = logits(&lm, &ids, &mask);
        let d = max_diff(&got, &want, &m, shape[2]);
        assert!(d < 1e-5, "{name}: peft adapter, max diff {d}");
        assert!(
            max_diff(&got, &base, &m, shape[2]) > 1e-3,
            "{name}: the adapter changed nothing"
        );
    }
}

#[test]
fn fucina_case_adapters_load_in_peft() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let tmp = std::env::temp_dir().join(format!("fucina-peft-cases-{}", std::process::id()));
    for (name, fam, cfg) in cases() {
        let lm = fucina_case_adapter(&ctx, name, fam, &cfg);
        let dir = tmp.join(name);
        save_adapter(&lm, &cfg, &dir).unwrap();
        let committed = case_dir(name).join("fucina_adapter");
        same_tensors(&ctx, &dir, &committed, name);
        // The saved config is what PEFT reads back: "all-linear" as its list.
        let saved = LoraConfig::from_file(&dir.join("adapter_config.json")).unwrap();
        if name == "all_linear" {
            assert_eq!(saved.target_modules, all_linear_expansion(&lm));
            assert_eq!(saved.exclude_modules, cfg.exclude_modules);
        } else {
            assert_eq!(saved, cfg, "{name}");
        }
        if cfg.modules_to_save.is_some() {
            let f = SafetensorsFile::open(&dir.join("adapter_model.safetensors")).unwrap();
            assert!(
                f.names().any(|n| n == "base_model.model.lm_head.weight"),
                "{name}"
            );
        }
        peft_ran_fucina_adapter(&ctx, &lm, fam, &case_dir(name), name);
    }
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn init_false_draws_both_matrices() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        // PEFT resets neither: both keep nn.Linear's kaiming-uniform, B on ±1/√r.
        let cfg = LoraConfig::new(4, 8.0, &["q_proj"]).with_init(InitLoraWeights::Bool(false));
        let mut lm = f32_lm(&ctx, "llama");
        let (ids, mask, _) = batch(&ctx, "llama");
        let before = logits(&lm, &ids, &mask);
        apply_lora(&mut lm, &cfg, &mut Init::new(&ctx, DType::F32, 5)).unwrap();
        let b: Vec<f64> = lm
            .named_parameters()
            .iter()
            .filter(|(n, _)| n.contains("lora_B."))
            .flat_map(|(_, t)| t.to_vec_f64().unwrap())
            .collect();
        assert!(b.iter().all(|x| x.abs() <= 0.5) && b.iter().any(|&x| x != 0.0));
        let std = (b.iter().map(|x| x * x).sum::<f64>() / b.len() as f64).sqrt();
        assert!(
            (std / (0.5 / 3f64.sqrt()) - 1.0).abs() < 0.1,
            "B's std {std}"
        );
        assert_ne!(logits(&lm, &ids, &mask), before, "a non-zero initial delta");
        // Same seed, same draws.
        let mut again = f32_lm(&ctx, "llama");
        apply_lora(&mut again, &cfg, &mut Init::new(&ctx, DType::F32, 5)).unwrap();
        assert_eq!(logits(&again, &ids, &mask), logits(&lm, &ids, &mask));
        // The adapter's own constructor agrees.
        let mut init = Init::new(&ctx, DType::F32, 1);
        let ad = LoraAdapter::new(
            &mut init,
            3,
            2,
            2,
            1.0,
            0.0,
            fucina_nn::linear::lora::LoraInit::Random,
        )
        .unwrap();
        assert!(ad
            .lora_b
            .weight
            .to_vec_f64()
            .unwrap()
            .iter()
            .any(|&x| x != 0.0));
    }
}

#[test]
fn saved_module_round_trips_and_rolls_back() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let tmp = std::env::temp_dir().join(format!("fucina-peft-mts-{}", std::process::id()));
    {
        // llama's head is untied: the copy replaces lm_head.weight, the original is frozen and kept.
        let cfg = LoraConfig::new(4, 8.0, &["q_proj"]).with_modules_to_save(&["lm_head"]);
        let mut lm = f32_lm(&ctx, "llama");
        let original = lm.lm_head.as_ref().unwrap().weight.clone();
        let base_bits = original.to_vec::<f32>().unwrap();
        apply_lora(&mut lm, &cfg, &mut Init::new(&ctx, DType::F32, 3)).unwrap();
        let copy = lm.lm_head.as_ref().unwrap().weight.clone();
        assert!(!copy.same_as(&original) && copy.requires_grad() && !original.requires_grad());
        assert!(!lm.embed_tokens.weight.requires_grad());
        copy.update_value(|v| {
            v.as_mut_slice::<f32>()?[0] += 1.0;
            Ok::<(), fucina_nn::Error>(())
        })
        .unwrap();
        assert_eq!(
            original.to_vec::<f32>().unwrap(),
            base_bits,
            "the original is untouched"
        );
        pattern_b(&lm);
        lm.eval();
        let (ids, mask, _) = batch(&ctx, "llama");
        let want = logits(&lm, &ids, &mask);
        save_adapter(&lm, &cfg, &tmp).unwrap();
        let f = SafetensorsFile::open(&tmp.join("adapter_model.safetensors")).unwrap();
        let mut names: Vec<&str> = f.names().collect();
        names.sort();
        assert_eq!(
            names,
            [
                "base_model.model.lm_head.weight",
                "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
                "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight",
                "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight",
            ]
        );
        drop(f);
        let mut fresh = f32_lm(&ctx, "llama");
        assert_eq!(
            load_adapter(&mut fresh, &tmp, &mut Init::new(&ctx, DType::F32, 0)).unwrap(),
            cfg
        );
        fresh.eval();
        assert_eq!(logits(&fresh, &ids, &mask), want, "bit for bit");
        // remove_lora keeps the trained copy (PEFT's unload).
        assert_eq!(remove_lora(&mut lm).unwrap(), 2);
        assert!(lm.lm_head.as_ref().unwrap().weight.same_as(&copy));

        // A file without the saved module's tensor: the strict load names it
        // and puts the original parameter back.
        let bad = tmp.join("bad");
        std::fs::create_dir_all(&bad).unwrap();
        let src = goldens("llama").join("peft_adapter");
        std::fs::copy(
            src.join("adapter_model.safetensors"),
            bad.join("adapter_model.safetensors"),
        )
        .unwrap();
        let text = std::fs::read_to_string(src.join("adapter_config.json")).unwrap();
        std::fs::write(
            bad.join("adapter_config.json"),
            text.replace(
                "\"modules_to_save\": null",
                "\"modules_to_save\": [\"lm_head\"]",
            ),
        )
        .unwrap();
        let mut lm = f32_lm(&ctx, "llama");
        let head = lm.lm_head.as_ref().unwrap().weight.clone();
        let flags: Vec<bool> = lm.parameters().iter().map(|t| t.requires_grad()).collect();
        let e = load_adapter(&mut lm, &bad, &mut Init::new(&ctx, DType::F32, 0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("base_model.model.lm_head.weight"), "{e}");
        assert!(lm.lm_head.as_ref().unwrap().weight.same_as(&head));
        assert!(adapted(&lm).is_empty());
        let after: Vec<bool> = lm.parameters().iter().map(|t| t.requires_grad()).collect();
        assert_eq!(after, flags);
    }
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn fucina_adapters_load_in_peft() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let tmp = std::env::temp_dir().join(format!("fucina-peft-dec-{}", std::process::id()));
    for fam in FAMILIES {
        let (lm, cfg) = fucina_adapter(&ctx, fam);
        // Today's save writes the committed tensors, bit for bit.
        let dir = tmp.join(fam);
        save_adapter(&lm, &cfg, &dir).unwrap();
        same_tensors(&ctx, &dir, &goldens(fam).join("fucina_adapter"), fam);
        peft_ran_fucina_adapter(&ctx, &lm, fam, &goldens(fam), fam);
    }
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn bad_adapters_are_clear_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let mut lm = f32_lm(&ctx, "llama");
        let mut init = Init::new(&ctx, DType::F32, 0);
        // Nothing matches: the error lists what exists.
        let e = apply_lora(&mut lm, &LoraConfig::new(4, 8.0, &["query"]), &mut init)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"query\"") && e.contains("q_proj") && e.contains("down_proj"),
            "{e}"
        );
        // r = 0.
        let e = apply_lora(&mut lm, &LoraConfig::new(0, 8.0, &["q_proj"]), &mut init)
            .unwrap_err()
            .to_string();
        assert!(e.contains("r must be positive"), "{e}");
        // An adapter made for another base (qwen3's head width): the key and both shapes.
        let e = load_adapter(&mut lm, &goldens("qwen3").join("peft_adapter"), &mut init)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("adapter_model.safetensors")
                && e.contains("q_proj.lora_A.weight`: file has F32 [4, 32], model has f32 [4, 64]"),
            "{e}"
        );
        // Nothing was left attached.
        assert!(lm
            .named_parameters()
            .iter()
            .all(|(n, _)| !n.contains("lora_")));
        let err = |cfg: LoraConfig, lm: &mut CausalLm, init: &mut Init| {
            let e = apply_lora(lm, &cfg, init).unwrap_err().to_string();
            assert!(adapted(lm).is_empty(), "{e}");
            assert!(lm.parameters().iter().all(|t| t.requires_grad()), "{e}");
            e
        };
        // Each bad config and what its error must name.
        let cases: [(LoraConfig, &[&str]); 7] = [
            // A regex that matches nothing lists the linears' full paths.
            (
                LoraConfig::with_targets(4, 8.0, pat("nothing.*")),
                &["\"nothing.*\"", "model.layers.1.mlp.down_proj"],
            ),
            // An invalid regex names its field.
            (
                LoraConfig::with_targets(4, 8.0, pat("(q_proj")),
                &["target_modules", "not a valid regular expression"],
            ),
            (
                LoraConfig::new(4, 8.0, &["q_proj"]).with_exclude(pat("[q")),
                &["exclude_modules", "not a valid regular expression"],
            ),
            // Everything excluded.
            (
                LoraConfig::with_targets(4, 8.0, pat(".*")).with_exclude(pat(".*")),
                &["every module was excluded"],
            ),
            // A target that is not a linear layer (PEFT: "not supported").
            (
                LoraConfig::with_targets(4, 8.0, pat(r"model\.layers\.0\.mlp")),
                &["`model.layers.0.mlp`", "not a linear layer"],
            ),
            // A modules_to_save entry that names nothing.
            (
                LoraConfig::new(4, 8.0, &["q_proj"]).with_modules_to_save(&["score"]),
                &["modules_to_save `score` matches no module"],
            ),
            // An init PEFT has but fucina does not (it rewrites the base weights).
            (
                LoraConfig::new(4, 8.0, &["q_proj"])
                    .with_init(InitLoraWeights::Name("pissa".into())),
                &["init_lora_weights `pissa`"],
            ),
        ];
        for (cfg, names) in cases {
            let e = err(cfg, &mut lm, &mut init);
            assert!(names.iter().all(|n| e.contains(n)), "{e}");
        }
        // On a tied model, saving the embedding whole would move the head too.
        {
            let mut tied = f32_lm(&ctx, "qwen2");
            let cfg = LoraConfig::new(4, 8.0, &["q_proj"]).with_modules_to_save(&["embed_tokens"]);
            let e = err(cfg.clone(), &mut tied, &mut init);
            assert!(
                e.contains("`model.embed_tokens`") && e.contains("untie_lm_head"),
                "{e}"
            );
            // Untied, the embedding trains on its copy and the head keeps the original.
            let (ids, mask, _) = batch(&ctx, "qwen2");
            let before = logits(&tied, &ids, &mask);
            assert!(tied.untie_lm_head().unwrap() && !tied.untie_lm_head().unwrap());
            assert_eq!(
                logits(&tied, &ids, &mask),
                before,
                "untying changes no logit"
            );
            let embed = tied.embed_tokens.weight.clone();
            apply_lora(&mut tied, &cfg, &mut init).unwrap();
            let head = &tied.lm_head.as_ref().unwrap().weight;
            assert!(
                !tied.embed_tokens.weight.same_as(&embed)
                    && tied.embed_tokens.weight.requires_grad()
            );
            assert!(!head.requires_grad() && !head.same_as(&tied.embed_tokens.weight));
        }
        // r = 0 through a file names the file.
        let dir = std::env::temp_dir().join(format!("fucina-peft-r0-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = goldens("llama").join("peft_adapter");
        let edit = ("\"r\": 4", "\"r\": 0");
        let e = lora_common::edited_config_error(&mut lm, &mut init, &src, &dir, edit);
        assert!(
            e.contains("adapter_config.json") && e.contains("r must be positive"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
        assert!(adapted(&lm).is_empty());
    }
}
