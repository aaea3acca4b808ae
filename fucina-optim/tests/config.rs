//! Invalid hyperparameters are a structured `Error::InvalidConfig` naming the optimizer and
//! the offending value, for every optimizer; nothing panics. (`set_lr` rejection and the
//! schedule checks are in `checkpoint.rs::schedules_and_config_validation`.)

use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;
use fucina_core::ExecContext;
use fucina_optim::{
    AdamConfig, Algorithm, Error, LionConfig, MuonConfig, Optim, ParamGroup, RmsPropConfig,
    SgdConfig,
};

/// Asserts that an optimizer over one small parameter with `config` is rejected with an
/// `InvalidConfig` of `name` whose message mentions `needle`.
fn rejected<A: Algorithm>(ctx: &ExecContext, config: A, name: &str, needle: &str) {
    let w = Tensor::variable(ctx, &[0.5f32; 4], &[2, 2]).unwrap();
    match Optim::new(vec![ParamGroup::new(vec![w], config)]) {
        Err(Error::InvalidConfig { optimizer, msg }) => {
            assert_eq!(optimizer, name);
            assert!(
                msg.contains(needle),
                "{name}: message {msg:?} lacks {needle:?}"
            );
        }
        Err(e) => panic!("{name}: expected InvalidConfig, got {e}"),
        Ok(_) => panic!("{name}: accepted an invalid config ({needle})"),
    }
}

#[test]
fn invalid_hyperparameters_are_structured_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let sgd = |f: fn(&mut SgdConfig)| {
        let mut c = SgdConfig::new(0.1);
        f(&mut c);
        c
    };
    rejected(&ctx, sgd(|c| c.lr = -1.0), "sgd", "lr");
    rejected(&ctx, sgd(|c| c.momentum = f64::NAN), "sgd", "momentum");
    rejected(
        &ctx,
        sgd(|c| c.dampening = f64::INFINITY),
        "sgd",
        "dampening",
    );
    rejected(&ctx, sgd(|c| c.nesterov = true), "sgd", "nesterov");

    let adam = |f: fn(&mut AdamConfig)| {
        let mut c = AdamConfig::adamw(1e-3);
        f(&mut c);
        c
    };
    rejected(&ctx, adam(|c| c.betas.0 = 1.0), "adam", "beta1");
    rejected(&ctx, adam(|c| c.betas.1 = -0.1), "adam", "beta2");
    rejected(&ctx, adam(|c| c.eps = -1e-8), "adam", "eps");
    rejected(
        &ctx,
        adam(|c| c.weight_decay = f64::NAN),
        "adam",
        "weight_decay",
    );

    let mut r = RmsPropConfig::new(0.01);
    r.alpha = -0.5;
    rejected(&ctx, r, "rmsprop", "alpha");

    let mut l = LionConfig::new(1e-4);
    l.betas.1 = 1.5;
    rejected(&ctx, l, "lion", "beta2");

    let m = MuonConfig {
        momentum: 1.0,
        ..MuonConfig::default()
    };
    rejected(&ctx, m, "muon", "momentum");
    let mut adamw = AdamConfig::adamw(1e-3);
    adamw.betas.0 = 2.0;
    let m = MuonConfig {
        adamw,
        ..MuonConfig::default()
    };
    rejected(&ctx, m, "adam", "beta1");
}

/// A parameter that does not require a gradient would never be updated: every optimizer
/// rejects it at construction with `NotTrainable`, naming group, index and shape, and
/// saying how to fix it.
#[test]
fn a_parameter_without_gradient_is_rejected_with_a_fix() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let w = Tensor::variable(&ctx, &[0.5f32; 4], &[2, 2]).unwrap();
        let frozen = Tensor::constant(&ctx, &[0.5f32; 3], &[3]).unwrap();
        let e = fucina_optim::Sgd::single(vec![w.clone(), frozen.clone()], SgdConfig::new(0.1))
            .expect_err("a constant parameter was accepted");
        assert!(
            matches!(
                &e,
                Error::NotTrainable { optimizer: "sgd", group: 0, index: 1, shape } if shape == &[3]
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains("does not require a gradient"), "{msg}");
        assert!(msg.contains("would never be updated"), "{msg}");
        assert!(msg.contains(".requires_grad_(true)"), "{msg}");
        let second = Optim::new(vec![
            ParamGroup::new(vec![w.clone()], AdamConfig::adamw(1e-3)),
            ParamGroup::new(vec![frozen.clone()], AdamConfig::adamw(1e-3)),
        ]);
        assert!(matches!(
            second,
            Err(Error::NotTrainable {
                group: 1,
                index: 0,
                ..
            })
        ));
        // The fix the message names.
        let trainable = frozen.requires_grad_(true).unwrap();
        assert!(fucina_optim::Sgd::single(vec![w, trainable], SgdConfig::new(0.1)).is_ok());
    }
}
