//! The second-order examples' math, shared by `examples/wgan_gp.rs`,
//! `examples/maml.rs` and their torch-golden tests: a small tanh MLP and its
//! initial parameters, a
//! WGAN-GP critic step (the gradient penalty differentiates a gradient), and
//! one MAML inner/outer step (the meta-gradient differentiates through an
//! inner SGD step). Both are plain `grad_with(create_graph)` calls, as a
//! PyTorch user writes them with `torch.autograd.grad(create_graph=True)`.

use fucina::autograd::{grad_with, no_grad, GradOpts, Tensor};
use fucina::core::{DType, ExecContext};
use fucina::Result;

/// `linear(tanh(linear(x, W1, b1)), W2, b2)` with `p = [W1, b1, W2, b2]`.
pub fn mlp(x: &Tensor, p: &[Tensor]) -> Result<Tensor> {
    Ok(x.linear(&p[0], Some(&p[1]))?
        .tanh()?
        .linear(&p[2], Some(&p[3]))?)
}

/// Fresh f64 parameters `[W1, b1, W2, b2]` of an `inputs → hidden → 1`
/// [`mlp`], each `N(0, 1)·scale` (`scales` in that order) from seeds 1 to 4,
/// and each a leaf that requires its gradient.
pub fn mlp_params(
    ctx: &ExecContext,
    inputs: usize,
    hidden: usize,
    scales: [f64; 4],
) -> Result<Vec<Tensor>> {
    let shapes: [&[usize]; 4] = [&[hidden, inputs], &[hidden], &[1, hidden], &[1]];
    shapes
        .into_iter()
        .zip(scales)
        .zip(1u64..)
        .map(|((shape, scale), seed)| {
            Ok(Tensor::randn(ctx, DType::F64, shape, seed)?
                .mul_scalar(scale)?
                .requires_grad_(true)?)
        })
        .collect()
}

/// The gradients of `loss` with respect to `wrt` (zeros where it does not depend).
fn grads(loss: &Tensor, wrt: &[Tensor], create_graph: bool) -> Result<Vec<Tensor>> {
    let refs: Vec<&Tensor> = wrt.iter().collect();
    let opts = GradOpts {
        grad_output: None,
        create_graph,
    };
    grad_with(loss, &refs, &opts)?
        .into_iter()
        .zip(wrt)
        .map(|(g, w)| {
            Ok(match g {
                Some(g) => g,
                None => w.zeros_like()?,
            })
        })
        .collect()
}

/// The WGAN-GP critic loss at one step: with x̂ = ε·real + (1 − ε)·fake
/// (ε per row), gp = mean over rows of (‖∇ₓ̂ D(x̂)‖₂ − 1)², and
/// loss = mean D(fake) − mean D(real) + λ·gp. Returns (loss, gp).
pub fn wgan_gp_loss(
    critic: &[Tensor],
    real: &Tensor,
    fake: &Tensor,
    eps: &Tensor,
    lambda: f64,
) -> Result<(Tensor, Tensor)> {
    let mixed = eps.mul(real)?.add(&eps.rsub_scalar(1.0)?.mul(fake)?)?;
    let xh = mixed.detach()?.requires_grad_(true)?;
    let d = mlp(&xh, critic)?.sum_all()?;
    let g = grads(&d, std::slice::from_ref(&xh), true)?.remove(0);
    let gp = g.norm(&[1], false)?.sub_scalar(1.0)?.square()?.mean_all()?;
    let loss = mlp(fake, critic)?
        .mean_all()?
        .sub(&mlp(real, critic)?.mean_all()?)?
        .add(&gp.mul_scalar(lambda)?)?;
    Ok((loss, gp))
}

/// One critic step: the loss's gradient (through the penalty's gradient) and
/// a plain SGD update with rate `lr`. Returns the new parameters and the loss.
pub fn wgan_gp_step(
    critic: &[Tensor],
    real: &Tensor,
    fake: &Tensor,
    eps: &Tensor,
    lambda: f64,
    lr: f64,
) -> Result<(Vec<Tensor>, f64)> {
    let (loss, _gp) = wgan_gp_loss(critic, real, fake, eps, lambda)?;
    let g = grads(&loss, critic, false)?;
    let _ng = no_grad();
    let next = critic
        .iter()
        .zip(&g)
        .map(|(p, g)| Ok(p.sub(&g.mul_scalar(lr)?)?.detach()?.requires_grad_(true)?))
        .collect::<Result<Vec<_>>>()?;
    Ok((next, loss.item()?))
}

/// Mean squared error of the MLP on (x, y).
pub fn mse(p: &[Tensor], x: &Tensor, y: &Tensor) -> Result<Tensor> {
    Ok(mlp(x, p)?.sub(y)?.square()?.mean_all()?)
}

/// What one MAML step computed.
pub struct MamlStep {
    /// θ' = θ − α·∇θ L_support(θ), recorded (a function of θ).
    pub adapted: Vec<Tensor>,
    /// L_query(θ').
    pub outer_loss: f64,
    /// ∇θ L_query(θ'), through the inner step (second order).
    pub meta_gradient: Vec<Tensor>,
}

/// One MAML inner step on the support set and the meta-gradient of the query
/// loss at the adapted parameters.
pub fn maml_step(
    theta: &[Tensor],
    support: (&Tensor, &Tensor),
    query: (&Tensor, &Tensor),
    alpha: f64,
) -> Result<MamlStep> {
    let inner = mse(theta, support.0, support.1)?;
    let g = grads(&inner, theta, true)?;
    let adapted = theta
        .iter()
        .zip(&g)
        .map(|(t, g)| Ok(t.sub(&g.mul_scalar(alpha)?)?))
        .collect::<Result<Vec<_>>>()?;
    let outer = mse(&adapted, query.0, query.1)?;
    let meta_gradient = grads(&outer, theta, false)?;
    Ok(MamlStep {
        outer_loss: outer.item()?,
        adapted,
        meta_gradient,
    })
}
