//! Loading a Hugging Face decoder directory into a [`CausalLm`] and
//! writing one back (`save_pretrained`).
//!
//! Loading is strict and validates before it allocates: the config is
//! parsed and checked, every shard's header is read when the checkpoint
//! opens, and then each parameter is read only after its key, shape and
//! dtype were checked against the header. A missing or mismatched tensor,
//! or a tensor the model does not use, is an error naming the file and the
//! key; the partly built model is dropped, so nothing half-loaded ever
//! reaches the caller. GPT-2's `Conv1D` weights (`[in, out]`) are
//! transposed to `[out, in]` at load and back at save; buffers older
//! checkpoints carry (GPT-2's `attn.bias`, Llama's `rotary_emb.inv_freq`)
//! are recomputed, not read. A checkpoint of the bare model (GPT-2's
//! `wte.weight` without `transformer.`, Llama's without `model.`) loads too.
//! With a storage dtype (`from_pretrained_frozen`, in `frozen.rs`) every 2-D
//! parameter is read in that dtype (a bf16 file straight into bf16 buffers)
//! and frozen.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use fucina_autograd::io::{save_state_dict, SaveOptions};
use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};

use super::names::{is_conv1d, is_recomputed_buffer, names_of};
use super::CausalLm;
use crate::error::Result;
use crate::hf::save::{copy_tokenizer_files, create_dir, write_json};
use crate::hf::{file_err, Checkpoint, DecoderConfig, GenerationConfig};
use crate::init::Dist;
use crate::module::Module;

impl CausalLm {
    /// Builds the model a Hugging Face directory describes (`config.json`)
    /// and loads its `model.safetensors` (or the shards of
    /// `model.safetensors.index.json`) strictly, in `dtype` (f32 or f64;
    /// stored f16/bf16/f32/f64 convert); the token ids of
    /// `generation_config.json`, when present, replace `config.json`'s. The
    /// model starts in eval mode.
    ///
    /// ```no_run
    /// let ctx = fucina_core::ExecContext::with_threads(2)?;
    /// let dir = std::path::Path::new("models/SmolLM2-135M");
    /// let lm = fucina_nn::CausalLm::from_pretrained(&ctx, dir, fucina_core::DType::F32)?;
    /// println!("{} parameters", fucina_nn::Module::num_parameters(&lm));
    /// # Ok::<(), fucina_nn::Error>(())
    /// ```
    pub fn from_pretrained(ctx: &ExecContext, dir: &Path, dtype: DType) -> Result<CausalLm> {
        let config = Self::pretrained_config(dir)?;
        let ckpt = Checkpoint::open(dir)?;
        let mut model = Self::from_checkpoint(ctx, &config, &ckpt, dtype)?;
        model.source = Some(dir.to_path_buf());
        model.eval();
        Ok(model)
    }

    /// Builds the model of `config` with every parameter read from `ckpt`.
    pub fn from_checkpoint(
        ctx: &ExecContext,
        config: &DecoderConfig,
        ckpt: &Checkpoint,
        dtype: DType,
    ) -> Result<CausalLm> {
        Self::load_checkpoint(ctx, config, ckpt, dtype, None)
    }

    /// The config of `dir` with `generation_config.json`'s token ids (they
    /// win over `config.json`'s, as in transformers).
    pub(super) fn pretrained_config(dir: &Path) -> Result<DecoderConfig> {
        let mut config = DecoderConfig::from_file(&dir.join("config.json"))?;
        let gen = GenerationConfig::from_dir(dir)?;
        if !gen.eos_token_ids.is_empty() {
            config.eos_token_ids = gen.eos_token_ids;
        }
        config.bos_token_id = gen.bos_token_id.or(config.bos_token_id);
        config.pad_token_id = gen.pad_token_id.or(config.pad_token_id);
        Ok(config)
    }

    /// [`CausalLm::from_checkpoint`] in `dtype`; with `frozen = Some(s)`,
    /// every 2-D parameter (embeddings, linear weights) is read straight
    /// into dtype `s` (a bf16 file into bf16 pool buffers, no f32 copy)
    /// and frozen, the rest (norms, biases) in `dtype`.
    pub(super) fn load_checkpoint(
        ctx: &ExecContext,
        config: &DecoderConfig,
        ckpt: &Checkpoint,
        dtype: DType,
        frozen: Option<DType>,
    ) -> Result<CausalLm> {
        if !matches!(dtype, DType::F32 | DType::F64) {
            return Err(file_err(
                &ckpt.path_of(""),
                format!("models are built in f32 or f64, not {dtype}"),
            ));
        }
        let mt = config.model_type;
        let names = names_of(mt);
        // A bare-model checkpoint lacks the `transformer.` / `model.` prefix.
        let embed_key = format!("{}.weight", names.embed);
        let prefix = embed_key.split('.').next().unwrap_or("").to_string() + ".";
        let strip =
            ckpt.info(&embed_key).is_none() && ckpt.info(&embed_key[prefix.len()..]).is_some();
        let file_key = |name: &str| -> String {
            match name.strip_prefix(prefix.as_str()) {
                Some(rest) if strip => rest.to_string(),
                _ => name.to_string(),
            }
        };
        let mut used: BTreeSet<String> = BTreeSet::new();
        let mut src = |name: &str, shape: &[usize], _: Dist| -> Result<Tensor> {
            let key = file_key(name);
            let Some((info, path)) = ckpt.info(&key) else {
                return Err(file_err(
                    &ckpt.path_of(&key),
                    format!("tensor `{key}` is missing from the checkpoint"),
                ));
            };
            let conv = is_conv1d(mt, name);
            let want: Vec<usize> = if conv {
                shape.iter().rev().copied().collect()
            } else {
                shape.to_vec()
            };
            if info.shape != want {
                return Err(file_err(
                    path,
                    format!(
                        "tensor `{key}` has shape {:?}, the config needs {want:?}",
                        info.shape
                    ),
                ));
            }
            if !info.dtype.is_some_and(|d| d.is_float()) {
                return Err(file_err(
                    path,
                    format!(
                        "tensor `{key}` is stored as {}, not a float dtype",
                        info.dtype_name
                    ),
                ));
            }
            let (as_dtype, trainable) = match frozen {
                Some(s) if shape.len() == 2 => (s, false),
                _ => (dtype, true),
            };
            let mut raw = ckpt.read_as(ctx, &key, as_dtype)?;
            if conv {
                raw = ctx.contiguous(&raw.transpose(0, 1)?)?;
            }
            used.insert(key);
            Ok(Tensor::from_raw(ctx, raw, trainable)?)
        };
        let model = CausalLm::build(ctx, config, dtype, 0, &mut src)?;
        let head_key = file_key(&format!("{}.weight", names.head));
        let unexpected: Vec<&str> = ckpt
            .keys()
            .filter(|k| !used.contains(*k) && !is_recomputed_buffer(mt, k))
            // A tied checkpoint may still store the head (a copy of the embedding).
            .filter(|k| !(config.tie_word_embeddings && *k == head_key))
            .collect();
        if let Some(k) = unexpected.first() {
            return Err(file_err(
                &ckpt.path_of(k),
                format!(
                    "tensor `{k}` is not a parameter of this {} model ({} unused tensors)",
                    mt.as_str(),
                    unexpected.len()
                ),
            ));
        }
        Ok(model)
    }

    /// The parameters under their checkpoint names and in the checkpoint's
    /// layout (GPT-2's `Conv1D` weights transposed back to `[in, out]`).
    pub fn checkpoint_tensors(&self) -> Result<Vec<(String, Tensor)>> {
        let ctx = self.ctx();
        let mut out = Vec::new();
        for (name, t) in self.named_parameters() {
            if is_conv1d(self.config.model_type, &name) {
                let raw = ctx.contiguous(&t.raw()?.transpose(0, 1)?)?;
                out.push((name, Tensor::from_raw(ctx, raw, false)?));
            } else {
                out.push((name, t));
            }
        }
        Ok(out)
    }

    /// Writes `dir/model.safetensors`, `config.json` and
    /// `generation_config.json` in the family's layout (f32), and copies the
    /// tokenizer files of the directory the model was loaded from, so that
    /// transformers' `AutoModelForCausalLM.from_pretrained(dir)` loads the
    /// same model. Each file is replaced atomically, the weights first.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        create_dir(dir)?;
        let opts = SaveOptions {
            float_dtype: Some(DType::F32),
            ..Default::default()
        };
        save_state_dict(
            &dir.join("model.safetensors"),
            &self.checkpoint_tensors()?,
            &opts,
        )?;
        let c = &self.config;
        let gen = c.generation_config().to_json();
        write_json(&dir.join(crate::hf::generation_config::FILE), &gen)?;
        write_json(&DecoderConfig::path_in(dir), &c.to_hf_json())?;
        if let Some(from) = &self.source {
            copy_tokenizer_files(from, dir)?;
        }
        Ok(())
    }

    /// The directory the model was loaded from, if any.
    pub fn source_dir(&self) -> Option<&PathBuf> {
        self.source.as_ref()
    }
}
