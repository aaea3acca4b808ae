//! MAML on sine regression: each task is y = a·sin(x + φ); the model adapts
//! with one SGD step on a task's support set, and the meta-gradient of its
//! query loss flows back through that inner step (a second-order gradient:
//! `grad_with` with `create_graph` for the inner step). After meta-training,
//! one inner step on a new task lowers its query loss much more than it does
//! from the initial parameters. `examples/tests/second_order.rs` checks one
//! meta-gradient against PyTorch.
//!
//! Run: `cargo run --release --example maml`

use fucina::prelude::*;
use fucina_examples::second_order::{maml_step, mlp_params, mse};

/// A task's support and query sets (10 points each), from a seed.
fn task(ctx: &ExecContext, seed: u64) -> Result<[Tensor; 4]> {
    let f64 = DType::F64;
    let r = Tensor::rand(ctx, f64, &[2], seed)?.to_vec::<f64>()?;
    let (amp, phase) = (0.5 + 1.5 * r[0], std::f64::consts::PI * r[1]);
    let xs = Tensor::uniform(ctx, f64, &[10, 1], -3.0, 3.0, seed + 1)?;
    let xq = Tensor::uniform(ctx, f64, &[10, 1], -3.0, 3.0, seed + 2)?;
    let ys = xs.add_scalar(phase)?.sin()?.mul_scalar(amp)?;
    let yq = xq.add_scalar(phase)?.sin()?.mul_scalar(amp)?;
    Ok([xs, ys, xq, yq])
}

/// Mean query loss after one inner step, over 20 held-out tasks.
fn adapted_loss(ctx: &ExecContext, theta: &[Tensor]) -> Result<f64> {
    let mut total = 0.0;
    for t in 0..20u64 {
        let [xs, ys, xq, yq] = task(ctx, 1_000_000 + 10 * t)?;
        total += maml_step(theta, (&xs, &ys), (&xq, &yq), 0.1)?.outer_loss;
    }
    Ok(total / 20.0)
}

fn main() -> Result<()> {
    let ctx = ExecContext::with_threads(1)?;
    let mut theta = mlp_params(&ctx, 1, 32, [1.0, 0.5, 0.3, 0.0])?;
    println!(
        "query loss after one inner step, 20 new tasks: {:.4} (initial parameters)",
        adapted_loss(&ctx, &theta)?
    );
    for it in 0..300u64 {
        // A meta-batch of 4 tasks: the mean of their meta-gradients.
        let mut meta: Vec<Tensor> = theta
            .iter()
            .map(|t| t.zeros_like())
            .collect::<fucina::autograd::Result<_>>()?;
        for k in 0..4 {
            let [xs, ys, xq, yq] = task(&ctx, 10 * (4 * it + k))?;
            let step = maml_step(&theta, (&xs, &ys), (&xq, &yq), 0.1)?;
            for (m, g) in meta.iter_mut().zip(&step.meta_gradient) {
                *m = m.add(&g.mul_scalar(0.25)?)?;
            }
        }
        let _ng = no_grad();
        theta = theta
            .iter()
            .zip(&meta)
            .map(|(t, m)| {
                Ok(t.sub(&m.mul_scalar(0.01)?)?
                    .detach()?
                    .requires_grad_(true)?)
            })
            .collect::<Result<_>>()?;
        if it % 100 == 99 {
            let [xs, ys, ..] = task(&ctx, 1_000_000)?;
            println!(
                "meta-iteration {:>3}: support loss on a new task {:.4}",
                it + 1,
                mse(&theta, &xs, &ys)?.item()?
            );
        }
    }
    println!(
        "query loss after one inner step, 20 new tasks: {:.4} (meta-trained)",
        adapted_loss(&ctx, &theta)?
    );
    Ok(())
}
