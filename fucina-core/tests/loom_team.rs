//! Model check of the worker team's synchronisation with `loom`: every
//! interleaving (up to a preemption bound) of dispatch, spin, park, wake,
//! panic propagation and teardown, for a team with two workers. Each model
//! asserts that every chunk runs exactly once before `run` returns, that a
//! chunk's panic reaches the caller after all chunks ran, and that dropping
//! the team joins every worker (loom fails a model on a deadlock, a lost
//! wake-up that leaves a thread blocked forever, or a data race).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release -p fucina-core --test loom_team`
//! (without `--cfg loom` this file is empty).
#![cfg(loom)]

use std::panic::{catch_unwind, AssertUnwindSafe};

use fucina_core::loom_team::Team;
use loom::sync::atomic::{AtomicUsize, Ordering};

/// A model builder with a preemption bound (keeps the state space finite and
/// the run short; loom's docs find 2–3 enough for most bugs).
fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.check(f);
}

/// Runs `n_chunks` chunks that each bump their own counter; checks each ran once.
fn dispatch(team: &Team, n_chunks: usize) {
    let hits: Vec<AtomicUsize> = (0..n_chunks).map(|_| AtomicUsize::new(0)).collect();
    team.run(n_chunks, &|i| {
        hits[i].fetch_add(1, Ordering::Relaxed);
    });
    for (i, h) in hits.iter().enumerate() {
        assert_eq!(h.load(Ordering::Relaxed), 1, "chunk {i}");
    }
}

/// Models a team of `threads` (the caller plus workers) that runs `dispatches` (each a
/// chunk count, see [`dispatch`]) back to back and is then dropped.
fn team_model(bound: usize, threads: usize, dispatches: &'static [usize]) {
    model(bound, move || {
        let team = Team::new(threads).unwrap();
        for &n_chunks in dispatches {
            dispatch(&team, n_chunks);
        }
        drop(team);
    });
}

#[test]
fn one_dispatch_then_teardown_two_workers() {
    team_model(2, 3, &[3]); // the caller plus two workers
}

#[test]
fn two_dispatches_park_and_wake_one_worker() {
    // Back-to-back dispatches: a worker may still be in the first job, spinning,
    // parking or asleep when the second opens; it must wake for it or miss it
    // harmlessly, and the caller must never wait on it forever.
    team_model(3, 2, &[2, 2]);
}

#[test]
fn teardown_without_a_dispatch_two_workers() {
    team_model(3, 3, &[]);
}

#[test]
fn a_panicking_chunk_reaches_the_caller_after_every_chunk_ran() {
    model(2, || {
        let team = Team::new(2).unwrap();
        let hits: Vec<AtomicUsize> = (0..2).map(|_| AtomicUsize::new(0)).collect();
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.run(2, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
                if i == 0 {
                    panic!("chunk 0 fails");
                }
            })
        }));
        assert!(r.is_err());
        for h in &hits {
            assert_eq!(h.load(Ordering::Relaxed), 1);
        }
        // The team still works after a panic.
        dispatch(&team, 2);
        drop(team);
    });
}
