//! The `llama` and `llama-lora` training workloads of
//! `reference/torch_workloads.py`, on fucina-nn's [`CausalLm`]: a
//! Llama/SmolLM-style decoder (vocab 8192, width 384, 6 layers, 6 query
//! heads sharing 2 key/value heads, SwiGLU 1024, RMSNorm eps 1e-5, RoPE θ
//! 10⁴, tied embeddings, N(0, 0.02) init), a batch of 4 × 256 token ids
//! with uniform random targets, cross-entropy over every position.
//!
//! `llama`: AdamW(lr 3e-4, weight decay 0.1) over every parameter.
//! `llama-lora`: the base frozen, LoRA r 8, alpha 16 on q/k/v/o/gate/up/down
//! (A kaiming-uniform, B zero, as PEFT), AdamW(lr 1e-3, no decay) over the
//! adapters only. Ids from a seeded SplitMix64 (torch's generator differs;
//! shapes and distributions are the same).

use std::path::Path;

use fucina::Result;
use fucina_autograd::{CrossEntropyOpts, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::hf::DecoderConfig;
use fucina_nn::models::decoder::names::LLAMA_BLOCK_LINEARS;
use fucina_nn::{apply_lora, CausalLm, Init, LoraConfig, Module};
use fucina_optim::AdamW;

use super::train::{adamw, random_ids, train_step};

/// Batch size.
pub const BATCH: usize = 4;
/// Sequence length.
pub const SEQ: usize = 256;

/// The reference's `LLAMA_CFG` as a `config.json`.
pub fn config() -> Result<DecoderConfig> {
    let v = serde_json::json!({
        "model_type": "llama", "vocab_size": 8192, "hidden_size": 384, "num_hidden_layers": 6,
        "num_attention_heads": 6, "num_key_value_heads": 2, "intermediate_size": 1024,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
        "max_position_embeddings": SEQ, "initializer_range": 0.02
    });
    Ok(DecoderConfig::from_json(Path::new("llama workload"), &v)?)
}

/// A Llama train step with its data and optimizer.
pub struct LlamaTrain {
    ctx: ExecContext,
    model: CausalLm,
    idx: Tensor,
    tgt: Tensor,
    opt: AdamW,
    /// The base frozen under rank-8 adapters.
    lora: bool,
}

impl LlamaTrain {
    /// The workload; `lora` freezes the base and trains r-8 adapters.
    pub fn workload(ctx: &ExecContext, lora: bool) -> Result<LlamaTrain> {
        Self::build(ctx, lora, false)
    }

    /// `llama-lora-bf16`: `llama-lora` with the frozen base matrices stored
    /// in bf16 (widened inside the GEMM's packing; adapters, norms and
    /// activations f32). Not in the torch reference: for the memory
    /// benchmark against `llama-lora`.
    pub fn lora_bf16(ctx: &ExecContext) -> Result<LlamaTrain> {
        Self::build(ctx, true, true)
    }

    fn build(ctx: &ExecContext, lora: bool, bf16_base: bool) -> Result<LlamaTrain> {
        let cfg = config()?;
        let mut model = CausalLm::new(ctx, &cfg, DType::F32, 0)?;
        model.train();
        let opt = if lora {
            model.freeze("");
            apply_lora(
                &mut model,
                &LoraConfig::new(8, 16.0, &LLAMA_BLOCK_LINEARS),
                &mut Init::new(ctx, DType::F32, 1),
            )?;
            if bf16_base {
                model.store_frozen_weights(DType::BF16)?;
                // The f32 matrices' blocks go back to the system, not to later activations.
                ctx.pool().trim();
            }
            adamw(model.trainable_parameters(), 1e-3, 0.0)?
        } else {
            adamw(model.parameters(), 3e-4, 0.1)?
        };
        let (idx, tgt) = random_ids(BATCH * SEQ, cfg.vocab_size);
        Ok(LlamaTrain {
            ctx: ctx.clone(),
            model,
            idx: Tensor::constant(ctx, &idx, &[BATCH, SEQ])?,
            tgt: Tensor::constant(ctx, &tgt, &[BATCH * SEQ])?,
            opt,
            lora,
        })
    }

    /// One step: zero_grad + forward + cross-entropy + backward + AdamW step.
    pub fn train_step(&mut self) -> Result<f64> {
        let (model, idx, tgt) = (&self.model, &self.idx, &self.tgt);
        let v = model.config.vocab_size as isize;
        train_step(&self.ctx, &mut self.opt, || {
            let logits = model.forward(idx, None)?.reshape([-1, v])?;
            Ok(logits.cross_entropy(tgt, CrossEntropyOpts::default())?)
        })
    }
}

impl crate::Workload for LlamaTrain {
    fn step(&mut self) -> Result<()> {
        self.train_step().map(|_| ())
    }
    fn shape(&self) -> Option<crate::mfu::TransformerShape> {
        let c = &self.model.config;
        Some(crate::mfu::TransformerShape {
            batch: BATCH,
            seq: SEQ,
            layers: c.num_layers,
            d_model: c.hidden_size,
            heads: c.num_heads,
            kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            ffn: c.intermediate_size,
            mlp_matrices: 3,
            vocab: c.vocab_size,
            causal: true,
            lora_rank: self.lora.then_some(8),
        })
    }
}
