//! PEFT LoRA on the decoder families, both ways, on the llama, qwen2 and
//! qwen3 fixtures (`tools/gen_peft_decoder_goldens.py`):
//! - an adapter saved by `peft` (`<fam>/peft_adapter/`, non-zero B) loads
//!   into fucina's `CausalLm` and gives transformers + peft's logits within
//!   1e-5;
//! - the adapter fucina saved (`<fam>/fucina_adapter/`, written by the
//!   ignored `write_fucina_adapters` below) loads in `PeftModel.from_pretrained`
//!   with logits within 1e-5 of fucina's; a fresh save today writes the same
//!   tensors bit for bit, so the committed file is what fucina writes.

use std::path::{Path, PathBuf};

use fucina_autograd::io::SafetensorsFile;
use fucina_autograd::{no_grad, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::{apply_lora, load_adapter, save_adapter, CausalLm, Init, LoraConfig, Module};

const FAMILIES: [&str; 3] = ["llama", "qwen2", "qwen3"];
const TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

fn fixture(fam: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(fam)
}

fn goldens(fam: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/goldens/peft_decoders")
        .join(fam)
}

/// `name` of the family's goldens as f64, with its shape.
fn golden(ctx: &ExecContext, fam: &str, name: &str) -> (Vec<f64>, Vec<usize>) {
    let f = SafetensorsFile::open(&goldens(fam).join("logits.safetensors")).unwrap();
    let t = f.read_as(ctx, name, DType::F64).unwrap();
    (ctx.to_vec::<f64>(&t).unwrap(), t.shape().to_vec())
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
    let ctx = ExecContext::with_threads(1).unwrap();
    for fam in FAMILIES {
        let mut lm = CausalLm::from_pretrained(&ctx, &fixture(fam), DType::F32).unwrap();
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
    assert_eq!(ctx.stats().outstanding, 0);
}

/// A fucina adapter on `fam`: LoRA r 4, alpha 8 on the seven projections,
/// A from fucina's init (seed 3), B set to a fixed non-zero pattern.
fn fucina_adapter(ctx: &ExecContext, fam: &str) -> (CausalLm, LoraConfig) {
    let mut lm = CausalLm::from_pretrained(ctx, &fixture(fam), DType::F32).unwrap();
    let cfg = LoraConfig::new(4, 8.0, &TARGETS);
    apply_lora(&mut lm, &cfg, &mut Init::new(ctx, DType::F32, 3)).unwrap();
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
    lm.eval();
    (lm, cfg)
}

#[test]
#[ignore = "writes tests/goldens/peft_decoders/<fam>/fucina_adapter for tools/gen_peft_decoder_goldens.py"]
fn write_fucina_adapters() {
    let ctx = ExecContext::with_threads(1).unwrap();
    for fam in FAMILIES {
        let (lm, cfg) = fucina_adapter(&ctx, fam);
        save_adapter(&lm, &cfg, &goldens(fam).join("fucina_adapter")).unwrap();
    }
}

#[test]
fn fucina_adapters_load_in_peft() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let tmp = std::env::temp_dir().join(format!("fucina-peft-dec-{}", std::process::id()));
    for fam in FAMILIES {
        let (lm, cfg) = fucina_adapter(&ctx, fam);
        // Today's save writes the committed tensors, bit for bit.
        let dir = tmp.join(fam);
        save_adapter(&lm, &cfg, &dir).unwrap();
        let fresh = SafetensorsFile::open(&dir.join("adapter_model.safetensors")).unwrap();
        let committed =
            SafetensorsFile::open(&goldens(fam).join("fucina_adapter/adapter_model.safetensors"))
                .unwrap();
        assert_eq!(fresh.len(), committed.len(), "{fam}");
        for name in committed.names() {
            let a = ctx
                .to_vec::<f32>(&committed.read_as(&ctx, name, DType::F32).unwrap())
                .unwrap();
            let b = ctx
                .to_vec::<f32>(&fresh.read_as(&ctx, name, DType::F32).unwrap())
                .unwrap();
            assert_eq!(
                committed.info(name).unwrap().shape,
                fresh.info(name).unwrap().shape,
                "{fam}: {name}"
            );
            assert!(
                a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{fam}: {name} differs from the committed adapter"
            );
        }
        // What peft computed with fucina's adapter.
        let (ids, mask, m) = batch(&ctx, fam);
        let (want, shape) = golden(&ctx, fam, "fucina_logits");
        let d = max_diff(&logits(&lm, &ids, &mask), &want, &m, shape[2]);
        assert!(d < 1e-5, "{fam}: fucina adapter in peft, max diff {d}");
    }
    std::fs::remove_dir_all(&tmp).ok();
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn bad_adapters_are_clear_errors() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let mut lm = CausalLm::from_pretrained(&ctx, &fixture("llama"), DType::F32).unwrap();
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
    }
    assert_eq!(ctx.stats().outstanding, 0);
}
