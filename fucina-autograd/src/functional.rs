//! Function transforms on top of `create_graph` (PyTorch's
//! `torch.autograd.functional`): [`vjp`], [`jvp`], [`vhp`], [`hvp`],
//! [`jacobian`], [`hessian`].
//!
//! Each takes a function of a list of tensors returning one tensor, and the
//! point to evaluate at. As in PyTorch, the inputs are first copied into fresh
//! leaves that require a gradient (the caller's tensors and their gradients are
//! never touched), the function runs with grad mode on under
//! [`crate::higher_order`], and the results are constants (cut from the
//! graph). An input the output does not depend on gets zeros (PyTorch's
//! `strict=False`). `jvp` uses the double-vjp trick: Jᵀu is linear in a dummy
//! u, so the vjp of u ↦ ⟨Jᵀu, v⟩ is J·v. `hvp` is PyTorch's too (the double
//! backward of the gradient, valid without assuming a symmetric Hessian);
//! `vhp` is the direct vᵀH.

use crate::error::{Error, Result};
use crate::grad_mode::{enable_grad, higher_order};
use crate::tape::higher::{grad_with, GradOpts};
use crate::tape::tensor::Tensor;

/// Fresh leaves requiring a gradient, holding the inputs' values.
fn fresh(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    inputs
        .iter()
        .map(|t| Tensor::from_raw(t.ctx(), t.raw()?, true))
        .collect()
}

/// Runs `body(xs, out)` with grad mode on under [`higher_order`], `xs` fresh
/// leaves holding the inputs' values and `out = f(xs)`: the common start of
/// every transform.
fn traced<F, R>(
    f: F,
    inputs: &[Tensor],
    body: impl FnOnce(&[Tensor], &Tensor) -> Result<R>,
) -> Result<R>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    let (_g, _h) = (enable_grad(), higher_order());
    let xs = fresh(inputs)?;
    let out = f(&xs)?;
    body(&xs, &out)
}

/// [`traced`] for a scalar `f` (`op` names the transform in the error for
/// another shape): `body` also gets the recorded gradient of `out`.
fn traced_grad<F, R>(
    op: &'static str,
    f: F,
    inputs: &[Tensor],
    body: impl FnOnce(&[Tensor], &Tensor, Vec<Tensor>) -> Result<R>,
) -> Result<R>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    traced(f, inputs, |xs, out| {
        scalar(op, out)?;
        let g = grads(out, xs, None, true)?;
        body(xs, out, g)
    })
}

/// `g` or zeros of `like`'s shape, cut from the graph.
fn or_zeros(g: Option<Tensor>, like: &Tensor) -> Result<Tensor> {
    match g {
        Some(g) => g.detach(),
        None => like.zeros_like(),
    }
}

/// The gradients of `out` with respect to `xs` (zeros where it does not
/// depend), recorded when `create_graph`.
fn grads(
    out: &Tensor,
    xs: &[Tensor],
    seed: Option<&Tensor>,
    create_graph: bool,
) -> Result<Vec<Tensor>> {
    let refs: Vec<&Tensor> = xs.iter().collect();
    let opts = GradOpts {
        grad_output: seed.cloned(),
        create_graph,
    };
    let gs = if out.requires_grad() {
        grad_with(out, &refs, &opts)?
    } else {
        vec![None; xs.len()]
    };
    gs.into_iter()
        .zip(xs)
        .map(|(g, x)| match g {
            Some(g) => Ok(g),
            None => x.zeros_like(),
        })
        .collect()
}

/// Checks that `v` has one tensor per input, each of its input's shape.
fn check_v(op: &'static str, v: &[Tensor], like: &[Tensor]) -> Result<()> {
    if v.len() != like.len() {
        return Err(Error::Core(fucina_core::Error::InvalidArgument {
            op,
            msg: format!("{} vectors for {} inputs", v.len(), like.len()),
        }));
    }
    for (i, (a, b)) in v.iter().zip(like).enumerate() {
        crate::error::check_grad_fits(op, i, (b.shape(), b.dtype()), (a.shape(), a.dtype()))?;
    }
    Ok(())
}

/// Σᵢ ⟨aᵢ, bᵢ⟩ as a recorded scalar.
fn dot(a: &[Tensor], b: &[Tensor]) -> Result<Tensor> {
    let mut acc: Option<Tensor> = None;
    for (x, y) in a.iter().zip(b) {
        let d = x.mul(y)?.sum_all()?;
        acc = Some(match acc {
            None => d,
            Some(s) => s.add(&d)?,
        });
    }
    acc.ok_or(Error::NoVariableInputs)
}

/// The output of `f` at `inputs` and the vector-Jacobian product vᵀJ, one
/// tensor per input (`v`: the output's shape; `None` for a one-element output).
///
/// ```
/// use fucina_autograd::{functional, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let x = Tensor::constant(&ctx, &[1.0f64, 2.0], &[2])?;
/// let (y, g) = functional::vjp(|x| x[0].square()?.sum_all(), &[x], None)?;
/// assert_eq!(y.item()?, 5.0);
/// assert_eq!(g[0].to_vec::<f64>()?, vec![2.0, 4.0]);
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
pub fn vjp<F>(f: F, inputs: &[Tensor], v: Option<&Tensor>) -> Result<(Tensor, Vec<Tensor>)>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    traced(f, inputs, |xs, out| {
        let g = grads(out, xs, v, false)?;
        let g = g.into_iter().map(|g| g.detach()).collect::<Result<_>>()?;
        Ok((out.detach()?, g))
    })
}

/// The output of `f` at `inputs` and the Jacobian-vector product J·v (`v`: one
/// tensor per input, of its shape), by the double-vjp trick.
///
/// ```
/// use fucina_autograd::{functional, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let x = Tensor::constant(&ctx, &[1.0f64, 2.0], &[2])?;
/// let v = Tensor::constant(&ctx, &[1.0f64, 0.0], &[2])?;
/// let (_, jv) = functional::jvp(|x| x[0].square(), &[x], &[v])?;
/// assert_eq!(jv.to_vec::<f64>()?, vec![2.0, 0.0]);
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
pub fn jvp<F>(f: F, inputs: &[Tensor], v: &[Tensor]) -> Result<(Tensor, Tensor)>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    check_v("jvp", v, inputs)?;
    traced(f, inputs, |xs, out| {
        let u = out.zeros_like()?.requires_grad_(true)?;
        if !out.requires_grad() {
            return Ok((out.detach()?, out.zeros_like()?));
        }
        let jt_u = grads(out, xs, Some(&u), true)?;
        let s = dot(&jt_u, v)?;
        let jv = if s.requires_grad() {
            grad_with(&s, &[&u], &GradOpts::default())?.remove(0)
        } else {
            None
        };
        Ok((out.detach()?, or_zeros(jv, out)?))
    })
}

/// The output of scalar `f` at `inputs` and the vector-Hessian product vᵀH,
/// one tensor per input.
///
/// ```
/// use fucina_autograd::{functional, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let x = Tensor::constant(&ctx, &[1.0f64, 2.0], &[2])?;
/// let v = Tensor::constant(&ctx, &[1.0f64, 1.0], &[2])?;
/// // f = Σ x³: H = diag(6x)
/// let (_, vh) = functional::vhp(|x| x[0].pow_scalar(3.0)?.sum_all(), &[x], &[v])?;
/// assert_eq!(vh[0].to_vec::<f64>()?, vec![6.0, 12.0]);
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
pub fn vhp<F>(f: F, inputs: &[Tensor], v: &[Tensor]) -> Result<(Tensor, Vec<Tensor>)>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    check_v("vhp", v, inputs)?;
    traced_grad("vhp", f, inputs, |xs, out, g| {
        let s = dot(&g, v)?;
        let vh = grads(&s, xs, None, false)?;
        let vh = vh.into_iter().map(|t| t.detach()).collect::<Result<_>>()?;
        Ok((out.detach()?, vh))
    })
}

/// The output of scalar `f` at `inputs` and the Hessian-vector product H·v,
/// one tensor per input (PyTorch's `hvp`: the vjp of the gradient's vjp, so no
/// symmetry of H is assumed).
///
/// ```
/// use fucina_autograd::{functional, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let x = Tensor::constant(&ctx, &[1.0f64, 2.0], &[2])?;
/// let v = Tensor::constant(&ctx, &[0.0f64, 1.0], &[2])?;
/// // f = x₀²·x₁: H = [[2x₁, 2x₀], [2x₀, 0]]
/// let f = |x: &[Tensor]| x[0].narrow(0, 0, 1)?.square()?.mul(&x[0].narrow(0, 1, 1)?)?.sum_all();
/// let (_, hv) = functional::hvp(f, &[x], &[v])?;
/// assert_eq!(hv[0].to_vec::<f64>()?, vec![2.0, 0.0]);
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
pub fn hvp<F>(f: F, inputs: &[Tensor], v: &[Tensor]) -> Result<(Tensor, Vec<Tensor>)>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    check_v("hvp", v, inputs)?;
    traced_grad("hvp", f, inputs, |xs, out, g| {
        // u ↦ Σ ⟨(∂g/∂x)ᵀ u⟩ is linear in dummies u; its vjp against v is H·v.
        let us: Vec<Tensor> = xs
            .iter()
            .map(|x| x.zeros_like()?.requires_grad_(true))
            .collect::<Result<_>>()?;
        let s = dot(&g, &us)?;
        let hu = grads(&s, xs, None, true)?;
        let t = dot(&hu, v)?;
        let hv = grads(&t, &us, None, false)?;
        let hv = hv.into_iter().map(|t| t.detach()).collect::<Result<_>>()?;
        Ok((out.detach()?, hv))
    })
}

/// A one-element output, or the error naming the transform.
fn scalar(op: &'static str, out: &Tensor) -> Result<()> {
    if out.numel() == 1 {
        Ok(())
    } else {
        Err(Error::Core(fucina_core::Error::InvalidArgument {
            op,
            msg: format!(
                "the function must return one element, got shape {:?}",
                out.shape()
            ),
        }))
    }
}

/// The Jacobian of `f` at `inputs`: per input, a tensor of shape
/// `output.shape ++ input.shape` (one vjp per output element).
///
/// ```
/// use fucina_autograd::{functional, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let x = Tensor::constant(&ctx, &[1.0f64, 2.0], &[2])?;
/// let j = functional::jacobian(|x| x[0].square(), &[x])?;
/// assert_eq!(j[0].shape(), &[2, 2]);
/// assert_eq!(j[0].to_vec::<f64>()?, vec![2.0, 0.0, 0.0, 4.0]);
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
pub fn jacobian<F>(f: F, inputs: &[Tensor]) -> Result<Vec<Tensor>>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    traced(f, inputs, |xs, out| {
        rows_of(out, xs, |e| {
            let seed = unit(out, e)?;
            // Recorded, so the graph stays for the next row (PyTorch's retain_graph).
            detached(grads(out, xs, Some(&seed), true)?)
        })
    })
}

/// The Hessian of scalar `f` at `inputs`: for inputs i and j, a tensor of
/// shape `input_i.shape ++ input_j.shape`, in row-major order of (i, j).
///
/// ```
/// use fucina_autograd::{functional, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let x = Tensor::constant(&ctx, &[1.0f64, 2.0], &[2])?;
/// let h = functional::hessian(|x| x[0].pow_scalar(3.0)?.sum_all(), &[x])?;
/// assert_eq!(h[0].to_vec::<f64>()?, vec![6.0, 0.0, 0.0, 12.0]);
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
pub fn hessian<F>(f: F, inputs: &[Tensor]) -> Result<Vec<Tensor>>
where
    F: Fn(&[Tensor]) -> Result<Tensor>,
{
    traced_grad("hessian", f, inputs, |xs, _out, g| {
        let mut blocks = Vec::with_capacity(xs.len() * xs.len());
        for gi in &g {
            // Rows of ∂gᵢ/∂x_j for every j, then one block per j.
            let per_j = rows_of(gi, xs, |e| {
                if !gi.requires_grad() {
                    return xs.iter().map(|x| x.zeros_like()).collect();
                }
                let seed = unit(gi, e)?;
                detached(grads(gi, xs, Some(&seed), true)?)
            })?;
            blocks.extend(per_j);
        }
        Ok(blocks)
    })
}

/// The tensors cut from the graph.
fn detached(ts: Vec<Tensor>) -> Result<Vec<Tensor>> {
    ts.into_iter().map(|t| t.detach()).collect()
}

/// A one-hot tensor of `like`'s shape and dtype with a 1 at flat index `e`.
fn unit(like: &Tensor, e: usize) -> Result<Tensor> {
    let mut v = vec![0.0f64; like.numel()];
    v[e] = 1.0;
    let ctx = like.ctx();
    let r = ctx.to_dtype(&ctx.from_slice(&v, like.shape())?, like.dtype())?;
    Tensor::from_raw(ctx, r, false)
}

/// Stacks `row(e)` (one tensor per input) over every element e of `out` into
/// one tensor per input of shape `out.shape ++ input.shape`.
fn rows_of(
    out: &Tensor,
    xs: &[Tensor],
    row: impl Fn(usize) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    let mut data: Vec<Vec<f64>> = vec![Vec::new(); xs.len()];
    for e in 0..out.numel() {
        for (d, g) in data.iter_mut().zip(row(e)?) {
            d.extend(g.to_vec_f64()?);
        }
    }
    xs.iter()
        .zip(data)
        .map(|(x, d)| {
            let mut shape = out.shape().to_vec();
            shape.extend_from_slice(x.shape());
            let ctx = x.ctx();
            let r = ctx.to_dtype(&ctx.from_slice(&d, &shape)?, x.dtype())?;
            Tensor::from_raw(ctx, r, false)
        })
        .collect()
}
