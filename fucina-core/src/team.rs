//! `Team`: the context's worker threads and its fork-join loop over chunks.
//!
//! A dispatch publishes a job (a borrowed `Fn(chunk)`) under a new epoch, and the calling
//! thread works on the chunks alongside the workers; chunks are claimed from one atomic
//! counter, so whoever is free takes the next one. A worker joins a job by incrementing the
//! job's active count in the same atomic word that holds the epoch and a "closed" bit; the
//! caller, once out of chunks, closes the job and waits only for the workers that joined. A
//! late worker finds the job closed and never touches it, so lending the borrowed closure to
//! other threads is sound, and the caller never waits for a worker that is still waking up.
//!
//! Between dispatches, workers spin for a short while ([`SPIN`]) before parking on a condvar:
//! a training step issues dozens of parallel kernels a few microseconds apart, and waking a
//! parked thread costs tens of microseconds on a virtual machine (a rayon `install` round trip
//! measured 20–40 µs here), more than many of those kernels take.
//!
//! Which thread runs which chunk never changes what a chunk computes, so results stay bitwise
//! identical for any thread count. A dispatch made while the team is busy (from inside a chunk,
//! or from another thread sharing the context) runs its chunks inline on the calling thread. A
//! panic in a chunk is caught, the remaining chunks still run, and it is resumed on the caller.

//!
//! The protocol is model-checked with `loom` (every interleaving of dispatch, spin, park,
//! wake, panic propagation and teardown, for two workers): `fucina-core/tests/loom_team.rs`,
//! run with `RUSTFLAGS="--cfg loom" cargo test --release -p fucina-core --test loom_team`.
//! Under `cfg(loom)` the [`sync`] shim swaps std's atomics, locks, threads and thread-locals
//! for loom's, and the timed spin becomes a bounded one (loom needs determinism).

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Duration;

use self::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use self::sync::thread::JoinHandle;
use self::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The synchronisation primitives the team uses: std's, or loom's under `cfg(loom)`.
mod sync {
    #[cfg(loom)]
    pub(crate) use loom::{
        sync::{atomic, Arc, Condvar, Mutex, MutexGuard},
        thread,
    };
    #[cfg(not(loom))]
    pub(crate) use std::{
        sync::{atomic, Arc, Condvar, Mutex, MutexGuard},
        thread,
    };

    /// A spin-wait hint (under loom, a yield so the model checker can run someone else).
    #[inline]
    pub(crate) fn spin_loop() {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        std::hint::spin_loop();
    }

    /// A spinning worker's clock: real time, or under loom a fixed spin count.
    pub(crate) struct SpinClock {
        #[cfg(not(loom))]
        start: std::time::Instant,
        #[cfg(loom)]
        polls: u32,
    }

    impl SpinClock {
        pub(crate) fn start() -> SpinClock {
            SpinClock {
                #[cfg(not(loom))]
                start: std::time::Instant::now(),
                #[cfg(loom)]
                polls: 0,
            }
        }

        /// True while the worker should keep spinning rather than park.
        #[inline]
        pub(crate) fn keep_spinning(&mut self, spins: u32, budget: std::time::Duration) -> bool {
            #[cfg(not(loom))]
            {
                !spins.is_multiple_of(64) || self.start.elapsed() < budget
            }
            #[cfg(loom)]
            {
                let _ = (spins, budget);
                self.polls += 1;
                self.polls < 2
            }
        }
    }
}

/// How long an idle worker spins before parking.
const SPIN: Duration = Duration::from_micros(200);

/// A chunk body with its lifetime erased (valid for one dispatch; see [`Team::run`]).
type JobRef = *const (dyn Fn(usize) + Sync);

/// `state` layout: epoch in the high 32 bits, the closed flag, and the active count.
const CLOSED: u64 = 1 << 31;
const ACTIVE: u64 = CLOSED - 1;

fn epoch_of(state: u64) -> u64 {
    state >> 32
}

struct Shared {
    /// Epoch (bumped once per dispatch), closed flag and count of workers inside the job.
    state: AtomicU64,
    /// The current job; written only by the dispatcher while no worker is inside a job.
    job: Mutex<Option<SendJob>>,
    /// Chunks in the current job.
    n_chunks: AtomicUsize,
    /// Next unclaimed chunk.
    next: AtomicUsize,
    /// Workers parked (or about to park) on `wake`.
    sleeping: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
    /// The first panic payload of the current job.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

#[derive(Clone, Copy)]
struct SendJob(JobRef);
// SAFETY: the pointee is `Sync` and outlives every use (the dispatcher waits for all workers).
unsafe impl Send for SendJob {}

#[cfg(not(loom))]
std::thread_local! {
    /// True while this thread runs chunks of some team's job (nested dispatches run inline).
    static IN_JOB: Cell<bool> = const { Cell::new(false) };
}
#[cfg(loom)]
loom::thread_local! {
    /// True while this thread runs chunks of some team's job (nested dispatches run inline).
    static IN_JOB: Cell<bool> = Cell::new(false);
}

/// The worker threads of one context (the calling thread is the team's other member).
pub(crate) struct Team {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Held for the length of a dispatch.
    dispatch: Mutex<()>,
}

impl Team {
    /// A team of `n` threads: the caller plus `n - 1` workers.
    pub(crate) fn new(n: usize) -> std::io::Result<Team> {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(CLOSED),
            job: Mutex::new(None),
            n_chunks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            panic: Mutex::new(None),
        });
        let mut workers = Vec::with_capacity(n.saturating_sub(1));
        for i in 1..n.max(1) {
            let s = Arc::clone(&shared);
            let spawned = sync::thread::Builder::new()
                .name(format!("fucina-{i}"))
                .spawn(move || worker(&s));
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    // Stop the ones already started before reporting.
                    drop(Team {
                        shared,
                        workers,
                        dispatch: Mutex::new(()),
                    });
                    return Err(e);
                }
            }
        }
        Ok(Team {
            shared,
            workers,
            dispatch: Mutex::new(()),
        })
    }

    /// Runs `f(0..n_chunks)`, spread over the team; returns when every chunk has run.
    pub(crate) fn run(&self, n_chunks: usize, f: &(dyn Fn(usize) + Sync)) {
        let inline = |f: &(dyn Fn(usize) + Sync)| (0..n_chunks).for_each(f);
        if self.workers.is_empty() || n_chunks <= 1 || IN_JOB.with(Cell::get) {
            return inline(f);
        }
        let Ok(busy) = self.dispatch.try_lock() else {
            return inline(f);
        };
        let s = &*self.shared;
        // SAFETY: only the lifetime is erased; the job is closed and every worker that joined
        // it has left before this function returns or unwinds, so no use outlives `f`.
        let job: JobRef = unsafe {
            std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f)
        };
        *lock(&s.job) = Some(SendJob(job));
        s.n_chunks.store(n_chunks, Ordering::Relaxed);
        s.next.store(0, Ordering::Relaxed);
        let epoch = epoch_of(s.state.load(Ordering::Relaxed)) + 1;
        // Open the job: new epoch, nobody inside.
        s.state.store(epoch << 32, Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = lock(&s.lock);
            s.wake.notify_all();
        }
        run_chunks(s, f);
        // Close it, then wait for the workers that joined (they are running chunks).
        s.state.fetch_or(CLOSED, Ordering::AcqRel);
        let mut spins = 0u32;
        while s.state.load(Ordering::Acquire) & ACTIVE != 0 {
            spins += 1;
            if spins < 1 << 12 {
                sync::spin_loop();
            } else {
                sync::thread::yield_now();
            }
        }
        *lock(&s.job) = None;
        let panic = lock(&s.panic).take();
        // Release the dispatch lock before resuming a chunk's panic: unwinding with the guard
        // held would poison it, and every later dispatch would run inline (found by loom).
        drop(busy);
        if let Some(p) = panic {
            resume_unwind(p);
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = lock(&self.shared.lock);
            self.shared.wake.notify_all();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

/// Locks ignoring poisoning (the guarded data stays consistent: panics are caught first).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Claims and runs chunks of the current job until none is left, catching panics.
fn run_chunks(s: &Shared, f: &(dyn Fn(usize) + Sync)) {
    let n = s.n_chunks.load(Ordering::Relaxed);
    IN_JOB.with(|c| c.set(true));
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i))) {
            lock(&s.panic).get_or_insert(p);
        }
    }
    IN_JOB.with(|c| c.set(false));
}

fn worker(s: &Shared) {
    let mut seen = 0u64;
    loop {
        let mut clock = sync::SpinClock::start();
        let mut spins = 0u32;
        let mut st;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            st = s.state.load(Ordering::Acquire);
            if epoch_of(st) != seen {
                seen = epoch_of(st);
                break;
            }
            spins = spins.wrapping_add(1);
            if clock.keep_spinning(spins, SPIN) {
                sync::spin_loop();
                continue;
            }
            let g = lock(&s.lock);
            s.sleeping.fetch_add(1, Ordering::SeqCst);
            if epoch_of(s.state.load(Ordering::SeqCst)) == seen
                && !s.shutdown.load(Ordering::SeqCst)
            {
                drop(s.wake.wait(g).unwrap_or_else(|e| e.into_inner()));
            }
            s.sleeping.fetch_sub(1, Ordering::SeqCst);
        }
        // Join the job if it is still open (same epoch, not closed).
        let joined = loop {
            if epoch_of(st) != seen || st & CLOSED != 0 {
                break false;
            }
            match s
                .state
                .compare_exchange_weak(st, st + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break true,
                Err(now) => st = now,
            }
        };
        if !joined {
            continue;
        }
        let job = *lock(&s.job);
        if let Some(SendJob(job)) = job {
            // SAFETY: the job is open and we are counted in it: the dispatcher keeps the
            // closure alive until the active count returns to 0.
            run_chunks(s, unsafe { &*job });
        }
        s.state.fetch_sub(1, Ordering::Release);
    }
}
