//! A LoRA training step (forward, backward, AdamW step) on a frozen bf16 base
//! against the same step on an f32 base, on a decoder with the llama
//! fixture's layout (`fucina-nn/tests/fixtures/hf/llama`: RMSNorm, gated
//! SiLU MLP, GQA, llama3 RoPE) scaled up so the weights dominate (hidden
//! 256, 4 layers, MLP 512, vocab 2000; LoRA r = 8 on every projection; one
//! sequence of 8 tokens): the bf16 step's peak live pool bytes (resident
//! weights included) are at most 0.6× the f32 step's (measured 0.57: 9.1 MB
//! against 15.9 MB); frozen parameters hold
//! no gradient and the optimizer (over `trainable_parameters`) has state for
//! the adapters only; one given frozen parameters refuses them
//! (`NotTrainable`). Lives here because it needs fucina-nn and fucina-optim,
//! which share a layer. Every context ends with no pool buffer outstanding.

use std::path::Path;

use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_nn::hf::DecoderConfig;
use fucina_nn::linear::lora::{apply_lora, LoraConfig};
use fucina_nn::models::decoder::names::LLAMA_BLOCK_LINEARS;
use fucina_nn::{CausalLm, Init, Module};
use fucina_optim::{AdamConfig, AdamW, Error as OptimError, Optimizer};

/// The llama fixture's config with hidden 256 (4 heads of 64, 2 KV heads),
/// MLP 512, 4 layers, vocab 2000.
fn config() -> DecoderConfig {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fucina-nn/tests/fixtures/hf/llama/config.json");
    let mut c = DecoderConfig::from_file(&path).unwrap();
    c.hidden_size = 256;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.intermediate_size = 512;
    c.num_layers = 4;
    c.vocab_size = 2000;
    c.validate().unwrap();
    c
}

/// What one step reports: the peak live pool bytes over the step, and the
/// pool's live bytes before it (the resident model).
struct StepReport {
    peak: usize,
    resident: usize,
}

/// Builds the model (f32, or f32 then its base matrices stored as `storage`),
/// attaches LoRA, and runs one forward + backward + AdamW step, checking
/// gradients and optimizer state on the way.
fn lora_step(storage: DType) -> StepReport {
    let ctx = ExecContext::with_threads(2).unwrap();
    let report = {
        let cfg = config();
        let mut lm = CausalLm::new(&ctx, &cfg, DType::F32, 7).unwrap();
        let mut init = Init::new(&ctx, DType::F32, 1);
        apply_lora(
            &mut lm,
            &LoraConfig::new(8, 16.0, &LLAMA_BLOCK_LINEARS),
            &mut init,
        )
        .unwrap();
        if storage != DType::F32 {
            assert!(lm.store_frozen_weights(storage).unwrap() > 0);
        }
        // An optimizer over every parameter refuses the frozen ones by name.
        match AdamW::single(lm.parameters(), AdamConfig::adamw(1e-3)) {
            Err(OptimError::NotTrainable { .. }) => {}
            other => panic!("expected NotTrainable, got {other:?}"),
        }
        let trainable = lm.trainable_parameters();
        assert!(trainable.iter().all(|t| t.dtype() == DType::F32));
        let mut opt = AdamW::single(trainable.clone(), AdamConfig::adamw(1e-3)).unwrap();
        // One sequence of 8 tokens: the weights dominate (at [2, 16] the
        // activations, ~4 MB, are as large as the bf16 weights and the ratio
        // measured 0.65; at [1, 8] 0.57).
        let ids: Vec<i64> = (0..8).map(|i| (i * 131 % 2000) as i64).collect();
        let ids = Tensor::constant(&ctx, &ids, &[1, 8]).unwrap();

        // Drop the cached blocks first: the f32 matrices `store_frozen_weights`
        // freed sit in the pool's cache, and its first-fit reuse would hand a
        // 32 KiB activation a 128 KiB block (live bytes count the block).
        ctx.pool().trim();
        ctx.pool().reset_peak();
        let resident = ctx.stats().live_bytes;
        lm.train();
        let logits = lm.forward(&ids, None).unwrap();
        let loss = lm.loss(&logits, &ids).unwrap();
        drop(logits);
        loss.backward().unwrap();
        drop(loss);
        opt.step().unwrap();
        let peak = ctx.stats().peak_live_bytes;

        for (name, t) in lm.named_parameters() {
            if t.requires_grad() {
                assert!(name.contains("lora_"), "`{name}` is trainable");
                assert!(t.grad().is_some(), "`{name}` has no gradient");
            } else {
                assert!(t.grad().is_none(), "frozen `{name}` holds a gradient");
                assert!(
                    !opt.groups()[0].params.iter().any(|p| p.same_as(&t)),
                    "frozen `{name}` is in the optimizer"
                );
                if t.rank() == 2 {
                    assert_eq!(t.dtype(), storage, "`{name}`");
                }
            }
        }
        // State for exactly the adapters, each stepped once.
        assert_eq!(opt.groups()[0].params.len(), trainable.len());
        for i in 0..trainable.len() {
            let st = opt.param_state(0, i).unwrap();
            assert_eq!(st.step, 1);
            assert!(!st.bufs.is_empty());
        }
        assert!(opt.param_state(0, trainable.len()).is_none());
        StepReport { peak, resident }
    };
    assert_eq!(ctx.stats().outstanding, 0);
    report
}

#[test]
fn a_bf16_base_step_peaks_at_most_0_6_of_the_f32_one() {
    let full = lora_step(DType::F32);
    let low = lora_step(DType::BF16);
    eprintln!(
        "LoRA step peak live bytes: f32 base {} (resident {}), bf16 base {} (resident {}): {:.3}x",
        full.peak,
        full.resident,
        low.peak,
        low.resident,
        low.peak as f64 / full.peak as f64
    );
    assert!(
        (low.peak as f64) <= 0.6 * full.peak as f64,
        "bf16 base peak {} B vs f32 base {} B",
        low.peak,
        full.peak
    );
}
