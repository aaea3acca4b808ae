//! A decoder whose frozen base matrices stay low precision: every 2-D
//! parameter (token and position embeddings, every linear weight, an untied
//! head) stored as bf16/f16 and frozen, while activations, norms, biases,
//! LoRA adapters and gradients are in the compute dtype (f32/f64).
//!
//! Nothing widens a whole matrix: the core GEMM widens a bf16/f16 weight
//! inside its B packing (bitwise the product with the widened weight), the
//! embedding widens only the rows it gathers, and backward computes only
//! the input gradients through the same mixed GEMM (no dW; a frozen linear
//! keeps no input alive). A bf16 checkpoint is read straight into bf16 pool
//! buffers.

use std::collections::HashMap;
use std::path::Path;

use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};

use super::CausalLm;
use crate::error::{Error, Result};
use crate::hf::Checkpoint;
use crate::linear::Linear;
use crate::module::{for_each, Module};

/// Checks a (compute, storage) pair: compute f32/f64, storage bf16, f16 or
/// the compute dtype itself.
fn check_dtypes(op: &str, compute: DType, storage: DType) -> Result<()> {
    if !compute.is_compute_float() {
        return Err(Error::config(
            "CausalLm",
            format!("{op}: the compute dtype must be f32 or f64, got {compute}"),
        ));
    }
    if !(matches!(storage, DType::BF16 | DType::F16) || storage == compute) {
        return Err(Error::config(
            "CausalLm",
            format!(
                "{op}: frozen weights are stored as bf16, f16 or the compute dtype {compute}, not {storage}"
            ),
        ));
    }
    Ok(())
}

/// Whether `name` is a LoRA adapter matrix (trainable, never narrowed).
fn is_adapter(name: &str) -> bool {
    name.contains("lora_A.") || name.contains("lora_B.")
}

impl CausalLm {
    /// [`CausalLm::from_pretrained`] with the base matrices frozen in
    /// `storage` (bf16 or f16; a bf16 checkpoint is read straight into bf16
    /// buffers, never through f32) and norms and biases in `compute` (f32
    /// or f64, trainable until `apply_lora` freezes them). Attach adapters
    /// with [`crate::linear::lora::apply_lora`] and an `Init` in `compute`.
    ///
    /// ```no_run
    /// use fucina_core::DType;
    /// let ctx = fucina_core::ExecContext::with_threads(2)?;
    /// let dir = std::path::Path::new("models/SmolLM2-135M");
    /// let lm = fucina_nn::CausalLm::from_pretrained_frozen(&ctx, dir, DType::F32, DType::BF16)?;
    /// assert_eq!((lm.dtype(), lm.storage_dtype()), (DType::F32, DType::BF16));
    /// # Ok::<(), fucina_nn::Error>(())
    /// ```
    pub fn from_pretrained_frozen(
        ctx: &ExecContext,
        dir: &Path,
        compute: DType,
        storage: DType,
    ) -> Result<CausalLm> {
        check_dtypes("from_pretrained_frozen", compute, storage)?;
        let config = Self::pretrained_config(dir)?;
        let ckpt = Checkpoint::open(dir)?;
        let mut model = Self::load_checkpoint(ctx, &config, &ckpt, compute, Some(storage))?;
        model.source = Some(dir.to_path_buf());
        model.eval();
        Ok(model)
    }

    /// Converts every 2-D base parameter (embeddings, linear weights, an
    /// untied head; not LoRA adapters, norms or biases, which stay in the
    /// compute dtype) to `storage` (bf16, f16, or the compute dtype to just
    /// freeze) and freezes it; returns how many were converted. Rounding to
    /// bf16 is round-to-nearest-even, as `torch.Tensor.to(torch.bfloat16)`.
    /// Works before or after `apply_lora`. An error (and nothing changed)
    /// when an adapter is merged (its saved base weight would no longer
    /// match) or the dtype is not a storage dtype.
    ///
    /// The tensors are replaced, not updated in place: an optimizer built
    /// over the old base tensors keeps the old ones.
    pub fn store_frozen_weights(&mut self, storage: DType) -> Result<usize> {
        check_dtypes("store_frozen_weights", self.dtype(), storage)?;
        let mut merged = None;
        for_each(&*self, |path: &str, lin: &Linear| {
            if lin.lora.as_ref().is_some_and(|l| l.is_merged()) && merged.is_none() {
                merged = Some(path.to_string());
            }
        });
        if let Some(p) = merged {
            return Err(Error::config(
                "CausalLm",
                format!(
                    "store_frozen_weights: the LoRA adapter of `{p}` is merged; unmerge it first"
                ),
            ));
        }
        // Convert every target first, then swap them in (all or nothing).
        let ctx = self.ctx().clone();
        let mut converted: HashMap<String, Tensor> = HashMap::new();
        let mut err = None;
        self.visit_params("", &mut |name, t| {
            if err.is_some() || t.rank() != 2 || is_adapter(name) {
                return;
            }
            let conv = t
                .raw()
                .and_then(|r| Ok(ctx.to_dtype(&r, storage)?))
                .and_then(|r| Tensor::from_raw(&ctx, r, false));
            match conv {
                Ok(c) => {
                    converted.insert(name.to_string(), c);
                }
                Err(e) => err = Some(e),
            }
        });
        if let Some(e) = err {
            return Err(e.into());
        }
        let n = converted.len();
        self.visit_params_mut("", &mut |name, t| {
            if let Some(c) = converted.remove(name) {
                *t = c;
            }
        });
        Ok(n)
    }
}
