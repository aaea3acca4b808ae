//! The model families: a nanoGPT-layout [`Gpt`], Hugging Face's
//! [`BertModel`], and the Hugging Face decoder LLMs (GPT-2, Llama, Qwen2,
//! Qwen3) as one [`CausalLm`]. What every Hugging Face family shares (config
//! parsing, checkpoints, tokenizer, `save_pretrained`) lives in `crate::hf`.

pub mod bert;
pub mod decoder;
pub mod gpt;

pub use bert::{mean_pool, BertConfig, BertModel};
pub use decoder::CausalLm;
pub use gpt::{Gpt, GptConfig};
