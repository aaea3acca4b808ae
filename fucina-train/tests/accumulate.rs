//! Gradient accumulation: 4 micro-batches of 8 give the gradients of one
//! batch of 32 — within 1e-6 relative in f32 and 1e-12 in f64 — for a GPT
//! (mean token cross-entropy) and an MLP (mean squared error).

use fucina_autograd::{Reduction, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::{Activation, Gpt, GptConfig, Init, Mlp, Module};
use fucina_train::accumulate_gradients;

fn grads(m: &impl Module) -> Vec<Vec<f64>> {
    m.parameters()
        .iter()
        .map(|p| p.grad().unwrap().to_vec_f64().unwrap())
        .collect()
}

fn assert_close(a: &[Vec<f64>], b: &[Vec<f64>], rel: f64, what: &str) {
    for (x, y) in a.iter().zip(b) {
        let scale = x.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
        for (u, v) in x.iter().zip(y) {
            assert!(
                (u - v).abs() <= rel * scale,
                "{what}: {u} vs {v} (scale {scale})"
            );
        }
    }
}

fn gpt_case(dtype: DType, rel: f64) {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let cfg = GptConfig {
            vocab_size: 13,
            block_size: 6,
            n_layer: 2,
            n_head: 2,
            n_embd: 8,
            ..GptConfig::default()
        };
        let gpt = Gpt::new(&mut Init::new(&ctx, dtype, 4), &cfg).unwrap();
        let ids: Vec<i64> = (0..32 * 7).map(|i| (i * 5 + i / 3) % 13).collect();
        let rows = |r0: usize, n: usize, off: usize| -> Tensor {
            let v: Vec<i64> = (r0..r0 + n)
                .flat_map(|r| ids[r * 7 + off..r * 7 + off + 6].to_vec())
                .collect();
            Tensor::constant(&ctx, &v, &[n, 6]).unwrap()
        };
        gpt.zero_grad();
        let full = gpt.loss(&rows(0, 32, 0), &rows(0, 32, 1)).unwrap();
        full.backward().unwrap();
        let want = grads(&gpt);
        gpt.zero_grad();
        let mean =
            accumulate_gradients(4, |k| Ok(gpt.loss(&rows(8 * k, 8, 0), &rows(8 * k, 8, 1))?))
                .unwrap();
        assert_close(&want, &grads(&gpt), rel, "gpt");
        let f = full.to_vec_f64().unwrap()[0];
        assert!((mean - f).abs() <= rel * f.abs(), "loss {mean} vs {f}");
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

fn mlp_case(dtype: DType, rel: f64) {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let mlp = Mlp::new(
            &mut Init::new(&ctx, dtype, 2),
            &[5, 16, 3],
            Activation::Tanh,
        )
        .unwrap();
        let xs: Vec<f64> = (0..32 * 5)
            .map(|i| ((i * 37 % 23) as f64 - 11.0) / 7.0)
            .collect();
        let ts: Vec<f64> = (0..32 * 3)
            .map(|i| ((i * 13 % 17) as f64 - 8.0) / 5.0)
            .collect();
        let make = |v: &[f64], shape: &[usize]| -> Tensor {
            match dtype {
                DType::F32 => {
                    let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                    Tensor::constant(&ctx, &v, shape).unwrap()
                }
                _ => Tensor::constant(&ctx, v, shape).unwrap(),
            }
        };
        let batch = |r0: usize, n: usize| -> (Tensor, Tensor) {
            (
                make(&xs[r0 * 5..(r0 + n) * 5], &[n, 5]),
                make(&ts[r0 * 3..(r0 + n) * 3], &[n, 3]),
            )
        };
        let loss = |r0: usize, n: usize| -> fucina_train::Result<Tensor> {
            let (x, t) = batch(r0, n);
            Ok(mlp.forward(&x)?.mse_loss(&t, Reduction::Mean)?)
        };
        mlp.zero_grad();
        loss(0, 32).unwrap().backward().unwrap();
        let want = grads(&mlp);
        mlp.zero_grad();
        accumulate_gradients(4, |k| loss(8 * k, 8)).unwrap();
        assert_close(&want, &grads(&mlp), rel, "mlp");
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn four_micro_batches_of_8_equal_one_batch_of_32_gpt() {
    gpt_case(DType::F32, 1e-6);
    gpt_case(DType::F64, 1e-12);
}

#[test]
fn four_micro_batches_of_8_equal_one_batch_of_32_mlp() {
    mlp_case(DType::F32, 1e-6);
    mlp_case(DType::F64, 1e-12);
}
