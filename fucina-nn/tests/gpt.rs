//! The GPT beyond the golden: nanoGPT init statistics and residual scaling,
//! config serde, input validation, same seed → same weights on 1 and 2
//! threads, and a 100-step training loop that leaves the pool's outstanding
//! count at its baseline after every step (SGD written by hand: fucina-optim
//! shares this crate's layer, so it cannot be a dev-dependency).

use fucina_autograd::{no_grad, ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::{Error, Gpt, GptConfig, Init, Module};

#[path = "common/tiny.rs"]
mod tiny_models;

fn tiny() -> GptConfig {
    tiny_models::tiny_gpt()
}

fn mean_std(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / n;
    (m, var.sqrt())
}

#[test]
fn nanogpt_init() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let cfg = GptConfig {
            n_embd: 64,
            n_layer: 2,
            ..GptConfig::default()
        };
        let gpt = Gpt::new(&mut Init::new(&ctx, DType::F32, 3), &cfg).unwrap();
        for (name, p) in gpt.named_parameters() {
            let v = p.to_vec::<f32>().unwrap();
            let (m, s) = mean_std(&v);
            if name.contains("ln") {
                let want = if name.ends_with("weight") { 1.0 } else { 0.0 };
                assert!(v.iter().all(|&x| x == want), "{name}");
            } else if name.ends_with("bias") {
                assert!(v.iter().all(|&x| x == 0.0), "{name}");
            } else {
                assert!(
                    m.abs() < 0.004 && (s - 0.02).abs() < 0.002,
                    "{name}: mean {m} std {s}"
                );
            }
        }
        let scaled = Gpt::new(
            &mut Init::new(&ctx, DType::F32, 3),
            &GptConfig {
                residual_scaling: true,
                ..cfg
            },
        )
        .unwrap();
        let (_, s) = mean_std(&scaled.blocks[1].mlp.fc_proj.weight.to_vec::<f32>().unwrap());
        assert!((s - 0.02 / 2.0).abs() < 0.001, "residual scaling: std {s}");
        let (_, s) = mean_std(&scaled.blocks[1].mlp.fc.weight.to_vec::<f32>().unwrap());
        assert!((s - 0.02).abs() < 0.002, "fc is not scaled: std {s}");
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn same_seed_same_gpt_on_any_thread_count() {
    let (c1, c2) = (
        ExecContext::with_threads(1).unwrap(),
        ExecContext::with_threads(2).unwrap(),
    );
    {
        let bits = |ctx: &ExecContext| -> Vec<u32> {
            let gpt = Gpt::new(&mut Init::new(ctx, DType::F32, 11), &tiny()).unwrap();
            let idx = Tensor::constant(ctx, &[1i64, 2, 3, 4, 5, 6, 7, 8], &[1, 8]).unwrap();
            let mut out: Vec<u32> = gpt
                .parameters()
                .iter()
                .flat_map(|p| p.to_vec::<f32>().unwrap())
                .map(f32::to_bits)
                .collect();
            out.extend(
                gpt.forward(&idx)
                    .unwrap()
                    .to_vec::<f32>()
                    .unwrap()
                    .into_iter()
                    .map(f32::to_bits),
            );
            out
        };
        assert_eq!(bits(&c1), bits(&c2));
    }
    assert_eq!(c1.stats().outstanding, 0);
    assert_eq!(c2.stats().outstanding, 0);
}

#[test]
fn config_serde_and_validation() {
    let cfg: GptConfig =
        serde_json::from_str(r#"{"n_layer": 2, "n_embd": 32, "tied_head": false}"#).unwrap();
    assert_eq!(
        (cfg.n_layer, cfg.n_embd, cfg.vocab_size, cfg.tied_head),
        (2, 32, 65, false)
    );
    let back: GptConfig = serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
    assert_eq!(back, cfg);
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let bad = GptConfig {
            n_head: 3,
            ..tiny()
        };
        let e = Gpt::new(&mut Init::new(&ctx, DType::F32, 0), &bad).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidConfig {
                    module: "GptConfig",
                    ..
                }
            ),
            "{e}"
        );
        let gpt = Gpt::new(&mut Init::new(&ctx, DType::F32, 0), &tiny()).unwrap();
        let long = Tensor::constant(&ctx, &[0i64; 9], &[1, 9]).unwrap();
        assert!(matches!(
            gpt.forward(&long),
            Err(Error::BadInput { module: "Gpt", .. })
        ));
        let oov = Tensor::constant(&ctx, &[13i64], &[1, 1]).unwrap();
        assert!(
            matches!(gpt.forward(&oov), Err(Error::Core(_))),
            "an out-of-vocabulary id is an error"
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn hundred_training_steps_leave_outstanding_at_baseline() {
    let ctx = ExecContext::with_threads(2).unwrap();
    {
        let gpt = Gpt::new(
            &mut Init::new(&ctx, DType::F32, 5),
            &GptConfig {
                dropout: 0.1,
                ..tiny()
            },
        )
        .unwrap();
        let ids: Vec<i64> = (0..16).map(|i| (i * 5 % 13) as i64).collect();
        let tgt: Vec<i64> = ids.iter().map(|&i| (i + 1) % 13).collect();
        let idx = Tensor::constant(&ctx, &ids, &[2, 8]).unwrap();
        let tgt = Tensor::constant(&ctx, &tgt, &[2, 8]).unwrap();
        let params = gpt.parameters();
        let baseline = ctx.stats().outstanding;
        let mut losses = Vec::new();
        for step in 0..100 {
            {
                let _scope = ctx.scope();
                let loss = gpt.loss(&idx, &tgt).unwrap();
                losses.push(loss.item().unwrap());
                loss.backward().unwrap();
            }
            {
                let _ng = no_grad();
                for p in &params {
                    let g = p.grad().unwrap();
                    let next = p.sub(&g.mul_scalar(0.5).unwrap()).unwrap();
                    p.set_value(next.raw().unwrap()).unwrap();
                }
            }
            gpt.zero_grad();
            assert_eq!(ctx.stats().outstanding, baseline, "step {step}");
        }
        assert!(
            losses[99] < 0.5 * losses[0],
            "training makes progress: {} -> {}",
            losses[0],
            losses[99]
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}
