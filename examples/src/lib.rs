//! Shared code of the fucina examples: the error every example reports,
//! character-level text data, the character models and the training run
//! behind `train_gpt` (a library function so a test can run it at a tiny
//! size) with its Hugging Face export, the decoder-LLM fine-tuning run
//! behind `finetune_llm` (the same) with what the two runs share, the
//! pictures, and process memory.

pub mod char_lm;
pub mod chardata;
pub mod error;
pub mod gpt_args;
pub mod gpt_train;
pub mod hf_export;
pub mod llm_args;
pub mod llm_finetune;
pub mod llm_step;
pub mod minilm;
pub mod plot;
pub mod resume;
pub mod run;
pub mod second_order;
pub mod sys;

pub use error::{exit_on_error, Error, Result};
