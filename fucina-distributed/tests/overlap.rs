//! The overlapped averaging (`DataParallel::backward_overlapped`, issue 28)
//! over [`fucina_distributed::LocalTransport`]: after several AdamW steps
//! its parameters, losses and per-step hashes are bitwise those of backward
//! followed by `average_gradients`, with one bucket and with many (buckets
//! sent while backward still runs), in f32 and f64, with 2 and 3 ranks; it
//! adds onto gradients already accumulated, averages a parameter the loss
//! does not use, reports a stalled peer as an error, and leaves no pool
//! buffer outstanding.

mod common;

use std::time::Duration;

use common::{on_ranks, plan, train, Plan};
use fucina_autograd::{ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_distributed::{DataParallel, DdpOptions, Error, Transport, DEFAULT_BUCKET_BYTES};

#[test]
fn overlapped_steps_are_bitwise_the_plain_steps() {
    for (world, bucket_bytes, dtype) in [
        (2, 256, DType::F64),
        (3, 100, DType::F32),
        (2, 1024, DType::F32),
        (2, DEFAULT_BUCKET_BYTES, DType::F64),
    ] {
        let run = |overlap: bool| {
            on_ranks(world, Duration::from_secs(60), move |t| {
                let p = Plan {
                    bucket_bytes,
                    dtype,
                    overlap,
                    ..plan(8, 8)
                };
                train(Some(&t), &p).unwrap()
            })
        };
        let (plain, overlapped) = (run(false), run(true));
        for (rank, (a, b)) in plain.iter().zip(&overlapped).enumerate() {
            let at = format!("world {world}, cap {bucket_bytes} B, {dtype}, rank {rank}");
            assert_eq!(a.outstanding, 0, "{at}");
            assert_eq!(b.outstanding, 0, "{at}");
            assert_eq!(a.losses.len(), 8, "{at}");
            assert_eq!(a.losses, b.losses, "{at}: losses");
            assert_eq!(a.hashes, b.hashes, "{at}: parameter hashes");
            assert_eq!(a.params, b.params, "{at}: parameters");
            assert_eq!(a.sent_early, 0, "{at}");
            if bucket_bytes < 2048 {
                // Several buckets, and every one left from the hook (the last
                // at the walk's last node).
                assert!(b.buckets > 2, "{at}: {} bucket(s)", b.buckets);
                assert_eq!(b.sent_early, 8 * b.buckets, "{at}");
            }
        }
        assert_eq!(plain[0].hashes, overlapped[1 % world].hashes);
    }
}

/// Three parameters `a`, `u`, `c`: `u` is not used by the loss, `a` and `c`
/// are; every rank has its own data. Returns, per rank, the gradients after
/// averaging (two backward passes accumulated) and the pool's outstanding
/// buffers.
fn accumulate_and_average(world: usize, overlap: bool) -> Vec<(Vec<Vec<f32>>, usize)> {
    on_ranks(world, Duration::from_secs(30), move |t| {
        let ctx = ExecContext::with_threads(1).unwrap();
        let grads = {
            let var = |v: &[f32]| Tensor::variable(&ctx, v, &[v.len()]).unwrap();
            let (a, u, c) = (
                var(&[0.5, -1.0, 2.0]),
                var(&[1.0, 1.0]),
                var(&[0.25, 4.0, -3.0]),
            );
            // One bucket per parameter (12 bytes each, cap 12).
            let opts = DdpOptions {
                bucket_bytes: 12,
                ..DdpOptions::default()
            };
            let ddp = DataParallel::new(&t, vec![a.clone(), u.clone(), c.clone()], opts).unwrap();
            assert_eq!(ddp.plan().buckets.len(), 3);
            let r = 1.0 + t.rank() as f32;
            let loss = |k: f32| {
                let x = Tensor::constant(&ctx, &[r, k * r, -r], &[3]).unwrap();
                a.mul(&x)
                    .unwrap()
                    .tanh()
                    .unwrap()
                    .mul(&c)
                    .unwrap()
                    .sum_all()
                    .unwrap()
            };
            {
                let _s = ctx.scope();
                loss(1.0).backward().unwrap(); // the first micro-batch
            }
            {
                let _s = ctx.scope();
                let l = loss(3.0);
                if overlap {
                    ddp.backward_overlapped(&l).unwrap();
                } else {
                    l.backward().unwrap();
                    ddp.average_gradients().unwrap();
                }
            }
            [&a, &u, &c]
                .map(|p| p.grad().unwrap().to_vec::<f32>().unwrap())
                .to_vec()
        };
        (grads, ctx.stats().outstanding)
    })
}

#[test]
fn accumulated_gradients_and_an_unused_parameter_average_as_after_backward() {
    for world in [2, 3] {
        let plain = accumulate_and_average(world, false);
        let overlapped = accumulate_and_average(world, true);
        assert_eq!(plain, overlapped, "world {world}");
        for (grads, outstanding) in &overlapped {
            assert_eq!(*outstanding, 0);
            assert_eq!(grads, &overlapped[0].0, "ranks differ");
            assert_eq!(
                grads[1],
                vec![0.0, 0.0],
                "the unused parameter averages to zero"
            );
        }
    }
}

#[test]
fn a_stalled_peer_during_an_overlapped_step_is_an_error_not_a_hang() {
    let outs = on_ranks(2, Duration::from_millis(500), |t| {
        let ctx = ExecContext::with_threads(1).unwrap();
        let r = {
            let w = Tensor::variable(&ctx, &[1.0f64, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
            let b = Tensor::variable(&ctx, &[0.5f64, -0.5], &[2]).unwrap();
            let opts = DdpOptions {
                bucket_bytes: 16,
                ..DdpOptions::default()
            };
            let ddp = DataParallel::new(&t, vec![w.clone(), b.clone()], opts).unwrap();
            if t.rank() == 1 {
                // Rank 1 never takes the step; it holds its end open past the deadline.
                std::thread::sleep(Duration::from_millis(1500));
                return (None, 0);
            }
            let _s = ctx.scope();
            let x = Tensor::constant(&ctx, &[1.0f64, -1.0], &[1, 2]).unwrap();
            let loss = x.linear(&w, Some(&b)).unwrap().sum_all().unwrap();
            Some(ddp.backward_overlapped(&loss))
        };
        (r, ctx.stats().outstanding)
    });
    let (r, outstanding) = &outs[0];
    match r {
        Some(Err(Error::PeerTimeout { missing, what, .. })) => {
            assert_eq!(missing, &vec![1]);
            assert!(
                what.contains("gradient averaging #1, bucket 1/2: reduce-scatter"),
                "{what}"
            );
        }
        other => panic!("expected a timeout naming rank 1, got {other:?}"),
    }
    assert_eq!(*outstanding, 0);
}
