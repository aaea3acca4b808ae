//! `Embedding`: a lookup table `weight [num_embeddings, dim]` indexed by
//! integer ids of any shape; PyTorch's default init N(0, 1). Out-of-range
//! ids are an error from the kernel (never a read outside the table).
//! A frozen table may be stored as bf16/f16: its rows are widened to the
//! compute dtype as they are gathered (`forward_as`), never the table.

use fucina_autograd::Tensor;

use crate::error::{Error, Result};
use crate::init::{Dist, Init};

/// A table of `num_embeddings` vectors of width `dim`.
///
/// ```
/// use fucina_nn::{Embedding, Init};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mut init = Init::new(&ctx, fucina_core::DType::F32, 0);
/// let emb = Embedding::new(&mut init, 10, 4).unwrap();
/// let ids = fucina_autograd::Tensor::constant(&ctx, &[1i64, 9, 1], &[3]).unwrap();
/// assert_eq!(emb.forward(&ids).unwrap().shape(), &[3, 4]);
/// ```
#[derive(Debug, fucina_nn_derive::Module)]
pub struct Embedding {
    /// `[num_embeddings, dim]`.
    pub weight: Tensor,
}

impl Embedding {
    /// PyTorch's default init: N(0, 1).
    pub fn new(init: &mut Init, num_embeddings: usize, dim: usize) -> Result<Embedding> {
        Self::with_dist(init, num_embeddings, dim, Dist::normal(1.0))
    }

    /// A table filled from `dist` (GPT: `Dist::normal(0.02)`).
    pub fn with_dist(
        init: &mut Init,
        num_embeddings: usize,
        dim: usize,
        dist: Dist,
    ) -> Result<Embedding> {
        Error::require_positive(
            "Embedding",
            &[("num_embeddings", num_embeddings), ("dim", dim)],
        )?;
        Ok(Embedding {
            weight: init.param(&[num_embeddings, dim], dist)?,
        })
    }

    /// A table over an existing `[num_embeddings, dim]` tensor.
    pub fn from_tensor(weight: Tensor) -> Result<Embedding> {
        if weight.rank() != 2 {
            return Err(Error::config(
                "Embedding",
                format!(
                    "weight must be [num_embeddings, dim], got {:?}",
                    weight.shape()
                ),
            ));
        }
        Ok(Embedding { weight })
    }

    /// The number of rows.
    pub fn num_embeddings(&self) -> usize {
        self.weight.shape()[0]
    }

    /// The vector width.
    pub fn dim(&self) -> usize {
        self.weight.shape()[1]
    }

    /// Integer `ids [...]` (I32 or I64, a constant) `-> [..., dim]`, in the
    /// table's dtype, or f32 for a frozen bf16/f16 table (see
    /// [`Embedding::forward_as`]).
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        match self.weight.dtype() {
            fucina_core::DType::BF16 | fucina_core::DType::F16 => {
                self.forward_as(ids, fucina_core::DType::F32)
            }
            _ => Ok(self.weight.embedding(ids)?),
        }
    }

    /// [`Embedding::forward`] with rows in `dtype`: the table's own, or
    /// f32/f64 from a frozen bf16/f16 table (only the gathered rows are
    /// widened; the table gets no gradient).
    pub fn forward_as(&self, ids: &Tensor, dtype: fucina_core::DType) -> Result<Tensor> {
        Ok(self.weight.embedding_to(ids, dtype)?)
    }
}

impl crate::module::Forward for Embedding {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        Embedding::forward(self, ids)
    }
}
