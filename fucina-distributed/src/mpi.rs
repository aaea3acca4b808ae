//! The MPI transport (feature `mpi`): [`init`] from the environment that
//! `mpirun` sets up, and [`Transport::exchange`] over non-blocking
//! point-to-point messages polled against a deadline.
//!
//! Failure policy: nothing in a distributed job may hang. A rank that
//! returns an error calls [`Mpi::abort`] (through [`Mpi::exit_on_error`]),
//! which prints `rank R of N failed: ...` and calls `MPI_Abort`, so
//! `mpirun` ends every rank. A rank that is killed is noticed by `mpirun`,
//! which kills the others and names the dead rank. A rank that stalls
//! (stopped, deadlocked) is noticed by its peers: an exchange whose messages
//! have not all arrived by the deadline prints which ranks are missing and
//! aborts the job. `MPI_Abort` never returns, so pending requests are never
//! dropped (rsmpi would abort the process without a message if they were).
//!
//! Threads: [`init`] asks MPI for `MPI_THREAD_SERIALIZED` (several threads
//! may call MPI, never two at once) and fails on a library that offers
//! less; every MPI call made through [`Mpi`] holds one lock, which is what
//! makes [`Mpi`] `Sync` and lets the overlapped averaging run its exchanges
//! on a communication thread (`DataParallel::backward_overlapped`).

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mpi::datatype::Equivalence;
use mpi::environment::{Threading, Universe};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::error::{Error, Result};
use crate::transport::{check_exchange_args, Transport, DEFAULT_TIMEOUT};

/// The one tag of fucina's messages (MPI keeps messages between a pair of
/// ranks with the same tag in order, so successive exchanges match).
const TAG: i32 = 0x0fc1;

/// Polls of an exchange without progress before it starts to sleep between
/// polls (each poll is an MPI progress call, so spinning costs a core).
const SPINS: u32 = 64;

/// The MPI world of this process: rank, size, and the exchange.
pub struct Mpi {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    /// Held by every MPI call made through this value (`MPI_THREAD_SERIALIZED`).
    serial: Mutex<()>,
    timeout: Duration,
    // Finalizes MPI when dropped: declared last, so dropped after `world`.
    _universe: Universe,
}

/// Initializes MPI from the environment `mpirun` set up (rank, world size);
/// a process started without `mpirun` is a world of one. Errors when MPI was
/// already initialized in this process, or when the library does not offer
/// `MPI_THREAD_SERIALIZED` (OpenMPI and MPICH do).
pub fn init() -> Result<Mpi> {
    let (universe, level) = mpi::initialize_with_threading(Threading::Serialized)
        .ok_or_else(|| Error::Mpi("MPI is already initialized".into()))?;
    if level < Threading::Serialized {
        return Err(Error::Mpi(format!(
            "the MPI library offers thread level {level:?}; fucina-distributed needs MPI_THREAD_SERIALIZED"
        )));
    }
    let world = universe.world();
    Ok(Mpi {
        rank: world.rank() as usize,
        size: world.size() as usize,
        serial: Mutex::new(()),
        _universe: universe,
        world,
        timeout: DEFAULT_TIMEOUT,
    })
}

// SAFETY: MPI runs at MPI_THREAD_SERIALIZED (checked in `init`), and every
// MPI call made through a shared `Mpi` holds `serial` (`exchange`, `host`),
// so no two threads are ever inside MPI at once. `rank` and `size` are
// cached plain values. The exception is `abort` (MPI_Abort), which may be
// called while the lock is held, by the exchange itself: it ends the
// process and does not return.
unsafe impl Sync for Mpi {}

impl Mpi {
    /// The same world with another exchange deadline (see
    /// [`crate::DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The host this rank runs on.
    pub fn host(&self) -> String {
        let _serial = self.serialize();
        mpi::environment::processor_name().unwrap_or_else(|_| "?".into())
    }

    /// Prints `fucina-distributed: rank R of N failed: {message}; aborting the
    /// job` to stderr and aborts every rank (`MPI_Abort`, exit code 1).
    ///
    /// The line is formatted first and written with one `write` call:
    /// `eprintln!` writes each formatted piece separately to the unbuffered
    /// stderr, and `mpirun` can then splice another rank's output into the
    /// middle of the line.
    pub fn abort(&self, message: &str) -> ! {
        use std::io::Write;
        let line = format!(
            "fucina-distributed: rank {} of {} failed: {message}; aborting the job\n",
            self.rank(),
            self.size()
        );
        let mut err = std::io::stderr().lock();
        // Nothing to do if stderr is gone: the abort below still ends the job.
        let _ = err.write_all(line.as_bytes());
        let _ = err.flush();
        drop(err);
        self.world.abort(1)
    }

    /// The lock every MPI call holds (poisoning is harmless: it guards no data).
    fn serialize(&self) -> MutexGuard<'_, ()> {
        self.serial.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `r`, or [`Mpi::abort`] with its error.
    pub fn exit_on_error<T>(&self, r: Result<T>) -> T {
        match r {
            Ok(v) => v,
            Err(e) => self.abort(&e.to_string()),
        }
    }
}

/// The items of `bufs` (one per rank, in rank order) with their rank, but
/// `me`'s: what this rank exchanges with each peer.
fn others<B>(me: usize, bufs: impl IntoIterator<Item = B>) -> impl Iterator<Item = (usize, B)> {
    bufs.into_iter().enumerate().filter(move |&(q, _)| q != me)
}

impl Transport for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn exchange(&self, what: &str, send: &[&[u8]], recv: &mut [Vec<u8>]) -> Result<()> {
        check_exchange_args(self, what, send, recv)?;
        let me = self.rank();
        let limit = i32::MAX as usize;
        if let Some(big) = send
            .iter()
            .map(|s| s.len())
            .chain(recv.iter().map(|r| r.len()))
            .find(|&l| l > limit)
        {
            return Err(Error::Mpi(format!(
                "`{what}`: a message of {big} bytes is over MPI's {limit}-element limit (lower the bucket size)"
            )));
        }
        recv[me].copy_from_slice(send[me]);
        let expected: Vec<usize> = recv.iter().map(|r| r.len()).collect();
        let _serial = self.serialize();
        let start = Instant::now();
        let deadline = start + self.timeout;
        let mut bad: Option<Error> = None;
        mpi::request::scope(|scope| {
            let peer = |q: usize| self.world.process_at_rank(q as i32);
            let mut recvs: Vec<_> = others(me, recv.iter_mut())
                .map(|(q, buf)| {
                    let req = peer(q).immediate_receive_into_with_tag(scope, &mut buf[..], TAG);
                    (q, req)
                })
                .collect();
            let mut sends: Vec<_> = others(me, send.iter())
                .map(|(q, buf)| peer(q).immediate_send_with_tag(scope, *buf, TAG))
                .collect();
            let (mut spins, mut naps) = (0u32, 0u32);
            loop {
                let before = recvs.len() + sends.len();
                let mut still = Vec::with_capacity(recvs.len());
                for (q, req) in recvs.drain(..) {
                    match req.test() {
                        Ok(status) => {
                            let got = status.count(u8::equivalent_datatype()) as usize;
                            if got != expected[q] && bad.is_none() {
                                bad = Some(Error::SizeMismatch {
                                    rank: me,
                                    what: what.to_string(),
                                    peer: q,
                                    expected: expected[q],
                                    got,
                                });
                            }
                        }
                        Err(req) => still.push((q, req)),
                    }
                }
                recvs = still;
                let mut still = Vec::with_capacity(sends.len());
                for req in sends.drain(..) {
                    if let Err(req) = req.test() {
                        still.push(req);
                    }
                }
                sends = still;
                if recvs.is_empty() && sends.is_empty() {
                    break;
                }
                if recvs.len() + sends.len() < before {
                    (spins, naps) = (0, 0);
                } else {
                    spins += 1;
                    if spins > SPINS {
                        if Instant::now() > deadline {
                            let err = Error::PeerTimeout {
                                rank: me,
                                what: what.to_string(),
                                missing: if recvs.is_empty() {
                                    // Only sends are pending: a peer is not receiving.
                                    (0..self.size()).filter(|&q| q != me).collect()
                                } else {
                                    recvs.iter().map(|(q, _)| *q).collect()
                                },
                                waited_s: start.elapsed().as_secs_f64(),
                            };
                            self.abort(&err.to_string());
                        }
                        // Waiting for a peer: stop burning the core it (or,
                        // overlapped, this rank's backward) may need; naps
                        // of 50 µs doubling to 800 µs.
                        std::thread::sleep(Duration::from_micros(50) * (1 << naps.min(4)));
                        naps += 1;
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        });
        match bad {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
