//! Plain scalar triple-loop implementations: the spec of the fast GEMM kernels (f32 and f64,
//! one dtype for every operand; a widened bf16/f16 B is specified as the GEMM of the fully
//! widened B, which is what the mixed tests compare with).

use super::*;

/// `C = alpha·A·B + beta·C` over strided, batched views with the same validation as
/// [`ExecContext::gemm`]; each element is `alpha·Σ_k a·b (accumulated in T, k ascending)
/// + beta·c`, with `beta == 0` ignoring the old C.
pub fn gemm<T: Float>(
    alpha: f64,
    a: &RawTensor,
    b: &RawTensor,
    beta: f64,
    c: &mut RawTensor,
) -> Result<()> {
    let p = plan_unfolded("gemm", a, b, c)?;
    if T::DTYPE != c.dtype() {
        return Err(Error::DTypeMismatch {
            op: "gemm",
            lhs: c.dtype(),
            rhs: T::DTYPE,
        });
    }
    let (alpha, beta) = (T::from_f64(alpha), T::from_f64(beta));
    let sa = a.storage::<T>()?;
    let sb = b.storage::<T>()?;
    let bytes = c.as_mut_bytes()?;
    let sc: &mut [T] = bytemuck::try_cast_slice_mut(bytes).map_err(|e| Error::InvalidArgument {
        op: "gemm",
        msg: format!("output buffer cannot be viewed as {}: {e}", T::DTYPE),
    })?;
    // Empty matrices: nothing to write, however many batch items (2^62 of
    // them must not be looped over; found by the op soak).
    if p.m == 0 || p.n == 0 {
        return Ok(());
    }
    for bi in 0..p.batch_len() {
        let ao = p.a.offset + shape::offset_of(&p.batch, &p.a.batch_strides, bi);
        let bo = p.b.offset + shape::offset_of(&p.batch, &p.b.batch_strides, bi);
        let co = p.c.offset + shape::offset_of(&p.batch, &p.c.batch_strides, bi);
        for i in 0..p.m {
            for j in 0..p.n {
                let mut acc = T::ZERO;
                for kk in 0..p.k {
                    acc += sa[ao + i * p.a.rs + kk * p.a.cs] * sb[bo + kk * p.b.rs + j * p.b.cs];
                }
                let dst = &mut sc[co + i * p.c.rs + j * p.c.cs];
                *dst = if beta == T::ZERO {
                    alpha * acc
                } else {
                    alpha * acc + beta * *dst
                };
            }
        }
    }
    Ok(())
}

/// `torch.matmul` semantics on the reference gemm.
pub fn matmul<T: Float>(ctx: &ExecContext, a: &RawTensor, b: &RawTensor) -> Result<RawTensor> {
    let (a2, b2, full, out_shape) = matmul_shapes("matmul", a, b)?;
    let mut c = ctx.empty(T::DTYPE, &full)?;
    gemm::<T>(1.0, &a2, &b2, 0.0, &mut c)?;
    c.reshape(&out_shape)
}

/// `x · wᵀ + bias` on the reference gemm (bias added after the full product).
pub fn linear<T: Float>(
    ctx: &ExecContext,
    x: &RawTensor,
    w: &RawTensor,
    bias: Option<&RawTensor>,
) -> Result<RawTensor> {
    let mut y = matmul::<T>(ctx, x, &w.transpose(0, 1)?)?;
    if let Some(bt) = bias {
        let bv = bt.to_vec::<T>()?;
        let n = bv.len();
        for (i, v) in y.as_mut_slice::<T>()?.iter_mut().enumerate() {
            *v += bv[i % n];
        }
    }
    Ok(y)
}
