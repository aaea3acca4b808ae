//! The model families, one file each: a nanoGPT-layout [`Gpt`] and Hugging
//! Face's [`BertModel`]. What every Hugging Face family shares (config
//! parsing, checkpoints, tokenizer, `save_pretrained`) lives in `crate::hf`.

pub mod bert;
pub mod gpt;

pub use bert::{mean_pool, BertConfig, BertModel};
pub use gpt::{Gpt, GptConfig};
