//! GEMM (C = alpha·op(A)·op(B) + beta·C) over strided and batched views, matmul and linear.
//!
//! Validation and layout live here; three paths run the product ([`GemmPath`]):
//! - packed AVX-512 (x86_64 with AVX-512F, AVX2 and FMA): the `packed` driver (own packing,
//!   jobs over rows and column runs) with the 6×32 (f32) / 6×16 (f64) micro-kernels in
//!   `avx512`;
//! - packed AVX2 (x86_64 with AVX2 + FMA, no AVX-512F): the same driver with the 6×16 / 6×8
//!   micro-kernels in `avx2`. Both kernels are one template (`micro`) and give bitwise the
//!   same C. On either, a one-row f32 product over a K-contiguous B (a decoder step's
//!   `x·Wᵀ`) reads B in place instead of packing it (`gemv`), bitwise the packed rows;
//! - `tiled` (elsewhere): `matrixmultiply` on a fixed grid of C tiles.
//!
//! `FUCINA_GEMM=packed|avx512|avx2|tiled` overrides the choice (read once; see
//! [`gemm_path`]). Every path reduces each C element over K the same way for any thread count,
//! so results are bitwise identical for any number of threads. Strided views (transposes
//! included) reach the kernels as row and column strides: operands are never copied. C must
//! be the sole owner of its buffer.
//!
//! Mixed precision: B (the weight: `linear`'s `w`, the input gradient's `W`) may be bf16 or
//! f16 while A and C are f32 or f64. Its elements are widened inside B's packing (`widen`:
//! the packed panels, or the tiled path's per-panel scratch, are f32/f64), never by a full
//! copy of the weight; widening is exact, so C is bitwise the GEMM of the widened B on every
//! path. Any other mix of dtypes is a `DTypeMismatch`.

mod avx2;
mod avx512;
mod gemv;
mod micro;
mod packed;
mod tile;
mod tiled;
mod widen;

use tile::{BufArgs, GemmArgs, MatRef};
use widen::BElem;

use std::sync::OnceLock;

use smallvec::SmallVec;

use crate::dtype::{DType, Float};
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::exec::MatMut;
use crate::shape::{self, Dims};
use crate::tensor::RawTensor;

/// One operand's layout inside a validated batched problem (strides in elements).
#[derive(Clone, Debug)]
struct Operand {
    offset: usize,
    batch_strides: Dims,
    rs: usize,
    cs: usize,
}

/// A validated batched GEMM: `c[b] = alpha·a[b]·b[b] + beta·c[b]` for every batch index.
#[derive(Clone, Debug)]
struct Problem {
    m: usize,
    n: usize,
    k: usize,
    batch: Dims,
    a: Operand,
    b: Operand,
    c: Operand,
}

impl Problem {
    fn batch_len(&self) -> usize {
        shape::numel(&self.batch)
    }
}

/// Validates `c = alpha·a·b + beta·c` and lays it out for the fast kernel (batch folded).
fn plan(op: &'static str, a: &RawTensor, b: &RawTensor, c: &RawTensor) -> Result<Problem> {
    plan_unfolded(op, a, b, c).map(fold_batch)
}

/// True when B may be a 16-bit storage type widened while packed: A (and C) f32 or f64, B
/// bf16 or f16.
fn widened_b(a: DType, b: DType) -> bool {
    a.is_compute_float() && matches!(b, DType::BF16 | DType::F16)
}

/// Validates `c = alpha·a·b + beta·c` shapes and dtypes and lays the problem out as given:
/// A and C share a compute dtype; B has it too, or is bf16/f16 (widened while packed).
fn plan_unfolded(op: &'static str, a: &RawTensor, b: &RawTensor, c: &RawTensor) -> Result<Problem> {
    if c.dtype() != a.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: c.dtype(),
        });
    }
    if b.dtype() != a.dtype() && !widened_b(a.dtype(), b.dtype()) {
        return Err(Error::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: b.dtype(),
        });
    }
    if !a.dtype().is_compute_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: a.dtype(),
        });
    }
    if a.rank() < 2 || b.rank() < 2 || c.rank() < 2 {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "operands must be at least 2-D, got a {:?}, b {:?}, c {:?}",
                a.shape(),
                b.shape(),
                c.shape()
            ),
        });
    }
    let (ar, br, cr) = (a.rank(), b.rank(), c.rank());
    let (m, k) = (a.shape()[ar - 2], a.shape()[ar - 1]);
    let (k2, n) = (b.shape()[br - 2], b.shape()[br - 1]);
    if k != k2 {
        return Err(Error::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    if c.shape()[cr - 2] != m || c.shape()[cr - 1] != n {
        return Err(Error::ShapeMismatch {
            op,
            lhs: vec![m, n],
            rhs: c.shape().to_vec(),
        });
    }
    let batch: Dims = SmallVec::from_slice(&c.shape()[..cr - 2]);
    let a_bs = shape::broadcast_strides(op, &a.shape()[..ar - 2], &a.strides()[..ar - 2], &batch)?;
    let b_bs = shape::broadcast_strides(op, &b.shape()[..br - 2], &b.strides()[..br - 2], &batch)?;
    if !shape::non_overlapping(c.shape(), c.strides()) {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "output of shape {:?} with strides {:?} overlaps itself",
                c.shape(),
                c.strides()
            ),
        });
    }
    let operand = |t: &RawTensor, bs: Dims| {
        let r = t.rank();
        Operand {
            offset: t.offset(),
            batch_strides: bs,
            rs: t.strides()[r - 2],
            cs: t.strides()[r - 1],
        }
    };
    Ok(Problem {
        m,
        n,
        k,
        a: operand(a, a_bs),
        b: operand(b, b_bs),
        c: operand(c, SmallVec::from_slice(&c.strides()[..cr - 2])),
        batch,
    })
}

/// When B is shared by every batch item (stride-0 batch) and the batch axes of A and C
/// merge with their row axis, the batch is folded into M: one larger GEMM, B packed once
/// per tile instead of once per item. Each element's K-reduction is unchanged.
fn fold_batch(p: Problem) -> Problem {
    if p.batch.is_empty() || p.b.batch_strides.iter().any(|&s| s != 0) {
        return p;
    }
    if p.m <= 1 {
        return p;
    }
    // Row axis then batch axes, innermost first: each must step over the one inside it.
    let merges = |bs: &[usize], rs: usize| {
        let mut inner = (p.m, rs);
        for (&d, &s) in p.batch.iter().zip(bs).rev() {
            if d == 1 {
                continue;
            }
            if s != inner.0 * inner.1 {
                return false;
            }
            inner = (d, s);
        }
        true
    };
    if !(merges(&p.a.batch_strides, p.a.rs) && merges(&p.c.batch_strides, p.c.rs)) {
        return p;
    }
    let m = p.m * p.batch_len();
    let strip = |o: Operand| Operand {
        batch_strides: SmallVec::new(),
        ..o
    };
    Problem {
        m,
        batch: SmallVec::new(),
        a: strip(p.a),
        b: strip(p.b),
        c: strip(p.c),
        ..p
    }
}

/// The GEMM implementations a process can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmPath {
    /// Own packing and AVX-512F micro-kernels (6×32 f32, 6×16 f64).
    PackedAvx512,
    /// Own packing and AVX2/FMA micro-kernels (6×16 f32, 6×8 f64): bitwise the same results
    /// as [`GemmPath::PackedAvx512`].
    PackedAvx2,
    /// `matrixmultiply` on a fixed tile grid (`tiled`).
    Tiled,
}

impl GemmPath {
    /// Every path, widest kernel first (the order [`gemm_path`] picks by default).
    pub const ALL: [GemmPath; 3] = [
        GemmPath::PackedAvx512,
        GemmPath::PackedAvx2,
        GemmPath::Tiled,
    ];

    /// True when this CPU can run the path (detected once, in `kernels::simd`).
    pub fn available(self) -> bool {
        match self {
            GemmPath::PackedAvx512 => avx512::available(),
            GemmPath::PackedAvx2 => avx2::available(),
            GemmPath::Tiled => true,
        }
    }

    /// The `FUCINA_GEMM` value that forces this path.
    pub fn env_name(self) -> &'static str {
        match self {
            GemmPath::PackedAvx512 => "avx512",
            GemmPath::PackedAvx2 => "avx2",
            GemmPath::Tiled => "tiled",
        }
    }
}

/// The path this process uses, chosen once. `FUCINA_GEMM=tiled` forces `tiled`;
/// `FUCINA_GEMM=avx2` or `avx512` force that packed kernel when the CPU has it;
/// `FUCINA_GEMM=packed` (or unset, or a value this CPU cannot honour) picks the first
/// available of packed AVX-512 (AVX-512F, AVX2 and FMA), packed AVX2 (AVX2 and FMA) and
/// tiled.
pub fn gemm_path() -> GemmPath {
    static PATH: OnceLock<GemmPath> = OnceLock::new();
    *PATH.get_or_init(|| {
        let forced = match std::env::var("FUCINA_GEMM").as_deref() {
            Ok("tiled") => Some(GemmPath::Tiled),
            Ok("avx2") => Some(GemmPath::PackedAvx2),
            Ok("avx512") => Some(GemmPath::PackedAvx512),
            _ => None,
        };
        match forced {
            Some(p) if p.available() => p,
            _ => GemmPath::ALL
                .into_iter()
                .find(|p| p.available())
                .unwrap_or(GemmPath::Tiled),
        }
    })
}

/// Element types every path implements (f32, f64), with their packed kernels.
trait GemmFloat: tiled::GemmKernel {
    /// The AVX2 packed kernel for this type.
    type Avx2: packed::PackedKernel<Elem = Self>;
    /// The AVX-512 packed kernel for this type.
    type Avx512: packed::PackedKernel<Elem = Self>;
}
impl GemmFloat for f32 {
    type Avx2 = packed::Avx2F32;
    type Avx512 = packed::Avx512F32;
}
impl GemmFloat for f64 {
    type Avx2 = packed::Avx2F64;
    type Avx512 = packed::Avx512F64;
}

/// Runs a validated problem on `path` (available on this CPU), writing C's batch items `c`
/// (one disjoint [`MatMut`] per batch index); `args`'s bias is added to every row of C after
/// the product. An empty problem writes nothing.
///
/// # Safety
/// As [`tiled::run`]: `args.a` and `args.b` are the buffers `p` was planned on (every element
/// the problem addresses in them is in bounds); `path.available()`.
unsafe fn run<T: GemmFloat, S: BElem<T>>(
    ctx: &ExecContext,
    path: GemmPath,
    p: &Problem,
    args: BufArgs<'_, T, S>,
    c: Vec<MatMut<'_, T>>,
) {
    if p.m == 0 || p.n == 0 || p.batch_len() == 0 {
        return;
    }
    match path {
        // SAFETY: forwarded caller contract; the problem is not empty.
        GemmPath::Tiled => unsafe { tiled::run(ctx, p, args, c) },
        // SAFETY: forwarded caller contract; `path.available()`, so AVX2 and FMA are present.
        GemmPath::PackedAvx2 => unsafe { run_packed::<T, T::Avx2, S>(ctx, p, args, c) },
        // SAFETY: forwarded caller contract; `path.available()`, so AVX-512F, AVX2 and FMA
        // are present.
        GemmPath::PackedAvx512 => unsafe { run_packed::<T, T::Avx512, S>(ctx, p, args, c) },
    }
}

/// [`run`] on the packed driver with kernel `K` (a non-empty problem): batch items one per
/// task when there are many (or they are small), else in turn, each split over the threads.
///
/// # Safety
/// As [`run`], with `K`'s features present.
unsafe fn run_packed<T: GemmFloat, K: packed::PackedKernel<Elem = T>, S: BElem<T>>(
    ctx: &ExecContext,
    p: &Problem,
    args: BufArgs<'_, T, S>,
    c: Vec<MatMut<'_, T>>,
) {
    let (m, n, k) = (p.m, p.n, p.k);
    let nb = p.batch_len();
    let item_flops = (2 * m * n).saturating_mul(k.max(1));
    // A one-row product that skips B's packing (`gemv`) splits over the threads from a
    // lower size: it moves no packed panels, so a column run per thread costs one dispatch.
    let par_min = if packed::one_row::<K, S>(m, p.b.rs, args.b).is_some() {
        packed::GEMV_PAR_MIN_FLOPS
    } else {
        packed::PAR_MIN_FLOPS
    };
    let parallel = item_flops.saturating_mul(nb) >= par_min;
    // Many items, or small ones: one item per task. Otherwise items in turn, each split.
    let per_item = nb > 1 && (nb >= 4 * ctx.num_threads() || item_flops < packed::PAR_MIN_FLOPS);
    let one = |bi: usize, ci: MatMut<'_, T>, inner_parallel: bool| {
        let ao = p.a.offset + shape::offset_of(&p.batch, &p.a.batch_strides, bi);
        let bo = p.b.offset + shape::offset_of(&p.batch, &p.b.batch_strides, bi);
        let av = MatRef {
            data: args.a,
            offset: ao,
            rs: p.a.rs,
            cs: p.a.cs,
        };
        let bv = MatRef {
            data: args.b,
            offset: bo,
            rs: p.b.rs,
            cs: p.b.cs,
        };
        // SAFETY: offsets stay inside the views validated by `plan`; `ci` is item bi's own
        // part of C.
        unsafe {
            packed::gemm::<T, K, S>(ctx, inner_parallel, k, args.on(av, bv), ci);
        }
    };
    if per_item {
        ctx.par_pieces(nb, c.into_iter(), parallel, |bi, ci| one(bi, ci, false));
    } else {
        for (bi, ci) in c.into_iter().enumerate() {
            one(bi, ci, parallel);
        }
    }
}

/// One validated GEMM call on tensors, `c = alpha·a·b + beta·c`, then `c[.., i, j] +=
/// bias[j]` when a bias is given: what the entry points ([`ExecContext::gemm`], matmul,
/// linear, [`gemm_on`]) hand to the dtype dispatch and the typed body, made once by
/// [`GemmCall::plan`].
struct GemmCall<'t> {
    /// The op named in errors.
    op: &'static str,
    /// The validated layout of `a`, `b`, `c`.
    p: Problem,
    alpha: f64,
    a: &'t RawTensor,
    b: &'t RawTensor,
    beta: f64,
    c: &'t mut RawTensor,
    bias: Option<&'t RawTensor>,
}

impl<'t> GemmCall<'t> {
    /// Validates `c = a·b` as `op` (see [`plan`]): alpha 1, beta 0 and no bias, which the
    /// caller sets where it has others.
    fn plan(
        op: &'static str,
        a: &'t RawTensor,
        b: &'t RawTensor,
        c: &'t mut RawTensor,
    ) -> Result<Self> {
        let p = plan(op, a, b, c)?;
        Ok(GemmCall {
            op,
            p,
            alpha: 1.0,
            a,
            b,
            beta: 0.0,
            c,
            bias: None,
        })
    }

    /// Runs the call on `path` with the element types of its dtypes: C's compute type `T` and
    /// B's (`T`, or bf16/f16 widened while packed).
    fn run(self, ctx: &ExecContext, path: GemmPath) -> Result<()> {
        use half::{bf16, f16};
        match (self.c.dtype(), self.b.dtype()) {
            (DType::F32, DType::F32) => self.typed::<f32, f32>(ctx, path),
            (DType::F32, DType::BF16) => self.typed::<f32, bf16>(ctx, path),
            (DType::F32, DType::F16) => self.typed::<f32, f16>(ctx, path),
            (DType::F64, DType::F64) => self.typed::<f64, f64>(ctx, path),
            (DType::F64, DType::BF16) => self.typed::<f64, bf16>(ctx, path),
            (DType::F64, DType::F16) => self.typed::<f64, f16>(ctx, path),
            (dtype, _) => Err(Error::UnsupportedDType { op: self.op, dtype }),
        }
    }

    /// Typed body of [`GemmCall::run`]: an error when this CPU cannot run `path`.
    fn typed<T: GemmFloat, S: BElem<T> + crate::dtype::Element>(
        self,
        ctx: &ExecContext,
        path: GemmPath,
    ) -> Result<()> {
        let GemmCall {
            op,
            p,
            alpha,
            a,
            b,
            beta,
            c,
            bias,
        } = self;
        // `run` may only be handed a path whose kernels this CPU runs.
        if !path.available() {
            return Err(Error::InvalidArgument {
                op,
                msg: format!("GEMM path {path:?} needs CPU features this machine lacks"),
            });
        }
        let (a_s, b_s) = (a.storage::<T>()?, b.storage::<S>()?);
        let bias = match bias {
            Some(t) => Some((
                &t.storage::<T>()?[t.offset()..],
                t.strides().first().copied().unwrap_or(0),
            )),
            None => None,
        };
        let c_shape = c.shape().to_vec();
        let c_strides = c.strides().to_vec();
        let bytes = c.as_mut_bytes()?;
        let whole = bytes.len() / std::mem::size_of::<T>() * std::mem::size_of::<T>();
        let c_s: &mut [T] = bytemuck::try_cast_slice_mut(&mut bytes[..whole]).map_err(|e| {
            Error::InvalidArgument {
                op,
                msg: format!("output buffer cannot be viewed as {:?}: {e}", T::DTYPE),
            }
        })?;
        // C's items as disjoint strided matrices (in bounds and non-overlapping, checked here).
        let items = MatMut::batch(
            c_s,
            p.c.offset,
            (&p.batch, &p.c.batch_strides),
            (p.m, p.n),
            (p.c.rs, p.c.cs),
        )
        .map_err(|why| Error::InvalidArgument {
            op,
            msg: format!("output of shape {c_shape:?} with strides {c_strides:?} {why}"),
        })?;
        let args = GemmArgs {
            alpha: T::from_f64(alpha),
            a: a_s,
            b: b_s,
            beta: T::from_f64(beta),
            bias,
        };
        // SAFETY: `a_s` and `b_s` are the buffers `p` was planned on; `path` is available
        // (checked above).
        unsafe { run::<T, S>(ctx, path, &p, args, items) };
        Ok(())
    }
}

/// Views `a` and `b` as at-least-2-D matmul operands (torch.matmul's 1-D promotion) and
/// returns them with the output shape `[..batch, M?, N?]` and the full 2-D-suffixed shape.
fn matmul_shapes(
    op: &'static str,
    a: &RawTensor,
    b: &RawTensor,
) -> Result<(RawTensor, RawTensor, Dims, Dims)> {
    if a.rank() == 0 || b.rank() == 0 {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "operands must be at least 1-D, got {:?} and {:?}",
                a.shape(),
                b.shape()
            ),
        });
    }
    let a2 = if a.rank() == 1 {
        a.unsqueeze(0)?
    } else {
        a.clone_view()
    };
    let b2 = if b.rank() == 1 {
        b.unsqueeze(1)?
    } else {
        b.clone_view()
    };
    let (ar, br) = (a2.rank(), b2.rank());
    if a2.shape()[ar - 1] != b2.shape()[br - 2] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    let batch = shape::broadcast_shapes(op, &a2.shape()[..ar - 2], &b2.shape()[..br - 2])?;
    let (m, n) = (a2.shape()[ar - 2], b2.shape()[br - 1]);
    let mut full = batch.clone();
    full.push(m);
    full.push(n);
    let mut out = batch;
    if a.rank() > 1 {
        out.push(m);
    }
    if b.rank() > 1 {
        out.push(n);
    }
    Ok((a2, b2, full, out))
}

impl ExecContext {
    /// `C = alpha·A·B + beta·C` for views of any strides (a transposed view *is* `op(A) = Aᵀ`:
    /// no copy is made), batched: `a [..., M, K]`, `b [..., K, N]`, `c [..., M, N]`, with the
    /// batch dims of `a` and `b` broadcast to `c`'s (stride-0 batch axes allowed).
    ///
    /// `c` must be the sole owner of its buffer ([`Error::SharedBuffer`] otherwise) and may
    /// have any non-overlapping strides. `beta == 0` ignores C's old contents (NaN-safe).
    /// f32 and f64; `b` may also be bf16/f16 under f32/f64 `a` and `c` (widened while
    /// packed, bitwise the GEMM of the widened `b`). Results are bitwise identical for any
    /// thread count.
    ///
    /// ```
    /// use fucina_core::{DType, ExecContext};
    /// let ctx = ExecContext::with_threads(1)?;
    /// let a = ctx.from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let mut c = ctx.ones(DType::F32, &[2, 2])?;
    /// ctx.gemm(1.0, &a.transpose(0, 1)?, &a, 0.5, &mut c)?; // c = aᵀ·a + 0.5
    /// assert_eq!(c.to_vec::<f32>()?, vec![10.5, 14.5, 14.5, 20.5]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn gemm(
        &self,
        alpha: f64,
        a: &RawTensor,
        b: &RawTensor,
        beta: f64,
        c: &mut RawTensor,
    ) -> Result<()> {
        let call = GemmCall::plan("gemm", a, b, c)?;
        GemmCall {
            alpha,
            beta,
            ..call
        }
        .run(self, gemm_path())
    }

    /// `a [..., M, K] @ b [..., K, N] -> [..., M, N]` with broadcast batch dims; a 1-D `a` is a
    /// row vector and a 1-D `b` a column vector whose unit axis is dropped (as `torch.matmul`).
    /// `b` may be bf16/f16 under an f32/f64 `a` (as [`ExecContext::gemm`]); the result has
    /// `a`'s dtype.
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(1)?;
    /// let a = ctx.arange::<f64>(0.0, 6.0, 1.0)?.reshape(&[2, 3])?;
    /// let v = ctx.from_slice(&[1.0f64, 1.0, 1.0], &[3])?;
    /// assert_eq!(ctx.matmul(&a, &v)?.to_vec::<f64>()?, vec![3.0, 12.0]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn matmul(&self, a: &RawTensor, b: &RawTensor) -> Result<RawTensor> {
        let (a2, b2, full, out_shape) = matmul_shapes("matmul", a, b)?;
        if a.dtype() != b.dtype() && !widened_b(a.dtype(), b.dtype()) {
            return Err(Error::DTypeMismatch {
                op: "matmul",
                lhs: a.dtype(),
                rhs: b.dtype(),
            });
        }
        let mut c = self.empty(a.dtype(), &full)?;
        GemmCall::plan("matmul", &a2, &b2, &mut c)?.run(self, gemm_path())?;
        c.reshape(&out_shape)
    }

    /// `x [..., K] · wᵀ + bias -> [..., N]` for `w [N, K]` and `bias [N]`; the bias is added
    /// tile by tile in the same pass over the output that the product writes. `w` may be
    /// bf16/f16 under an f32/f64 `x` and `bias` (a frozen low-precision weight, widened while
    /// packed); the result has `x`'s dtype.
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(1)?;
    /// let x = ctx.from_slice(&[1.0f32, 2.0], &[1, 2])?;
    /// let w = ctx.from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])?;
    /// let b = ctx.from_slice(&[0.5f32, 0.5, 0.5], &[3])?;
    /// assert_eq!(ctx.linear(&x, &w, Some(&b))?.to_vec::<f32>()?, vec![1.5, 2.5, 3.5]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn linear(
        &self,
        x: &RawTensor,
        w: &RawTensor,
        bias: Option<&RawTensor>,
    ) -> Result<RawTensor> {
        let op = "linear";
        if x.rank() == 0 || w.rank() != 2 {
            return Err(Error::InvalidArgument {
                op,
                msg: format!(
                    "expected x [..., K] and w [N, K], got {:?} and {:?}",
                    x.shape(),
                    w.shape()
                ),
            });
        }
        let (n, k) = (w.shape()[0], w.shape()[1]);
        let xk = x.shape()[x.rank() - 1];
        if xk != k {
            return Err(Error::ShapeMismatch {
                op,
                lhs: x.shape().to_vec(),
                rhs: w.shape().to_vec(),
            });
        }
        if w.dtype() != x.dtype() && !widened_b(x.dtype(), w.dtype()) {
            return Err(Error::DTypeMismatch {
                op,
                lhs: x.dtype(),
                rhs: w.dtype(),
            });
        }
        if let Some(bt) = bias {
            if bt.shape() != [n] {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: bt.shape().to_vec(),
                    rhs: vec![n],
                });
            }
            if bt.dtype() != x.dtype() {
                return Err(Error::DTypeMismatch {
                    op,
                    lhs: x.dtype(),
                    rhs: bt.dtype(),
                });
            }
        }
        let rows = shape::numel(&x.shape()[..x.rank() - 1]);
        let x2 = self.reshape(x, &[rows, k])?;
        let wt = w.transpose(0, 1)?;
        let mut c = self.empty(x.dtype(), &[rows, n])?;
        let call = GemmCall::plan(op, &x2, &wt, &mut c)?;
        GemmCall { bias, ..call }.run(self, gemm_path())?;
        let mut out_shape: Dims = SmallVec::from_slice(&x.shape()[..x.rank() - 1]);
        out_shape.push(n);
        c.reshape(&out_shape)
    }
}

/// [`ExecContext::gemm`] on a chosen [`GemmPath`] instead of the process's, then, when `bias`
/// (`[N]`) is given, `C[.., i, j] += bias[j]` in the same pass (as [`ExecContext::linear`]
/// adds its bias): for comparing the paths side by side in one process (tests, benches).
///
/// Errors: [`Error::InvalidArgument`] when this CPU cannot run `path`, else as
/// [`ExecContext::gemm`] (and a bias of the wrong shape or dtype).
///
/// ```
/// use fucina_core::kernels::matmul::{gemm_on, GemmPath};
/// use fucina_core::{DType, ExecContext};
/// let ctx = ExecContext::with_threads(1)?;
/// let a = ctx.from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
/// let bias = ctx.from_slice(&[0.5f64, -0.5], &[2])?;
/// let mut c = ctx.zeros(DType::F64, &[2, 2])?;
/// gemm_on(&ctx, GemmPath::Tiled, 1.0, &a, &a, 0.0, &mut c, Some(&bias))?;
/// assert_eq!(c.to_vec::<f64>()?, vec![7.5, 9.5, 15.5, 21.5]);
/// # Ok::<(), fucina_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn gemm_on(
    ctx: &ExecContext,
    path: GemmPath,
    alpha: f64,
    a: &RawTensor,
    b: &RawTensor,
    beta: f64,
    c: &mut RawTensor,
    bias: Option<&RawTensor>,
) -> Result<()> {
    let op = "gemm_on";
    let call = GemmCall::plan(op, a, b, c)?;
    if let Some(bt) = bias {
        if bt.shape() != [call.p.n] {
            return Err(Error::ShapeMismatch {
                op,
                lhs: bt.shape().to_vec(),
                rhs: vec![call.p.n],
            });
        }
        if bt.dtype() != call.c.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: call.c.dtype(),
                rhs: bt.dtype(),
            });
        }
    }
    GemmCall {
        alpha,
        beta,
        bias,
        ..call
    }
    .run(ctx, path)
}

/// Plain scalar triple-loop implementations: the spec of the fast kernels above.
pub mod reference;
