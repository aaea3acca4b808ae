//! Shared code of the fucina examples: the error every example reports,
//! character-level text data, the GPT training run behind `train_gpt`
//! (a library function so a test can run it at a tiny size), the decoder-LLM
//! fine-tuning run behind `finetune_llm` (the same), the pictures,
//! and process memory.

pub mod chardata;
pub mod error;
pub mod gpt_train;
pub mod llm_finetune;
pub mod minilm;
pub mod plot;
pub mod sys;

pub use error::{exit_on_error, Error, Result};
