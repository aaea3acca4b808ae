//! In-place accumulation into a gradient buffer: `add_assign`, `scale_add_assign` and
//! `add_assign_narrow` (a narrow view's gradient added into its base's window). The target
//! must be contiguous and the sole owner of its buffer; the added tensor may have any
//! strides. Each element is computed on its own, so results never depend on the thread
//! count.

use super::same_dtype;
use super::same_shape;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::kernels::map::{Plan, CHUNK, PAR_THRESHOLD};
use crate::tensor::RawTensor;

impl ExecContext {
    /// `acc += g` in place: `acc` must be contiguous and the sole owner of its
    /// buffer (else [`Error::NotContiguous`] / [`Error::SharedBuffer`]); `g`
    /// has the same shape and dtype, any strides.
    pub fn add_assign(&self, acc: &mut RawTensor, g: &RawTensor) -> Result<()> {
        self.axpby_assign(acc, 1.0, g, 1.0, "add_assign")
    }

    /// `acc[.., start..start + len, ..] += g` along `axis` in place, where `len =
    /// g.shape()[axis]` and `g` has `acc`'s shape elsewhere: a narrow view's gradient added
    /// into its base's gradient without building the zero-padded tensor (each element
    /// `acc + g`, as `acc + pad(g)` computes it inside the window; outside it nothing is
    /// written). `acc` must be contiguous and the sole owner of its buffer, as for
    /// [`Self::add_assign`]; `g` may have any strides.
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(1)?;
    /// let mut acc = ctx.zeros(fucina_core::DType::F32, &[2, 4])?;
    /// let g = ctx.from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// ctx.add_assign_narrow(&mut acc, 1, 1, &g)?;
    /// assert_eq!(acc.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn add_assign_narrow(
        &self,
        acc: &mut RawTensor,
        axis: usize,
        start: usize,
        g: &RawTensor,
    ) -> Result<()> {
        const OP: &str = "add_assign_narrow";
        same_dtype(OP, acc, g)?;
        let (sa, sg) = (acc.shape(), g.shape());
        if axis >= sa.len() {
            return Err(Error::axis(OP, axis, sa.len(), sa));
        }
        let fits = start
            .checked_add(sg.get(axis).copied().unwrap_or(0))
            .is_some_and(|end| end <= sa[axis]);
        if sa.len() != sg.len() || !fits || (0..sa.len()).any(|d| d != axis && sa[d] != sg[d]) {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: sa.to_vec(),
                rhs: sg.to_vec(),
            });
        }
        if !acc.is_contiguous() {
            return Err(Error::NotContiguous {
                op: OP,
                shape: sa.to_vec(),
            });
        }
        let inner: usize = sa[axis + 1..].iter().product();
        let (block, at, run) = (sa[axis] * inner, start * inner, sg[axis] * inner);
        if run == 0 {
            return Ok(());
        }
        crate::dispatch_float!(acc.dtype(), OP, T => {
            let gs = g.storage::<T>()?;
            let plan = Plan::new(sg, [(g.strides(), g.offset())]);
            let [si] = plan.inner_strides();
            let d = acc
                .as_mut_slice::<T>()
                .map_err(|_| Error::SharedBuffer { op: OP })?;
            // One block of `acc` per index of the axes before `axis`; its window is `run`
            // contiguous elements, g's elements `o·run..(o + 1)·run` in order.
            self.par_chunks_mut(d, block, g.numel() >= PAR_THRESHOLD, |o, dst| {
                let win = &mut dst[at..at + run];
                plan.for_rows(o * run, (o + 1) * run, |[og], pos, len| {
                    let seg = &mut win[pos - o * run..pos - o * run + len];
                    if si == 1 {
                        for (x, &v) in seg.iter_mut().zip(&gs[og..og + len]) {
                            *x += v;
                        }
                    } else {
                        for (j, x) in seg.iter_mut().enumerate() {
                            *x += gs[og + j * si];
                        }
                    }
                });
            });
            Ok(())
        })
    }

    /// `acc = acc·alpha + g·beta` in place, under the same rules as [`Self::add_assign`]
    /// (alpha = beta = 1 is exactly `acc + g`).
    pub fn scale_add_assign(
        &self,
        acc: &mut RawTensor,
        alpha: f64,
        g: &RawTensor,
        beta: f64,
    ) -> Result<()> {
        self.axpby_assign(acc, alpha, g, beta, "scale_add_assign")
    }

    fn axpby_assign(
        &self,
        acc: &mut RawTensor,
        alpha: f64,
        g: &RawTensor,
        beta: f64,
        op: &'static str,
    ) -> Result<()> {
        same_dtype(op, acc, g)?;
        same_shape(op, acc, g)?;
        if !acc.is_contiguous() {
            return Err(Error::NotContiguous {
                op,
                shape: acc.shape().to_vec(),
            });
        }
        crate::dispatch_float!(acc.dtype(), op, T => {
            let (al, be) = (T::from_f64(alpha), T::from_f64(beta));
            if alpha == 1.0 && beta == 1.0 {
                accumulate::<T>(self, op, acc, g, |s, v| s + v)
            } else {
                accumulate::<T>(self, op, acc, g, move |s, v| s * al + v * be)
            }
        })
    }
}

/// `acc[i] = f(acc[i], g[i])` over fixed chunks; acc is contiguous and unique.
fn accumulate<T: Element>(
    ctx: &ExecContext,
    op: &'static str,
    acc: &mut RawTensor,
    g: &RawTensor,
    f: impl Fn(T, T) -> T + Send + Sync,
) -> Result<()> {
    let gs = g.storage::<T>()?;
    let plan = Plan::new(g.shape(), [(g.strides(), g.offset())]);
    let [si] = plan.inner_strides();
    let d = acc
        .as_mut_slice::<T>()
        .map_err(|_| Error::SharedBuffer { op })?;
    let n = d.len();
    ctx.par_chunks_mut(d, CHUNK, n >= PAR_THRESHOLD, |ci, dst| {
        let s = ci * CHUNK;
        let e = s + dst.len();
        plan.for_rows(s, e, |[og], pos, len| {
            let dd = &mut dst[pos - s..pos - s + len];
            if si == 1 {
                for (o, &v) in dd.iter_mut().zip(&gs[og..og + len]) {
                    *o = f(*o, v);
                }
            } else {
                for (j, o) in dd.iter_mut().enumerate() {
                    *o = f(*o, gs[og + j * si]);
                }
            }
        });
    });
    Ok(())
}
