//! Indexing: embedding / index_select, gather (take along axis), scatter_add,
//! one_hot. Index tensors are integer constants and get no gradient.
//!
//! An embedding table that needs no gradient may be bf16/f16 and gathered
//! into f32/f64 rows ([`Tensor::embedding_to`]): only the gathered rows are
//! widened, and no backward work is done for the frozen table.

use fucina_core::shape::Dims;
use fucina_core::{DType, ExecContext, RawTensor};

use crate::error::Result;
use crate::ops::axis_of;
use crate::ops::elementwise::not_differentiable;
use crate::ops::linear_map::linear_map;
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;
use std::sync::Arc;

fn check_index(op: &'static str, idx: &Tensor) -> Result<()> {
    if idx.requires_grad() {
        return Err(not_differentiable(op));
    }
    Ok(())
}

/// embedding: gW = scatter-add of gy rows into the ids' rows (deterministic with duplicates).
struct EmbeddingBackward {
    vocab: usize,
    ids: RawTensor,
}

impl Backward for EmbeddingBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let gw = if needs[0] {
            Some(ctx.embedding_backward(self.vocab, &self.ids, gy)?)
        } else {
            None
        };
        Ok(smallvec::smallvec![gw, None])
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        if !saved.needs(0) {
            return Ok(smallvec::smallvec![None, None]);
        }
        let (vocab, ids, ids2) = (self.vocab, self.ids.clone(), self.ids.clone());
        Ok(smallvec::smallvec![
            Some(linear_map(
                "embedding",
                gy,
                Arc::new(move |ctx, g| ctx.embedding_backward(vocab, &ids, g)),
                Arc::new(move |ctx, g| ctx.embedding(g, &ids2)),
            )?),
            None
        ])
    }
}

/// The two index reads whose backward scatters the gradient back along `axis`:
/// index_select (gx = index_add(zeros(x), axis, idx, gy)) and gather
/// (gx = scatter_add(zeros(x), axis, idx, gy)). Each is linear in x, and its backward's
/// adjoint is the read itself (for `create_graph`).
#[derive(Clone, Copy)]
enum IndexRead {
    IndexSelect,
    Gather,
}

impl IndexRead {
    fn name(self) -> &'static str {
        match self {
            IndexRead::IndexSelect => "index_select",
            IndexRead::Gather => "gather",
        }
    }

    /// The index argument, as errors name it.
    fn index_arg(self) -> &'static str {
        match self {
            IndexRead::IndexSelect => "index_select (index)",
            IndexRead::Gather => "gather (index)",
        }
    }

    /// gx from gy: the read's transpose (a zero tensor of x's shape with gy added in).
    fn scatter(
        self,
        ctx: &ExecContext,
        shape: &[usize],
        axis: usize,
        idx: &RawTensor,
        g: &RawTensor,
    ) -> fucina_core::Result<RawTensor> {
        match self {
            IndexRead::IndexSelect => ctx.index_add(shape, axis, idx, g),
            IndexRead::Gather => ctx.scatter_add(shape, axis, idx, g),
        }
    }

    /// The read itself (the scatter's adjoint).
    fn read(
        self,
        ctx: &ExecContext,
        g: &RawTensor,
        axis: usize,
        idx: &RawTensor,
    ) -> fucina_core::Result<RawTensor> {
        match self {
            IndexRead::IndexSelect => ctx.index_select(g, axis, idx),
            IndexRead::Gather => ctx.gather(g, axis, idx),
        }
    }
}

/// Backward of an [`IndexRead`]: gx = its scatter of gy into zeros of x's shape.
struct IndexReadBackward {
    read: IndexRead,
    in_shape: Dims,
    axis: usize,
    idx: RawTensor,
}

impl Backward for IndexReadBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        Ok(smallvec::smallvec![
            Some(
                self.read
                    .scatter(ctx, &self.in_shape, self.axis, &self.idx, gy)?
            ),
            None
        ])
    }
    fn backward_graph(&self, _s: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let (read, shape, axis, idx, idx2) = (
            self.read,
            self.in_shape.clone(),
            self.axis,
            self.idx.clone(),
            self.idx.clone(),
        );
        Ok(smallvec::smallvec![
            Some(linear_map(
                read.name(),
                gy,
                Arc::new(move |ctx, g| read.scatter(ctx, &shape, axis, &idx, g)),
                Arc::new(move |ctx, g| read.read(ctx, g, axis, &idx2)),
            )?),
            None
        ])
    }
}

/// out = x + scatter(src): gx = gy, gsrc = gather(gy, axis, idx).
struct ScatterAddBackward {
    axis: usize,
    idx: RawTensor,
}

impl Backward for ScatterAddBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let gx = if needs[0] { Some(gy.clone()) } else { None };
        let gs = if needs[2] {
            Some(ctx.gather(gy, self.axis, &self.idx)?)
        } else {
            None
        };
        Ok(smallvec::smallvec![gx, None, gs])
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let gx = saved.needs(0).then(|| gy.clone());
        let gs = if saved.needs(2) {
            Some(gy.gather(self.axis as isize, &saved.constant(&self.idx))?)
        } else {
            None
        };
        Ok(smallvec::smallvec![gx, None, gs])
    }
}

impl Tensor {
    /// Rows of this `[V, D]` weight picked by integer `ids` of any shape: `[..ids, D]`.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let table = Tensor::variable(&ctx, &[0.0f32, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2])?;
    /// let ids = Tensor::constant(&ctx, &[2i64, 0], &[2])?;
    /// let rows = table.embedding(&ids)?;
    /// assert_eq!(rows.to_vec::<f32>()?, vec![20.0, 21.0, 0.0, 1.0]);
    /// let picked = table.gather(1, &Tensor::constant(&ctx, &[1i64, 0, 1], &[3, 1])?)?;
    /// assert_eq!(picked.to_vec::<f32>()?, vec![1.0, 10.0, 21.0]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn embedding(&self, ids: &Tensor) -> Result<Tensor> {
        check_index("embedding (ids)", ids)?;
        let ctx = self.ctx();
        let idsr = ids.raw()?;
        let y = ctx.embedding(&self.value()?, &idsr)?;
        let vocab = self.shape()[0];
        Ok(record(ctx, "embedding", y, &[self, ids], |_| {
            Box::new(EmbeddingBackward { vocab, ids: idsr })
        }))
    }

    /// [`Tensor::embedding`] into rows of `dtype`: this table's dtype, or
    /// f32/f64 from a bf16/f16 table that needs no gradient (a frozen base
    /// embedding; only the gathered rows are widened). A table that
    /// requires a gradient must already be `dtype`
    /// ([`crate::Error::TrainableDTypeMismatch`]).
    pub fn embedding_to(&self, ids: &Tensor, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return self.embedding(ids);
        }
        if self.requires_grad() {
            return Err(crate::Error::TrainableDTypeMismatch {
                op: "embedding",
                arg: "table",
                input: dtype,
                weight: self.dtype(),
            });
        }
        check_index("embedding (ids)", ids)?;
        let ctx = self.ctx();
        let y = ctx.embedding_to(&self.value()?, &ids.raw()?, dtype)?;
        // Neither the frozen table nor the integer ids take a gradient: a constant.
        let t = Tensor::leaf(ctx, y);
        crate::tape::scope::adopt(&t);
        Ok(t)
    }

    /// Entries of `axis` picked by a 1-D integer index.
    pub fn index_select(&self, axis: isize, idx: &Tensor) -> Result<Tensor> {
        self.index_read(IndexRead::IndexSelect, axis, idx)
    }

    /// torch.gather / take_along_axis: `out[.., j, ..] = x[.., idx[.., j, ..], ..]`.
    pub fn gather(&self, axis: isize, idx: &Tensor) -> Result<Tensor> {
        self.index_read(IndexRead::Gather, axis, idx)
    }

    /// [`Tensor::index_select`] or [`Tensor::gather`]: the read, recorded
    /// with its scatter as the backward.
    fn index_read(&self, read: IndexRead, axis: isize, idx: &Tensor) -> Result<Tensor> {
        check_index(read.index_arg(), idx)?;
        let a = axis_of(read.name(), self, axis)?;
        let ctx = self.ctx();
        let ir = idx.raw()?;
        let y = read.read(ctx, &self.value()?, a, &ir)?;
        let in_shape: Dims = smallvec::SmallVec::from_slice(self.shape());
        Ok(record(ctx, read.name(), y, &[self, idx], |_| {
            Box::new(IndexReadBackward {
                read,
                in_shape,
                axis: a,
                idx: ir,
            })
        }))
    }

    /// Alias of [`Tensor::gather`] (NumPy's name).
    pub fn take_along_axis(&self, axis: isize, idx: &Tensor) -> Result<Tensor> {
        self.gather(axis, idx)
    }

    /// `self + scatter(src)`: src entries added at `idx` along `axis` (torch.scatter_add).
    pub fn scatter_add(&self, axis: isize, idx: &Tensor, src: &Tensor) -> Result<Tensor> {
        check_index("scatter_add (index)", idx)?;
        crate::ops::same_dtype("scatter_add", self, src)?;
        let a = axis_of("scatter_add", self, axis)?;
        let ctx = self.ctx();
        let ir = idx.raw()?;
        let s = ctx.scatter_add(self.shape(), a, &ir, &src.value()?)?;
        let y = ctx.binary(
            &self.value()?,
            &s,
            fucina_core::kernels::elementwise::BinaryOp::Add,
        )?;
        drop(s);
        Ok(record(ctx, "scatter_add", y, &[self, idx, src], |_| {
            Box::new(ScatterAddBackward { axis: a, idx: ir })
        }))
    }

    /// One-hot encoding of integer indices: `idx.shape + [classes]` (not differentiable).
    pub fn one_hot(&self, classes: usize, dtype: DType) -> Result<Tensor> {
        let y = self.ctx().one_hot(&self.value()?, classes, dtype)?;
        let t = Tensor::leaf(self.ctx(), y);
        crate::tape::scope::adopt(&t);
        Ok(t)
    }
}
