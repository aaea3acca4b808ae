//! Joining and splitting: concat, stack, split, chunk, pad. Split and chunk
//! are narrow views; concat's backward hands each input its slice of gy.

use fucina_core::{ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::ops::axis_of;
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;

/// concat: g_i = gy[.., offset_i .. offset_i + len_i, ..] (views).
struct ConcatBackward {
    axis: usize,
    lens: Vec<usize>,
}

impl Backward for ConcatBackward {
    fn backward(&self, _ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let mut out = Grads::new();
        let mut start = 0;
        for (i, &len) in self.lens.iter().enumerate() {
            out.push(if needs[i] {
                Some(gy.narrow(self.axis, start, len)?)
            } else {
                None
            });
            start += len;
        }
        Ok(out)
    }
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let mut out = TensorGrads::new();
        let mut start = 0;
        for (i, &len) in self.lens.iter().enumerate() {
            out.push(if saved.needs(i) {
                Some(gy.narrow(self.axis as isize, start, len)?)
            } else {
                None
            });
            start += len;
        }
        Ok(out)
    }
}

/// pad: gx = the interior of gy (a narrow view per padded axis).
struct PadBackward {
    pads: Vec<(usize, usize)>,
}

impl Backward for PadBackward {
    fn backward(&self, _ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        let mut g = gy.clone();
        for (a, &(before, after)) in self.pads.iter().enumerate() {
            let len = g.shape()[a] - before - after;
            g = g.narrow(a, before, len)?;
        }
        Ok(smallvec::smallvec![Some(g)])
    }
    fn backward_graph(&self, _s: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let mut g = gy.clone();
        for (a, &(before, after)) in self.pads.iter().enumerate() {
            let len = g.shape()[a] - before - after;
            g = g.narrow(a as isize, before, len)?;
        }
        Ok(smallvec::smallvec![Some(g)])
    }
}

impl Tensor {
    /// Concatenates along `axis` (all other dims equal).
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let a = Tensor::constant(&ctx, &[1.0f32, 2.0], &[1, 2])?;
    /// let b = Tensor::constant(&ctx, &[3.0f32, 4.0], &[1, 2])?;
    /// assert_eq!(Tensor::concat(&[&a, &b], 0)?.shape(), &[2, 2]);
    /// assert_eq!(Tensor::stack(&[&a, &b], 0)?.shape(), &[2, 1, 2]);
    /// let halves = Tensor::concat(&[&a, &b], 1)?.chunk(2, 1)?;
    /// assert_eq!(halves[1].to_vec::<f32>()?, vec![3.0, 4.0]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn concat(xs: &[&Tensor], axis: isize) -> Result<Tensor> {
        let first = xs.first().ok_or_else(|| {
            Error::Core(fucina_core::Error::InvalidArgument {
                op: "concat",
                msg: "no tensors".into(),
            })
        })?;
        let a = axis_of("concat", first, axis)?;
        let raws: Vec<RawTensor> = xs.iter().map(|t| t.raw()).collect::<Result<_>>()?;
        let refs: Vec<&RawTensor> = raws.iter().collect();
        let ctx = first.ctx();
        let y = ctx.concat(&refs, a)?;
        drop(refs);
        let lens: Vec<usize> = raws.iter().map(|r| r.shape()[a]).collect();
        drop(raws);
        Ok(record(ctx, "concat", y, xs, |_| {
            Box::new(ConcatBackward { axis: a, lens })
        }))
    }

    /// Stacks equal-shape tensors along a new `axis`.
    pub fn stack(xs: &[&Tensor], axis: isize) -> Result<Tensor> {
        let ups: Vec<Tensor> = xs
            .iter()
            .map(|t| t.unsqueeze(axis))
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = ups.iter().collect();
        Tensor::concat(&refs, axis)
    }

    /// Splits `axis` into pieces of the given sizes (views).
    pub fn split(&self, axis: isize, sizes: &[usize]) -> Result<Vec<Tensor>> {
        let a = axis_of("split", self, axis)?;
        // Checked: sizes that wrap around usize must not pass as the right total.
        if fucina_core::shape::sum_of("split", "sum of sizes", sizes)? != self.shape()[a] {
            return Err(fucina_core::Error::InvalidArgument {
                op: "split",
                msg: format!("sizes {sizes:?} do not sum to {}", self.shape()[a]),
            }
            .into());
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&len| {
                let t = self.narrow(a as isize, start, len);
                start += len;
                t
            })
            .collect()
    }

    /// Splits `axis` into `n` nearly equal pieces (torch.chunk: the last may be smaller).
    pub fn chunk(&self, n: usize, axis: isize) -> Result<Vec<Tensor>> {
        let a = axis_of("chunk", self, axis)?;
        if n == 0 {
            return Err(fucina_core::Error::InvalidArgument {
                op: "chunk",
                msg: "n must be positive".into(),
            }
            .into());
        }
        let d = self.shape()[a];
        let step = d.div_ceil(n).max(1);
        let mut sizes = Vec::new();
        let mut left = d;
        while left > 0 {
            let s = step.min(left);
            sizes.push(s);
            left -= s;
        }
        self.split(a as isize, &sizes)
    }

    /// Pads with a constant: `pads[i] = (before, after)` for each axis.
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Result<Tensor> {
        let ctx = self.ctx();
        let y = ctx.pad(&self.value()?, pads, value)?;
        let pads = pads.to_vec();
        Ok(record(ctx, "pad", y, &[self], |_| {
            Box::new(PadBackward { pads })
        }))
    }
}
