//! The decoder fixtures of `fucina-nn/tests/fixtures/hf/` (made by
//! `tools/gen_hf_decoder_fixtures.py`): a family's directory, and its model
//! loaded in f32.

use std::path::{Path, PathBuf};

use fucina_core::{DType, ExecContext};
use fucina_nn::CausalLm;

/// The fixture directory of `family` (`llama`, `qwen2`, `gpt2`, …).
pub fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(family)
}

/// The fixture model of `family` in f32.
pub fn f32_lm(ctx: &ExecContext, family: &str) -> CausalLm {
    CausalLm::from_pretrained(ctx, &fixture(family), DType::F32).unwrap()
}
