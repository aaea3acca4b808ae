//! Crash safety of training checkpoints, and structured errors (never
//! panics) on missing, truncated or mismatched files.
//!
//! Two crash tests: a failure injected between two files of a save, and a
//! child process (this test binary re-executed) killed by the parent while
//! it is in the middle of a save. Both times `load_latest` must return the
//! previous complete checkpoint. The fault hooks come from the crate's
//! `fault-injection` feature, which only its own tests enable.
//!
//! Then damage after the fact: a malformed marker, a truncated or
//! bit-flipped payload and a stray file named like a step directory are
//! skipped by `load_latest`, with the reason (naming the file) available
//! from `find_latest`; a model file with an extra tensor is rejected.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use fucina_autograd::testing::TestCtx;
use fucina_autograd::StateDictError;
use fucina_optim::checkpoint::{inject_fault, FaultAction};
use fucina_optim::*;

/// The state-dict error inside an optim error.
fn sd_err(e: Error) -> StateDictError {
    match e {
        Error::Autograd(fucina_autograd::Error::StateDict(e)) => *e,
        other => panic!("not a state-dict error: {other}"),
    }
}

const CHILD_ENV: &str = "FUCINA_OPTIM_CRASH_CHILD_ROOT";

/// `r` is the `StateMismatch` of a state file that does not fit.
fn assert_state_mismatch(r: Result<()>) {
    assert!(matches!(r, Err(Error::StateMismatch(_))), "{r:?}");
}

/// Runs `test` on a fresh temporary directory named after `tag`, then
/// removes it.
fn with_root(tag: &str, test: impl FnOnce(PathBuf)) {
    let root = tmp_root(tag);
    test(root.clone());
    std::fs::remove_dir_all(&root).ok();
}

fn tmp_root(tag: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("fucina-optim-{tag}-{}", std::process::id()));
    std::fs::remove_dir_all(&root).ok();
    root
}

/// Trains `steps` steps of AdamW and saves a checkpoint at the end (step = `steps`).
fn train_and_save(root: &Path, steps: usize) -> Result<PathBuf> {
    let ctx = TestCtx::with_threads(1)?;
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
    with_root("inject", |root| {
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
        // Overwriting a complete checkpoint: the old one stays complete until
        // the new one is (`resaving_a_step_keeps_it_complete_at_every_point`).
        train_and_save(&root, 5).unwrap();
        assert_eq!(load_latest(&root).unwrap().unwrap().state.step, 5);
        inject_fault(Some(("after_model", FaultAction::Fail)));
        assert!(train_and_save(&root, 5).is_err());
        inject_fault(None);
        assert_eq!(load_latest(&root).unwrap().unwrap().state.step, 5);
        // A successful save then restores it; loading works end to end.
        train_and_save(&root, 5).unwrap();
        let ck = load_latest(&root).unwrap().unwrap();
        assert_eq!(ck.state.step, 5);
        let ctx = TestCtx::with_threads(1).unwrap();
        let ps = params(&ctx);
        let (mut opt, _) = build("adamw", &ps);
        ck.load_model(&ps).unwrap();
        ck.load_optimizer(opt.as_mut()).unwrap();
        assert_eq!(opt.step_count(), 5);
    });
}

/// Saves step 5 with the parameters moved by `shift` and returns their bits.
fn save_step5(root: &Path, shift: f32) -> Result<Vec<Vec<u32>>> {
    let ctx = TestCtx::with_threads(1)?;
    let ps = params(&ctx);
    for (_, t) in &ps {
        let v: Vec<f32> = t.to_vec::<f32>()?.iter().map(|x| x + shift).collect();
        t.set_value(ctx.from_slice(&v, t.shape())?)?;
    }
    let (opt, _) = build("adamw", &ps);
    let st = TrainerState {
        step: 5,
        data_position: shift as u64,
        ..Default::default()
    };
    save_checkpoint(root, &ps, opt.as_ref(), &st)?;
    Ok(bits(&ps))
}

#[test]
fn resaving_a_step_keeps_it_complete_at_every_point() {
    with_root("resave", |root| {
        train_and_save(&root, 3).unwrap();
        let mut current = save_step5(&root, 1.0).unwrap();
        let mut current_pos = 1;
        let points = [
            "before_model",
            "after_model",
            "after_optimizer",
            "after_stage",
            "after_swap_out",
        ];
        for (k, point) in points.into_iter().enumerate() {
            let shift = 2.0 + k as f32;
            inject_fault(Some((point, FaultAction::Fail)));
            let err = save_step5(&root, shift).unwrap_err();
            inject_fault(None);
            assert!(matches!(err, Error::Injected(p) if p == point), "{err}");
            // Step 5 is still there, complete, and either the old save or (once
            // the new one was complete) the new one; it loads end to end.
            let found = find_latest(&root).unwrap();
            let ck = found.checkpoint.expect("a checkpoint");
            assert_eq!(
                ck.state.step, 5,
                "after a failure at {point}: {:?}",
                found.skipped
            );
            let ctx = TestCtx::with_threads(1).unwrap();
            let ps = params(&ctx);
            let (mut opt, _) = build("adamw", &ps);
            ck.load_model(&ps).unwrap();
            ck.load_optimizer(opt.as_mut()).unwrap();
            let got = bits(&ps);
            let new_complete = point == "after_stage" || point == "after_swap_out";
            if !new_complete {
                assert_eq!(
                    got, current,
                    "after a failure at {point}: not the old checkpoint"
                );
                assert_eq!(ck.state.data_position, current_pos);
            }
            if point == "after_swap_out" {
                // Mid-swap: the new one, found from its staging name.
                assert_ne!(got, current);
                assert_eq!(ck.state.data_position, shift as u64);
            }
            drop((ps, opt));
            // A successful re-save afterwards is the new checkpoint, in place.
            let shift = 20.0 + k as f32;
            current = save_step5(&root, shift).unwrap();
            current_pos = shift as u64;
            let ck = load_latest(&root).unwrap().unwrap();
            assert_eq!(ck.dir, root.join("step-000005"));
            assert_eq!(ck.state.data_position, shift as u64);
        }
    });
}

#[test]
fn leftovers_of_interrupted_resaves_are_removed_once_their_step_is_complete() {
    with_root("stale", |root| {
        train_and_save(&root, 3).unwrap();
        save_step5(&root, 1.0).unwrap();
        // A re-save of step 5 that failed in this process mid-swap leaves the
        // old copy and the staged one beside the new directory's absence.
        inject_fault(Some(("after_swap_out", FaultAction::Fail)));
        save_step5(&root, 2.0).unwrap_err();
        inject_fault(None);
        let names = |root: &Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(root)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        let me = std::process::id();
        assert_eq!(names(&root).len(), 3, "{:?}", names(&root));
        // Leftovers of a dead process (pid above Linux's pid_max) for step 3,
        // and for a step 9 whose directory is missing (find_latest may need them).
        let dead = 999_999_999u32;
        for n in [
            format!("step-000003.tmp-{dead}-0"),
            format!("step-000003.old-{dead}-1"),
            format!("step-000009.tmp-{dead}-2"),
        ] {
            std::fs::create_dir(root.join(n)).unwrap();
        }
        // Step 5 is missing (mid-swap): nothing of step 5 or 9 may go yet.
        let gone = remove_stale_saves(&root).unwrap();
        let mut gone: Vec<String> = gone
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        gone.sort();
        if cfg!(target_os = "linux") {
            assert_eq!(
                gone,
                [
                    format!("step-000003.old-{dead}-1"),
                    format!("step-000003.tmp-{dead}-0")
                ]
            );
        }
        assert!(names(&root)
            .iter()
            .any(|n| n.starts_with(&format!("step-000005.old-{me}-"))));
        // A successful re-save completes step 5 and tidies its own leftovers.
        save_step5(&root, 3.0).unwrap();
        let left = names(&root);
        let want = [
            "step-000003".to_string(),
            "step-000005".to_string(),
            format!("step-000009.tmp-{dead}-2"),
        ];
        assert_eq!(left, want, "{left:?}");
        assert_eq!(load_latest(&root).unwrap().unwrap().state.data_position, 3);
    });
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
    with_root("kill", |root| {
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
        let ctx = TestCtx::with_threads(1).unwrap();
        let ps = params(&ctx);
        let (mut opt, _) = build("adamw", &ps);
        ck.load_model(&ps).unwrap();
        ck.load_optimizer(opt.as_mut()).unwrap();
    });
}

#[test]
fn load_latest_without_checkpoints_is_none() {
    with_root("empty", |root| {
        assert!(load_latest(&root).unwrap().is_none());
        std::fs::create_dir_all(root.join("step-000001")).unwrap();
        std::fs::create_dir_all(root.join("not-a-step")).unwrap();
        assert!(load_latest(&root).unwrap().is_none());
    });
}

#[test]
fn bad_files_are_structured_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let ps = params(&ctx);
    let (mut opt, clip) = build("adamw", &ps);
    for s in 0..3 {
        train_step(&ctx, &ps, opt.as_mut(), clip, s);
    }
    let good = opt.state_bytes().unwrap();
    let model = model_bytes(&ps).unwrap();

    // Missing file: an I/O error naming it.
    let missing = std::env::temp_dir().join("fucina-optim-definitely-missing.safetensors");
    assert!(matches!(opt.load(&missing), Err(Error::Io { .. })));
    let e = sd_err(load_model(&missing, &ps).unwrap_err());
    assert!(
        matches!(&e, StateDictError::Io { file, .. } if *file == missing),
        "{e}"
    );
    // Truncated files.
    for cut in [0, 7, 100, good.len() / 2, good.len() - 1] {
        assert!(opt.load_state_bytes(&good[..cut]).is_err(), "cut at {cut}");
    }
    for cut in [0, 7, model.len() / 2, model.len() - 1] {
        let e = sd_err(load_model_bytes(&model[..cut], &ps).unwrap_err());
        assert!(
            matches!(
                e,
                StateDictError::Format { .. } | StateDictError::Tensor { .. }
            ),
            "cut at {cut}: {e}"
        );
    }
    // A model file is not an optimizer file.
    assert_state_mismatch(opt.load_state_bytes(&model));
    // Wrong optimizer.
    let (mut sgd, _) = build("sgd_momentum", &ps);
    assert_state_mismatch(sgd.load_state_bytes(&good));
    // Wrong dtypes / names / shapes in the model: one error listing the keys.
    let ps64 = params_of(&ctx, fucina_core::DType::F64);
    let e = sd_err(load_model_bytes(&model, &ps64).unwrap_err());
    assert!(
        matches!(&e, StateDictError::Keys { mismatched, .. } if mismatched.len() == 3),
        "{e}"
    );
    let renamed: Vec<_> = ps
        .iter()
        .map(|(n, t)| (format!("{n}_x"), t.clone()))
        .collect();
    let e = sd_err(load_model_bytes(&model, &renamed).unwrap_err());
    assert!(
        matches!(&e, StateDictError::Keys { missing, unexpected, .. } if missing.len() == 3 && unexpected.len() == 3),
        "{e}"
    );
    let other_shape = vec![(
        "w1".to_string(),
        fucina_autograd::Tensor::variable(&ctx, &[0f32; 48], &[8, 6]).unwrap(),
    )];
    let e = sd_err(load_model_bytes(&model, &other_shape).unwrap_err());
    assert!(e.to_string().contains("w1"), "{e}");
    // Optimizer over different parameters.
    let few = vec![ps[0].clone()];
    let (mut opt_few, _) = build("adamw", &few);
    assert_state_mismatch(opt_few.load_state_bytes(&good));
    let (mut opt64, _) = build("adamw", &ps64);
    assert_state_mismatch(opt64.load_state_bytes(&good));
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
    let ctx = TestCtx::with_threads(1).unwrap();
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
    let ctx = TestCtx::with_threads(1).unwrap();
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

#[test]
fn strict_model_load_rejects_an_unexpected_tensor() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let ps = params(&ctx);
    let mut more = params(&ctx);
    more.push((
        "extra".to_string(),
        fucina_autograd::Tensor::variable(&ctx, &[1f32, 2.0], &[2]).unwrap(),
    ));
    let path = tmp_root("extra").with_extension("safetensors");
    save_model(&path, &more).unwrap();
    // Change the targets so "unchanged" is observable.
    for (_, t) in &ps {
        t.set_value(ctx.zeros(t.dtype(), t.shape()).unwrap())
            .unwrap();
    }
    let before = bits(&ps);
    let e = sd_err(load_model(&path, &ps).unwrap_err());
    match &e {
        StateDictError::Keys {
            file,
            unexpected,
            missing,
            mismatched,
        } => {
            assert_eq!(file, &path);
            assert_eq!(unexpected, &["extra"]);
            assert!(missing.is_empty() && mismatched.is_empty());
        }
        other => panic!("wrong error: {other}"),
    }
    assert_eq!(bits(&ps), before, "a failed load changed the model");
    std::fs::remove_file(&path).ok();
    drop((ps, more));
}

#[test]
fn malformed_marker_is_an_error_naming_it_and_load_latest_skips_it() {
    with_root("badmarker", |root| {
        train_and_save(&root, 3).unwrap();
        train_and_save(&root, 5).unwrap();
        let marker = root.join("step-000005").join("trainer_state.json");
        std::fs::write(&marker, b"{\"step\": 5, \"seeds\": ").unwrap();
        match load_checkpoint(&root.join("step-000005")) {
            Err(Error::BadCheckpoint { file, reason }) => {
                assert_eq!(file, marker);
                assert!(reason.contains("does not parse"), "{reason}");
            }
            other => panic!("expected a marker error, got {other:?}"),
        }
        let found = find_latest(&root).unwrap();
        assert_eq!(found.checkpoint.as_ref().unwrap().state.step, 3);
        assert_eq!(found.skipped.len(), 1);
        assert_eq!(found.skipped[0].dir, root.join("step-000005"));
        assert!(found.skipped[0]
            .reason
            .to_string()
            .contains("trainer_state.json"));
        assert_eq!(load_latest(&root).unwrap().unwrap().state.step, 3);
    });
}

#[test]
fn load_latest_verifies_the_payload_and_falls_back() {
    with_root("verify", |root| {
        train_and_save(&root, 3).unwrap();
        train_and_save(&root, 5).unwrap();
        train_and_save(&root, 7).unwrap();
        // step 7: model truncated (size differs); step 5: one bit flipped in the
        // optimizer file (size equal, checksum differs).
        let model7 = root.join("step-000007").join("model.safetensors");
        let bytes = std::fs::read(&model7).unwrap();
        std::fs::write(&model7, &bytes[..bytes.len() - 10]).unwrap();
        let opt5 = root.join("step-000005").join("optimizer.safetensors");
        let mut bytes = std::fs::read(&opt5).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x10;
        std::fs::write(&opt5, &bytes).unwrap();
        let found = find_latest(&root).unwrap();
        assert_eq!(found.checkpoint.as_ref().unwrap().state.step, 3);
        let reasons: Vec<_> = found.skipped.iter().map(|s| &s.reason).collect();
        assert!(
            matches!(reasons[0], Error::BadCheckpoint { file, reason } if *file == model7 && reason.contains("bytes")),
            "{}",
            reasons[0]
        );
        assert!(
            matches!(reasons[1], Error::BadCheckpoint { file, reason } if *file == opt5 && reason.contains("checksum")),
            "{}",
            reasons[1]
        );
        // The fallback loads end to end.
        let ctx = TestCtx::with_threads(1).unwrap();
        let ps = params(&ctx);
        let (mut opt, _) = build("adamw", &ps);
        let ck = found.checkpoint.unwrap();
        ck.load_model(&ps).unwrap();
        ck.load_optimizer(opt.as_mut()).unwrap();
        assert_eq!(opt.step_count(), 3);
    });
}

#[test]
fn stray_files_named_like_steps_are_skipped() {
    with_root("stray", |root| {
        train_and_save(&root, 3).unwrap();
        std::fs::write(root.join("step-000009"), b"not a directory").unwrap();
        std::fs::create_dir_all(root.join("step-000008")).unwrap(); // incomplete
        let found = find_latest(&root).unwrap();
        assert_eq!(found.checkpoint.unwrap().state.step, 3);
        assert_eq!(found.skipped.len(), 1);
        assert!(
            matches!(&found.skipped[0].reason, Error::IncompleteCheckpoint { dir } if dir.ends_with("step-000008"))
        );
    });
}

#[test]
fn optimizer_file_errors_name_the_file() {
    with_root("optfile", |root| {
        std::fs::create_dir_all(&root).unwrap();
        let ctx = TestCtx::with_threads(1).unwrap();
        let ps = params(&ctx);
        let (mut opt, _) = build("adamw", &ps);
        let path = root.join("optimizer.safetensors");
        save_model(&path, &ps).unwrap(); // a model file, not an optimizer file
        let e = opt.load(&path).unwrap_err();
        assert!(
            matches!(&e, Error::InFile { file, .. } if *file == path),
            "{e}"
        );
        assert!(e.to_string().contains("optimizer.safetensors"), "{e}");
    });
}

#[test]
fn an_optimizer_state_naming_a_tensor_twice_is_refused() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let ps = params(&ctx);
    let (mut opt, clip) = build("adamw", &ps);
    train_step(&ctx, &ps, opt.as_mut(), clip, 0);
    let bytes = opt.state_bytes().unwrap();
    // The header with its first tensor entry written twice, verbatim (the
    // safetensors crate keeps the last, so the file loaded before).
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    let key_at = header.find("\"state.").unwrap();
    let end = key_at + header[key_at..].find('}').unwrap() + 1;
    let entry = &header[key_at..end];
    let doubled = format!("{}{entry},{}", &header[..key_at], &header[key_at..]);
    let mut file = (doubled.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(doubled.as_bytes());
    file.extend_from_slice(&bytes[8 + n..]);
    let (mut fresh, _) = build("adamw", &ps);
    let err = fresh.load_state_bytes(&file).unwrap_err().to_string();
    let key = &entry[1..entry[1..].find('"').unwrap() + 1];
    assert!(err.contains(key) && err.contains("twice"), "{err}");
    assert_eq!(fresh.step_count(), 0);
    // The original still loads.
    fresh.load_state_bytes(&bytes).unwrap();
    drop((opt, fresh, ps));
}
