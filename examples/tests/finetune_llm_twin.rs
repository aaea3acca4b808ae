//! `finetune_llm`'s training step against its PyTorch + peft twin
//! (`tools/finetune_llm_torch.py golden`): 20 LoRA steps on the tiny Llama
//! fixture from the same weights, the same initial adapter (PEFT's files)
//! and the same batches (prompt-masked, right-padded), with the same AdamW,
//! warmup + cosine schedule and clipping: every loss within 1e-3 relative
//! of torch's, bitwise the same for 1 and 2 threads, no pool buffer left.

use std::path::{Path, PathBuf};

use fucina_autograd::io::SafetensorsFile;
use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_examples::llm_step::{optimizer, train_step};
use fucina_nn::{load_adapter, CausalLm, Init};
use fucina_train::causal::CausalBatch;

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/finetune_llm")
}

/// fucina's 20 losses on `threads` threads.
fn run(threads: usize) -> Vec<f32> {
    let ctx = ExecContext::with_threads(threads).unwrap();
    let losses = {
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../fucina-nn/tests/fixtures/hf/llama");
        let mut lm = CausalLm::from_pretrained(&ctx, &fixture, DType::F32).unwrap();
        let cfg = load_adapter(
            &mut lm,
            &golden().join("adapter_init"),
            &mut Init::new(&ctx, DType::F32, 0),
        )
        .unwrap();
        assert_eq!((cfg.r, cfg.lora_alpha), (4, 8.0));
        let run: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(golden().join("run.json")).unwrap())
                .unwrap();
        let f = |k: &str| run[k].as_f64().unwrap();
        let mut opt = optimizer(
            &lm,
            f("lr"),
            f("weight_decay"),
            run["warmup"].as_u64().unwrap(),
            run["total"].as_u64().unwrap(),
            f("min_lr_frac"),
        )
        .unwrap();
        let file = SafetensorsFile::open(&golden().join("batches.safetensors")).unwrap();
        let read = |k: &str| file.read(&ctx, k).unwrap().to_vec::<i64>().unwrap();
        let (ids, labels, mask) = (read("input_ids"), read("labels"), read("attention_mask"));
        let shape = file.info("input_ids").unwrap().shape.clone();
        let (steps, b, t) = (shape[0], shape[1], shape[2]);
        let mut losses = Vec::new();
        for s in 0..steps {
            let r = s * b * t..(s + 1) * b * t;
            let mask_u8: Vec<u8> = mask[r.clone()].iter().map(|&m| m as u8).collect();
            let batch = CausalBatch {
                input_ids: Tensor::constant(&ctx, &ids[r.clone()], &[b, t]).unwrap(),
                labels: Tensor::constant(&ctx, &labels[r], &[b, t]).unwrap(),
                attention_mask: Tensor::constant(&ctx, &mask_u8, &[b, t]).unwrap(),
            };
            losses.push(train_step(&lm, &mut opt, &batch, f("grad_clip")).unwrap());
        }
        losses
    };
    assert_eq!(
        ctx.stats().outstanding,
        0,
        "pool buffers left after the run"
    );
    losses
}

#[test]
fn twenty_lora_steps_match_torch_and_peft() {
    let torch: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(golden().join("torch.json")).unwrap())
            .unwrap();
    let want: Vec<f64> = torch["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(want.len(), 20);
    let ours = run(1);
    assert_eq!(ours.len(), want.len());
    let mut worst = 0.0f64;
    for (i, (&a, &w)) in ours.iter().zip(&want).enumerate() {
        let rel = (a as f64 - w).abs() / w.abs();
        worst = worst.max(rel);
        assert!(
            rel < 1e-3,
            "step {}: fucina {a} torch {w} (rel {rel:.2e})",
            i + 1
        );
    }
    eprintln!("largest relative loss difference to torch + peft over 20 steps: {worst:.2e}");
    // The run moved the adapters: later losses differ from the first batch's scale.
    assert!(ours.windows(2).any(|w| w[0] != w[1]));
    let two = run(2);
    assert_eq!(ours, two, "1 and 2 threads differ");
}
