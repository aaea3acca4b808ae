//! Scaled dot-product attention (causal, additive-bias and keep masks) and its backward,
//! streamed over key blocks (flash attention's algorithm on the CPU).
//!
//! Invariants: no `[T, S]` score or probability block wider than one (query block, key
//! block) tile ever exists: the forward keeps a running max, a running sum and the output
//! accumulator per query row and saves only the row logsumexp; the backward recomputes each
//! tile's probabilities from q, k and that logsumexp (`flash.rs`). Grouped-query attention:
//! k, v may have `Hkv` heads for q's `H` (`Hkv` dividing `H`; 1 is multi-query), query head
//! `h` reading k/v head `h / (H / Hkv)` in place (never repeated). q, k, v may be any view
//! whose last axis has stride 1 (e.g. heads transposed out of `[B, T, H, D]`, or k, v
//! narrowed out of a `[B, Hkv, Smax, D]` KV cache) and are read in place; other layouts are
//! copied once. Chunks are fixed (query head, query block) pairs forward and k/v heads
//! backward (their query heads in ascending order), each reduced in a fixed order, so
//! results are bitwise identical for any thread count. Fully masked rows give a zero output
//! and zero gradients, not NaN (even with a NaN scale). NaN in, NaN out: a row with a NaN
//! score (NaN in its query, in a key it sees, or a NaN scale) gives a NaN output row and
//! `lse`, and NaN gradients for its query and for the keys and values it sees, as PyTorch
//! does (the online softmax's max skips NaN, so such a row used to look fully masked).
//! The previous, materialising kernel lives in the benches crate
//! (`benches/src/materialising.rs`), for the benchmark comparison only.

mod flash;
mod micro;

use crate::dtype::{DType, Float};
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::tensor::RawTensor;

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

/// A rank-4 operand read in place: head (b, h) row r starts at
/// `off + b*sb + h*sh + r*sr` and its `cols` elements are contiguous.
#[derive(Clone, Copy)]
struct Heads<'a, T> {
    st: &'a [T],
    off: usize,
    sb: usize,
    sh: usize,
    sr: usize,
    cols: usize,
}

impl<'a, T: Float> Heads<'a, T> {
    /// A view of `t`, whose last axis must be unit-stride (see [`rows_readable`]).
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

    /// Where head `(b, h)` starts in `st` (its row r starts `r * sr` further).
    #[inline(always)]
    fn start(&self, b: usize, h: usize) -> usize {
        self.off + b * self.sb + h * self.sh
    }

    /// Row `r` of head `(b, h)`.
    #[inline(always)]
    fn row(&self, b: usize, h: usize, r: usize) -> &'a [T] {
        let base = self.start(b, h) + r * self.sr;
        &self.st[base..base + self.cols]
    }
}

/// `t` itself when its last axis is unit-stride (or of length ≤ 1), else a contiguous copy.
/// The other axes may have any strides: a view narrowed out of a bigger buffer (a KV cache
/// `[B, Hkv, Smax, D]` narrowed to `S` keys) is read in place through the buffer's strides.
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

/// One query row of a [`Mask`]: key `j` is at `m[base + j * st]`.
#[derive(Clone, Copy)]
enum RowMask<'a, T> {
    None,
    Bias { m: &'a [T], base: usize, st: usize },
    Keep { m: &'a [u8], base: usize, st: usize },
}

impl<'a, T: Float> Mask<'a, T> {
    /// Reads a mask prepared by [`prepare_mask`] (U8 keep-mask, or a bias of dtype `T`).
    fn new(m: Option<&'a RawTensor>) -> Result<Mask<'a, T>> {
        Ok(match m {
            None => Mask::None,
            Some(m) if m.dtype() == DType::U8 => {
                Mask::Keep(m.storage::<u8>()?, strides4(m), m.offset())
            }
            Some(m) => Mask::Bias(m.storage::<T>()?, strides4(m), m.offset()),
        })
    }

    /// The mask of query row (b, h, i).
    #[inline]
    /// One past the last key that any of query rows `i0..i0 + rows` of head (b, h) may see
    /// through this mask: for a keep-mask, after its last 1 in those rows (0 when there is
    /// none); `ns` for no mask or a bias (a bias never hides a key exactly). Keys from there
    /// on get weight exactly 0 in every one of those rows, so the kernels skip them.
    fn keys_end(&self, b: usize, h: usize, i0: usize, rows: usize, ns: usize) -> usize {
        let Mask::Keep(m, st, o) = *self else {
            return ns;
        };
        // A mask broadcast over query rows (a key-padding mask) is scanned once.
        let rows = if st[2] == 0 { rows.min(1) } else { rows };
        let mut end = 0;
        for i in i0..i0 + rows {
            let base = o + b * st[0] + h * st[1] + i * st[2];
            if let Some(j) = (end..ns).rev().find(|&j| m[base + j * st[3]] != 0) {
                end = j + 1;
            }
            if end == ns {
                break;
            }
        }
        end
    }

    fn row(&self, b: usize, h: usize, i: usize) -> RowMask<'a, T> {
        match *self {
            Mask::None => RowMask::None,
            Mask::Bias(m, st, o) => RowMask::Bias {
                m,
                base: o + b * st[0] + h * st[1] + i * st[2],
                st: st[3],
            },
            Mask::Keep(m, st, o) => RowMask::Keep {
                m,
                base: o + b * st[0] + h * st[1] + i * st[2],
                st: st[3],
            },
        }
    }
}

fn strides4(t: &RawTensor) -> [usize; 4] {
    let s = t.strides();
    [s[0], s[1], s[2], s[3]]
}

/// Validates `mask` against `[B, H, T, S]` and returns it as a U8 keep-mask or a bias of
/// `dtype`, broadcast to `full` (a view: a `[B, 1, 1, S]` padding mask stays `B·S` elements):
/// how [`ExecContext::attention`] reads its mask (also the benchmark's materialising kernel).
/// [`Error::Broadcast`] if it does not broadcast to `full`, [`Error::UnsupportedDType`]
/// naming `op` unless it is U8, F32 or F64.
pub fn prepare_mask(
    ctx: &ExecContext,
    op: &'static str,
    mask: Option<&RawTensor>,
    dtype: DType,
    full: [usize; 4],
) -> Result<Option<RawTensor>> {
    let Some(m) = mask else {
        return Ok(None);
    };
    let bad = |m: &RawTensor| Error::broadcast(op, m.shape(), &full);
    m.broadcast_to(&full).map_err(|_| bad(m))?;
    // Convert before broadcasting, so a broadcast mask is never expanded.
    let m = match m.dtype() {
        DType::U8 => m.clone_view(),
        DType::F32 | DType::F64 => ctx.to_dtype(m, dtype)?,
        dt => return Err(Error::UnsupportedDType { op, dtype: dt }),
    };
    Ok(Some(m.broadcast_to(&full).map_err(|_| bad(&m))?))
}

/// The validated sizes of an attention problem: q `[b, h, t, d]`, k `[b, hkv, s, d]`,
/// v `[b, hkv, s, dv]`, with `hkv` dividing `h` (the kernels take `hkv` from k).
#[derive(Clone, Copy, Debug)]
struct QkvDims {
    b: usize,
    h: usize,
    t: usize,
    s: usize,
    d: usize,
    dv: usize,
}

impl QkvDims {
    /// `[b, h, t, s]`: the full mask shape (and the leading sizes of every output).
    fn bhts(&self) -> [usize; 4] {
        [self.b, self.h, self.t, self.s]
    }
}

/// q, k and v, each with its last axis unit-stride (copied where it is not).
fn qkv_readable(
    ctx: &ExecContext,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
) -> Result<(RawTensor, RawTensor, RawTensor)> {
    Ok((
        rows_readable(ctx, q)?,
        rows_readable(ctx, k)?,
        rows_readable(ctx, v)?,
    ))
}

/// Shape checks shared by forward and backward: q `[B, H, T, D]`, k `[B, Hkv, S, D]`,
/// v `[B, Hkv, S, Dv]`, one dtype, `Hkv` dividing `H` (grouped-query attention).
fn check_qkv(op: &'static str, q: &RawTensor, k: &RawTensor, v: &RawTensor) -> Result<QkvDims> {
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
    if ks[0] != qs[0] || ks[3] != qs[3] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: qs.to_vec(),
            rhs: ks.to_vec(),
        });
    }
    // Query head h reads kv head h / (H / Hkv); H = Hkv = 0 is an empty problem.
    if ks[1] != qs[1] && (ks[1] == 0 || qs[1] % ks[1] != 0) {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "the k/v head count must divide the query head count (grouped-query \
                 attention): q {:?}, k {:?}",
                qs, ks
            ),
        });
    }
    if vs[0] != ks[0] || vs[1] != ks[1] || vs[2] != ks[2] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: ks.to_vec(),
            rhs: vs.to_vec(),
        });
    }
    Ok(QkvDims {
        b: qs[0],
        h: qs[1],
        t: qs[2],
        s: ks[2],
        d: qs[3],
        dv: vs[3],
    })
}

fn expect_shape(op: &'static str, t: &RawTensor, want: &[usize], dtype: DType) -> Result<()> {
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

impl ExecContext {
    /// Scaled dot-product attention. `q [B,H,T,D]`, `k [B,Hkv,S,D]`, `v [B,Hkv,S,Dv]`
    /// (f32/f64, any strides; views with a unit-stride last axis, such as k, v narrowed out
    /// of a KV cache, are read in place). `Hkv` must divide `H` (grouped-query attention;
    /// `Hkv == H` is plain multi-head, `Hkv == 1` multi-query): query head `h` reads k/v head
    /// `h / (H / Hkv)`, so k/v head `j` serves query heads `j·G .. j·G + G − 1` with
    /// `G = H / Hkv` (PyTorch's `enable_gqa=True`, transformers' `repeat_kv`), without
    /// repeating k or v; another `Hkv` is an [`Error::InvalidArgument`] naming both shapes.
    /// `mask`: an additive f32/f64 bias broadcastable to `[B,H,T,S]` (e.g. a `[B,1,1,S]`
    /// padding bias of 0 / -1e4 or -inf) or a U8 keep-mask broadcastable to `[B,H,T,S]`
    /// (0 = masked), over the query heads. Causal masks `j > i + (S - T)` (bottom-right
    /// aligned: a decode step with T = 1 sees every key).
    ///
    /// Returns `(out [B,H,T,Dv], lse [B,H,T])`: `lse` is each row's logsumexp of the masked,
    /// scaled scores (what [`ExecContext::attention_backward`] needs); a fully masked row
    /// has `lse = -inf` and a zero output, not NaN. A row with a NaN score (NaN in q, in k
    /// at a key the row sees, or `scale: Some(NaN)`) has a NaN output and `lse`, as
    /// PyTorch. No `[T, S]` block is materialised.
    ///
    /// ```
    /// use fucina_core::{kernels::fused::attention::AttentionOpts, ExecContext};
    /// let ctx = ExecContext::with_threads(1)?;
    /// let q = ctx.from_slice(&[1.0f32, 0.0], &[1, 1, 1, 2])?;
    /// let k = ctx.from_slice(&[1.0f32, 0.0, 1.0, 0.0], &[1, 1, 2, 2])?;
    /// let v = ctx.from_slice(&[2.0f32, 4.0], &[1, 1, 2, 1])?;
    /// let (out, lse) = ctx.attention(&q, &k, &v, None, AttentionOpts::default())?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![3.0]); // equal scores: the mean of v
    /// assert!((lse.to_vec::<f32>()?[0] - (0.5f32.sqrt() + 2f32.ln())).abs() < 1e-6);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn attention(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        mask: Option<&RawTensor>,
        opts: AttentionOpts,
    ) -> Result<(RawTensor, RawTensor)> {
        const OP: &str = "attention";
        let dims = check_qkv(OP, q, k, v)?;
        let [nb, nh, nt, _] = dims.bhts();
        let mask = prepare_mask(self, OP, mask, q.dtype(), dims.bhts())?;
        let (q, k, v) = qkv_readable(self, q, k, v)?;
        let mut out = self.empty(q.dtype(), &[nb, nh, nt, dims.dv])?;
        let mut lse = self.empty(q.dtype(), &[nb, nh, nt])?;
        let scale = opts.scale_for(dims.d);
        crate::dispatch_float!(q.dtype(), OP, T => {
            let p = flash::Problem::<T>::new(&q, &k, &v, mask.as_ref(), opts.causal, scale)?;
            flash::forward(self, &p, &mut out, &mut lse)
        })?;
        Ok((out, lse))
    }

    /// Backward of [`ExecContext::attention`] from its inputs (`mask` as given to the
    /// forward), its outputs `out` and `lse`, and the upstream `g_out` `[B,H,T,Dv]`;
    /// `needs` = which of (gq, gk, gv) to compute: gq `[B,H,T,D]`, gk `[B,Hkv,S,D]`,
    /// gv `[B,Hkv,S,Dv]` (grouped k/v heads: a k/v head's gk, gv sum over its query heads,
    /// in ascending order, so the bits do not depend on the thread count). Per (query
    /// block, key block) tile the
    /// probabilities are recomputed, P = exp(s·QKᵀ + M − lse), then with Δ = rowsum(gO ∘ O):
    /// ```text
    /// gV += Pᵀ · gO          gP = gO · Vᵀ          gS = P ∘ (gP − Δ)   (softmax backward)
    /// gQ += s · gS · K       gK += s · gSᵀ · Q
    /// ```
    /// Masked entries (P = 0) and fully masked rows get no gradient. A NaN row (`lse` NaN)
    /// gives NaN in its gq row and in the gk, gv rows of the keys it sees.
    pub fn attention_backward(
        &self,
        q: &RawTensor,
        k: &RawTensor,
        v: &RawTensor,
        mask: Option<&RawTensor>,
        out: &RawTensor,
        lse: &RawTensor,
        g_out: &RawTensor,
        opts: AttentionOpts,
        needs: [bool; 3],
    ) -> Result<(Option<RawTensor>, Option<RawTensor>, Option<RawTensor>)> {
        const OP: &str = "attention_backward";
        let dims = check_qkv(OP, q, k, v)?;
        let [nb, nh, nt, _] = dims.bhts();
        expect_shape(OP, out, &[nb, nh, nt, dims.dv], q.dtype())?;
        expect_shape(OP, lse, &[nb, nh, nt], q.dtype())?;
        expect_shape(OP, g_out, &[nb, nh, nt, dims.dv], q.dtype())?;
        let mask = prepare_mask(self, OP, mask, q.dtype(), dims.bhts())?;
        let (q, k, v) = qkv_readable(self, q, k, v)?;
        let (out, g_out) = (rows_readable(self, out)?, rows_readable(self, g_out)?);
        let lse = self.contiguous(lse)?;
        let scale = opts.scale_for(dims.d);
        crate::dispatch_float!(q.dtype(), OP, T => {
            let p = flash::Problem::<T>::new(&q, &k, &v, mask.as_ref(), opts.causal, scale)?;
            flash::backward(self, &p, &out, &lse, &g_out, needs)
        })
    }
}

/// Scalar reference implementations: the spec of this file's kernels. Tensors are
/// row-major slices; masks are given already broadcast to `[B, H, T, S]`.
pub mod reference {
    use crate::dtype::Float;

    /// Problem sizes: q `[b,h,t,d]`, k `[b,hkv,s,d]`, v `[b,hkv,s,dv]`; query head `i`
    /// reads k/v head `i / (h / hkv)` (`hkv == h`: one each; `hkv == 1`: multi-query).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct AttnDims {
        /// Batch.
        pub b: usize,
        /// Query heads.
        pub h: usize,
        /// K/V heads (dividing `h`).
        pub hkv: usize,
        /// Query length.
        pub t: usize,
        /// Key length.
        pub s: usize,
        /// Query/key head dim.
        pub d: usize,
        /// Value head dim.
        pub dv: usize,
    }

    impl AttnDims {
        /// The k/v head row (`b·hkv + j`) that query head row `bh` (= `b·h + i`) reads.
        pub fn kv_head(&self, bh: usize) -> usize {
            let (b, i) = (bh / self.h, bh % self.h);
            b * self.hkv + i / (self.h / self.hkv)
        }
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

    /// The masked, scaled scores of query row `row` (= bh·t + i): `q·kᵀ·scale + bias`,
    /// −∞ where masked (keep-mask 0, or causal `j > i + (s − t)`).
    fn scores<T: Float>(
        q: &[T],
        k: &[T],
        dims: AttnDims,
        mask: RefMask<'_, T>,
        causal: bool,
        scale: T,
        row: usize,
    ) -> Vec<T> {
        let AttnDims { t, s, d, .. } = dims;
        let (kvh, i) = (dims.kv_head(row / t), row % t);
        let mut sc = vec![T::NEG_INFINITY; s];
        for j in 0..s {
            if causal && j + t > i + s {
                continue;
            }
            let mut acc = T::ZERO;
            for x in 0..d {
                acc += q[row * d + x] * k[(kvh * s + j) * d + x];
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
        sc
    }

    /// Returns `(out, probs)`: scores `q·kᵀ·scale + bias` (masked → -inf), softmax over
    /// keys (fully masked rows → 0), `out = probs · v`. A row with a NaN score (NaN in q,
    /// in k at a key it sees, or a NaN scale) has NaN probabilities at the keys it sees
    /// (0 where masked) and a NaN output row, as PyTorch's softmax gives.
    pub fn attention<T: Float>(
        q: &[T],
        k: &[T],
        v: &[T],
        dims: AttnDims,
        mask: RefMask<'_, T>,
        causal: bool,
        scale: f64,
    ) -> (Vec<T>, Vec<T>) {
        let AttnDims { b, h, t, s, dv, .. } = dims;
        let scale = T::from_f64(scale);
        let mut out = vec![T::ZERO; b * h * t * dv];
        let mut probs = vec![T::ZERO; b * h * t * s];
        for row in 0..b * h * t {
            let kvh = dims.kv_head(row / t);
            let sc = scores(q, k, dims, mask, causal, scale, row);
            if sc.iter().any(|x| x.is_nan()) {
                let nan = T::from_f64(f64::NAN);
                for j in 0..s {
                    if sc[j] != T::NEG_INFINITY {
                        probs[row * s + j] = nan;
                    }
                }
                out[row * dv..(row + 1) * dv].fill(nan);
                continue;
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
                    out[row * dv + x] += p * v[(kvh * s + j) * dv + x];
                }
            }
        }
        (out, probs)
    }

    /// Each query row's logsumexp of its masked, scaled scores (−∞ when fully masked, NaN
    /// with a NaN score): the `lse` that `ExecContext::attention` returns.
    pub fn attention_lse<T: Float>(
        q: &[T],
        k: &[T],
        dims: AttnDims,
        mask: RefMask<'_, T>,
        causal: bool,
        scale: f64,
    ) -> Vec<T> {
        let AttnDims { b, h, t, .. } = dims;
        let scale = T::from_f64(scale);
        (0..b * h * t)
            .map(|row| {
                let sc = scores(q, k, dims, mask, causal, scale, row);
                if sc.iter().any(|x| x.is_nan()) {
                    return T::from_f64(f64::NAN);
                }
                let m = sc.iter().fold(T::NEG_INFINITY, |a, &x| a.max(x));
                if m == T::NEG_INFINITY {
                    return m;
                }
                m + sc.iter().map(|&x| (x - m).exp()).sum::<T>().ln()
            })
            .collect()
    }

    /// Returns `(gq, gk, gv)` from the probabilities of [`attention`] (per head, s = scale):
    /// `gv = probsᵀ·g`, `gp = g·vᵀ`, `gs = probs ∘ (gp − rowsum(gp ∘ probs))`,
    /// `gq = s·gs·k`, `gk = s·gsᵀ·q`; a shared k/v head's `gk`, `gv` sum over its query
    /// heads.
    pub fn attention_backward<T: Float>(
        q: &[T],
        k: &[T],
        v: &[T],
        probs: &[T],
        g: &[T],
        dims: AttnDims,
        scale: f64,
    ) -> (Vec<T>, Vec<T>, Vec<T>) {
        let AttnDims {
            b,
            h,
            hkv,
            t,
            s,
            d,
            dv,
        } = dims;
        let scale = T::from_f64(scale);
        let mut gq = vec![T::ZERO; b * h * t * d];
        let mut gk = vec![T::ZERO; b * hkv * s * d];
        let mut gv = vec![T::ZERO; b * hkv * s * dv];
        for qh in 0..b * h {
            let kvh = dims.kv_head(qh);
            for i in 0..t {
                let row = qh * t + i;
                let gp: Vec<T> = (0..s)
                    .map(|j| {
                        (0..dv)
                            .map(|x| g[row * dv + x] * v[(kvh * s + j) * dv + x])
                            .sum()
                    })
                    .collect();
                let r: T = (0..s).map(|j| gp[j] * probs[row * s + j]).sum();
                for j in 0..s {
                    let p = probs[row * s + j];
                    let gs = p * (gp[j] - r);
                    for x in 0..dv {
                        gv[(kvh * s + j) * dv + x] += p * g[row * dv + x];
                    }
                    for x in 0..d {
                        gq[row * d + x] += scale * gs * k[(kvh * s + j) * d + x];
                        gk[(kvh * s + j) * d + x] += scale * gs * q[row * d + x];
                    }
                }
            }
        }
        (gq, gk, gv)
    }
}
