//! A WGAN-GP critic trained with its gradient penalty: the penalty
//! (‖∇ₓ̂ D(x̂)‖₂ − 1)² differentiates the critic's gradient, so each step is a
//! backward through a backward (`grad_with` with `create_graph`, as
//! `torch.autograd.grad(create_graph=True)`). The critic separates a shifted
//! Gaussian ("real") from a standard one ("fake") while the penalty keeps its
//! gradient norm near 1. `examples/tests/second_order.rs` checks the same
//! step against PyTorch.
//!
//! Run: `cargo run --release --example wgan_gp`

use fucina::prelude::*;
use fucina_examples::second_order::{mlp_params, wgan_gp_loss, wgan_gp_step};

fn main() -> Result<()> {
    let ctx = ExecContext::with_threads(1)?;
    let f64 = DType::F64;
    let shift = Tensor::constant(&ctx, &[1.0f64, -0.5], &[2])?;
    let mut critic = mlp_params(&ctx, 2, 16, [0.5, 0.1, 0.5, 0.1])?;
    for step in 0..=400u64 {
        let real = Tensor::randn(&ctx, f64, &[64, 2], 100 + step)?
            .mul_scalar(0.5)?
            .add(&shift)?;
        let fake = Tensor::randn(&ctx, f64, &[64, 2], 10_000 + step)?;
        let eps = Tensor::rand(&ctx, f64, &[64, 1], 20_000 + step)?;
        if step % 80 == 0 {
            let (loss, gp) = wgan_gp_loss(&critic, &real, &fake, &eps, 10.0)?;
            println!(
                "step {step:>3}: critic loss {:+.4}  gradient penalty {:.4}",
                loss.item()?,
                gp.item()?
            );
        }
        critic = wgan_gp_step(&critic, &real, &fake, &eps, 10.0, 0.005)?.0;
    }
    Ok(())
}
