//! Pins every rule of the buffer pool: address reuse and LIFO order, the
//! rounding table, the cache cap, the slab arm (alignment, rounding,
//! cross-dtype reuse), leak reporting, views keeping buffers alive, exact
//! counters under concurrency, the memory limit, and the O(1) working set of
//! a drop-as-you-go op chain. Every test ends with nothing outstanding.

use fucina_core::pool::{allocation_len, slab_len, BufferPool, SLAB_QUANTUM};
use fucina_core::rng::SplitMix64;
use fucina_core::storage::{Arm, ALIGN};
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Error, ExecContext, RawTensor};

fn ctx() -> TestCtx {
    TestCtx::with_threads(1).expect("context")
}

#[test]
fn same_address_back_after_drop_and_same_size_acquire() {
    let pool = BufferPool::new();
    let a = pool.acquire_f32(1000).unwrap();
    let addr = a.as_ptr();
    drop(a);
    let b = pool.acquire_f32(1000).unwrap();
    assert_eq!(b.as_ptr(), addr);
    // Another length of the same size class reuses it too.
    drop(b);
    let c = pool.acquire_f32(513).unwrap();
    assert_eq!(c.as_ptr(), addr);
    drop(c);
    let s = pool.stats();
    assert_eq!((s.hits, s.misses), (2, 1));

    // Through the context: a same-shape op gets the address back.
    let ctx = ctx();
    let x = ctx.empty(DType::F32, &[7, 9]).unwrap();
    let p = x.buffer().as_ptr();
    drop(x);
    let y = ctx.zeros(DType::F32, &[9, 7]).unwrap();
    assert_eq!(y.buffer().as_ptr(), p);
    drop(y);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn lifo_within_a_size_class() {
    let pool = BufferPool::new();
    // 700, 1000 and 1024 elements all round to 1024.
    let bufs: Vec<_> = [700, 1000, 1024]
        .iter()
        .map(|&n| pool.acquire_f32(n).unwrap())
        .collect();
    let addrs: Vec<_> = bufs.iter().map(|b| b.as_ptr()).collect();
    // Release in order 0, 1, 2: the last released comes back first.
    for b in bufs {
        drop(b);
    }
    assert_eq!(pool.cached_sizes(Arm::F32), vec![4096; 3]);
    let again: Vec<_> = (0..3).map(|_| pool.acquire_f32(1024).unwrap()).collect();
    let got: Vec<_> = again.iter().map(|b| b.as_ptr()).collect();
    assert_eq!(got, vec![addrs[2], addrs[1], addrs[0]]);
    drop(again);
    // First fit across classes: a request takes the smallest cached block that
    // fits (the free list is sorted ascending by capacity).
    let pool = BufferPool::new();
    let small = pool.acquire_f32(8).unwrap(); // 32 bytes
    let mid = pool.acquire_f32(1000).unwrap(); // 4096 bytes
    let big = pool.acquire_f32(4096).unwrap(); // 16384 bytes
    let (sp, mp, bp) = (small.as_ptr(), mid.as_ptr(), big.as_ptr());
    drop((big, small, mid));
    assert_eq!(pool.cached_sizes(Arm::F32), vec![32, 4096, 16384]);
    let b2 = pool.acquire_f32(3000).unwrap(); // 12288 bytes: only the 16384 block fits
    assert_eq!(b2.as_ptr(), bp);
    let m2 = pool.acquire_f32(100).unwrap(); // 512 bytes: the 4096 block
    assert_eq!(m2.as_ptr(), mp);
    let s2 = pool.acquire_f32(5).unwrap(); // 32 bytes: the 32-byte block
    assert_eq!(s2.as_ptr(), sp);
    assert_eq!(pool.stats().hits, 3);
    drop((s2, m2, b2));
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn rounding_table() {
    for (len, want) in [
        (0, 1),
        (1, 1),
        (2, 2),
        (3, 4),
        (5, 8),
        (1000, 1024),
        (1024, 1024),
        (1025, 2048),
        (1500, 2048),
        (2048, 2048),
        (2049, 3072),
        (1_000_000, 1_000_448),
    ] {
        assert_eq!(allocation_len(len), want, "allocation_len({len})");
    }
    let pool = BufferPool::new();
    for (len, want) in [(1, 1), (3, 4), (1000, 1024), (1025, 2048), (2049, 3072)] {
        let b = pool.acquire_f32(len).unwrap();
        assert_eq!(
            b.capacity_bytes(),
            want * 4,
            "capacity of a {len}-element f32 buffer"
        );
        assert_eq!(b.arm(), Arm::F32);
    }
    // Fresh (miss) and reused (hit) blocks are accounted by the same rounded
    // size, so live bytes return to exactly 0 (a 1-element f32 is 4 bytes).
    let s = pool.stats();
    assert_eq!((s.outstanding, s.live_bytes), (0, 0));
    assert_eq!(s.cached_bytes, (1 + 4 + 1024 + 2048 + 3072) * 4);
    let tiny = pool.acquire_f32(1).unwrap();
    assert_eq!(pool.stats().live_bytes, 4);
    drop(tiny);
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn over_cap_buffer_is_freed_and_cache_never_exceeds_cap() {
    let cap = 10_000;
    let pool = BufferPool::with_max_cached_bytes(cap);
    // 4096 f32 = 16 KiB: alone over the cap, so it is freed, not cached.
    let big = pool.acquire_f32(4096).unwrap();
    drop(big);
    let s = pool.stats();
    assert_eq!((s.cached_bytes, s.cached_buffers), (0, 0));
    let again = pool.acquire_f32(4096).unwrap();
    assert_eq!(pool.stats().misses, 2, "an over-cap buffer is never reused");
    drop(again);

    // Four 4 KiB buffers: only two fit under 10 000 bytes; the rest are freed.
    let bufs: Vec<_> = (0..4).map(|_| pool.acquire_f32(1024).unwrap()).collect();
    for b in bufs {
        drop(b);
        assert!(pool.stats().cached_bytes <= cap);
    }
    let s = pool.stats();
    assert_eq!((s.cached_bytes, s.cached_buffers), (8192, 2));

    // Mixed sizes and arms under random release order: the bound always holds.
    let mut rng = SplitMix64::new(7);
    let mut held = Vec::new();
    for _ in 0..2000 {
        if held.len() < 8 && rng.below(3) != 0 {
            let b = if rng.below(2) == 0 {
                pool.acquire_f32(1 + rng.below(3000) as usize).unwrap()
            } else {
                pool.acquire_slab(1 + rng.below(9000) as usize).unwrap()
            };
            held.push(b);
        } else if !held.is_empty() {
            let i = rng.below(held.len() as u64) as usize;
            drop(held.swap_remove(i));
        }
        let s = pool.stats();
        assert!(
            s.cached_bytes <= cap,
            "cached {} > cap {cap}",
            s.cached_bytes
        );
        let listed: usize = pool.cached_sizes(Arm::F32).iter().sum::<usize>()
            + pool.cached_sizes(Arm::Slab).iter().sum::<usize>();
        assert_eq!(listed, s.cached_bytes);
    }
    drop(held);

    // Lowering the cap evicts at once.
    pool.set_max_cached_bytes(4096);
    assert!(pool.stats().cached_bytes <= 4096);
    pool.trim();
    assert_eq!(pool.stats().cached_bytes, 0);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn slab_alignment_rounding_and_cross_dtype_reuse() {
    assert_eq!(SLAB_QUANTUM, 4096);
    for (bytes, want) in [
        (0, 4096),
        (1, 4096),
        (4096, 4096),
        (4097, 8192),
        (10_000, 12_288),
    ] {
        assert_eq!(slab_len(bytes), want, "slab_len({bytes})");
    }
    let pool = BufferPool::new();
    let mut held = Vec::new();
    for bytes in [1, 63, 64, 65, 4095, 4097, 100_000, 1 << 20] {
        let b = pool.acquire_slab(bytes).unwrap();
        assert_eq!(
            b.as_ptr() as usize % ALIGN,
            0,
            "slab of {bytes} bytes misaligned"
        );
        assert_eq!(b.capacity_bytes() % 4096, 0);
        assert!(b.capacity_bytes() >= bytes);
        assert_eq!(b.arm(), Arm::Slab);
        held.push(b);
    }
    for len in [1, 3, 17, 1025] {
        let b = pool.acquire_f32(len).unwrap();
        assert_eq!(b.as_ptr() as usize % ALIGN, 0, "f32 buffer misaligned");
        held.push(b);
    }
    drop(held);

    // An f16 slab released then reused by an i64 and then an f64 request.
    let ctx = ctx();
    let h = ctx.empty(DType::F16, &[1000]).unwrap(); // 2000 bytes -> one 4096 slab
    assert_eq!(h.buffer().arm(), Arm::Slab);
    assert_eq!(h.buffer().capacity_bytes(), 4096);
    let addr = h.buffer().as_ptr();
    drop(h);
    let i = ctx.empty(DType::I64, &[500]).unwrap(); // 4000 bytes
    assert_eq!(i.buffer().as_ptr(), addr, "f16 slab not reused for i64");
    drop(i);
    let f = ctx.full::<f64>(&[8, 64], 1.5).unwrap(); // exactly 4096 bytes
    assert_eq!(f.buffer().as_ptr(), addr, "slab not reused for f64");
    assert!(f.to_vec::<f64>().unwrap().iter().all(|&v| v == 1.5));
    drop(f);
    // A scratch lease comes from the same arm and returns on drop.
    {
        let mut s = ctx.pool().scratch::<u32>(1024).unwrap();
        assert_eq!(s.as_ptr() as *const u8, addr);
        s.fill(3);
        assert_eq!(s.iter().sum::<u32>(), 3072);
        assert_eq!(ctx.stats().outstanding, 1);
    }
    let s = ctx.stats();
    assert_eq!((s.hits, s.misses), (3, 1));
    assert_eq!(s.outstanding, 0);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn leak_is_reported_and_clears_when_released() {
    let pool = BufferPool::new();
    assert_eq!(pool.check_leaks(), Ok(()));
    let b = pool.acquire_slab(10).unwrap();
    assert_eq!(pool.check_leaks(), Err(Error::Leak { outstanding: 1 }));
    drop(b);
    assert_eq!(pool.check_leaks(), Ok(()));

    let ctx = ctx();
    let t = ctx.zeros(DType::F32, &[3, 3]).unwrap();
    let v = t.transpose(0, 1).unwrap(); // a view is not a second buffer
    assert_eq!(ctx.check_leaks(), Err(Error::Leak { outstanding: 1 }));
    drop(t);
    assert_eq!(ctx.check_leaks(), Err(Error::Leak { outstanding: 1 }));
    drop(v);
    assert_eq!(ctx.check_leaks(), Ok(()));
    assert_eq!(ctx.stats().outstanding, 0);
    assert_eq!(ctx.stats().live_bytes, 0);
}

#[test]
fn view_keeps_buffer_alive_until_it_drops() {
    let ctx = ctx();
    let data: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let t = ctx.from_slice(&data, &[4, 6]).unwrap();
    let addr = t.buffer().as_ptr();
    let v = t.narrow(1, 2, 3).unwrap().transpose(0, 1).unwrap();
    assert!(v.buffer().same_as(t.buffer()));
    assert_eq!(t.buffer().ref_count(), 2);
    drop(t);
    // The parent is gone; the buffer is still out, held by the view.
    let s = ctx.stats();
    assert_eq!((s.outstanding, s.cached_buffers), (1, 0));
    assert_eq!(v.buffer().ref_count(), 1);
    let want: Vec<f32> = (0..3)
        .flat_map(|j| (0..4).map(move |i| (i * 6 + 2 + j) as f32))
        .collect();
    assert_eq!(v.to_vec::<f32>().unwrap(), want);
    // A new acquire cannot get the view's buffer while it is alive.
    let other = ctx.empty(DType::F32, &[4, 6]).unwrap();
    assert_ne!(other.buffer().as_ptr(), addr);
    drop(other);
    drop(v);
    let s = ctx.stats();
    assert_eq!((s.outstanding, s.cached_buffers), (0, 2));
    let back = ctx.empty(DType::F32, &[24]).unwrap();
    assert_eq!(
        back.buffer().as_ptr(),
        addr,
        "view's buffer returned last, reused first"
    );
    drop(back);
}

#[test]
fn concurrent_acquire_release_keeps_counts_exact() {
    const THREADS: u64 = 8;
    const OPS: usize = 10_000;
    let cap = 256 * 1024;
    let pool = BufferPool::with_max_cached_bytes(cap);
    let acquires: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let pool = pool.clone();
                s.spawn(move || {
                    let mut rng = SplitMix64::new(0xC0FFEE + t);
                    let mut held: Vec<(fucina_core::Buffer, u8)> = Vec::new();
                    let mut n = 0u64;
                    for op in 0..OPS {
                        if held.len() < 6 && rng.below(2) == 0 {
                            let mut b = match rng.below(3) {
                                0 => pool.acquire_f32(1 + rng.below(5000) as usize),
                                1 => pool.acquire_slab(1 + rng.below(20_000) as usize),
                                _ => pool.acquire(DType::F64, 1 + rng.below(700) as usize),
                            }
                            .unwrap();
                            n += 1;
                            // Stamp the whole block; a block handed to two owners at once
                            // would be caught when the stamp is checked at release.
                            let tag = (t as u8).wrapping_mul(31).wrapping_add(op as u8);
                            b.get_mut().unwrap().fill(tag);
                            held.push((b, tag));
                        } else if !held.is_empty() {
                            let i = rng.below(held.len() as u64) as usize;
                            let (mut b, tag) = held.swap_remove(i);
                            let bytes = b.get_mut().unwrap();
                            assert!(
                                bytes.iter().all(|&x| x == tag),
                                "buffer shared by two owners"
                            );
                        }
                    }
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let s = pool.stats();
    assert_eq!(s.outstanding, 0);
    assert_eq!(s.live_bytes, 0);
    assert_eq!(s.hits + s.misses, acquires);
    assert!(s.hits > 0 && s.misses > 0);
    assert!(s.cached_bytes <= cap);
    let listed: usize = pool.cached_sizes(Arm::F32).iter().sum::<usize>()
        + pool.cached_sizes(Arm::Slab).iter().sum::<usize>();
    assert_eq!(listed, s.cached_bytes);
    assert_eq!(pool.check_leaks(), Ok(()));
}

#[test]
fn memory_limit_evicts_cache_then_fails_cleanly() {
    let pool = BufferPool::new();
    pool.set_memory_limit(Some(64 * 1024));
    assert_eq!(pool.memory_limit(), Some(64 * 1024));

    // Fill the cache with 3 x 16 KiB, keep 16 KiB live.
    let live = pool.acquire_f32(4096).unwrap();
    let cached: Vec<_> = (0..3).map(|_| pool.acquire_f32(4096).unwrap()).collect();
    drop(cached);
    let s = pool.stats();
    assert_eq!((s.live_bytes, s.cached_bytes), (16384, 3 * 16384));

    // 32 KiB fresh: live 16 + cached 48 + 32 > 64, so cached blocks are freed first.
    let mid = pool.acquire_f32(8192).unwrap();
    let s = pool.stats();
    assert_eq!(s.live_bytes, 16384 + 32768);
    assert!(s.live_bytes + s.cached_bytes <= 64 * 1024);
    assert_eq!(s.misses, 5);

    // 32 KiB more cannot fit even with an empty cache: a structured error.
    let before = pool.stats();
    let err = pool.acquire_f32(8192).unwrap_err();
    assert_eq!(
        err,
        Error::OutOfMemory {
            requested_bytes: 32768,
            live_bytes: 16384 + 32768,
            limit_bytes: 64 * 1024,
        }
    );
    assert!(err.to_string().contains("32768"));
    let after = pool.stats();
    assert_eq!(after.outstanding, before.outstanding);
    assert_eq!(after.live_bytes, before.live_bytes);
    assert_eq!(after.hits + after.misses, before.hits + before.misses);
    assert_eq!(after.cached_bytes, 0, "the cache is emptied before failing");

    // Work continues once buffers are released.
    drop(mid);
    let ok = pool.acquire_f32(8192).unwrap();
    let ok2 = pool.acquire_slab(16384).unwrap();
    assert!(pool.acquire_slab(1).is_err());
    drop((ok, ok2, live));
    let s = pool.stats();
    assert_eq!((s.outstanding, s.live_bytes), (0, 0));
    assert!(s.cached_bytes <= 64 * 1024);

    // Through the context; clearing the limit lifts it.
    let ctx = TestCtx::with_pool(1, pool.clone()).unwrap();
    let e = ctx.empty(DType::F64, &[1 << 20]).unwrap_err();
    assert!(matches!(
        e,
        Error::OutOfMemory {
            requested_bytes: 8_388_608,
            ..
        }
    ));
    // A zero limit refuses fresh memory; it does not mean "no limit".
    pool.trim();
    pool.set_memory_limit(Some(0));
    assert!(matches!(
        ctx.empty(DType::F32, &[1]),
        Err(Error::OutOfMemory {
            requested_bytes: 4,
            live_bytes: 0,
            ..
        })
    ));
    pool.set_memory_limit(None);
    assert_eq!(pool.memory_limit(), None);
    let t = ctx.zeros(DType::F64, &[1 << 20]).unwrap();
    drop(t);
}

#[test]
fn huge_requests_are_errors_not_panics() {
    let pool = BufferPool::new();
    assert!(matches!(
        pool.acquire_f32(usize::MAX),
        Err(Error::OutOfMemory { .. })
    ));
    assert!(matches!(
        pool.acquire_slab(usize::MAX),
        Err(Error::OutOfMemory { .. })
    ));
    assert!(matches!(
        pool.acquire(DType::F64, usize::MAX / 2),
        Err(Error::OutOfMemory { .. })
    ));
    let ctx = ctx();
    assert!(ctx.empty(DType::F32, &[usize::MAX, 2]).is_err());
    assert!(ctx.empty(DType::F64, &[1 << 62]).is_err());
    let s = pool.stats();
    assert_eq!((s.outstanding, s.live_bytes), (0, 0));
}

/// A same-shape op that acquires its output, writes `f(x)` and consumes its input.
fn map(ctx: &ExecContext, x: RawTensor, f: impl Fn(f32) -> f32) -> RawTensor {
    let mut y = ctx.empty(DType::F32, x.shape()).unwrap();
    {
        let src = x.as_slice::<f32>().unwrap();
        for (o, &v) in y.as_mut_slice::<f32>().unwrap().iter_mut().zip(src) {
            *o = f(v);
        }
    }
    drop(x);
    y
}

#[test]
fn sixteen_op_chain_holds_at_most_two_buffers() {
    let ctx = ctx();
    let n = 48;
    let data: Vec<f32> = (0..n * n).map(|i| (i % 97) as f32).collect();
    let mut x = ctx.from_slice(&data, &[n, n]).unwrap();
    let mut want = data.clone();
    let mut peak = 0;
    let mut addrs = std::collections::BTreeSet::new();
    for op in 0..16 {
        let y = match op % 4 {
            0 => ctx.copy(&x).unwrap(),
            // A transposed view is not contiguous: `contiguous` copies it.
            1 => {
                let xt = x.transpose(0, 1).unwrap();
                let y = ctx.contiguous(&xt).unwrap();
                let mut t = vec![0.0; n * n];
                for i in 0..n {
                    for j in 0..n {
                        t[i * n + j] = want[j * n + i];
                    }
                }
                want = t;
                y
            }
            2 => {
                for v in want.iter_mut() {
                    *v = *v * 0.5 + 1.0;
                }
                map(&ctx, x.clone_view(), |v| v * 0.5 + 1.0)
            }
            _ => {
                for v in want.iter_mut() {
                    *v = -*v;
                }
                map(&ctx, x.clone_view(), |v| -v)
            }
        };
        peak = peak.max(ctx.stats().outstanding);
        addrs.insert(y.buffer().as_ptr() as usize);
        x = y; // drops the input
        peak = peak.max(ctx.stats().outstanding);
        assert_eq!(ctx.stats().outstanding, 1, "after op {op}");
    }
    assert_eq!(x.to_vec::<f32>().unwrap(), want);
    assert!(peak <= 2, "peak outstanding {peak}");
    assert!(
        addrs.len() <= 2,
        "a ping-pong chain touches two buffers, saw {}",
        addrs.len()
    );
    let bytes = allocation_len(n * n) * 4;
    assert!(ctx.stats().peak_live_bytes <= 2 * bytes);
    drop(x);
}

#[test]
fn holding_every_intermediate_grows_linearly() {
    // The contrast to the chain above: keeping each result (what a scope does)
    // holds one buffer per op. The pool must not hide that, nor cap it.
    let ctx = ctx();
    let mut held = vec![ctx.full::<f32>(&[32, 32], 1.0).unwrap()];
    for _ in 0..16 {
        let last = held.last().unwrap().clone_view();
        held.push(map(&ctx, last, |v| v + 1.0));
    }
    assert_eq!(ctx.stats().outstanding, 17);
    assert_eq!(held[16].to_vec::<f32>().unwrap()[0], 17.0);
    drop(held);
    assert_eq!(ctx.stats().outstanding, 0);
    assert_eq!(ctx.stats().cached_buffers, 17);
}

/// Seconds to release `n` small buffers into the free list and acquire
/// them all back (best of 5, to shrug off a noisy neighbour).
fn release_reacquire_secs(n: usize) -> f64 {
    let pool = BufferPool::new();
    // Mixed small sizes, so first fit and LIFO both do work.
    let mut held: Vec<_> = (0..n)
        .map(|i| pool.acquire_f32(1 + i % 7).unwrap())
        .collect();
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        held.clear();
        held.extend((0..n).map(|i| pool.acquire_f32(1 + i % 7).unwrap()));
        best = best.min(t.elapsed().as_secs_f64());
        assert_eq!(pool.stats().misses as usize, n, "every reacquire is a hit");
    }
    drop(held);
    assert_eq!(pool.stats().outstanding, 0);
    pool.trim();
    best
}

#[test]
#[ignore = "a wall-clock ratio (issue 11): run with --ignored on a quiet machine; figures in docs/RELIABILITY.md"]
fn free_list_release_and_acquire_are_near_linear() {
    // Issue 11's criterion: 10x the buffers may take at most 15x the time
    // (under a load of 16 on 2 cores one best-of-3 run reached 18x while
    // reruns passed, hence best of 5).
    // A sorted Vec with front insertion is quadratic (about 100x here).
    let small = release_reacquire_secs(100_000);
    let large = release_reacquire_secs(1_000_000);
    assert!(
        large <= 15.0 * small,
        "1,000,000 buffers took {large:.3}s, 100,000 took {small:.3}s ({:.1}x)",
        large / small
    );
}
