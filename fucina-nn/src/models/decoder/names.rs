//! The checkpoint's own parameter names, per family: one [`Names`] table
//! each, read by the decoder's module visits (so `named_parameters` gives
//! exactly the keys of the family's `model.safetensors`), by the builder
//! that loads them, and by `save_pretrained`. Also which stored tensors are
//! GPT-2 `Conv1D` weights (`[in, out]`, transposed at load and save) and
//! which keys of old checkpoints are buffers the decoder recomputes, and
//! the leaf names of each family's block linears (LoRA target lists).

use crate::hf::ModelType;

/// Where each parameter sits in a family's checkpoint.
#[derive(Debug, PartialEq, Eq)]
pub struct Names {
    /// The token embedding (`model.embed_tokens`, `transformer.wte`).
    pub embed: &'static str,
    /// The learned position table (`transformer.wpe`; unused with RoPE).
    pub positions: &'static str,
    /// The list of layers (`model.layers`, `transformer.h`).
    pub layers: &'static str,
    /// The final norm (`model.norm`, `transformer.ln_f`).
    pub final_norm: &'static str,
    /// The untied head.
    pub head: &'static str,
    /// A layer's attention (`self_attn`, `attn`).
    pub attn: &'static str,
    /// The norm before attention (`input_layernorm`, `ln_1`).
    pub attn_norm: &'static str,
    /// The norm before the MLP (`post_attention_layernorm`, `ln_2`).
    pub mlp_norm: &'static str,
    /// A layer's MLP.
    pub mlp: &'static str,
    /// The fused q/k/v projection (GPT-2's `c_attn`).
    pub qkv: &'static str,
    /// Separate projections.
    pub q: &'static str,
    /// Key projection.
    pub k: &'static str,
    /// Value projection.
    pub v: &'static str,
    /// Attention output projection.
    pub o: &'static str,
    /// Qwen3's per-head norms of q and k.
    pub q_norm: &'static str,
    /// Key norm.
    pub k_norm: &'static str,
    /// Gated MLP's gate.
    pub gate: &'static str,
    /// MLP up-projection (`up_proj`, `c_fc`).
    pub up: &'static str,
    /// MLP down-projection (`down_proj`, `c_proj`).
    pub down: &'static str,
}

/// GPT-2's names (`GPT2LMHeadModel`).
pub static GPT2: Names = Names {
    embed: "transformer.wte",
    positions: "transformer.wpe",
    layers: "transformer.h",
    final_norm: "transformer.ln_f",
    head: "lm_head",
    attn: "attn",
    attn_norm: "ln_1",
    mlp_norm: "ln_2",
    mlp: "mlp",
    qkv: "c_attn",
    q: "q_proj",
    k: "k_proj",
    v: "v_proj",
    o: "c_proj",
    q_norm: "q_norm",
    k_norm: "k_norm",
    gate: "gate_proj",
    up: "c_fc",
    down: "c_proj",
};

/// Llama's names, shared by Mistral, Qwen2 and Qwen3.
pub static LLAMA: Names = Names {
    embed: "model.embed_tokens",
    positions: "model.embed_positions",
    layers: "model.layers",
    final_norm: "model.norm",
    head: "lm_head",
    attn: "self_attn",
    attn_norm: "input_layernorm",
    mlp_norm: "post_attention_layernorm",
    mlp: "mlp",
    qkv: "qkv_proj",
    q: "q_proj",
    k: "k_proj",
    v: "v_proj",
    o: "o_proj",
    q_norm: "q_norm",
    k_norm: "k_norm",
    gate: "gate_proj",
    up: "up_proj",
    down: "down_proj",
};

/// GPT-2's block linears (`attn.c_attn`, `attn.c_proj`, `mlp.c_fc`,
/// `mlp.c_proj`) by leaf name: a LoRA target list that adapts them all.
pub const GPT2_BLOCK_LINEARS: [&str; 3] = ["c_attn", "c_proj", "c_fc"];

/// The Llama-layout block linears (attention's four projections, then the
/// gated MLP's three) by leaf name: a LoRA target list that adapts them all.
pub const LLAMA_BLOCK_LINEARS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// The names of a family.
pub fn names_of(model_type: ModelType) -> &'static Names {
    match model_type {
        ModelType::Gpt2 => &GPT2,
        _ => &LLAMA,
    }
}

/// True when the checkpoint stores `name` as a GPT-2 `Conv1D` weight,
/// `[in, out]` (the decoder keeps every projection as `[out, in]`).
pub fn is_conv1d(model_type: ModelType, name: &str) -> bool {
    model_type == ModelType::Gpt2
        && name.starts_with("transformer.h.")
        && [
            ".attn.c_attn.weight",
            ".attn.c_proj.weight",
            ".mlp.c_fc.weight",
            ".mlp.c_proj.weight",
        ]
        .iter()
        .any(|s| name.ends_with(s))
}

/// True for keys older checkpoints carry that are buffers, not parameters,
/// and that the decoder recomputes: GPT-2's causal-mask `attn.bias` and
/// `attn.masked_bias`, Llama's `rotary_emb.inv_freq`.
pub fn is_recomputed_buffer(model_type: ModelType, name: &str) -> bool {
    match model_type {
        ModelType::Gpt2 => name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"),
        _ => name.ends_with(".rotary_emb.inv_freq"),
    }
}
