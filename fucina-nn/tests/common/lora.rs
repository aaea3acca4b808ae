//! The LoRA tests' shared steps: giving every adapter's B a fixed non-zero
//! value, so that an adapter's delta (and its round trip) is observable, and
//! loading an adapter whose config was edited to something invalid.
#![allow(dead_code)] // each test binary uses its own part

use std::path::Path;

use fucina_core::Element;
use fucina_nn::linear::lora::ADAPTER_CONFIG;
use fucina_nn::{load_adapter, Init, Module};

/// Sets every `lora_B` parameter of `model` to `value(i)` at flat index `i`.
pub fn set_lora_b<T: Element>(model: &impl Module, value: impl Fn(usize) -> T) {
    for (n, t) in model.named_parameters() {
        if n.contains("lora_B") {
            let v: Vec<T> = (0..t.numel()).map(&value).collect();
            t.set_value(t.ctx().from_slice(&v, t.shape()).unwrap())
                .unwrap();
        }
    }
}

/// `load_adapter`'s error (as text) for `dir`, holding `src`'s adapter
/// config with `edit.0` replaced by `edit.1`.
pub fn edited_config_error(
    model: &mut impl Module,
    init: &mut Init,
    src: &Path,
    dir: &Path,
    edit: (&str, &str),
) -> String {
    let text = std::fs::read_to_string(src.join(ADAPTER_CONFIG)).unwrap();
    std::fs::write(dir.join(ADAPTER_CONFIG), text.replace(edit.0, edit.1)).unwrap();
    load_adapter(model, dir, init).unwrap_err().to_string()
}
