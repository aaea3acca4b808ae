//! Cross-entropy from logits (ignore_index, label smoothing, reductions) and its backward.
//!
//! Invariants: logits are `[N, C]` with any strides (made contiguous first),
//! targets `[N]` of i64 or i32 with any stride. Rows run in fixed chunks; the
//! Mean/Sum reduction is one serial f64 sum in row order, so results are
//! bitwise identical for any thread count. The forward saves each row's max and
//! Σ exp(x − max), which the backward reuses instead of a second pass.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::kernels::rows::{par_rows_mut, rows_per_chunk};
use crate::kernels::simd::{max, simd_dispatch, sum, sum_exp_impl, RowFloat};
use crate::tensor::RawTensor;

/// How per-row losses are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// The mean over non-ignored rows (0 when every row is ignored).
    Mean,
    /// The sum over rows.
    Sum,
    /// No reduction: one loss per row (0 for ignored rows).
    None,
}

/// Options of [`ExecContext::cross_entropy`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyOpts {
    /// Rows whose target equals this are ignored (PyTorch's default is `Some(-100)`).
    pub ignore_index: Option<i64>,
    /// Label smoothing ε in `[0, 1]`: the target distribution is `(1−ε)·onehot + ε/C`.
    pub label_smoothing: f64,
    /// The reduction.
    pub reduction: Reduction,
}

impl Default for CrossEntropyOpts {
    /// No ignored index, no smoothing, [`Reduction::Mean`].
    fn default() -> Self {
        CrossEntropyOpts {
            ignore_index: None,
            label_smoothing: 0.0,
            reduction: Reduction::Mean,
        }
    }
}

/// Per-row statistics saved by the forward and reused by the backward.
pub struct CrossEntropySaved {
    /// `[N]`: max of each logits row.
    pub row_max: RawTensor,
    /// `[N]`: Σ exp(x − max) of each logits row.
    pub row_sumexp: RawTensor,
    /// Number of non-ignored rows.
    pub count: usize,
}

/// One row's (max, Σ exp(x − max), Σ x); the last only when `with_sum`.
#[inline(always)]
fn row_stats_impl<T: RowFloat>(x: &[T], with_sum: bool) -> (T, T, T) {
    let m = max(x);
    let s = sum_exp_impl(x, m);
    let t = if with_sum { sum(x) } else { T::ZERO };
    (m, s, t)
}

/// One row's gradient `g_j = s · (exp(x_j − m) · inv − ε/C)`, then `g_t −= s · (1 − ε)`.
#[inline(always)]
fn grad_row_impl<T: RowFloat>(
    x: &[T],
    g: &mut [T],
    m: T,
    inv: T,
    s: T,
    eps_c: T,
    t: usize,
    keep: T,
) {
    for (o, &v) in g.iter_mut().zip(x) {
        *o = s * ((v - m).vexp() * inv - eps_c);
    }
    g[t] -= s * keep;
}

simd_dispatch! { fn row_stats => row_stats_impl(x: &[T], with_sum: bool) -> (T, T, T) }
simd_dispatch! { fn grad_row => grad_row_impl(x: &[T], g: &mut [T], m: T, inv: T, s: T, eps_c: T, t: usize, keep: T) }

/// Strided read access to the `[N]` targets as i64.
#[derive(Clone, Copy)]
enum Targets<'a> {
    I32(&'a [i32], usize, usize),
    I64(&'a [i64], usize, usize),
}

impl<'a> Targets<'a> {
    fn new(op: &'static str, t: &'a RawTensor) -> Result<Targets<'a>> {
        let (off, st) = (t.offset(), t.strides().first().copied().unwrap_or(0));
        match t.dtype() {
            DType::I32 => Ok(Targets::I32(t.storage::<i32>()?, off, st)),
            DType::I64 => Ok(Targets::I64(t.storage::<i64>()?, off, st)),
            d => Err(Error::UnsupportedDType { op, dtype: d }),
        }
    }
    #[inline]
    fn get(&self, i: usize) -> i64 {
        match *self {
            Targets::I32(s, o, st) => s[o + i * st] as i64,
            Targets::I64(s, o, st) => s[o + i * st],
        }
    }
}

/// Validates logits/targets/opts; returns (n, c, targets, non-ignored count).
fn check_inputs<'a>(
    op: &'static str,
    logits: &RawTensor,
    targets: &'a RawTensor,
    opts: &CrossEntropyOpts,
) -> Result<(usize, usize, Targets<'a>, usize)> {
    if !logits.dtype().is_compute_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: logits.dtype(),
        });
    }
    if logits.rank() != 2 || logits.shape()[1] == 0 {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "logits must be [N, C] with C > 0, got shape {:?}",
                logits.shape()
            ),
        });
    }
    let (n, c) = (logits.shape()[0], logits.shape()[1]);
    if targets.rank() != 1 || targets.shape()[0] != n {
        return Err(Error::ShapeMismatch {
            op,
            lhs: logits.shape().to_vec(),
            rhs: targets.shape().to_vec(),
        });
    }
    let eps = opts.label_smoothing;
    if !(0.0..=1.0).contains(&eps) {
        return Err(Error::InvalidArgument {
            op,
            msg: format!("label_smoothing must be in [0, 1], got {eps}"),
        });
    }
    let t = Targets::new(op, targets)?;
    let mut count = 0;
    // A broadcast target (stride 0) holds one value: check it once, so a
    // huge broadcast view costs O(1) here and fails at allocation instead.
    let distinct = if targets.strides().first() == Some(&0) {
        n.min(1)
    } else {
        n
    };
    for i in 0..distinct {
        let ti = t.get(i);
        if Some(ti) == opts.ignore_index {
            continue;
        }
        if ti < 0 || ti as usize >= c {
            return Err(Error::OutOfRange {
                op,
                what: "target",
                index: ti,
                bound: c,
                shape: logits.shape().to_vec(),
            });
        }
        count += 1;
    }
    if distinct < n {
        count *= n;
    }
    Ok((n, c, t, count))
}

impl ExecContext {
    /// Cross-entropy of `logits` `[N, C]` (any strides) against class indices
    /// `targets` `[N]` (i64 or i32). Row loss:
    /// `lse(x) − (1−ε)·x_t − (ε/C)·Σ_j x_j` (PyTorch's label smoothing), 0 for
    /// ignored rows. Output: a rank-0 tensor for Mean/Sum, `[N]` for None.
    /// Mean divides by the number of non-ignored rows; when every row is
    /// ignored the loss is 0 (PyTorch gives NaN). The Mean/Sum is one serial
    /// f64 sum in row order. A target outside `[0, C)` that is not
    /// `ignore_index` is [`Error::OutOfRange`].
    ///
    /// ```
    /// use fucina_core::{ExecContext, kernels::fused::loss::CrossEntropyOpts};
    /// let ctx = ExecContext::with_threads(1)?;
    /// let x = ctx.from_slice(&[0.0f64, 0.0], &[1, 2])?;
    /// let t = ctx.from_slice(&[1i64], &[1])?;
    /// let (loss, _saved) = ctx.cross_entropy(&x, &t, CrossEntropyOpts::default())?;
    /// assert!((loss.item::<f64>()? - 2f64.ln()).abs() < 1e-15);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn cross_entropy(
        &self,
        logits: &RawTensor,
        targets: &RawTensor,
        opts: CrossEntropyOpts,
    ) -> Result<(RawTensor, CrossEntropySaved)> {
        const OP: &str = "cross_entropy";
        let (n, c, t, count) = check_inputs(OP, logits, targets, &opts)?;
        crate::dispatch_float!(logits.dtype(), OP, T => self.cross_entropy_t::<T>(logits, t, n, c, count, opts))
    }

    fn cross_entropy_t<T: RowFloat>(
        &self,
        logits: &RawTensor,
        t: Targets<'_>,
        n: usize,
        c: usize,
        count: usize,
        opts: CrossEntropyOpts,
    ) -> Result<(RawTensor, CrossEntropySaved)> {
        let dtype = logits.dtype();
        let xc = self.contiguous(logits)?;
        let mut row_max = self.empty(dtype, &[n])?;
        let mut row_sumexp = self.empty(dtype, &[n])?;
        let mut losses = self.empty(dtype, &[n])?;
        {
            let xs = xc.as_slice::<T>()?;
            let mp = row_max.as_mut_slice::<T>()?;
            let sp = row_sumexp.as_mut_slice::<T>()?;
            let lp = losses.as_mut_slice::<T>()?;
            let eps = opts.label_smoothing;
            let keep = T::from_f64(1.0 - eps);
            let eps_c = T::from_f64(eps / c as f64);
            let ignore = opts.ignore_index;
            let rpc = rows_per_chunk(c, 1);
            let outs = [mp, sp, lp];
            par_rows_mut(
                self,
                (n, c, rpc),
                outs,
                [rpc; 3],
                |_, r0, r1, [mc, sc, lc]| {
                    for r in r0..r1 {
                        let k = r - r0;
                        let xr = &xs[r * c..(r + 1) * c];
                        let (m, s, sx) = row_stats(xr, eps != 0.0);
                        mc[k] = m;
                        sc[k] = s;
                        let ti = t.get(r);
                        lc[k] = if Some(ti) == ignore {
                            T::ZERO
                        } else {
                            let lse = m + s.ln();
                            let mut l = lse - keep * xr[ti as usize];
                            if eps != 0.0 {
                                l -= eps_c * sx;
                            }
                            l
                        };
                    }
                },
            );
        }
        drop(xc);
        let saved = CrossEntropySaved {
            row_max,
            row_sumexp,
            count,
        };
        let out = match opts.reduction {
            Reduction::None => losses,
            red => {
                // One serial sum in row order, in f64.
                let mut acc = 0f64;
                for &l in losses.as_slice::<T>()? {
                    acc += l.to_f64();
                }
                if red == Reduction::Mean {
                    acc = if count == 0 { 0.0 } else { acc / count as f64 };
                }
                drop(losses);
                self.scalar(T::from_f64(acc))?
            }
        };
        Ok((out, saved))
    }

    /// Cross-entropy backward: `glogits[i, j] = s_i · (softmax(x_i)_j − q_ij)`
    /// with the target distribution `q_ij = (1−ε)·[j = t_i] + ε/C` and
    /// `s_i = gy` (Sum), `gy / count` (Mean) or `gy[i]` (None); ignored rows get 0.
    /// `gy` is rank-0 (any one-element tensor) for Mean/Sum and `[N]` for None.
    /// `softmax(x_i)_j = exp(x_ij − max_i) / sumexp_i` from `saved` (no second pass).
    ///
    /// Math: `loss_i = lse(x_i) − Σ_j q_ij x_ij` with `Σ_j q_ij = 1`, and
    /// `∂lse/∂x_ij = softmax(x_i)_j`, so `∂loss_i/∂x_ij = softmax(x_i)_j − q_ij`.
    pub fn cross_entropy_backward(
        &self,
        logits: &RawTensor,
        targets: &RawTensor,
        saved: &CrossEntropySaved,
        gy: &RawTensor,
        opts: CrossEntropyOpts,
    ) -> Result<RawTensor> {
        const OP: &str = "cross_entropy_backward";
        let (n, c, t, count) = check_inputs(OP, logits, targets, &opts)?;
        for s in [&saved.row_max, &saved.row_sumexp, gy] {
            if s.dtype() != logits.dtype() {
                return Err(Error::DTypeMismatch {
                    op: OP,
                    lhs: logits.dtype(),
                    rhs: s.dtype(),
                });
            }
        }
        for s in [&saved.row_max, &saved.row_sumexp] {
            if s.shape() != [n] {
                return Err(Error::ShapeMismatch {
                    op: OP,
                    lhs: vec![n],
                    rhs: s.shape().to_vec(),
                });
            }
        }
        if saved.count != count {
            return Err(Error::InvalidArgument {
                op: OP,
                msg: format!(
                    "saved count {} does not match the {count} non-ignored targets",
                    saved.count
                ),
            });
        }
        let gy_ok = match opts.reduction {
            Reduction::None => gy.shape() == [n],
            _ => gy.numel() == 1,
        };
        if !gy_ok {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: if opts.reduction == Reduction::None {
                    vec![n]
                } else {
                    vec![]
                },
                rhs: gy.shape().to_vec(),
            });
        }
        crate::dispatch_float!(logits.dtype(), OP, T => {
            self.cross_entropy_backward_t::<T>(logits, t, saved, gy, n, c, count, opts)
        })
    }

    fn cross_entropy_backward_t<T: RowFloat>(
        &self,
        logits: &RawTensor,
        t: Targets<'_>,
        saved: &CrossEntropySaved,
        gy: &RawTensor,
        n: usize,
        c: usize,
        count: usize,
        opts: CrossEntropyOpts,
    ) -> Result<RawTensor> {
        let xc = self.contiguous(logits)?;
        let mc = self.contiguous(&saved.row_max)?;
        let sc = self.contiguous(&saved.row_sumexp)?;
        let gyc = self.contiguous(gy)?;
        let mut gx = self.empty(logits.dtype(), &[n, c])?;
        {
            let xs = xc.as_slice::<T>()?;
            let ms = mc.as_slice::<T>()?;
            let ss = sc.as_slice::<T>()?;
            let gys = gyc.as_slice::<T>()?;
            let reduction = opts.reduction;
            // The row scale for Mean/Sum (count == 0 means every row is ignored).
            let scale0 = match reduction {
                Reduction::None => T::ZERO,
                Reduction::Mean if count == 0 => T::ZERO,
                Reduction::Mean => gys[0] / T::from_usize(count),
                Reduction::Sum => gys[0],
            };
            let eps = opts.label_smoothing;
            let keep = T::from_f64(1.0 - eps);
            let eps_c = T::from_f64(eps / c as f64);
            let ignore = opts.ignore_index;
            let gp = gx.as_mut_slice::<T>()?;
            let rpc = rows_per_chunk(c, 1);
            par_rows_mut(self, (n, c, rpc), [gp], [rpc * c], |_, r0, _, [gc]| {
                for (k, gr) in gc.chunks_exact_mut(c).enumerate() {
                    let r = r0 + k;
                    let ti = t.get(r);
                    if Some(ti) == ignore {
                        gr.fill(T::ZERO);
                        continue;
                    }
                    let s = if reduction == Reduction::None {
                        gys[r]
                    } else {
                        scale0
                    };
                    let xr = &xs[r * c..(r + 1) * c];
                    let m = ms[r];
                    let inv = T::ONE / ss[r];
                    grad_row(xr, gr, m, inv, s, eps_c, ti as usize, keep);
                }
            });
        }
        Ok(gx)
    }
}

/// Plain scalar implementations: the spec of the kernels above. `logits` is a
/// contiguous row-major `[n, c]` vector, `targets` the class indices.
pub mod reference {
    use super::{CrossEntropyOpts, Reduction};
    use crate::dtype::Float;

    /// `(m, Σ_j exp(x_j − m))` of one row, `m` its maximum.
    fn max_and_sum_exp<T: Float>(xr: &[T]) -> (T, T) {
        let mut m = T::NEG_INFINITY;
        for &v in xr {
            m = m.max(v);
        }
        let mut s = T::ZERO;
        for &v in xr {
            s += (v - m).exp();
        }
        (m, s)
    }

    /// The smoothed target distribution `q_j = (1−ε)·[j == t] + ε/C` at class `j`.
    fn target_weight<T: Float>(eps: f64, c: usize, j: usize, t: i64) -> T {
        T::from_f64(eps / c as f64)
            + if j as i64 == t {
                T::from_f64(1.0 - eps)
            } else {
                T::ZERO
            }
    }

    /// Per-row losses (0 for ignored rows), and the count of non-ignored rows.
    /// Targets must be valid (in range or ignored).
    pub fn cross_entropy_rows<T: Float>(
        logits: &[T],
        c: usize,
        targets: &[i64],
        opts: CrossEntropyOpts,
    ) -> (Vec<T>, usize) {
        let eps = opts.label_smoothing;
        let mut count = 0;
        let rows = logits
            .chunks(c)
            .zip(targets)
            .map(|(xr, &t)| {
                if Some(t) == opts.ignore_index {
                    return T::ZERO;
                }
                count += 1;
                let (m, s) = max_and_sum_exp(xr);
                let lse = m + s.ln();
                // −Σ_j q_j log p_j with q = (1−ε)·onehot + ε/C and log p_j = x_j − lse.
                let mut l = T::ZERO;
                for (j, &v) in xr.iter().enumerate() {
                    l -= target_weight::<T>(eps, c, j, t) * (v - lse);
                }
                l
            })
            .collect();
        (rows, count)
    }

    /// The loss: per-row for `Reduction::None`, else a one-element vector.
    pub fn cross_entropy<T: Float>(
        logits: &[T],
        c: usize,
        targets: &[i64],
        opts: CrossEntropyOpts,
    ) -> Vec<T> {
        let (rows, count) = cross_entropy_rows(logits, c, targets, opts);
        let total: f64 = rows.iter().map(|v| v.to_f64()).sum();
        match opts.reduction {
            Reduction::None => rows,
            Reduction::Sum => vec![T::from_f64(total)],
            Reduction::Mean if count == 0 => vec![T::ZERO],
            Reduction::Mean => vec![T::from_f64(total / count as f64)],
        }
    }

    /// The gradient w.r.t. the logits; `gy` has one element for Mean/Sum, `n` for None.
    pub fn cross_entropy_backward<T: Float>(
        logits: &[T],
        c: usize,
        targets: &[i64],
        gy: &[T],
        opts: CrossEntropyOpts,
    ) -> Vec<T> {
        let eps = opts.label_smoothing;
        let count = targets
            .iter()
            .filter(|&&t| Some(t) != opts.ignore_index)
            .count();
        let mut g = vec![T::ZERO; logits.len()];
        for (i, (xr, gr)) in logits.chunks(c).zip(g.chunks_mut(c)).enumerate() {
            let t = targets[i];
            if Some(t) == opts.ignore_index {
                continue;
            }
            let s = match opts.reduction {
                Reduction::None => gy[i],
                Reduction::Sum => gy[0],
                Reduction::Mean => gy[0] / T::from_usize(count),
            };
            let (m, z) = max_and_sum_exp(xr);
            for j in 0..c {
                gr[j] = s * ((xr[j] - m).exp() / z - target_weight::<T>(eps, c, j, t));
            }
        }
        g
    }
}
