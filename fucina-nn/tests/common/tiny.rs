//! The tiny model configs several tests build (no download): a BERT of
//! vocabulary 11, 8 wide with 2 heads, a 12-wide MLP, 8 positions and
//! dropout 0.1; a GPT of vocabulary 13, block 8, 2 layers, 2 heads, 16 wide.
#![allow(dead_code)] // each test binary uses its own part

use fucina_nn::{Activation, BertConfig, GptConfig};

/// The tiny BERT with `layers` layers.
pub fn tiny_bert(layers: usize) -> BertConfig {
    BertConfig {
        vocab_size: 11,
        hidden_size: 8,
        num_hidden_layers: layers,
        num_attention_heads: 2,
        intermediate_size: 12,
        hidden_act: Activation::Gelu,
        hidden_dropout_prob: 0.1,
        attention_probs_dropout_prob: 0.1,
        max_position_embeddings: 8,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        position_embedding_type: "absolute".into(),
        initializer_range: 0.5,
    }
}

/// The tiny GPT.
pub fn tiny_gpt() -> GptConfig {
    GptConfig {
        vocab_size: 13,
        block_size: 8,
        n_layer: 2,
        n_head: 2,
        n_embd: 16,
        ..GptConfig::default()
    }
}
