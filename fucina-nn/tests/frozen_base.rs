//! LoRA on a frozen bf16 base (`CausalLm::store_frozen_weights`,
//! `CausalLm::from_pretrained_frozen`) on the decoder fixtures of
//! `fucina-nn/tests/fixtures/hf/` (llama: untied, GQA; qwen2: tied head, qkv
//! biases; gpt2: tied, learned positions, Conv1D). A LoRA forward/backward on
//! the bf16 base gives logits, loss and adapter gradients **bitwise** equal to
//! the same step on the f32 model whose matrices were first rounded to bf16:
//! widening is exact, the mixed GEMM is bitwise the widened one, and every
//! other op sees the same f32 values. Frozen parameters get no gradient; a
//! bf16 checkpoint loads straight into bf16 buffers (the load's peak stays
//! below the f32 size); merging rounds once and unmerging restores the bits;
//! bad dtypes are errors. Every test ends with no pool buffer outstanding.

mod common;

use common::fixtures::{f32_lm, fixture};
use fucina_autograd::io::{save_state_dict, SaveOptions};
use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext};
use fucina_nn::linear::lora::{apply_lora, merge_lora, unmerge_lora, LoraConfig};
use fucina_nn::models::decoder::names::{GPT2_BLOCK_LINEARS, LLAMA_BLOCK_LINEARS};
use fucina_nn::{CausalLm, Init, Module};

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Rounds every 2-D base matrix of `lm` to bf16 and back, in place (the f32
/// reference of a bf16 base).
fn round_matrices_to_bf16(lm: &CausalLm) {
    let ctx = lm.ctx();
    for (name, t) in lm.named_parameters() {
        if t.rank() == 2 && !name.contains("lora_") {
            let r = ctx.to_dtype(&t.raw().unwrap(), DType::BF16).unwrap();
            t.set_value(ctx.to_dtype(&r, DType::F32).unwrap()).unwrap();
        }
    }
}

/// The targets of the decoder families (GPT-2's fused `c_attn`, the others'
/// projections), all of each block's linears.
fn lora_config(family: &str) -> LoraConfig {
    let targets: &[&str] = if family == "gpt2" {
        &GPT2_BLOCK_LINEARS
    } else {
        &LLAMA_BLOCK_LINEARS
    };
    LoraConfig::new(4, 8.0, targets)
}

/// Applies LoRA with a fixed seed and gives every `lora_B` deterministic
/// non-zero values (PEFT starts it at zero, which would leave A's gradient 0).
fn adapt(lm: &mut CausalLm, family: &str) {
    let mut init = Init::new(lm.ctx(), DType::F32, 11);
    apply_lora(lm, &lora_config(family), &mut init).unwrap();
    let mut rng = SplitMix64::new(5);
    for (name, t) in lm.named_parameters() {
        if name.contains("lora_B.") {
            let v: Vec<f32> = rng
                .vec_uniform(t.numel(), -0.1, 0.1)
                .into_iter()
                .map(|x| x as f32)
                .collect();
            t.set_value(lm.ctx().from_slice(&v, t.shape()).unwrap())
                .unwrap();
        }
    }
}

/// One LoRA step's observables: logits and loss bits, and each adapter
/// parameter's gradient bits by name.
type Step = (Vec<u64>, Vec<u64>, Vec<(String, Vec<u64>)>);

fn lora_step(lm: &CausalLm, ids: &Tensor) -> Step {
    lm.train();
    let logits = lm.forward(ids, None).unwrap();
    let loss = lm.loss(&logits, ids).unwrap();
    loss.backward().unwrap();
    let mut grads = Vec::new();
    for (name, t) in lm.named_parameters() {
        if t.requires_grad() {
            assert!(name.contains("lora_"), "`{name}` is trainable");
            let g = t
                .grad()
                .unwrap_or_else(|| panic!("`{name}` has no gradient"));
            grads.push((name, bits(&g)));
        } else {
            assert!(t.grad().is_none(), "frozen `{name}` holds a gradient");
        }
    }
    (bits(&logits), bits(&loss), grads)
}

/// The bf16 base against the f32 model with bf16-rounded matrices: bitwise
/// the same logits, loss and adapter gradients, on 1 and 2 threads; the
/// loaded-frozen model (`from_pretrained_frozen`) holds the same weights.
#[test]
fn lora_step_on_a_bf16_base_equals_the_rounded_f32_model() {
    for family in ["llama", "qwen2", "gpt2"] {
        for threads in [1, 2] {
            let ctx = ExecContext::with_threads(threads).unwrap();
            let dir = fixture(family);
            let ids: Vec<i64> = (0..2 * 12).map(|i| (i * 37 % 97) as i64).collect();
            let ids = Tensor::constant(&ctx, &ids, &[2, 12]).unwrap();

            let mut reference = CausalLm::from_pretrained(&ctx, &dir, DType::F32).unwrap();
            round_matrices_to_bf16(&reference);
            adapt(&mut reference, family);
            let want = lora_step(&reference, &ids);

            let mut low = CausalLm::from_pretrained(&ctx, &dir, DType::F32).unwrap();
            adapt(&mut low, family);
            let converted = low.store_frozen_weights(DType::BF16).unwrap();
            assert!(converted > 0);
            assert_eq!(
                (low.dtype(), low.storage_dtype()),
                (DType::F32, DType::BF16)
            );
            for (name, t) in low.named_parameters() {
                let want_dt = if t.rank() == 2 && !name.contains("lora_") {
                    DType::BF16
                } else {
                    DType::F32
                };
                assert_eq!(t.dtype(), want_dt, "{family}: `{name}`");
            }
            let got = lora_step(&low, &ids);
            let what = format!("{family}, {threads} threads");
            assert!(got.0 == want.0, "{what}: logits differ");
            assert!(got.1 == want.1, "{what}: loss differs");
            assert_eq!(got.2.len(), want.2.len(), "{what}");
            for ((n, g), (n2, w)) in got.2.iter().zip(&want.2) {
                assert_eq!(n, n2);
                assert!(g == w, "{what}: gradient of `{n}` differs");
            }

            // Loaded frozen: the same bf16 matrices as the converted model.
            let loaded =
                CausalLm::from_pretrained_frozen(&ctx, &dir, DType::F32, DType::BF16).unwrap();
            let low_params = low.named_parameters();
            for (name, t) in loaded.named_parameters() {
                let (_, u) = low_params.iter().find(|(n, _)| *n == name).unwrap();
                assert_eq!(t.dtype(), u.dtype(), "{family}: `{name}`");
                assert_eq!(t.requires_grad(), t.rank() != 2, "{family}: `{name}`");
                assert!(bits(&t) == bits(u), "{family}: `{name}` differs");
            }
            drop((reference, low, loaded, low_params, ids));
            assert_eq!(ctx.stats().outstanding, 0, "{what}");
        }
    }
}

/// A bf16 checkpoint is read straight into bf16 buffers: the pool's peak
/// while loading stays under 60 % of the model's f32 size, the weights are
/// the file's bits, and the frozen matrices are bf16.
#[test]
fn a_bf16_checkpoint_loads_without_an_f32_copy() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let src = fixture("llama");
    let lm = CausalLm::from_pretrained(&ctx, &src, DType::F32).unwrap();
    let f32_bytes: usize = lm.parameters().iter().map(|t| t.numel() * 4).sum();
    let dir = std::env::temp_dir().join(format!("fucina-frozen-bf16-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "generation_config.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let opts = SaveOptions {
        float_dtype: Some(DType::BF16),
        ..Default::default()
    };
    save_state_dict(
        &dir.join("model.safetensors"),
        &lm.checkpoint_tensors().unwrap(),
        &opts,
    )
    .unwrap();
    let want: Vec<(String, Vec<u64>)> = lm
        .named_parameters()
        .into_iter()
        .map(|(n, t)| {
            let r = ctx.to_dtype(&t.raw().unwrap(), DType::BF16).unwrap();
            (n, bits(&Tensor::from_raw(&ctx, r, false).unwrap()))
        })
        .collect();
    drop(lm);
    assert_eq!(ctx.stats().outstanding, 0);
    ctx.pool().reset_peak();
    let loaded = CausalLm::from_pretrained_frozen(&ctx, &dir, DType::F32, DType::BF16).unwrap();
    let peak = ctx.stats().peak_live_bytes;
    assert!(
        (peak as f64) < 0.6 * f32_bytes as f64,
        "peak {peak} B while loading, the f32 model is {f32_bytes} B"
    );
    for ((name, t), (n2, w)) in loaded.named_parameters().into_iter().zip(&want) {
        assert_eq!(&name, n2);
        let dt = if t.rank() == 2 {
            DType::BF16
        } else {
            DType::F32
        };
        assert_eq!(t.dtype(), dt, "`{name}`");
        assert!(&bits(&t) == w, "`{name}` is not the file's bf16 value");
    }
    drop(loaded);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Merging into a bf16 weight is `round_bf16(widen(W) + scale·B·A)`; the
/// merged model's logits are those of the f32 model with the merged,
/// rounded weights; unmerging restores every weight bit for bit.
#[test]
fn merging_into_a_bf16_base_rounds_once_and_unmerges_exactly() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut lm = f32_lm(&ctx, "llama");
    adapt(&mut lm, "llama");
    lm.store_frozen_weights(DType::BF16).unwrap();
    lm.eval();
    let before: Vec<(String, Vec<u64>)> = lm
        .named_parameters()
        .into_iter()
        .map(|(n, t)| (n, bits(&t)))
        .collect();
    let q = &lm.layers[0].attn.q_proj.as_ref().unwrap();
    let expected = {
        let l = q.lora.as_ref().unwrap();
        let _ng = fucina_autograd::no_grad();
        let delta = l
            .lora_b
            .weight
            .matmul(&l.lora_a.weight)
            .unwrap()
            .mul_scalar(l.scale)
            .unwrap();
        let w = ctx.to_dtype(&q.weight.raw().unwrap(), DType::F32).unwrap();
        let w = Tensor::from_raw(&ctx, w, false).unwrap();
        let sum = w.add(&delta).unwrap().raw().unwrap();
        bits(&Tensor::from_raw(&ctx, ctx.to_dtype(&sum, DType::BF16).unwrap(), false).unwrap())
    };
    merge_lora(&mut lm).unwrap();
    let q = &lm.layers[0].attn.q_proj.as_ref().unwrap();
    assert_eq!(q.weight.dtype(), DType::BF16);
    assert!(bits(&q.weight) == expected, "merged q_proj");
    // store_frozen_weights refuses a merged model (its saved originals).
    assert!(lm.store_frozen_weights(DType::BF16).is_err());
    unmerge_lora(&mut lm).unwrap();
    for ((n, t), (n2, b)) in lm.named_parameters().into_iter().zip(&before) {
        assert_eq!(&n, n2);
        assert!(&bits(&t) == b, "`{n}` not restored");
    }
    drop((lm, before));
}

/// Bad dtypes are errors naming what is wrong; nothing is half converted.
#[test]
fn bad_storage_dtypes_are_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let dir = fixture("llama");
    let msg = |e: fucina_nn::Error| e.to_string();
    let e = CausalLm::from_pretrained_frozen(&ctx, &dir, DType::BF16, DType::BF16).unwrap_err();
    assert!(msg(e).contains("compute dtype"));
    let e = CausalLm::from_pretrained_frozen(&ctx, &dir, DType::F32, DType::I32).unwrap_err();
    assert!(msg(e).contains("i32"));
    let mut lm = CausalLm::from_pretrained(&ctx, &dir, DType::F32).unwrap();
    assert!(lm.store_frozen_weights(DType::U8).is_err());
    assert!(lm.parameters().iter().all(|t| t.dtype() == DType::F32));
    // Adapters are made in the compute dtype, never the storage dtype.
    lm.store_frozen_weights(DType::BF16).unwrap();
    let mut init = Init::new(&ctx, DType::BF16, 0);
    let e = apply_lora(&mut lm, &lora_config("llama"), &mut init).unwrap_err();
    assert!(msg(e).contains("compute dtype"));
    let mut init = Init::new(&ctx, DType::F32, 0);
    apply_lora(&mut lm, &lora_config("llama"), &mut init).unwrap();
    for (name, t) in lm.named_parameters() {
        if name.contains("lora_") {
            assert_eq!(t.dtype(), DType::F32, "`{name}`");
        }
    }
    drop(lm);
}
