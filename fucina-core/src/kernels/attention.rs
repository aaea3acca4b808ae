//! Scaled dot-product attention (causal, additive-bias and keep masks) and its backward.
//!
//! Self-contained per-(batch, head) loops over contiguous inner rows: q, k, v may be
//! any view whose last axis has stride 1 (e.g. heads transposed out of `[B, T, H, D]`)
//! and are read in place; other layouts are copied once. Forward chunks are fixed
//! (head, 16-row block) pairs and backward chunks are heads, so results are bitwise
//! identical for any thread count. Fully masked rows give zero probabilities, not NaN.

use crate::dtype::{DType, Element, Float};
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::kernels::copy::SendPtr;
use crate::tensor::RawTensor;

/// Query rows per forward chunk (fixed: never derived from the thread count).
const ROW_BLOCK: usize = 16;

/// Options of [`ExecContext::attention`].
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct AttentionOpts {
    /// Mask key `j` for query `i` when `j > i + (S - T)` (bottom-right aligned, as PyTorch
    /// with `T == S`, and as a KV cache when `T < S`).
    pub causal: bool,
    /// Score scale; `None` is `1 / sqrt(D)`.
    pub scale: Option<f64>,
}

impl AttentionOpts {
    /// The scale used for head dim `d`.
    pub fn scale_for(&self, d: usize) -> f64 {
        self.scale.unwrap_or(1.0 / (d.max(1) as f64).sqrt())
    }
}

/// Sum of `a[i] * b[i]` in 8 interleaved lanes (vectorisable; order fixed by the length).
#[inline]
fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [T::ZERO; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = T::ZERO;
    for (&x, &y) in ca.remainder().iter().zip(cb.remainder()) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// `y += alpha * x`.
#[inline]
fn axpy<T: Float>(y: &mut [T], alpha: T, x: &[T]) {
    for (v, &u) in y.iter_mut().zip(x) {
        *v += alpha * u;
    }
}

/// A rank-4 operand read in place: head (b, h) row r starts at
/// `off + b*sb + h*sh + r*sr` and its `cols` elements are contiguous.
struct Heads<'a, T> {
    st: &'a [T],
    off: usize,
    sb: usize,
    sh: usize,
    sr: usize,
    cols: usize,
}

impl<'a, T: Float> Heads<'a, T> {
    fn new(t: &'a RawTensor) -> Result<Heads<'a, T>> {
        let s = t.strides();
        Ok(Heads {
            st: t.storage::<T>()?,
            off: t.offset(),
            sb: s[0],
            sh: s[1],
            sr: s[2],
            cols: t.shape()[3],
        })
    }

    #[inline]
    fn row(&self, b: usize, h: usize, r: usize) -> &'a [T] {
        let base = self.off + b * self.sb + h * self.sh + r * self.sr;
        &self.st[base..base + self.cols]
    }
}

/// `t` itself when its last axis is unit-stride (or of length ≤ 1), else a contiguous copy.
fn rows_readable(ctx: &ExecContext, t: &RawTensor) -> Result<RawTensor> {
    if t.strides()[3] == 1 || t.shape()[3] <= 1 {
        Ok(t.clone_view())
    } else {
        ctx.copy(t)
    }
}

/// The mask, broadcast to `[B, H, T, S]` and read through strides.
enum Mask<'a, T> {
    None,
    Bias(&'a [T], [usize; 4], usize),
    Keep(&'a [u8], [usize; 4], usize),
}

impl<T: Float> Mask<'_, T> {
    /// Applies the mask to the raw score of (b, h, i, j); masked entries become -inf.
    #[inline]
    fn apply(&self, b: usize, h: usize, i: usize, j: usize, s: T) -> T {
        match self {
            Mask::None => s,
            Mask::Bias(m, st, o) => s + m[o + b * st[0] + h * st[1] + i * st[2] + j * st[3]],
            Mask::Keep(m, st, o) => {
                if m[o + b * st[0] + h * st[1] + i * st[2] + j * st[3]] == 0 {
                    T::NEG_INFINITY
                } else {
                    s
                }
            }
        }
    }
}

fn strides4(t: &RawTensor) -> [usize; 4] {
    let s = t.strides();
    [s[0], s[1], s[2], s[3]]
}

/// Shape checks shared by forward and backward; returns (B, H, T, S, D, Dv).
fn check_qkv(
    op: &'static str,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
) -> Result<(usize, usize, usize, usize, usize, usize)> {
    for t in [q, k, v] {
        if t.rank() != 4 {
            return Err(Error::InvalidArgument {
                op,
                msg: format!("q, k, v must be rank 4 [B, H, *, D], got {:?}", t.shape()),
            });
        }
        if t.dtype() != q.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: q.dtype(),
                rhs: t.dtype(),
            });
        }
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if ks[0] != qs[0] || ks[1] != qs[1] || ks[3] != qs[3] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: qs.to_vec(),
            rhs: ks.to_vec(),
        });
    }
    if vs[0] != qs[0] || vs[1] != qs[1] || vs[2] != ks[2] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: ks.to_vec(),
            rhs: vs.to_vec(),
        });
    }
    Ok((qs[0], qs[1], qs[2], ks[2], qs[3], vs[3]))
}

fn expect_shape(op: &'static str, t: &RawTensor, want: [usize; 4], dtype: DType) -> Result<()> {
    if t.shape() != want {
        return Err(Error::ShapeMismatch {
            op,
            lhs: t.shape().to_vec(),
            rhs: want.to_vec(),
        });
    }
    if t.dtype() != dtype {
        return Err(Error::DTypeMismatch {
            op,
            lhs: dtype,
            rhs: t.dtype(),
        });
    }
    Ok(())
}

/// The forward kernel: probs and out are fresh contiguous outputs.
fn attention_fwd<T: Float>(
    ctx: &ExecContext,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    mask: &Mask<'_, T>,
    causal: bool,
    scale: T,
    out: &mut RawTensor,
    probs: &mut RawTensor,
) -> Result<()> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (nb, nh, nt, ns, dv) = (qs[0], qs[1], qs[2], ks[2], vs[3]);
    let (qh, kh, vh) = (
        Heads::<T>::new(q)?,
        Heads::<T>::new(k)?,
        Heads::<T>::new(v)?,
    );
    let out_ptr = SendPtr(out.as_mut_slice::<T>()?.as_mut_ptr());
    let probs_ptr = SendPtr(probs.as_mut_slice::<T>()?.as_mut_ptr());
    let n_tb = nt.div_ceil(ROW_BLOCK);
    let n_chunks = nb * nh * n_tb;
    let work = nb * nh * nt * ns * (qs[3] + dv);
    ctx.for_chunks(n_chunks, work >= 1 << 15, |c| {
        let (op, pp) = (out_ptr, probs_ptr);
        let (bh, tb) = (c / n_tb, c % n_tb);
        let (b, h) = (bh / nh, bh % nh);
        for i in tb * ROW_BLOCK..((tb + 1) * ROW_BLOCK).min(nt) {
            let row = bh * nt + i;
            // SAFETY: row (b, h, i) of probs and out is written by this chunk only.
            let (p, o) = unsafe {
                (
                    std::slice::from_raw_parts_mut(pp.0.add(row * ns), ns),
                    std::slice::from_raw_parts_mut(op.0.add(row * dv), dv),
                )
            };
            // Causal: keys j <= i + (S - T) are visible.
            let jmax = if causal {
                (i + ns + 1).saturating_sub(nt).min(ns)
            } else {
                ns
            };
            let qi = qh.row(b, h, i);
            let mut m = T::NEG_INFINITY;
            for j in 0..jmax {
                let s = mask.apply(b, h, i, j, dot(qi, kh.row(b, h, j)) * scale);
                p[j] = s;
                m = m.max(s);
            }
            p[jmax..].fill(T::ZERO);
            o.fill(T::ZERO);
            if m == T::NEG_INFINITY {
                // Fully masked row: zero probabilities and a zero output.
                p[..jmax].fill(T::ZERO);
                continue;
            }
            let mut sum = T::ZERO;
            for x in p[..jmax].iter_mut() {
                let e = (*x - m).exp();
                *x = e;
                sum += e;
            }
            let inv = T::ONE / sum;
            for (j, x) in p[..jmax].iter_mut().enumerate() {
                *x *= inv;
                if *x != T::ZERO {
                    axpy(o, *x, vh.row(b, h, j));
                }
            }
        }
    });
    Ok(())
}

/// The backward kernel for one dtype; see [`ExecContext::attention_backward`] for the math.
fn attention_bwd<T: Float>(
    ctx: &ExecContext,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    probs: &RawTensor,
    g_out: &RawTensor,
    scale: T,
    needs: [bool; 3],
) -> Result<(Option<RawTensor>, Option<RawTensor>, Option<RawTensor>)> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (nb, nh, nt, ns, d, dv) = (qs[0], qs[1], qs[2], ks[2], qs[3], vs[3]);
    let (qh, kh, vh) = (
        Heads::<T>::new(q)?,
        Heads::<T>::new(k)?,
        Heads::<T>::new(v)?,
    );
    let pr = probs.as_slice::<T>()?;
    let gr = g_out.as_slice::<T>()?;
    let need_s = needs[0] || needs[1];
    let mut gq = if needs[0] {
        Some(ctx.empty(T::DTYPE, qs)?)
    } else {
        None
    };
    let mut gk = if needs[1] {
        Some(ctx.zeros(T::DTYPE, &[nb, nh, ns, d])?)
    } else {
        None
    };
    let mut gv = if needs[2] {
        Some(ctx.zeros(T::DTYPE, &[nb, nh, ns, dv])?)
    } else {
        None
    };
    let n_heads = nb * nh;
    // One row of d(scores) per head, leased up front so chunks cannot fail.
    let mut gs_buf = ctx
        .pool()
        .scratch::<T>(if need_s { n_heads * ns } else { 0 })?;
    let ptr = |t: &mut Option<RawTensor>| -> Result<Option<SendPtr<T>>> {
        Ok(match t {
            Some(t) => Some(SendPtr(t.as_mut_slice::<T>()?.as_mut_ptr())),
            None => None,
        })
    };
    let (gq_ptr, gk_ptr, gv_ptr) = (ptr(&mut gq)?, ptr(&mut gk)?, ptr(&mut gv)?);
    let gs_ptr = SendPtr(gs_buf.as_mut_ptr());
    let work = n_heads * nt * ns * (d + dv);
    ctx.for_chunks(n_heads, work >= 1 << 15, |bh| {
        let (gqp, gkp, gvp, gsp) = (gq_ptr, gk_ptr, gv_ptr, gs_ptr);
        let (b, h) = (bh / nh, bh % nh);
        // SAFETY (all slices below): head bh's rows of gq/gk/gv and its gs row are
        // owned by this chunk only; the buffers hold n_heads such blocks.
        let gk_h =
            gkp.map(|p| unsafe { std::slice::from_raw_parts_mut(p.0.add(bh * ns * d), ns * d) });
        let gv_h =
            gvp.map(|p| unsafe { std::slice::from_raw_parts_mut(p.0.add(bh * ns * dv), ns * dv) });
        let (mut gk_h, mut gv_h) = (gk_h, gv_h);
        let gs = if need_s {
            unsafe { std::slice::from_raw_parts_mut(gsp.0.add(bh * ns), ns) }
        } else {
            &mut [][..]
        };
        for i in 0..nt {
            let row = bh * nt + i;
            let p = &pr[row * ns..(row + 1) * ns];
            let g = &gr[row * dv..(row + 1) * dv];
            // gv[j] += p[i, j] * g[i]   (gv = probsᵀ · g), i increasing.
            if let Some(gv_h) = gv_h.as_deref_mut() {
                for (j, &pj) in p.iter().enumerate() {
                    if pj != T::ZERO {
                        axpy(&mut gv_h[j * dv..(j + 1) * dv], pj, g);
                    }
                }
            }
            if !need_s {
                continue;
            }
            // gp[j] = g[i] · v[j]; r = Σ_j gp[j] p[j]; gs[j] = p[j] (gp[j] - r).
            // Where p[i, j] = 0 (masked or underflowed) gs[j] = 0 and is skipped.
            let mut r = T::ZERO;
            for (j, &pj) in p.iter().enumerate() {
                gs[j] = if pj != T::ZERO {
                    let gp = dot(g, vh.row(b, h, j));
                    r += gp * pj;
                    gp
                } else {
                    T::ZERO
                };
            }
            for (x, &pj) in gs.iter_mut().zip(p) {
                *x = pj * (*x - r) * scale;
            }
            // gq[i] = scale Σ_j gs[j] k[j];  gk[j] += scale gs[j] q[i].
            if let Some(gqp) = gqp {
                // SAFETY: row (b, h, i) of gq belongs to this chunk.
                let gq_i = unsafe { std::slice::from_raw_parts_mut(gqp.0.add(row * d), d) };
                gq_i.fill(T::ZERO);
                for (j, &c) in gs.iter().enumerate() {
                    if c != T::ZERO {
                        axpy(gq_i, c, kh.row(b, h, j));
                    }
                }
            }
            if let Some(gk_h) = gk_h.as_deref_mut() {
                let qi = qh.row(b, h, i);
                for (j, &c) in gs.iter().enumerate() {
                    if c != T::ZERO {
                        axpy(&mut gk_h[j * d..(j + 1) * d], c, qi);
                    }
                }
            }
        }
    });
    drop(gs_buf);
    Ok((gq, gk, gv))
}

impl ExecContext {
    /// Scaled dot-product attention. `q [B,H,T,D]`, `k [B,H,S,D]`, `v [B,H,S,Dv]` (f32/f64,
    /// any strides). `mask`: an additive f32/f64 bias broadcastable to `[B,H,T,S]` (e.g. a
    /// `[B,1,1,S]` padding bias of 0 / -1e4 or -inf) or a U8 keep-mask broadcastable to
    /// `[B,H,T,S]` (0 = masked). Causal masks `j > i + (S - T)`.
    ///
    /// Returns `(out [B,H,T,Dv], probs [B,H,T,S])`: probs is the softmax the backward needs.
    /// Fully masked rows give zero probabilities (and a zero output), not NaN.
    pub fn attention(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        mask: Option<&RawTensor>,
        opts: AttentionOpts,
    ) -> Result<(RawTensor, RawTensor)> {
        const OP: &str = "attention";
        let (nb, nh, nt, ns, d, dv) = check_qkv(OP, q, k, v)?;
        let full = [nb, nh, nt, ns];
        let mask = match mask {
            None => None,
            Some(m) => {
                let m = m.broadcast_to(&full).map_err(|_| Error::Broadcast {
                    op: OP,
                    lhs: m.shape().to_vec(),
                    rhs: full.to_vec(),
                })?;
                match m.dtype() {
                    DType::U8 => Some(m),
                    DType::F32 | DType::F64 => Some(self.to_dtype(&m, q.dtype())?),
                    dt => return Err(Error::UnsupportedDType { op: OP, dtype: dt }),
                }
            }
        };
        let (q, k, v) = (
            rows_readable(self, q)?,
            rows_readable(self, k)?,
            rows_readable(self, v)?,
        );
        let mut out = self.empty(q.dtype(), &[nb, nh, nt, dv])?;
        let mut probs = self.empty(q.dtype(), &full)?;
        let scale = opts.scale_for(d);
        crate::dispatch_float!(q.dtype(), OP, T => {
            let mk = match &mask {
                None => Mask::None,
                Some(m) if m.dtype() == DType::U8 => {
                    Mask::Keep(m.storage::<u8>()?, strides4(m), m.offset())
                }
                Some(m) => Mask::Bias(m.storage::<T>()?, strides4(m), m.offset()),
            };
            attention_fwd::<T>(self, &q, &k, &v, &mk, opts.causal, T::from_f64(scale), &mut out, &mut probs)
        })?;
        Ok((out, probs))
    }

    /// Backward of [`ExecContext::attention`] from its `probs` and the upstream `g_out`
    /// `[B,H,T,Dv]`; `needs` = which of (gq, gk, gv) to compute. Masking is already in
    /// probs (masked entries are 0), so no mask is needed. Per head, with s = scale:
    /// ```text
    /// gv = probsᵀ · g                     gp = g · vᵀ
    /// gs = probs ∘ (gp − rowsum(gp ∘ probs))   (softmax backward)
    /// gq = s · gs · k                     gk = s · gsᵀ · q
    /// ```
    pub fn attention_backward(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        probs: &RawTensor,
        g_out: &RawTensor,
        opts: AttentionOpts,
        needs: [bool; 3],
    ) -> Result<(Option<RawTensor>, Option<RawTensor>, Option<RawTensor>)> {
        const OP: &str = "attention_backward";
        let (nb, nh, nt, ns, d, dv) = check_qkv(OP, q, k, v)?;
        expect_shape(OP, probs, [nb, nh, nt, ns], q.dtype())?;
        expect_shape(OP, g_out, [nb, nh, nt, dv], q.dtype())?;
        let (q, k, v) = (
            rows_readable(self, q)?,
            rows_readable(self, k)?,
            rows_readable(self, v)?,
        );
        let probs = self.contiguous(probs)?;
        let g_out = self.contiguous(g_out)?;
        let scale = opts.scale_for(d);
        crate::dispatch_float!(q.dtype(), OP, T => {
            attention_bwd::<T>(self, &q, &k, &v, &probs, &g_out, T::from_f64(scale), needs)
        })
    }
}

/// Scalar reference implementations: the spec of this file's kernels. Tensors are
/// row-major slices; masks are given already broadcast to `[B, H, T, S]`.
pub mod reference {
    use crate::dtype::Float;

    /// Problem sizes: q `[b,h,t,d]`, k `[b,h,s,d]`, v `[b,h,s,dv]`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct AttnDims {
        /// Batch.
        pub b: usize,
        /// Heads.
        pub h: usize,
        /// Query length.
        pub t: usize,
        /// Key length.
        pub s: usize,
        /// Query/key head dim.
        pub d: usize,
        /// Value head dim.
        pub dv: usize,
    }

    /// A full `[B, H, T, S]` mask.
    #[derive(Clone, Copy, Debug)]
    pub enum RefMask<'a, T> {
        /// No mask.
        None,
        /// Additive bias.
        Bias(&'a [T]),
        /// Keep mask (0 = masked).
        Keep(&'a [u8]),
    }

    /// Returns `(out, probs)`: scores `q·kᵀ·scale + bias` (masked → -inf), softmax over
    /// keys (fully masked rows → 0), `out = probs · v`.
    pub fn attention<T: Float>(
        q: &[T],
        k: &[T],
        v: &[T],
        dims: AttnDims,
        mask: RefMask<'_, T>,
        causal: bool,
        scale: f64,
    ) -> (Vec<T>, Vec<T>) {
        let AttnDims { b, h, t, s, d, dv } = dims;
        let scale = T::from_f64(scale);
        let mut out = vec![T::ZERO; b * h * t * dv];
        let mut probs = vec![T::ZERO; b * h * t * s];
        for bh in 0..b * h {
            for i in 0..t {
                let row = bh * t + i;
                let mut sc = vec![T::NEG_INFINITY; s];
                for j in 0..s {
                    if causal && j + t > i + s {
                        continue;
                    }
                    let mut acc = T::ZERO;
                    for x in 0..d {
                        acc += q[row * d + x] * k[(bh * s + j) * d + x];
                    }
                    sc[j] = match mask {
                        RefMask::None => acc * scale,
                        RefMask::Bias(m) => acc * scale + m[row * s + j],
                        RefMask::Keep(m) => {
                            if m[row * s + j] == 0 {
                                T::NEG_INFINITY
                            } else {
                                acc * scale
                            }
                        }
                    };
                }
                let m = sc.iter().fold(T::NEG_INFINITY, |a, &x| a.max(x));
                if m == T::NEG_INFINITY {
                    continue;
                }
                let e: Vec<T> = sc.iter().map(|&x| (x - m).exp()).collect();
                let sum: T = e.iter().copied().sum();
                for j in 0..s {
                    let p = e[j] / sum;
                    probs[row * s + j] = p;
                    for x in 0..dv {
                        out[row * dv + x] += p * v[(bh * s + j) * dv + x];
                    }
                }
            }
        }
        (out, probs)
    }

    /// Returns `(gq, gk, gv)` by the formulas of `ExecContext::attention_backward`.
    pub fn attention_backward<T: Float>(
        q: &[T],
        k: &[T],
        v: &[T],
        probs: &[T],
        g: &[T],
        dims: AttnDims,
        scale: f64,
    ) -> (Vec<T>, Vec<T>, Vec<T>) {
        let AttnDims { b, h, t, s, d, dv } = dims;
        let scale = T::from_f64(scale);
        let mut gq = vec![T::ZERO; b * h * t * d];
        let mut gk = vec![T::ZERO; b * h * s * d];
        let mut gv = vec![T::ZERO; b * h * s * dv];
        for bh in 0..b * h {
            for i in 0..t {
                let row = bh * t + i;
                let gp: Vec<T> = (0..s)
                    .map(|j| {
                        (0..dv)
                            .map(|x| g[row * dv + x] * v[(bh * s + j) * dv + x])
                            .sum()
                    })
                    .collect();
                let r: T = (0..s).map(|j| gp[j] * probs[row * s + j]).sum();
                for j in 0..s {
                    let p = probs[row * s + j];
                    let gs = p * (gp[j] - r);
                    for x in 0..dv {
                        gv[(bh * s + j) * dv + x] += p * g[row * dv + x];
                    }
                    for x in 0..d {
                        gq[row * d + x] += scale * gs * k[(bh * s + j) * d + x];
                        gk[(bh * s + j) * d + x] += scale * gs * q[row * d + x];
                    }
                }
            }
        }
        (gq, gk, gv)
    }
}
