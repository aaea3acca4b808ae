//! `Tensor` is `Send + Sync`: a loader thread hands batches to the training
//! loop, a graph built on one thread runs backward on another, and a scoped
//! tensor that crossed threads reads `TensorReleased` once its scope closes.

use std::sync::mpsc;

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{live_nodes, Error, ScopeExt, Tensor};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn tensor_is_send_and_sync() {
    assert_send_sync::<Tensor>();
}

#[test]
fn a_loader_thread_hands_batches_to_the_training_loop() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let w = Tensor::variable(&ctx, &[0.5f64, -0.5], &[2, 1]).unwrap();
    let (tx, rx) = mpsc::sync_channel::<Tensor>(2);
    let loader_ctx = ctx.clone();
    let loader = std::thread::spawn(move || {
        for i in 0..4 {
            let x =
                Tensor::constant(&loader_ctx, &[i as f64, 1.0, 2.0, i as f64], &[2, 2]).unwrap();
            tx.send(x).unwrap();
        }
    });
    let mut seen = 0;
    for x in rx {
        let _scope = ctx.scope();
        let loss = x.matmul(&w).unwrap().square().unwrap().sum_all().unwrap();
        loss.backward().unwrap();
        seen += 1;
    }
    loader.join().unwrap();
    assert_eq!(seen, 4);
    // d/dw Σ (xw)² = 2 xᵀ(xw), summed over the four batches.
    let mut expect = [0.0f64; 2];
    for i in 0..4 {
        let x = [[i as f64, 1.0], [2.0, i as f64]];
        for r in x {
            let y = r[0] * 0.5 - r[1] * 0.5;
            expect[0] += 2.0 * r[0] * y;
            expect[1] += 2.0 * r[1] * y;
        }
    }
    assert_eq!(w.grad().unwrap().to_vec::<f64>().unwrap(), expect.to_vec());
    w.zero_grad();
    drop(w);
}

#[test]
fn a_tensor_goes_to_a_thread_and_back_and_backward_runs_there() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let x = Tensor::variable(&ctx, &[1.0f64, 2.0, 3.0], &[3]).unwrap();
    let y = x.mul(&x).unwrap(); // recorded here
    let nodes_here = live_nodes();
    let xs = x.clone();
    let back = std::thread::spawn(move || {
        // More graph recorded on the other thread, on top of this one's.
        let loss = y.mul_scalar(2.0).unwrap().sum_all().unwrap();
        loss.backward().unwrap();
        (y, xs.grad().unwrap().to_vec::<f64>().unwrap())
    })
    .join()
    .unwrap();
    let (y, g) = back;
    assert_eq!(g, vec![4.0, 8.0, 12.0]); // d/dx Σ 2x² = 4x
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), g);
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![1.0, 4.0, 9.0]);
    assert_eq!(live_nodes(), nodes_here);
    drop(y);
    assert_eq!(live_nodes(), nodes_here - 1);
    x.zero_grad();
    drop(x);
}

#[test]
fn a_scoped_tensor_sent_away_reads_released_after_its_scope_closes() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = Tensor::variable(&ctx, &[1.0f32, 2.0], &[2]).unwrap();
    let (to_worker, worker_rx) = mpsc::channel::<Tensor>();
    let (closed_tx, closed_rx) = mpsc::channel::<()>();
    let (read_tx, read_rx) = mpsc::channel::<()>();
    let (result_tx, result_rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let t = worker_rx.recv().unwrap();
        let before = t.to_vec::<f32>();
        read_tx.send(()).unwrap();
        closed_rx.recv().unwrap();
        let after = t.to_vec::<f32>();
        let op_after = t.exp().map(|_| ());
        let backward_after = t.sum_all().and_then(|s| s.backward());
        result_tx
            .send((before, after, op_after, backward_after))
            .unwrap();
    });
    {
        let _scope = ctx.scope();
        let y = x.mul_scalar(3.0).unwrap();
        assert!(y.is_scoped());
        to_worker.send(y).unwrap();
        read_rx.recv().unwrap();
    } // the scope releases y on this thread
    closed_tx.send(()).unwrap();
    let (before, after, op_after, backward_after) = result_rx.recv().unwrap();
    worker.join().unwrap();
    assert_eq!(before.unwrap(), vec![3.0, 6.0]);
    assert_eq!(after, Err(Error::TensorReleased));
    assert_eq!(op_after, Err(Error::TensorReleased));
    assert_eq!(backward_after, Err(Error::TensorReleased));
    assert!(x.grad().is_none());
    drop(x);
}

#[test]
fn two_threads_share_parameters_and_backward_concurrently() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let w = Tensor::variable(&ctx, &[1.0f64, 2.0], &[2]).unwrap();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let w = w.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let loss = w.mul_scalar(1.0).unwrap().sum_all().unwrap();
                    loss.backward().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // 400 contributions of exactly 1.0: no update was lost.
    assert_eq!(
        w.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![400.0, 400.0]
    );
    w.zero_grad();
    drop(w);
}
