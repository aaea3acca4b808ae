//! Crash safety of training checkpoints, and structured errors (never
//! panics) on missing, truncated or mismatched files.
//!
//! Two crash tests: a failure injected between two files of a save, and a
//! child process (this test binary re-executed) killed by the parent while
//! it is in the middle of a save. Both times `load_latest` must return the
//! previous complete checkpoint.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use fucina_core::ExecContext;
use fucina_optim::checkpoint::{inject_fault, FaultAction};
use fucina_optim::*;

const CHILD_ENV: &str = "FUCINA_OPTIM_CRASH_CHILD_ROOT";

fn tmp_root(tag: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("fucina-optim-{tag}-{}", std::process::id()));
    std::fs::remove_dir_all(&root).ok();
    root
}

/// Trains `steps` steps of AdamW and saves a checkpoint at the end (step = `steps`).
fn train_and_save(root: &Path, steps: usize) -> Result<PathBuf> {
    let ctx = ExecContext::with_threads(1)?;
    let ps = params(&ctx);
    let (mut opt, clip) = build("adamw", &ps);
    for s in 0..steps {
        train_step(&ctx, &ps, opt.as_mut(), clip, s % 10);
    }
    let st = TrainerState {
        step: steps as u64,
        data_position: steps as u64 * 64,
        lr: opt.lr(0)?,
        seeds: [("data".to_string(), 42)].into_iter().collect(),
        ..Default::default()
    };
    save_checkpoint(root, &ps, opt.as_ref(), &st)
}

#[test]
fn injected_failure_between_files_keeps_previous_checkpoint() {
    let root = tmp_root("inject");
    train_and_save(&root, 3).unwrap();
    for point in ["before_model", "after_model", "after_optimizer"] {
        inject_fault(Some((point, FaultAction::Fail)));
        let err = train_and_save(&root, 5).unwrap_err();
        inject_fault(None);
        assert!(matches!(err, Error::Injected(p) if p == point), "{err}");
        let ck = load_latest(&root).unwrap().expect("previous checkpoint");
        assert_eq!(ck.state.step, 3, "after a failure at {point}");
        assert_eq!(ck.state.data_position, 3 * 64);
        assert_eq!(ck.state.seeds["data"], 42);
    }
    // Overwriting a complete checkpoint: the marker goes first, so a failure
    // leaves that directory incomplete and an older one is returned.
    train_and_save(&root, 5).unwrap();
    assert_eq!(load_latest(&root).unwrap().unwrap().state.step, 5);
    inject_fault(Some(("after_model", FaultAction::Fail)));
    assert!(train_and_save(&root, 5).is_err());
    inject_fault(None);
    assert_eq!(load_latest(&root).unwrap().unwrap().state.step, 3);
    // A successful save then restores it; loading works end to end.
    train_and_save(&root, 5).unwrap();
    let ck = load_latest(&root).unwrap().unwrap();
    assert_eq!(ck.state.step, 5);
    let ctx = ExecContext::with_threads(1).unwrap();
    let ps = params(&ctx);
    let (mut opt, _) = build("adamw", &ps);
    ck.load_model(&ps).unwrap();
    ck.load_optimizer(opt.as_mut()).unwrap();
    assert_eq!(opt.step_count(), 5);
    std::fs::remove_dir_all(&root).ok();
}

/// In the child: save step 3 completely, then hang in the middle of saving step 6.
/// Not a test of its own: `killed_mid_save_keeps_previous_checkpoint` runs it
/// (with `--ignored` and the directory in `CHILD_ENV`) and kills it.
#[test]
#[ignore = "child process of killed_mid_save_keeps_previous_checkpoint, which runs it"]
fn crash_child_entry() {
    let Ok(root) = std::env::var(CHILD_ENV) else {
        panic!("{CHILD_ENV} is not set: this is run by killed_mid_save_keeps_previous_checkpoint");
    };
    let root = PathBuf::from(root);
    train_and_save(&root, 3).unwrap();
    inject_fault(Some(("after_model", FaultAction::Hang)));
    train_and_save(&root, 6).unwrap();
    unreachable!("the hang point never returns");
}

#[test]
fn killed_mid_save_keeps_previous_checkpoint() {
    let root = tmp_root("kill");
    std::fs::create_dir_all(&root).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args([
            "crash_child_entry",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, &root)
        .spawn()
        .unwrap();
    let ready = root.join("ready_file");
    // No wall-clock limit: the child either reaches the hang point or exits
    // (a failure), and both end this loop.
    while !ready.exists() {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("child exited before reaching the save: {st}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The step-6 directory exists with its model file but no marker.
    let partial = root.join("step-000006");
    assert!(partial.join("model.safetensors").exists());
    assert!(!partial.join("trainer_state.json").exists());
    let ck = load_latest(&root).unwrap().expect("previous checkpoint");
    assert_eq!(ck.state.step, 3);
    assert_eq!(ck.dir, root.join("step-000003"));
    let ctx = ExecContext::with_threads(1).unwrap();
    let ps = params(&ctx);
    let (mut opt, _) = build("adamw", &ps);
    ck.load_model(&ps).unwrap();
    ck.load_optimizer(opt.as_mut()).unwrap();
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn load_latest_without_checkpoints_is_none() {
    let root = tmp_root("empty");
    assert!(load_latest(&root).unwrap().is_none());
    std::fs::create_dir_all(root.join("step-000001")).unwrap();
    std::fs::create_dir_all(root.join("not-a-step")).unwrap();
    assert!(load_latest(&root).unwrap().is_none());
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn bad_files_are_structured_errors() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let ps = params(&ctx);
    let (mut opt, clip) = build("adamw", &ps);
    for s in 0..3 {
        train_step(&ctx, &ps, opt.as_mut(), clip, s);
    }
    let good = opt.state_bytes().unwrap();
    let model = model_bytes(&ps).unwrap();

    // Missing file.
    let missing = std::env::temp_dir().join("fucina-optim-definitely-missing.safetensors");
    assert!(matches!(opt.load(&missing), Err(Error::Io { .. })));
    assert!(matches!(load_model(&missing, &ps), Err(Error::Io { .. })));
    // Truncated files.
    for cut in [0, 7, 100, good.len() / 2, good.len() - 1] {
        assert!(opt.load_state_bytes(&good[..cut]).is_err(), "cut at {cut}");
    }
    for cut in [0, 7, model.len() / 2, model.len() - 1] {
        assert!(
            load_model_bytes(&model[..cut], &ps).is_err(),
            "cut at {cut}"
        );
    }
    // A model file is not an optimizer file.
    assert!(matches!(
        opt.load_state_bytes(&model),
        Err(Error::StateMismatch(_))
    ));
    // Wrong optimizer.
    let (mut sgd, _) = build("sgd_momentum", &ps);
    assert!(matches!(
        sgd.load_state_bytes(&good),
        Err(Error::StateMismatch(_))
    ));
    // Wrong shapes / names / dtypes in the model.
    let ps64 = params_of(&ctx, fucina_core::DType::F64);
    assert!(matches!(
        load_model_bytes(&model, &ps64),
        Err(Error::StateMismatch(_))
    ));
    let renamed: Vec<_> = ps
        .iter()
        .map(|(n, t)| (format!("{n}_x"), t.clone()))
        .collect();
    assert!(matches!(
        load_model_bytes(&model, &renamed),
        Err(Error::StateMismatch(_))
    ));
    let other_shape = vec![(
        "w1".to_string(),
        fucina_autograd::Tensor::variable(&ctx, &[0f32; 48], &[8, 6]).unwrap(),
    )];
    assert!(matches!(
        load_model_bytes(&model, &other_shape),
        Err(Error::StateMismatch(_))
    ));
    // Optimizer over different parameters.
    let few = vec![ps[0].clone()];
    let (mut opt_few, _) = build("adamw", &few);
    assert!(matches!(
        opt_few.load_state_bytes(&good),
        Err(Error::StateMismatch(_))
    ));
    let (mut opt64, _) = build("adamw", &ps64);
    assert!(matches!(
        opt64.load_state_bytes(&good),
        Err(Error::StateMismatch(_))
    ));
    // A failed load changed nothing: the optimizer still has its own state and keeps working.
    let before = opt.state_bytes().unwrap();
    assert!(opt.load_state_bytes(&good[..good.len() / 2]).is_err());
    assert_eq!(opt.state_bytes().unwrap(), before);
    opt.load_state_bytes(&good).unwrap();
    assert_eq!(opt.step_count(), 3);
    drop((
        opt,
        sgd,
        opt_few,
        opt64,
        ps,
        ps64,
        renamed,
        other_shape,
        few,
    ));
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn schedules_and_config_validation() {
    let s = Schedule::StepDecay {
        step_size: 3,
        gamma: 0.5,
    };
    assert_eq!(
        (s.factor(0), s.factor(2), s.factor(3), s.factor(7)),
        (1.0, 1.0, 0.5, 0.25)
    );
    let l = Schedule::LinearDecay {
        start_factor: 1.0,
        end_factor: 0.0,
        total: 4,
    };
    assert_eq!(
        (l.factor(0), l.factor(2), l.factor(4), l.factor(99)),
        (1.0, 0.5, 0.0, 0.0)
    );
    let w = Schedule::LinearWarmup { warmup: 4 };
    assert_eq!((w.factor(0), w.factor(3), w.factor(4)), (0.25, 1.0, 1.0));
    assert!(Schedule::WarmupCosine {
        warmup: 5,
        total: 5,
        min_factor: 0.0
    }
    .validate()
    .is_err());
    assert!(Schedule::LinearWarmup { warmup: 0 }.validate().is_err());
    let ctx = ExecContext::with_threads(1).unwrap();
    let ps = params(&ctx);
    let all: Vec<_> = ps.iter().map(|(_, t)| t.clone()).collect();
    assert!(Sgd::single(
        all.clone(),
        SgdConfig {
            nesterov: true,
            ..SgdConfig::new(0.1)
        }
    )
    .is_err());
    assert!(AdamW::single(
        all.clone(),
        AdamConfig {
            betas: (1.0, 0.9),
            ..AdamConfig::adamw(0.1)
        }
    )
    .is_err());
    let dup = vec![
        ParamGroup::new(vec![all[0].clone()], SgdConfig::new(0.1)),
        ParamGroup::new(vec![all[0].clone()], SgdConfig::new(0.1)),
    ];
    assert!(Sgd::new(dup).is_err());
    let mut opt = Sgd::single(all, SgdConfig::new(0.1)).unwrap();
    assert!(opt.set_lr(0, f64::NAN).is_err());
    assert_eq!(opt.lr(0).unwrap(), 0.1);
    assert!(matches!(opt.lr(3), Err(Error::NoSuchGroup { .. })));
    opt.set_schedule(0, Schedule::LinearWarmup { warmup: 2 })
        .unwrap();
    assert_eq!(opt.lr(0).unwrap(), 0.05);
}

#[test]
fn clip_grad_norm_returns_pre_clip_norm_and_skips_missing_grads() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let ps = params(&ctx);
    set_grads(&ctx, &ps, 0);
    ps[1].1.zero_grad(); // no gradient: skipped
    let all: Vec<_> = ps.iter().map(|(_, t)| t.clone()).collect();
    let want: f64 = [0usize, 2]
        .iter()
        .flat_map(|&k| grad_values(0, k, ps[k].1.numel()))
        .map(|g| (g as f64) * (g as f64))
        .sum::<f64>()
        .sqrt();
    let n = clip_grad_norm(&all, 1.0).unwrap();
    assert!((n - want).abs() <= 1e-12 * want);
    let after = grad_norm(&all).unwrap();
    assert!((after - 1.0).abs() < 1e-5, "{after}");
    // Below the threshold nothing changes.
    let g0 = ps[0].1.grad().unwrap().to_vec::<f32>().unwrap();
    clip_grad_norm(&all, 10.0).unwrap();
    assert_eq!(ps[0].1.grad().unwrap().to_vec::<f32>().unwrap(), g0);
    assert!(clip_grad_norm(&all, -1.0).is_err());
}
