//! The second-order examples against PyTorch (goldens from
//! `tools/gen_second_order_examples.py`, f64): the WGAN-GP critic's
//! parameters after 5 steps within 1e-6 relative, and a MAML meta-gradient
//! within 1e-8.

use fucina::autograd::testing::TestCtx;
use fucina::prelude::*;
use fucina_examples::second_order::{maml_step, wgan_gp_step};
use safetensors::SafeTensors;

const GOLDENS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/goldens/second_order_examples.safetensors"
);

fn load(ctx: &ExecContext, st: &SafeTensors, key: &str) -> Tensor {
    let v = st
        .tensor(key)
        .unwrap_or_else(|_| panic!("{key}: no golden"));
    let data: Vec<f64> = bytemuck::pod_collect_to_vec(v.data());
    Tensor::constant(ctx, &data, v.shape()).unwrap()
}

/// max |a − b| / max |b|.
fn rel_err(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
    let scale = w.iter().fold(1e-300f64, |m, v| m.max(v.abs()));
    g.iter()
        .zip(&w)
        .fold(0.0, |m, (a, b)| m.max((a - b).abs() / scale))
}

/// Runs `test` on the goldens in a fresh context, then checks that nothing
/// it made is left in the pool or the graph.
fn with_goldens(test: impl FnOnce(&ExecContext, &SafeTensors)) {
    let bytes = std::fs::read(GOLDENS).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let tc = TestCtx::new().unwrap();
    test(tc.ctx(), &st);
    tc.check().unwrap();
}

/// The four MLP parameters `{prefix}/p0..p3` as leaves that require their gradient.
fn params(ctx: &ExecContext, st: &SafeTensors, prefix: &str) -> Vec<Tensor> {
    (0..4)
        .map(|i| {
            load(ctx, st, &format!("{prefix}/p{i}"))
                .requires_grad_(true)
                .unwrap()
        })
        .collect()
}

#[test]
fn wgan_gp_critic_after_five_steps_matches_torch() {
    with_goldens(|ctx, st| {
        let (real, fake, eps) = (
            load(ctx, st, "wgan/real"),
            load(ctx, st, "wgan/fake"),
            load(ctx, st, "wgan/eps"),
        );
        let mut critic = params(ctx, st, "wgan");
        for step in 0..5 {
            let e = eps.select(0, step).unwrap();
            critic = wgan_gp_step(&critic, &real, &fake, &e, 10.0, 0.05)
                .unwrap()
                .0;
        }
        for (i, p) in critic.iter().enumerate() {
            let want = load(ctx, st, &format!("wgan/final{i}"));
            let e = rel_err(p, &want);
            assert!(e <= 1e-6, "critic parameter {i}: rel err {e:e}");
        }
    });
}

#[test]
fn maml_meta_gradient_matches_torch() {
    with_goldens(|ctx, st| {
        let d: Vec<Tensor> = ["xs", "ys", "xq", "yq"]
            .iter()
            .map(|k| load(ctx, st, &format!("maml/{k}")))
            .collect();
        let theta = params(ctx, st, "maml");
        let step = maml_step(&theta, (&d[0], &d[1]), (&d[2], &d[3]), 0.1).unwrap();
        for i in 0..4 {
            let e = rel_err(
                &step.meta_gradient[i],
                &load(ctx, st, &format!("maml/meta{i}")),
            );
            assert!(e <= 1e-8, "meta-gradient {i}: rel err {e:e}");
            let e = rel_err(
                &step.adapted[i],
                &load(ctx, st, &format!("maml/adapted{i}")),
            );
            assert!(e <= 1e-8, "adapted parameter {i}: rel err {e:e}");
        }
        let want = load(ctx, st, "maml/outer_loss").item().unwrap();
        assert!((step.outer_loss - want).abs() <= 1e-8 * want.abs());
        // First order only (the inner gradient detached) differs: the test sees the second order.
    });
}
