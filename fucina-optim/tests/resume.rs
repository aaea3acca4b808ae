//! Resume is bit-exact: 20 steps straight equal 10 steps + save (optimizer
//! state and model, through a checkpoint directory) + load into fresh objects
//! + 10 steps, bitwise, for every optimizer case (and with bf16 moments).

mod common;

use common::*;
use fucina_autograd::testing::TestCtx;
use fucina_optim::*;

fn run_straight(case: &str) -> Vec<Vec<u32>> {
    let ctx = TestCtx::with_threads(1).unwrap();
    let ps = params(&ctx);
    let (mut opt, clip) = build(case, &ps);
    for s in 0..20 {
        train_step(&ctx, &ps, opt.as_mut(), clip, s % 10);
    }
    bits(&ps)
}

fn run_resumed(case: &str, root: &std::path::Path) -> Vec<Vec<u32>> {
    {
        let ctx = TestCtx::with_threads(1).unwrap();
        let ps = params(&ctx);
        let (mut opt, clip) = build(case, &ps);
        for s in 0..10 {
            train_step(&ctx, &ps, opt.as_mut(), clip, s);
        }
        let st = TrainerState {
            step: 10,
            data_position: 10,
            lr: opt.lr(0).unwrap(),
            ..Default::default()
        };
        save_checkpoint(root, &ps, opt.as_ref(), &st).unwrap();
    }
    // Fresh context, fresh parameters (at their init values), fresh optimizer.
    let ctx = TestCtx::with_threads(1).unwrap();
    let ps = params(&ctx);
    let (mut opt, clip) = build(case, &ps);
    let ck = load_latest(root).unwrap().expect("checkpoint");
    assert_eq!(ck.state.step, 10);
    ck.load_model(&ps).unwrap();
    ck.load_optimizer(opt.as_mut()).unwrap();
    assert_eq!(opt.step_count(), 10);
    for s in ck.state.data_position as usize..20 {
        train_step(&ctx, &ps, opt.as_mut(), clip, s % 10);
    }
    bits(&ps)
}

#[test]
fn twenty_steps_equal_ten_save_load_ten_for_every_case() {
    let base = std::env::temp_dir().join(format!("fucina-optim-resume-{}", std::process::id()));
    for case in CASES {
        let root = base.join(case);
        let a = run_straight(case);
        let b = run_resumed(case, &root);
        assert_eq!(a, b, "{case}: resumed run differs from the straight run");
    }
    std::fs::remove_dir_all(&base).ok();
}

fn bf16_adamw(ps: &[(String, fucina_autograd::Tensor)]) -> AdamW {
    let cfg = AdamConfig {
        bf16_exp_avg: true,
        bf16_exp_avg_sq: true,
        ..AdamConfig::adamw(0.01)
    };
    AdamW::single(ps.iter().map(|(_, t)| t.clone()).collect(), cfg).unwrap()
}

#[test]
fn bf16_moments_resume_bit_exact_and_stay_close_to_f32() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let ps = params(&ctx);
    let mut opt = bf16_adamw(&ps);
    for s in 0..20 {
        train_step(&ctx, &ps, &mut opt, Clip::None, s % 10);
    }
    let straight = bits(&ps);
    assert_eq!(
        opt.param_state(0, 0).unwrap().bufs[0].dtype(),
        fucina_core::DType::BF16
    );

    let ps2 = params(&ctx);
    let mut opt2 = bf16_adamw(&ps2);
    for s in 0..10 {
        train_step(&ctx, &ps2, &mut opt2, Clip::None, s);
    }
    let bytes = opt2.state_bytes().unwrap();
    let model = model_bytes(&ps2).unwrap();
    let ps3 = params(&ctx);
    let mut opt3 = bf16_adamw(&ps3);
    load_model_bytes(&model, &ps3).unwrap();
    opt3.load_state_bytes(&bytes).unwrap();
    for s in 10..20 {
        train_step(&ctx, &ps3, &mut opt3, Clip::None, s % 10);
    }
    assert_eq!(straight, bits(&ps3));

    // bf16 moments track the f32 run closely.
    let ps4 = params(&ctx);
    let mut f32opt = AdamW::single(
        ps4.iter().map(|(_, t)| t.clone()).collect(),
        AdamConfig::adamw(0.01),
    )
    .unwrap();
    for s in 0..20 {
        train_step(&ctx, &ps4, &mut f32opt, Clip::None, s % 10);
    }
    for ((_, a), (_, b)) in ps.iter().zip(&ps4) {
        for (x, y) in a
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .zip(b.to_vec::<f32>().unwrap())
        {
            assert!((x - y).abs() < 0.02, "bf16 {x} vs f32 {y}");
        }
    }
    drop((opt, opt2, opt3, f32opt, ps, ps2, ps3, ps4));
}
