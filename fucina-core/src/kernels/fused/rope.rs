//! Rotary position embedding (RoPE) in Hugging Face's rotate-half convention,
//! with its backward kernel and the scalar reference.
//!
//! Invariants: `x` is `[B, T, H, D]` (f32/f64, any strides: rows whose last
//! axis is unit-stride are read in place, any other layout is copied first),
//! D even; `cos` and `sin` are `[P, D/2]` tables of x's dtype (row `p` holds
//! position `p`'s angles once: HF's full-width table is `cat(freqs, freqs)`);
//! `positions` is an I64 or I32 `[B, T]` tensor (any strides, broadcast views
//! included) with every value in `0..P`. The output is contiguous
//! `[B, T, H, D]`. Rows `(b, t, h)` run in fixed chunks and each element is
//! computed by the same two products and one add as the reference, so the
//! result is bitwise identical to the reference and for any thread count.

use crate::dtype::{DType, Float};
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::kernels::index::read_indices;
use crate::kernels::rows::{rows_per_chunk, PAR_MIN_ELEMS};
use crate::shape;
use crate::tensor::RawTensor;

/// The validated sizes of a rope call: x's `[B, T, H, D]` and the table length `P`.
struct Dims {
    b: usize,
    t: usize,
    h: usize,
    d: usize,
    p: usize,
}

/// Checks x (`[B, T, H, D]`, f32/f64, D even and > 0), the tables (`[P, D/2]`,
/// x's dtype) and positions (I64/I32 `[B, T]`).
fn check(
    op: &'static str,
    x: &RawTensor,
    cos: &RawTensor,
    sin: &RawTensor,
    positions: &RawTensor,
) -> Result<Dims> {
    if !x.dtype().is_compute_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: x.dtype(),
        });
    }
    if x.rank() != 4 {
        return Err(Error::InvalidArgument {
            op,
            msg: format!("x must be [B, T, H, D], got shape {:?}", x.shape()),
        });
    }
    let (b, t, h, d) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    if d == 0 || !d.is_multiple_of(2) {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "the head dim D must be even and > 0, got shape {:?}",
                x.shape()
            ),
        });
    }
    shape::numel_of(op, x.shape())?;
    for (name, table) in [("cos", cos), ("sin", sin)] {
        if table.dtype() != x.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                lhs: x.dtype(),
                rhs: table.dtype(),
            });
        }
        if table.rank() != 2 || table.shape()[1] != d / 2 {
            return Err(Error::InvalidArgument {
                op,
                msg: format!(
                    "{name} must be [P, D/2] = [P, {}] for x of shape {:?}, got {:?}",
                    d / 2,
                    x.shape(),
                    table.shape()
                ),
            });
        }
    }
    if cos.shape() != sin.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: cos.shape().to_vec(),
            rhs: sin.shape().to_vec(),
        });
    }
    if !matches!(positions.dtype(), DType::I64 | DType::I32) {
        return Err(Error::UnsupportedDType {
            op,
            dtype: positions.dtype(),
        });
    }
    if positions.shape() != [b, t] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: vec![b, t],
            rhs: positions.shape().to_vec(),
        });
    }
    Ok(Dims {
        b,
        t,
        h,
        d,
        p: cos.shape()[0],
    })
}

/// Declares a public rotation entry point, `$name($x, cos, sin, positions)`: it checks
/// its operands as `$name` and runs the shared `rope_t`; `inverse` rotates
/// by the negated angles (the backward). The forward and the backward are one function
/// but for that flag and their names.
macro_rules! rope_entry {
    ($(#[$doc:meta])* $name:ident($x:ident), inverse: $inv:literal) => {
        $(#[$doc])*
        pub fn $name(
            &self,
            $x: &RawTensor,
            cos: &RawTensor,
            sin: &RawTensor,
            positions: &RawTensor,
        ) -> Result<RawTensor> {
            const OP: &str = stringify!($name);
            let dims = check(OP, $x, cos, sin, positions)?;
            crate::dispatch_float!($x.dtype(), OP, T => {
                self.rope_t::<T, $inv>(OP, $x, cos, sin, positions, &dims)
            })
        }
    };
}

impl ExecContext {
    rope_entry! {
        /// Rotary position embedding, HF rotate-half convention:
        /// `y = x * cos[pos] + rotate_half(x) * sin[pos]` with
        /// `rotate_half(x) = cat(−x₂, x₁)` and the half-width tables duplicated
        /// across both halves. With `h = D/2`, `c = cos[positions[b, t]]` and
        /// `s = sin[positions[b, t]]`, for `i < h`:
        /// `y[i] = x[i]·c[i] − x[i+h]·s[i]`, `y[i+h] = x[i+h]·c[i] + x[i]·s[i]`.
        ///
        /// `x`: `[B, T, H, D]` f32/f64 (any strides, D even); `cos`, `sin`:
        /// `[P, D/2]` of x's dtype; `positions`: I64 or I32 `[B, T]`, each in
        /// `0..P` (else [`Error::OutOfRange`]). Returns a contiguous `[B, T, H, D]`.
        ///
        /// ```
        /// use fucina_core::ExecContext;
        /// let ctx = ExecContext::with_threads(1)?;
        /// let x = ctx.from_slice(&[1.0f64, 0.0], &[1, 1, 1, 2])?;
        /// // position 0 has angle 0, position 1 a quarter turn.
        /// let cos = ctx.from_slice(&[1.0f64, 0.0], &[2, 1])?;
        /// let sin = ctx.from_slice(&[0.0f64, 1.0], &[2, 1])?;
        /// let pos = ctx.from_slice(&[1i64], &[1, 1])?;
        /// assert_eq!(ctx.rope(&x, &cos, &sin, &pos)?.to_vec::<f64>()?, vec![0.0, 1.0]);
        /// # Ok::<(), fucina_core::Error>(())
        /// ```
        rope(x), inverse: false
    }

    rope_entry! {
        /// Rope backward: the gradient of `x` given the output's gradient `gy`
        /// (`[B, T, H, D]`, x's dtype, any strides) and the forward's tables and
        /// positions.
        ///
        /// Math: per row the forward is a rotation by the angle θᵢ of each pair
        /// `(x[i], x[i+h])`, `y = R(θ)·x` with `R = [[c, −s], [s, c]]`; it is
        /// linear in x, so `gx = R(θ)ᵀ·gy = R(−θ)·gy`:
        /// `gx[i] = g[i]·c[i] + g[i+h]·s[i]`, `gx[i+h] = g[i+h]·c[i] − g[i]·s[i]`
        /// for `i < h`. It needs no saved activation, only the tables and positions.
        rope_backward(gy), inverse: true
    }

    /// The rotation of every row of `x` by its position's angles; `INV` rotates
    /// by the negated angles (the backward). Inputs are validated by the callers.
    fn rope_t<T: Float, const INV: bool>(
        &self,
        op: &'static str,
        x: &RawTensor,
        cos: &RawTensor,
        sin: &RawTensor,
        positions: &RawTensor,
        dims: &Dims,
    ) -> Result<RawTensor> {
        let Dims { b, t, h, d, p } = *dims;
        let half = d / 2;
        let pos = read_indices(self, op, positions, p, positions.shape())?;
        // Rows are read in place when the last axis is unit-stride; any other layout is copied.
        let xc = if x.strides()[3] == 1 {
            x.clone_view()
        } else {
            self.contiguous(x)?
        };
        let (cc, sc) = (self.contiguous(cos)?, self.contiguous(sin)?);
        let mut out = self.empty(x.dtype(), x.shape())?;
        {
            let xs = xc.storage::<T>()?;
            let (x_off, st) = (xc.offset(), xc.strides());
            let (sb, stt, sh) = (st[0], st[1], st[2]);
            let (cs, ss) = (cc.as_slice::<T>()?, sc.as_slice::<T>()?);
            let pos: &[i64] = &pos;
            let n_rows = b * t * h;
            let rpc = rows_per_chunk(d, 1);
            let parallel = n_rows.saturating_mul(d) >= PAR_MIN_ELEMS;
            let o = out.as_mut_slice::<T>()?;
            self.par_chunks_mut(o, rpc * d, parallel, |c, oc| {
                for (k, yr) in oc.chunks_exact_mut(d).enumerate() {
                    let r = c * rpc + k;
                    let (bt, hh) = (r / h, r % h);
                    let (bb, tt) = (bt / t, bt % t);
                    let start = x_off + bb * sb + tt * stt + hh * sh;
                    let xr = &xs[start..start + d];
                    // Positions were checked to lie in 0..P.
                    let row = pos[bt] as usize * half;
                    let (cr, sr) = (&cs[row..row + half], &ss[row..row + half]);
                    let (x1, x2) = xr.split_at(half);
                    let (y1, y2) = yr.split_at_mut(half);
                    for i in 0..half {
                        let (a, bv, ci, si) = (x1[i], x2[i], cr[i], sr[i]);
                        if INV {
                            y1[i] = a * ci + bv * si;
                            y2[i] = bv * ci - a * si;
                        } else {
                            y1[i] = a * ci - bv * si;
                            y2[i] = bv * ci + a * si;
                        }
                    }
                }
            });
        }
        Ok(out)
    }
}

/// Plain scalar implementations: the spec of the kernels above. `x` (or `gy`)
/// is a contiguous row-major `[B, T, H, D]` element vector (`shape`), `cos` and
/// `sin` contiguous `[P, D/2]`, `positions` the `B·T` positions in row-major order.
pub mod reference {
    use crate::dtype::Float;

    /// Declares a public reference `$name($x, shape, cos, sin, positions)`: the shared
    /// `rotate`, `inverse` rotating by the negated angles (the backward).
    macro_rules! reference_entry {
        ($(#[$doc:meta])* $name:ident($x:ident), inverse: $inv:literal) => {
            $(#[$doc])*
            pub fn $name<T: Float>(
                $x: &[T],
                shape: [usize; 4],
                cos: &[T],
                sin: &[T],
                positions: &[i64],
            ) -> Vec<T> {
                rotate($x, shape, cos, sin, positions, $inv)
            }
        };
    }

    reference_entry! {
        /// Forward: `y = x·cos + rotate_half(x)·sin`, `rotate_half(x) = cat(−x₂, x₁)`.
        rope(x), inverse: false
    }

    reference_entry! {
        /// Backward: `gx[i] = g[i]·c + g[i+h]·s`, `gx[i+h] = g[i+h]·c − g[i]·s`.
        rope_backward(gy), inverse: true
    }

    fn rotate<T: Float>(
        x: &[T],
        [b, t, h, d]: [usize; 4],
        cos: &[T],
        sin: &[T],
        positions: &[i64],
        inverse: bool,
    ) -> Vec<T> {
        let half = d / 2;
        let mut y = vec![T::ZERO; x.len()];
        for bb in 0..b {
            for tt in 0..t {
                let p = positions[bb * t + tt] as usize;
                for hh in 0..h {
                    let base = ((bb * t + tt) * h + hh) * d;
                    for i in 0..half {
                        let (x1, x2) = (x[base + i], x[base + i + half]);
                        let (c, s) = (cos[p * half + i], sin[p * half + i]);
                        if inverse {
                            y[base + i] = x1 * c + x2 * s;
                            y[base + i + half] = x2 * c - x1 * s;
                        } else {
                            y[base + i] = x1 * c - x2 * s;
                            y[base + i + half] = x2 * c + x1 * s;
                        }
                    }
                }
            }
        }
        y
    }
}
