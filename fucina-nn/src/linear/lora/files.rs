//! PEFT's adapter files: `adapter_model.safetensors` (every adapter tensor
//! and every `modules_to_save` parameter under PEFT's saved key names) and
//! `adapter_config.json`, written atomically and read strictly.
//!
//! Invariant: a failed [`load_adapter`] leaves the model as it found it (no
//! adapter attached, original parameters back, `requires_grad` restored).

use std::path::Path;

use fucina_autograd::io::{self as sdio, LoadOptions, SaveOptions};
use fucina_autograd::Tensor;

use super::{
    all_linear_paths, apply, saved_paths, under, LoraConfig, TargetModules, ADAPTER_CONFIG,
    ADAPTER_WEIGHTS, PEFT_PREFIX,
};
use crate::error::{Error, Result};
use crate::init::Init;
use crate::module::Module;

/// The adapter tensors of `model` under PEFT's key names: every
/// `lora_A`/`lora_B` weight (`base_model.model.<path>.lora_A.weight`), then
/// every parameter of the modules `config.modules_to_save` selects
/// (`base_model.model.<path>.<param>`: PEFT's saved key drops the
/// `modules_to_save.<adapter>` part of its in-memory name).
pub fn adapter_state_dict<M: Module>(
    model: &M,
    config: &LoraConfig,
) -> Result<Vec<(String, Tensor)>> {
    let saved = saved_paths(model, config)?;
    let params = model.named_parameters();
    let lora = params
        .iter()
        .filter(|(n, _)| n.contains("lora_A.") || n.contains("lora_B."));
    let whole = params.iter().filter(|(n, _)| under(n, &saved));
    Ok(lora
        .chain(whole)
        .map(|(n, t)| (format!("{PEFT_PREFIX}{n}"), t.clone()))
        .collect())
}

/// Writes `dir/adapter_model.safetensors` (adapter tensors, PEFT names) and
/// `dir/adapter_config.json`, each atomically. An `"all-linear"` target is
/// written as the list it expands to (every linear but the output head,
/// sorted; `exclude_modules` is written beside it), as PEFT writes the set
/// it expanded.
pub fn save_adapter<M: Module>(model: &M, config: &LoraConfig, dir: &Path) -> Result<()> {
    config.validate()?;
    let sd = adapter_state_dict(model, config)?;
    if !sd.iter().any(|(n, _)| n.contains("lora_A.")) {
        return Err(Error::config(
            "save_adapter",
            "the model has no LoRA adapter",
        ));
    }
    let mut config = config.clone();
    if config.target_modules.is_all_linear() {
        config.target_modules = TargetModules::Names(all_linear_paths(model));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::File {
        file: dir.to_path_buf(),
        msg: e.to_string(),
    })?;
    let opts = SaveOptions {
        metadata: [("format".to_string(), "pt".to_string())]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    sdio::save_state_dict(&dir.join(ADAPTER_WEIGHTS), &sd, &opts)?;
    let json = serde_json::to_vec_pretty(&config).map_err(|e| Error::File {
        file: dir.join(ADAPTER_CONFIG),
        msg: e.to_string(),
    })?;
    sdio::write_atomic(&dir.join(ADAPTER_CONFIG), &json)?;
    Ok(())
}

/// Reads a PEFT adapter directory, attaches its adapters and saved modules
/// to `model` (see [`super::apply_lora`]) and loads their weights strictly
/// (every tensor of the file used, none missing, each of the model's shape:
/// a mismatch names the key and both shapes). On any error the new adapters
/// are removed again, the original parameters of saved modules put back and
/// every parameter's `requires_grad` restored. New adapters' dropout starts
/// in training mode, as new modules do: call `eval()` for inference.
pub fn load_adapter<M: Module>(model: &mut M, dir: &Path, init: &mut Init) -> Result<LoraConfig> {
    let config = LoraConfig::from_file(&dir.join(ADAPTER_CONFIG))?;
    let flags: Vec<(Tensor, bool)> = model
        .named_parameters()
        .into_iter()
        .map(|(_, t)| {
            let g = t.requires_grad();
            (t, g)
        })
        .collect();
    // apply changes nothing when it fails.
    let applied = apply(model, &config, init)?;
    let loaded = adapter_state_dict(&*model, &config).and_then(|sd| {
        Ok(sdio::load_state_dict(
            &dir.join(ADAPTER_WEIGHTS),
            &sd,
            &LoadOptions::new(),
        )?)
    });
    if let Err(e) = loaded {
        applied.undo(model);
        for (t, g) in flags {
            let _ = t.set_requires_grad(g);
        }
        return Err(e);
    }
    Ok(config)
}
