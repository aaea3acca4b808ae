//! Data-parallel training over [`LocalTransport`] (ranks as threads of this
//! process): the whole protocol without MPI. Pins that N ranks with batch b
//! match one process with batch N·b (20 AdamW steps, 1e-5 relative), that
//! every rank holds bitwise-identical parameters after every step, that a
//! resumed run repeats the uninterrupted run's losses bit for bit, and that
//! a stalled or vanished rank is named in an error instead of hanging.

mod common;

use std::time::{Duration, Instant};

use common::{on_ranks, plan, train, Outcome, Plan};
use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_distributed::{
    barrier, save_checkpoint, DataParallel, DdpOptions, Error, Transport, DEFAULT_BUCKET_BYTES,
};

fn assert_same_run_on_every_rank(outs: &[Outcome]) {
    for o in outs {
        assert_eq!(o.outstanding, 0);
        assert_eq!(o.hashes, outs[0].hashes, "ranks diverged");
        assert_eq!(o.losses, outs[0].losses);
        assert_eq!(o.params, outs[0].params);
    }
}

/// Max over elements of |a - b| / |b| (elements with |b| < 1e-6 compare absolutely).
fn max_rel(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    let mut m = 0f64;
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        for (&p, &q) in x.iter().zip(y) {
            m = m.max((p - q).abs() / q.abs().max(1e-6));
        }
    }
    m
}

/// Max over tensors of ||a - b|| / ||b|| (Euclidean norms).
fn max_norm_rel(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    let mut m = 0f64;
    for (x, y) in a.iter().zip(b) {
        let d: f64 = x
            .iter()
            .zip(y)
            .map(|(p, q)| (p - q) * (p - q))
            .sum::<f64>()
            .sqrt();
        let n: f64 = y.iter().map(|q| q * q).sum::<f64>().sqrt();
        m = m.max(d / n);
    }
    m
}

/// N ranks x batch b vs one process x batch N·b: (elementwise, tensor-norm) relative differences.
fn versus_single(world: usize, batch: usize, bucket_bytes: usize, dtype: DType) -> (f64, f64) {
    let outs = on_ranks(world, Duration::from_secs(60), move |t| {
        let p = Plan {
            bucket_bytes,
            dtype,
            ..plan(20, batch)
        };
        train(Some(&t), &p).unwrap()
    });
    assert_same_run_on_every_rank(&outs);
    assert_eq!(outs[0].losses.len(), 20);
    let single = train(
        None,
        &Plan {
            dtype,
            ..plan(20, batch * world)
        },
    )
    .unwrap();
    assert_eq!(single.outstanding, 0);
    // The runs are not trivially equal: training moved the parameters.
    let init = train(
        None,
        &Plan {
            dtype,
            ..plan(0, batch)
        },
    )
    .unwrap();
    assert!(max_norm_rel(&init.params, &single.params) > 1e-2);
    (
        max_rel(&outs[0].params, &single.params),
        max_norm_rel(&outs[0].params, &single.params),
    )
}

/// (world, per-rank batch, bucket cap): one bucket, several, and padded ones.
const CASES: [(usize, usize, usize); 3] = [(2, 8, DEFAULT_BUCKET_BYTES), (3, 4, 256), (2, 5, 100)];

/// Which of [`versus_single`]'s two differences is bounded.
#[derive(Clone, Copy)]
enum Bound {
    /// The largest elementwise relative difference.
    Elementwise,
    /// The largest relative difference of a tensor's norm.
    TensorNorm,
}

/// Every case of [`CASES`] in `dtype`: the ranks' parameters are within
/// 1e-5 of one process's with the global batch, by `bound`.
fn assert_ranks_match_one_process(dtype: DType, bound: Bound) {
    for (world, batch, bucket_bytes) in CASES {
        let (elem, norm) = versus_single(world, batch, bucket_bytes, dtype);
        let (what, diff) = match bound {
            Bound::Elementwise => ("max elementwise relative difference", elem),
            Bound::TensorNorm => ("tensor-norm relative difference", norm),
        };
        assert!(
            diff <= 1e-5,
            "world {world}: {what} {diff:e} (elementwise {elem:e}, tensor norm {norm:e})"
        );
    }
}

#[test]
fn ranks_match_one_process_with_the_global_batch_f64() {
    assert_ranks_match_one_process(DType::F64, Bound::Elementwise);
}

/// In f32 the two runs round their gradient sums differently (~1e-7) and
/// AdamW's normalisation amplifies that for elements whose gradient is near
/// zero, so the bound is on each tensor's norm (elementwise it reaches 1.5e-5).
#[test]
fn ranks_match_one_process_with_the_global_batch_f32() {
    assert_ranks_match_one_process(DType::F32, Bound::TensorNorm);
}

#[test]
fn thread_count_does_not_change_the_bits() {
    let run = |threads: usize| {
        on_ranks(2, Duration::from_secs(60), move |t| {
            train(
                Some(&t),
                &Plan {
                    threads,
                    ..plan(6, 8)
                },
            )
            .unwrap()
            .hashes
        })
    };
    assert_eq!(run(1), run(2));
}

#[test]
fn rank0_parameters_are_broadcast_at_the_start() {
    let outs = on_ranks(3, Duration::from_secs(10), |t| {
        let ctx = ExecContext::with_threads(1).unwrap();
        let r = {
            // Each rank starts from different values; rank 0's win.
            let v = [t.rank() as f64, 10.0 + t.rank() as f64];
            let w = Tensor::variable(&ctx, &v, &[2]).unwrap();
            let ddp = DataParallel::new(&t, vec![w.clone()], DdpOptions::default()).unwrap();
            ddp.check_in_sync().unwrap();
            w.to_vec::<f64>().unwrap()
        };
        assert_eq!(ctx.stats().outstanding, 0);
        r
    });
    for o in outs {
        assert_eq!(o, vec![0.0, 10.0]);
    }
}

#[test]
fn ranks_with_different_models_are_refused() {
    let outs = on_ranks(2, Duration::from_secs(10), |t| {
        let ctx = ExecContext::with_threads(1).unwrap();
        let n = 2 + t.rank();
        let w = Tensor::variable(&ctx, &vec![1.0f32; n], &[n]).unwrap();
        DataParallel::new(&t, vec![w], DdpOptions::default())
            .err()
            .map(|e| e.to_string())
    });
    for o in outs {
        let msg = o.expect("a mismatch error");
        assert!(msg.contains("rank(s) [1]"), "{msg}");
    }
}

#[test]
fn a_stalled_rank_is_named_within_the_deadline() {
    let timeout = Duration::from_millis(400);
    let outs = on_ranks(3, timeout, move |t| {
        let start = Instant::now();
        if t.rank() == 2 {
            // Stalls past its peers' deadline, holding its end open.
            std::thread::sleep(Duration::from_millis(1500));
            return (None, start.elapsed());
        }
        let r = barrier(&t, "step 7 barrier");
        (Some(r), start.elapsed())
    });
    for (rank, (r, took)) in outs.into_iter().enumerate().take(2) {
        match r {
            Some(Err(Error::PeerTimeout {
                rank: me,
                missing,
                what,
                ..
            })) => {
                assert_eq!(me, rank);
                assert_eq!(missing, vec![2]);
                assert_eq!(what, "step 7 barrier");
            }
            other => panic!("rank {rank}: expected a timeout naming rank 2, got {other:?}"),
        }
        assert!(
            took < Duration::from_millis(1400),
            "rank {rank} waited {took:?}"
        );
    }
}

#[test]
fn a_vanished_rank_is_named() {
    let outs = on_ranks(2, Duration::from_secs(30), |t| {
        if t.rank() == 1 {
            drop(t); // the rank's process ends
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
        Some(barrier(&t, "barrier").map_err(|e| e.to_string()))
    });
    let msg = outs[0]
        .clone()
        .expect("rank 0 ran")
        .expect_err("rank 1 is gone");
    assert!(msg.contains("rank 1 has exited"), "{msg}");
}

#[test]
fn resume_repeats_the_uninterrupted_losses() {
    let root = std::env::temp_dir().join(format!("fucina-dist-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let full = on_ranks(2, Duration::from_secs(60), |t| {
        train(Some(&t), &plan(12, 8)).unwrap()
    });
    let dir = root.clone();
    let first = on_ranks(2, Duration::from_secs(60), move |t| {
        let p = Plan {
            ckpt: Some((&dir, 4)),
            stop_after: Some(10),
            ..plan(12, 8)
        };
        train(Some(&t), &p).unwrap()
    });
    assert_eq!(first[0].losses[..], full[0].losses[..10]);
    // The newest checkpoint is step 8; the restart redoes 9 and 10, from a
    // different initial model (every parameter comes from the checkpoint).
    let dir = root.clone();
    let second = on_ranks(2, Duration::from_secs(60), move |t| {
        let p = Plan {
            ckpt: Some((&dir, 4)),
            resume: true,
            model_seed: 99,
            ..plan(12, 8)
        };
        train(Some(&t), &p).unwrap()
    });
    assert_same_run_on_every_rank(&second);
    assert_eq!(second[0].losses[..], full[0].losses[8..]);
    assert_eq!(second[0].hashes[..], full[0].hashes[8..]);
    assert_eq!(second[0].params, full[0].params);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_failed_save_on_rank0_fails_every_rank() {
    let file = std::env::temp_dir().join(format!("fucina-dist-notadir-{}", std::process::id()));
    std::fs::write(&file, b"x").unwrap();
    let root = file.clone();
    let outs = on_ranks(2, Duration::from_secs(10), move |t| {
        let ctx = ExecContext::with_threads(1).unwrap();
        let w = Tensor::variable(&ctx, &[1.0f32], &[1]).unwrap();
        let opt =
            fucina_optim::Sgd::single(vec![w.clone()], fucina_optim::SgdConfig::new(0.1)).unwrap();
        let state = fucina_optim::TrainerState {
            step: 1,
            ..Default::default()
        };
        // The checkpoint root is a file: creating step-000001 under it fails on rank 0.
        save_checkpoint(&t, &root, &[("w".into(), w)], &opt, &state).map_err(|e| e.to_string())
    });
    let msg0 = outs[0].clone().expect_err("rank 0 fails");
    let msg1 = outs[1].clone().expect_err("rank 1 hears of it");
    assert!(
        msg1.contains("failed on rank 0") && msg1.contains("checkpoint save at step 1"),
        "{msg1}"
    );
    assert!(
        msg1.contains(&msg0),
        "rank 1 `{msg1}` should carry rank 0's `{msg0}`"
    );
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn a_resume_whose_optimizer_does_not_fit_leaves_the_model_as_it_was() {
    let root = std::env::temp_dir().join(format!("fucina-dist-mismatch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    {
        // An SGD checkpoint of w = [1, 2].
        let ctx = ExecContext::with_threads(1).unwrap();
        let w = Tensor::variable(&ctx, &[1.0f32, 2.0], &[2]).unwrap();
        let opt =
            fucina_optim::Sgd::single(vec![w.clone()], fucina_optim::SgdConfig::new(0.1)).unwrap();
        let state = fucina_optim::TrainerState {
            step: 3,
            ..Default::default()
        };
        fucina_optim::save_checkpoint(&root, &[("w".into(), w)], &opt, &state).unwrap();
    }
    let dir = root.clone();
    let outs = on_ranks(2, Duration::from_secs(30), move |t| {
        let ctx = ExecContext::with_threads(1).unwrap();
        let w = Tensor::variable(&ctx, &[5.0f32, 6.0], &[2]).unwrap();
        // Resumed into AdamW: the model file fits, the optimizer state does not.
        let mut opt =
            fucina_optim::AdamW::single(vec![w.clone()], fucina_optim::AdamConfig::adamw(1e-3))
                .unwrap();
        let r = fucina_distributed::resume(&t, &dir, &[("w".into(), w.clone())], &mut opt);
        (
            r.map(|_| ()).map_err(|e| e.to_string()),
            w.to_vec::<f32>().unwrap(),
            fucina_optim::Optimizer::step_count(&opt),
        )
    });
    for (rank, (r, w, steps)) in outs.into_iter().enumerate() {
        let msg = r.expect_err("the optimizer mismatch is an error");
        assert!(
            msg.contains("`sgd`") && msg.contains("`adam`"),
            "rank {rank}: {msg}"
        );
        assert_eq!(w, vec![5.0, 6.0], "rank {rank}: the model was overwritten");
        assert_eq!(steps, 0);
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_retry_after_a_timeout_never_takes_the_late_message_of_the_first_attempt() {
    let timeout = Duration::from_millis(1000);
    let outs = on_ranks(2, timeout, move |t| {
        let mut recv = vec![vec![0u8; 1]; 2];
        if t.rank() == 0 {
            // Attempt 1 times out (rank 1 is late); the retry must get rank
            // 1's second message, not its late first one.
            let first = t.exchange("attempt", &[&[10], &[10]], &mut recv);
            assert!(matches!(first, Err(Error::PeerTimeout { .. })), "{first:?}");
            t.exchange("retry", &[&[11], &[11]], &mut recv).unwrap();
            vec![recv[1][0]]
        } else {
            std::thread::sleep(Duration::from_millis(1500));
            t.exchange("attempt", &[&[1], &[1]], &mut recv).unwrap();
            let a = recv[0][0];
            t.exchange("retry", &[&[2], &[2]], &mut recv).unwrap();
            vec![a, recv[0][0]]
        }
    });
    assert_eq!(outs[0], vec![2], "rank 0's retry took the stale message");
    assert_eq!(outs[1], vec![10, 11]);
}
