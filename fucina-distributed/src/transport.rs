//! The transport: the one collective every distributed operation is built
//! on, and an in-process implementation over threads.
//!
//! [`Transport::exchange`] is a personalised all-to-all: rank `r` hands one
//! byte buffer per destination and receives one per source, in rank order.
//! Broadcast, barrier, the reduce-scatter and the all-gather of the gradient
//! averaging are all exchanges. Every exchange has a deadline: a peer whose
//! message has not arrived when it passes is **named** in the error
//! ([`Error::PeerTimeout`]), so a failed or stalled rank never makes its
//! peers hang. [`LocalTransport`] runs a group of ranks as threads of one
//! process (channels between every pair), which tests the whole data-parallel
//! logic without MPI; the MPI transport is `crate::mpi` (feature `mpi`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The default deadline of one exchange: 120 s. Long enough for rank 0 to
/// write a large checkpoint while its peers wait; a killed rank is usually
/// detected far sooner by the launcher (`docs/DISTRIBUTED.md`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Moves bytes between the ranks of a job.
///
/// `Sync`, so that [`crate::DataParallel::backward_overlapped`] can run the
/// exchanges on a communication thread while backward runs on the caller's;
/// an implementation serializes its calls where its backend needs it.
pub trait Transport: Sync {
    /// This rank, in `0..size()`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// The deadline of one exchange.
    fn timeout(&self) -> Duration;
    /// Sends `send[q]` to every rank `q` and fills `recv[q]` with what rank
    /// `q` sent to this rank; `recv[q]` must already have the expected length
    /// (a different length is [`Error::SizeMismatch`]). `send[rank]` is
    /// copied to `recv[rank]`. Every rank calls `exchange` in the same order
    /// with matching lengths; `what` names the operation in errors.
    fn exchange(&self, what: &str, send: &[&[u8]], recv: &mut [Vec<u8>]) -> Result<()>;
}

/// Checks the argument lengths every [`Transport::exchange`] shares.
pub(crate) fn check_exchange_args(
    t: &dyn Transport,
    what: &str,
    send: &[&[u8]],
    recv: &[Vec<u8>],
) -> Result<()> {
    let n = t.size();
    if send.len() != n || recv.len() != n {
        return Err(Error::InvalidConfig(format!(
            "`{what}`: exchange needs one send and one receive buffer per rank ({n}), got {} and {}",
            send.len(),
            recv.len()
        )));
    }
    let me = t.rank();
    if send[me].len() != recv[me].len() {
        return Err(Error::SizeMismatch {
            rank: me,
            what: what.to_string(),
            peer: me,
            expected: recv[me].len(),
            got: send[me].len(),
        });
    }
    Ok(())
}

/// One rank of a group of threads in this process, connected by channels.
///
/// Every message carries its sender's exchange number (the n-th call of
/// [`Transport::exchange`] on that rank): a message of an earlier exchange,
/// one whose receiver timed out before it came, is dropped by the next
/// exchange instead of being taken for its own, so a retry after a timeout
/// never mixes the two attempts.
///
/// ```
/// use fucina_distributed::{LocalTransport, Transport};
/// let group = LocalTransport::group(2, std::time::Duration::from_secs(5))?;
/// let handles: Vec<_> = group
///     .into_iter()
///     .map(|t| {
///         std::thread::spawn(move || {
///             let me = [t.rank() as u8];
///             let mut recv = vec![vec![0u8; 1]; 2];
///             t.exchange("demo", &[&me, &me], &mut recv).map(|_| recv)
///         })
///     })
///     .collect();
/// for h in handles {
///     assert_eq!(h.join().unwrap()?, vec![vec![0u8], vec![1u8]]);
/// }
/// # Ok::<(), fucina_distributed::Error>(())
/// ```
#[derive(Debug)]
pub struct LocalTransport {
    rank: usize,
    timeout: Duration,
    /// `to[q]`: the channel to rank `q` (`None` for this rank), carrying
    /// (exchange number, bytes).
    to: Vec<Option<Sender<Tagged>>>,
    /// `from[q]`: the channel from rank `q` (`None` for this rank), behind
    /// a lock so that the transport is `Sync` (one exchange at a time
    /// receives from it).
    from: Vec<Option<Mutex<Receiver<Tagged>>>>,
    /// The number of this rank's next exchange.
    seq: AtomicU64,
}

/// A message and the number of the exchange that sent it.
type Tagged = (u64, Vec<u8>);

impl LocalTransport {
    /// `n` connected ranks (move each into its own thread). Errors when `n` is 0.
    pub fn group(n: usize, timeout: Duration) -> Result<Vec<LocalTransport>> {
        if n == 0 {
            return Err(Error::InvalidConfig(
                "a group needs at least one rank".into(),
            ));
        }
        let mut group: Vec<LocalTransport> = (0..n)
            .map(|rank| LocalTransport {
                rank,
                timeout,
                to: (0..n).map(|_| None).collect(),
                from: (0..n).map(|_| None).collect(),
                seq: AtomicU64::new(0),
            })
            .collect();
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    let (tx, rx) = channel();
                    group[a].to[b] = Some(tx);
                    group[b].from[a] = Some(Mutex::new(rx));
                }
            }
        }
        Ok(group)
    }
}

impl Transport for LocalTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.to.len()
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn exchange(&self, what: &str, send: &[&[u8]], recv: &mut [Vec<u8>]) -> Result<()> {
        check_exchange_args(self, what, send, recv)?;
        let me = self.rank;
        let gone = |peer| Error::PeerGone {
            rank: me,
            what: what.to_string(),
            peer,
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        for (q, tx) in self.to.iter().enumerate() {
            if let Some(tx) = tx {
                tx.send((seq, send[q].to_vec())).map_err(|_| gone(q))?;
            }
        }
        recv[me].copy_from_slice(send[me]);
        let start = Instant::now();
        let deadline = start + self.timeout;
        for (q, rx) in self.from.iter().enumerate() {
            let Some(rx) = rx else { continue };
            let rx = lock(rx);
            let msg = loop {
                match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    // Sent by an exchange this rank already gave up on: stale.
                    Ok((tag, _)) if tag < seq => continue,
                    Ok((tag, m)) if tag == seq => break Ok(m),
                    // Channels are FIFO and every exchange sends once to
                    // each peer, so a later tag means this rank lost count.
                    Ok((tag, _)) => {
                        return Err(Error::InvalidConfig(format!(
                            "rank {me}: `{what}`: message of exchange {tag} from rank {q} \
                             arrived during exchange {seq}: the ranks' exchanges are out of step"
                        )))
                    }
                    Err(e) => break Err(e),
                }
            };
            let msg = match msg {
                Ok(m) => m,
                Err(RecvTimeoutError::Disconnected) => return Err(gone(q)),
                Err(RecvTimeoutError::Timeout) => {
                    // Name every peer still missing, not just the first.
                    let mut missing = vec![q];
                    for (p, rx) in self.from.iter().enumerate().skip(q + 1) {
                        if let Some(rx) = rx {
                            let rx = lock(rx);
                            // Only a message of this exchange counts as arrived.
                            let arrived = loop {
                                match rx.try_recv() {
                                    Ok((tag, _)) if tag < seq => continue,
                                    Ok(_) => break true,
                                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                                        break false
                                    }
                                }
                            };
                            if !arrived {
                                missing.push(p);
                            }
                        }
                    }
                    return Err(Error::PeerTimeout {
                        rank: me,
                        what: what.to_string(),
                        missing,
                        waited_s: start.elapsed().as_secs_f64(),
                    });
                }
            };
            if msg.len() != recv[q].len() {
                return Err(Error::SizeMismatch {
                    rank: me,
                    what: what.to_string(),
                    peer: q,
                    expected: recv[q].len(),
                    got: msg.len(),
                });
            }
            recv[q].copy_from_slice(&msg);
        }
        Ok(())
    }
}

/// Locks `m`, also after a panic elsewhere poisoned it (a receiver has no
/// invariant a panic could break).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Rank `root` sends `data` to every rank; returns it on every rank (the
/// length travels first, so only the root needs to know it). `data` is
/// ignored on the other ranks.
pub fn broadcast_bytes(t: &dyn Transport, what: &str, root: usize, data: &[u8]) -> Result<Vec<u8>> {
    let n = t.size();
    if root >= n {
        return Err(Error::InvalidConfig(format!(
            "`{what}`: broadcast root {root} of world size {n}"
        )));
    }
    let me = t.rank();
    let empty: &[u8] = &[];
    let len_bytes = (data.len() as u64).to_le_bytes();
    // Step 1: the length, from the root to everyone.
    let send: Vec<&[u8]> = (0..n)
        .map(|_| if me == root { &len_bytes[..] } else { empty })
        .collect();
    let mut recv: Vec<Vec<u8>> = (0..n)
        .map(|q| vec![0; if q == root { 8 } else { 0 }])
        .collect();
    t.exchange(&format!("{what} (length)"), &send, &mut recv)?;
    let mut len = [0u8; 8];
    len.copy_from_slice(&recv[root]);
    let len = usize::try_from(u64::from_le_bytes(len))
        .map_err(|_| Error::InvalidConfig(format!("`{what}`: broadcast length overflows")))?;
    // Step 2: the payload.
    let send: Vec<&[u8]> = (0..n)
        .map(|_| if me == root { data } else { empty })
        .collect();
    let mut recv: Vec<Vec<u8>> = (0..n)
        .map(|q| vec![0; if q == root { len } else { 0 }])
        .collect();
    t.exchange(what, &send, &mut recv)?;
    Ok(std::mem::take(&mut recv[root]))
}

/// Waits until every rank has reached the barrier (an exchange of empty
/// messages, with the transport's deadline).
pub fn barrier(t: &dyn Transport, what: &str) -> Result<()> {
    let n = t.size();
    let empty: &[u8] = &[];
    let send = vec![empty; n];
    let mut recv = vec![Vec::new(); n];
    t.exchange(what, &send, &mut recv)
}

/// Gathers one `u64` from every rank, in rank order, on every rank.
pub fn all_gather_u64(t: &dyn Transport, what: &str, value: u64) -> Result<Vec<u64>> {
    let n = t.size();
    let bytes = value.to_le_bytes();
    let send = vec![&bytes[..]; n];
    let mut recv = vec![vec![0u8; 8]; n];
    t.exchange(what, &send, &mut recv)?;
    Ok(recv
        .iter()
        .map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
        .collect())
}
