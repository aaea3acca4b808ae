//! Updates are bitwise identical for 1 and 2 threads: every optimizer over
//! parameters large enough to span several parallel chunks (and clipping,
//! whose norm is reduced over chunks).

use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;
use fucina_core::rng::SplitMix64;
use fucina_optim::*;

fn run(threads: usize, which: usize) -> Vec<u64> {
    let ctx = TestCtx::with_threads(threads).unwrap();
    let mut rng = SplitMix64::new(7);
    // 70_003 elements: 5 chunks of 16K, the last one ragged; a 300 × 233 matrix for Muon.
    let w: Vec<f32> = rng
        .vec_uniform(300 * 233, -1.0, 1.0)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let b: Vec<f64> = rng.vec_uniform(1003, -1.0, 1.0);
    let pw = Tensor::variable(&ctx, &w, &[300, 233]).unwrap();
    let pb = Tensor::variable(&ctx, &b, &[1003]).unwrap();
    let ps = vec![pw.clone(), pb.clone()];
    let mut opt: Box<dyn Optimizer> = match which {
        0 => Box::new(
            Sgd::single(
                ps.clone(),
                SgdConfig {
                    momentum: 0.9,
                    nesterov: true,
                    ..SgdConfig::new(0.1)
                },
            )
            .unwrap(),
        ),
        1 => Box::new(AdamW::single(ps.clone(), AdamConfig::adamw(1e-2)).unwrap()),
        2 => Box::new(
            RmsProp::single(
                ps.clone(),
                RmsPropConfig {
                    centered: true,
                    momentum: 0.5,
                    ..RmsPropConfig::new(1e-2)
                },
            )
            .unwrap(),
        ),
        3 => Box::new(
            Lion::single(
                ps.clone(),
                LionConfig {
                    weight_decay: 0.1,
                    ..LionConfig::new(1e-3)
                },
            )
            .unwrap(),
        ),
        _ => Box::new(Muon::single(ps.clone(), MuonConfig::default()).unwrap()),
    };
    for step in 0..3 {
        let gw: Vec<f32> = rng
            .vec_uniform(w.len(), -2.0, 2.0)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let gb: Vec<f64> = rng.vec_uniform(b.len(), -2.0, 2.0);
        pw.set_grad(Some(ctx.from_slice(&gw, &[300, 233]).unwrap()))
            .unwrap();
        pb.set_grad(Some(ctx.from_slice(&gb, &[1003]).unwrap()))
            .unwrap();
        let norm = clip_grad_norm(&ps, 50.0 + step as f64).unwrap();
        assert!(norm > 50.0);
        opt.step().unwrap();
        opt.zero_grad();
    }
    let mut out: Vec<u64> = pw
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits() as u64)
        .collect();
    out.extend(pb.to_vec::<f64>().unwrap().iter().map(|v| v.to_bits()));
    drop((opt, ps, pw, pb));
    out
}

#[test]
fn one_and_two_threads_are_bitwise_identical() {
    for which in 0..5 {
        assert_eq!(run(1, which), run(2, which), "optimizer #{which}");
    }
}
