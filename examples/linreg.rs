//! Linear regression, y = 3x + 2, learned by SGD: the smallest complete
//! fucina program (one import, at most 15 lines of code; a test counts them).
//!
//! Run: `cargo run --release --example linreg`

use fucina::prelude::*;

fn main() -> Result<()> {
    let ctx = ExecContext::with_threads(1)?;
    let x = Tensor::linspace(&ctx, DType::F32, -1.0, 1.0, 64)?.reshape([-1, 1])?;
    let y = ((&x * 3.0)? + 2.0)?;
    let w = Tensor::zeros(&ctx, DType::F32, &[1])?.requires_grad_(true)?;
    let b = Tensor::zeros(&ctx, DType::F32, &[1])?.requires_grad_(true)?;
    let mut opt = Sgd::single(vec![w.clone(), b.clone()], SgdConfig::new(0.5))?;
    for _ in 0..200 {
        opt.backward_step(&(&x * &w + &b)?.mse_loss(&y, Reduction::Mean)?)?;
    }
    println!("learned w = {:.4}, b = {:.4}", w.item()?, b.item()?);
    Ok(())
}
