//! The materialising attention kernel that fucina shipped before the streaming one: it
//! writes the full `[B, H, T, S]` probability tensor and its backward reads it back.
//!
//! Not part of the library: it is the comparison for `benches/benches/attention.rs`, and
//! `benches/tests/materialising.rs` checks it against the scalar reference so the
//! comparison stays honest; models use [`ExecContext::attention`]. Built on fucina-core's
//! public API only: q, k, v are made contiguous (a copy for the benchmark's head views,
//! a few milliseconds against the kernel's hundreds), and a mask is expanded to
//! `[B, H, T, S]` (this kernel materialises that block anyway). Forward chunks are fixed (head, 16-row block)
//! pairs and backward chunks are heads, so results are bitwise identical for any thread
//! count. Fully masked rows give zero probabilities, not NaN. No grouped-query attention:
//! k and v must have q's head count.

use fucina_core::kernels::fused::attention::{prepare_mask, AttentionOpts};
use fucina_core::{dispatch_float, DType, Element, Error, ExecContext, Float, RawTensor, Result};

/// A contiguous rank-4 operand `[B, H, L, C]`: row `r` of head `(b, h)` is the `C`
/// elements from `((b·H + h)·L + r)·C`.
#[derive(Clone, Copy)]
struct Heads<'a, T> {
    data: &'a [T],
    /// `[H, L, C]`.
    dims: [usize; 3],
}

impl<'a, T: Element> Heads<'a, T> {
    /// `t` must be contiguous (the public entry points copy their operands).
    fn new(t: &'a RawTensor) -> Result<Heads<'a, T>> {
        let s = t.shape();
        Ok(Heads {
            data: t.as_slice::<T>()?,
            dims: [s[1], s[2], s[3]],
        })
    }

    /// Row `r` of head `(b, h)`.
    #[inline(always)]
    fn row(&self, b: usize, h: usize, r: usize) -> &'a [T] {
        let [nh, len, cols] = self.dims;
        let at = ((b * nh + h) * len + r) * cols;
        &self.data[at..at + cols]
    }
}

/// The contiguous q `[B, H, T, D]`, k `[B, H, S, D]` and v `[B, H, S, Dv]` of one problem,
/// with its sizes `(B, H, T, S, D, Dv)` (as [`dims`] returns them).
#[derive(Clone, Copy)]
struct Qkv<'a, T> {
    q: Heads<'a, T>,
    k: Heads<'a, T>,
    v: Heads<'a, T>,
    dims: (usize, usize, usize, usize, usize, usize),
}

impl<'a, T: Element> Qkv<'a, T> {
    /// `q`, `k` and `v` must be contiguous, of the sizes `dims`.
    fn new(
        [q, k, v]: [&'a RawTensor; 3],
        dims: (usize, usize, usize, usize, usize, usize),
    ) -> Result<Qkv<'a, T>> {
        Ok(Qkv {
            q: Heads::new(q)?,
            k: Heads::new(k)?,
            v: Heads::new(v)?,
            dims,
        })
    }
}

/// The mask, expanded to a contiguous `[B, H, T, S]`: row `(b, h, i)` is at
/// `((b·H + h)·T + i)·S`.
enum Mask<'a, T> {
    None,
    Bias(&'a [T]),
    Keep(&'a [u8]),
}

impl<T: Float> Mask<'_, T> {
    /// The raw score `s` of element `at` of the expanded mask after masking (-inf if hidden).
    #[inline]
    fn apply(&self, at: usize, s: T) -> T {
        match self {
            Mask::None => s,
            Mask::Bias(m) => s + m[at],
            Mask::Keep(m) if m[at] == 0 => T::NEG_INFINITY,
            Mask::Keep(_) => s,
        }
    }
}

/// `mask` (a U8 keep-mask or an f32/f64 bias, broadcastable to `full`) as a contiguous
/// `[B, H, T, S]` keep-mask or a bias of `dtype`: the library's validation and conversion
/// ([`prepare_mask`]), then expanded.
fn expand_mask(
    ctx: &ExecContext,
    op: &'static str,
    mask: Option<&RawTensor>,
    dtype: DType,
    full: [usize; 4],
) -> Result<Option<RawTensor>> {
    prepare_mask(ctx, op, mask, dtype, full)?
        .map(|m| ctx.contiguous(&m))
        .transpose()
}

/// `(B, H, T, S, D, Dv)` of q `[B, H, T, D]`, k `[B, H, S, D]`, v `[B, H, S, Dv]` of one
/// dtype; an [`Error::InvalidArgument`] naming the shapes otherwise (grouped-query shapes,
/// with fewer k/v heads than query heads, included).
fn dims(
    op: &'static str,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
) -> Result<(usize, usize, usize, usize, usize, usize)> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let fits = [qs, ks, vs].iter().all(|s| s.len() == 4)
        && k.dtype() == q.dtype()
        && v.dtype() == q.dtype()
        && ks[..2] == qs[..2]
        && ks[3] == qs[3]
        && vs[..3] == ks[..3];
    if !fits {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "q [B, H, T, D], k [B, H, S, D], v [B, H, S, Dv] of one dtype (no grouped-query \
                 attention), got q {qs:?} {}, k {ks:?} {}, v {vs:?} {}",
                q.dtype(),
                k.dtype(),
                v.dtype()
            ),
        });
    }
    Ok((qs[0], qs[1], qs[2], ks[2], qs[3], vs[3]))
}

/// An error unless `t` is `want` of `dtype`.
fn expect_shape(op: &'static str, t: &RawTensor, want: &[usize], dtype: DType) -> Result<()> {
    if t.shape() != want || t.dtype() != dtype {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "expected {want:?} {dtype}, got {:?} {}",
                t.shape(),
                t.dtype()
            ),
        });
    }
    Ok(())
}

/// Query rows per forward chunk (fixed: never derived from the thread count).
const ROW_BLOCK: usize = 16;

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

/// The forward kernel: probs and out are fresh contiguous outputs.
fn attention_fwd<T: Float>(
    ctx: &ExecContext,
    qkv: Qkv<'_, T>,
    mask: &Mask<'_, T>,
    causal: bool,
    scale: T,
    out: &mut RawTensor,
    probs: &mut RawTensor,
) -> Result<()> {
    let (nb, nh, nt, ns, d, dv) = qkv.dims;
    let outs = [
        &mut out.as_mut_slice::<T>()?[..nb * nh * nt * dv],
        &mut probs.as_mut_slice::<T>()?[..nb * nh * nt * ns],
    ];
    let n_tb = nt.div_ceil(ROW_BLOCK);
    let n_chunks = nb * nh * n_tb;
    let work = nb * nh * nt * ns * (d + dv);
    // Chunk c = (bh, tb) owns rows bh*nt + tb*ROW_BLOCK .. (+ ROW_BLOCK, within the head).
    let first_row = |c: usize| (c / n_tb) * nt + (c % n_tb) * ROW_BLOCK;
    ctx.par_split_mut_n(
        outs,
        [dv, ns],
        n_chunks,
        work >= 1 << 15,
        first_row,
        |c, [oc, pc]| {
            let (bh, tb) = (c / n_tb, c % n_tb);
            let (b, h) = (bh / nh, bh % nh);
            let i0 = tb * ROW_BLOCK;
            for i in i0..((tb + 1) * ROW_BLOCK).min(nt) {
                let k = i - i0;
                let (p, o) = (&mut pc[k * ns..(k + 1) * ns], &mut oc[k * dv..(k + 1) * dv]);
                // Causal: keys j <= i + (S - T) are visible.
                let jmax = if causal {
                    (i + ns + 1).saturating_sub(nt).min(ns)
                } else {
                    ns
                };
                let qi = qkv.q.row(b, h, i);
                let mut m = T::NEG_INFINITY;
                for j in 0..jmax {
                    let s = mask.apply(
                        ((b * nh + h) * nt + i) * ns + j,
                        dot(qi, qkv.k.row(b, h, j)) * scale,
                    );
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
                        axpy(o, *x, qkv.v.row(b, h, j));
                    }
                }
            }
        },
    );
    Ok(())
}

/// The backward kernel for one dtype; see [`attention_backward`] for the math.
fn attention_bwd<T: Float>(
    ctx: &ExecContext,
    qkv: Qkv<'_, T>,
    [probs, g_out]: [&RawTensor; 2],
    scale: T,
    needs: [bool; 3],
) -> Result<(Option<RawTensor>, Option<RawTensor>, Option<RawTensor>)> {
    let (nb, nh, nt, ns, d, dv) = qkv.dims;
    let pr = probs.as_slice::<T>()?;
    let gr = g_out.as_slice::<T>()?;
    let need_s = needs[0] || needs[1];
    let mut gq = if needs[0] {
        Some(ctx.empty(T::DTYPE, &[nb, nh, nt, d])?)
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
    // Chunk bh owns head bh's rows of gq/gk/gv and its gs row (an absent output is an empty
    // slice with chunk length 0).
    fn out<T: Float>(t: &mut Option<RawTensor>, per: usize) -> Result<(&mut [T], usize)> {
        Ok(match t {
            Some(t) => (t.as_mut_slice::<T>()?, per),
            None => (&mut [][..], 0),
        })
    }
    let (gqs, gq_len) = out(&mut gq, nt * d)?;
    let (gks, gk_len) = out(&mut gk, ns * d)?;
    let (gvs, gv_len) = out(&mut gv, ns * dv)?;
    let gs_len = if need_s { ns } else { 0 };
    let has = (gq_len > 0, gk_len > 0, gv_len > 0);
    let work = n_heads * nt * ns * (d + dv);
    let outs = [gqs, gks, gvs, &mut gs_buf[..]];
    let lens = [gq_len, gk_len, gv_len, gs_len];
    ctx.par_chunks_mut_n(
        outs,
        lens,
        n_heads,
        work >= 1 << 15,
        |bh, [gq_h, gk_h, gv_h, gs]| {
            let (b, h) = (bh / nh, bh % nh);
            let mut gq_h = has.0.then_some(gq_h);
            let mut gk_h = has.1.then_some(gk_h);
            let mut gv_h = has.2.then_some(gv_h);
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
                        let gp = dot(g, qkv.v.row(b, h, j));
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
                if let Some(gq_h) = gq_h.as_deref_mut() {
                    let gq_i = &mut gq_h[i * d..(i + 1) * d];
                    gq_i.fill(T::ZERO);
                    for (j, &c) in gs.iter().enumerate() {
                        if c != T::ZERO {
                            axpy(gq_i, c, qkv.k.row(b, h, j));
                        }
                    }
                }
                if let Some(gk_h) = gk_h.as_deref_mut() {
                    let qi = qkv.q.row(b, h, i);
                    for (j, &c) in gs.iter().enumerate() {
                        if c != T::ZERO {
                            axpy(&mut gk_h[j * d..(j + 1) * d], c, qi);
                        }
                    }
                }
            }
        },
    );
    drop(gs_buf);
    Ok((gq, gk, gv))
}

/// The materialising forward: `(out [B,H,T,Dv], probs [B,H,T,S])`, with the arguments of
/// [`ExecContext::attention`].
pub fn attention(
    ctx: &ExecContext,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    mask: Option<&RawTensor>,
    opts: AttentionOpts,
) -> Result<(RawTensor, RawTensor)> {
    const OP: &str = "attention_materialising";
    let sizes = dims(OP, q, k, v)?;
    let (nb, nh, nt, ns, d, dv) = sizes;
    let full = [nb, nh, nt, ns];
    let mask = expand_mask(ctx, OP, mask, q.dtype(), full)?;
    let (q, k, v) = (ctx.contiguous(q)?, ctx.contiguous(k)?, ctx.contiguous(v)?);
    let mut out = ctx.empty(q.dtype(), &[nb, nh, nt, dv])?;
    let mut probs = ctx.empty(q.dtype(), &full)?;
    let scale = opts.scale_for(d);
    dispatch_float!(q.dtype(), OP, T => {
        let mk = match &mask {
            None => Mask::None,
            Some(m) if m.dtype() == DType::U8 => Mask::Keep(m.as_slice::<u8>()?),
            Some(m) => Mask::Bias(m.as_slice::<T>()?),
        };
        let qkv = Qkv::<T>::new([&q, &k, &v], sizes)?;
        attention_fwd::<T>(ctx, qkv, &mk, opts.causal, T::from_f64(scale), &mut out, &mut probs)
    })?;
    Ok((out, probs))
}

/// The materialising backward from `probs` and the upstream `g_out` `[B,H,T,Dv]`; `needs` =
/// which of (gq, gk, gv) to compute. Masking is already in probs (masked entries are 0).
/// Per head, with s = scale:
/// ```text
/// gv = probsᵀ · g                     gp = g · vᵀ
/// gs = probs ∘ (gp − rowsum(gp ∘ probs))   (softmax backward)
/// gq = s · gs · k                     gk = s · gsᵀ · q
/// ```
pub fn attention_backward(
    ctx: &ExecContext,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    probs: &RawTensor,
    g_out: &RawTensor,
    opts: AttentionOpts,
    needs: [bool; 3],
) -> Result<(Option<RawTensor>, Option<RawTensor>, Option<RawTensor>)> {
    const OP: &str = "attention_materialising_backward";
    let sizes = dims(OP, q, k, v)?;
    let (nb, nh, nt, ns, d, dv) = sizes;
    expect_shape(OP, probs, &[nb, nh, nt, ns], q.dtype())?;
    expect_shape(OP, g_out, &[nb, nh, nt, dv], q.dtype())?;
    let (q, k, v) = (ctx.contiguous(q)?, ctx.contiguous(k)?, ctx.contiguous(v)?);
    let probs = ctx.contiguous(probs)?;
    let g_out = ctx.contiguous(g_out)?;
    let scale = opts.scale_for(d);
    dispatch_float!(q.dtype(), OP, T => {
        let qkv = Qkv::<T>::new([&q, &k, &v], sizes)?;
        attention_bwd::<T>(ctx, qkv, [&probs, &g_out], T::from_f64(scale), needs)
    })
}
