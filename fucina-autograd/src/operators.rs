//! `std::ops` operators on [`Tensor`]: `+ - * /` between tensors (with
//! broadcasting) and with `f64` scalars on either side, and unary `-`.
//! (Only `f64`: a second scalar type would leave float literals ambiguous.)
//!
//! Every operator returns `Result<Tensor>`, as candle's do, because shapes and
//! dtypes are checked at run time: write `(&a + &b)?`. Operands may be
//! `&Tensor` or `Tensor` (by value). A `Result<Tensor>` on either side of a
//! tensor operand also works, so chains need one `?` at the end:
//! `(&x * &w + &b)?`, `(&b + &x * &w)?`. (Rust's orphan rule allows no
//! `Result<Tensor> ⊕ f64` nor `Result ⊕ Result`: there, apply `?` first.)
//! Each operator is exactly the named method ([`Tensor::add`],
//! [`Tensor::mul_scalar`], ...), recording the same backward.
//!
//! ```
//! use fucina_autograd::Tensor;
//! let ctx = fucina_core::ExecContext::with_threads(1)?;
//! let a = Tensor::constant(&ctx, &[1.0f32, 2.0], &[2])?;
//! let b = Tensor::constant(&ctx, &[3.0f32, 4.0], &[2])?;
//! let y = (((&a * &b + &a)? * 2.0)? - 1.0)?; // 2·(a·b + a) − 1
//! assert_eq!(y.to_vec::<f32>()?, vec![7.0, 19.0]);
//! assert_eq!((&a + &a * &b)?.to_vec::<f32>()?, vec![4.0, 10.0]);
//! assert_eq!((-&a)?.to_vec::<f32>()?, vec![-1.0, -2.0]);
//! assert_eq!((1.0 / &b)?.to_vec::<f32>()?, vec![1.0 / 3.0, 0.25]);
//! # Ok::<(), fucina_autograd::Error>(())
//! ```

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::error::Result;
use crate::tape::tensor::Tensor;

/// Tensor ⊕ tensor, for the four owned/borrowed combinations and for a
/// `Result<Tensor>` on either side of a tensor (so chains need one `?`).
macro_rules! tensor_tensor {
    ($tr:ident, $m:ident) => {
        impl $tr<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$m(self, rhs)
            }
        }
        impl $tr<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$m(self, &rhs)
            }
        }
        impl $tr<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$m(&self, rhs)
            }
        }
        impl $tr<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$m(&self, &rhs)
            }
        }
        impl $tr<&Tensor> for Result<Tensor> {
            type Output = Result<Tensor>;
            fn $m(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$m(&self?, rhs)
            }
        }
        impl $tr<Tensor> for Result<Tensor> {
            type Output = Result<Tensor>;
            fn $m(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$m(&self?, &rhs)
            }
        }
        impl $tr<Result<Tensor>> for &Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: Result<Tensor>) -> Result<Tensor> {
                Tensor::$m(self, &rhs?)
            }
        }
        impl $tr<Result<Tensor>> for Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: Result<Tensor>) -> Result<Tensor> {
                Tensor::$m(&self, &rhs?)
            }
        }
    };
}

tensor_tensor!(Add, add);
tensor_tensor!(Sub, sub);
tensor_tensor!(Mul, mul);
tensor_tensor!(Div, div);

/// Tensor ⊕ scalar and scalar ⊕ tensor for one scalar type. `$fwd(t, s)` is
/// `t ⊕ s`, `$rev(t, s)` is `s ⊕ t`.
macro_rules! tensor_scalar {
    ($s:ty, $tr:ident, $m:ident, $fwd:ident, $rev:ident) => {
        impl $tr<$s> for &Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: $s) -> Result<Tensor> {
                self.$fwd(f64::from(rhs))
            }
        }
        impl $tr<$s> for Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: $s) -> Result<Tensor> {
                self.$fwd(f64::from(rhs))
            }
        }
        impl $tr<&Tensor> for $s {
            type Output = Result<Tensor>;
            fn $m(self, rhs: &Tensor) -> Result<Tensor> {
                rhs.$rev(f64::from(self))
            }
        }
        impl $tr<Tensor> for $s {
            type Output = Result<Tensor>;
            fn $m(self, rhs: Tensor) -> Result<Tensor> {
                rhs.$rev(f64::from(self))
            }
        }
    };
}

macro_rules! scalar_ops {
    ($s:ty) => {
        tensor_scalar!($s, Add, add, add_scalar, add_scalar);
        tensor_scalar!($s, Sub, sub, sub_scalar, rsub_scalar);
        tensor_scalar!($s, Mul, mul, mul_scalar, mul_scalar);
        tensor_scalar!($s, Div, div, div_scalar, rdiv_scalar);
    };
}

scalar_ops!(f64);

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(&self)
    }
}
