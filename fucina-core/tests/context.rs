//! The `ExecContext`: thread count (in code and by `FUCINA_NUM_THREADS`),
//! chunked parallelism, creation functions, `to_vec`, ndarray interop,
//! dtype conversion, and the leak report printed when a context drops.
//!
//! Environment variables are process-global, so nothing here calls
//! `set_var`: the env-dependent checks re-run this test binary as a child
//! process with the variable set, and parse what the `probe_*` tests print.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use fucina_core::exec::default_num_threads;
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{bf16, f16, DType, Element, Error, RawTensor};

fn ctx() -> TestCtx {
    TestCtx::with_threads(1).expect("context")
}

fn available() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Runs the ignored test `name` of this binary in a child process with
/// `FUCINA_NUM_THREADS` set to `value` (or removed), returning (stdout, stderr).
fn run_probe(name: &str, value: Option<&str>) -> (String, String) {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    cmd.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    match value {
        Some(v) => cmd.env("FUCINA_NUM_THREADS", v),
        None => cmd.env_remove("FUCINA_NUM_THREADS"),
    };
    let out = cmd.output().expect("spawn the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "probe {name} failed:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

/// Reads `FUCINA_PROBE default=<n> new=<m>` from a probe's output.
fn probe_threads(value: Option<&str>) -> (usize, usize) {
    let (out, _) = run_probe("probe_default_num_threads", value);
    let line = out
        .lines()
        // libtest may print the test name on the same line first.
        .find_map(|l| l.split_once("FUCINA_PROBE ").map(|(_, rest)| rest.trim()))
        .unwrap_or_else(|| panic!("no probe line in:\n{out}"));
    let mut nums = line.split(' ').map(|kv| {
        kv.split_once('=')
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("bad probe line {line}"))
    });
    (nums.next().unwrap(), nums.next().unwrap())
}

#[test]
#[ignore = "probe: run by fucina_num_threads_env_is_parsed in a child process"]
fn probe_default_num_threads() {
    let ctx = TestCtx::new().unwrap();
    println!(
        "FUCINA_PROBE default={} new={}",
        default_num_threads(),
        ctx.num_threads()
    );
}

#[test]
fn fucina_num_threads_env_is_parsed() {
    let avail = available();
    // Valid values are taken as they are (surrounding whitespace ignored) ...
    assert_eq!(probe_threads(Some("3")), (3, 3));
    assert_eq!(probe_threads(Some(" 5\n")), (5, 5));
    assert_eq!(probe_threads(Some("1")), (1, 1));
    // ... anything else falls back to the machine's parallelism.
    for bad in ["0", "", "abc", "-2", "2.5", "99999999999999999999999"] {
        assert_eq!(
            probe_threads(Some(bad)),
            (avail, avail),
            "FUCINA_NUM_THREADS={bad:?}"
        );
    }
    assert_eq!(probe_threads(None), (avail, avail));
}

#[test]
#[ignore = "probe: run by dropping_a_context_with_a_live_buffer_reports_a_leak"]
fn probe_leak_report() {
    // Keeps a buffer past the context on purpose: that is what it probes.
    let ctx = TestCtx::with_threads(1).unwrap().allow_outstanding();
    let kept = ctx.zeros(DType::F32, &[10]).unwrap();
    assert_eq!(ctx.check_leaks(), Err(Error::Leak { outstanding: 1 }));
    drop(ctx); // prints the leak report to stderr
               // The buffer outlives its pool safely: it is freed, not returned.
    assert_eq!(kept.to_vec::<f32>().unwrap(), vec![0.0; 10]);
    drop(kept);
}

#[test]
fn dropping_a_context_with_a_live_buffer_reports_a_leak() {
    let (_, err) = run_probe("probe_leak_report", None);
    assert!(
        err.contains("1 pool buffer(s) still outstanding (leak)"),
        "no leak report in stderr:\n{err}"
    );
    // And a clean context says nothing.
    let (_, err) = run_probe("probe_default_num_threads", None);
    assert!(!err.contains("leak"), "spurious leak report:\n{err}");
}

#[test]
fn thread_count_is_settable_in_code() {
    for n in [1, 2, 3] {
        let ctx = TestCtx::with_threads(n).unwrap();
        assert_eq!(ctx.num_threads(), n);
        // rayon calls inside install run on the context's pool.
        let inside = ctx.install(rayon::current_num_threads);
        if n > 1 {
            assert_eq!(inside, n);
        }
        assert_eq!(ctx.stats().outstanding, 0);
    }
    assert_eq!(TestCtx::with_threads(0).unwrap().num_threads(), 1);
    let a = ctx();
    let b = a.clone();
    assert_eq!(a.id(), b.id());
    assert_ne!(a.id(), ctx().id());
}

#[test]
fn for_chunks_runs_each_chunk_once() {
    for threads in [1, 2] {
        let ctx = TestCtx::with_threads(threads).unwrap();
        for parallel in [false, true] {
            let hits: Vec<AtomicUsize> = (0..257).map(|_| AtomicUsize::new(0)).collect();
            ctx.for_chunks(hits.len(), parallel, |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
        ctx.for_chunks(0, true, |_| panic!("no chunks to run"));
        assert_eq!(ctx.stats().outstanding, 0);
    }
}

/// The team spreads chunks over its threads (the caller included) and every chunk of
/// every dispatch runs exactly once, over many back-to-back dispatches.
#[test]
fn for_chunks_uses_the_team_and_runs_every_chunk() {
    let ctx = TestCtx::with_threads(3).unwrap();
    let caller = std::thread::current().id();
    let mut seen = std::collections::HashSet::new();
    for round in 0..2000 {
        let n = 1 + round % 40;
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        let ids = std::sync::Mutex::new(Vec::new());
        ctx.for_chunks(n, true, |i| {
            // Enough work per chunk that more than one thread gets a share.
            let mut x = i as u64;
            for _ in 0..2000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            std::hint::black_box(x);
            hits[i].fetch_add(1, Ordering::Relaxed);
            ids.lock().unwrap().push(std::thread::current().id());
        });
        assert!(
            hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
            "round {round}"
        );
        seen.extend(ids.into_inner().unwrap());
    }
    assert!(
        seen.contains(&caller),
        "the calling thread takes chunks too"
    );
    assert!(seen.len() > 1, "chunks ran on one thread only");
}

/// A dispatch from inside a chunk runs inline; a panicking chunk is resumed on the
/// caller once the other chunks have run, and the context keeps working.
#[test]
fn for_chunks_nests_and_propagates_panics() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let total = AtomicUsize::new(0);
    ctx.for_chunks(8, true, |_| {
        ctx.for_chunks(8, true, |_| {
            total.fetch_add(1, Ordering::Relaxed);
        });
    });
    assert_eq!(total.load(Ordering::Relaxed), 64);

    let ran = AtomicUsize::new(0);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ctx.for_chunks(16, true, |i| {
            ran.fetch_add(1, Ordering::Relaxed);
            if i == 5 {
                panic!("chunk 5 fails");
            }
        });
    }));
    let msg = caught.expect_err("the panic reaches the caller");
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"chunk 5 fails"));
    assert_eq!(
        ran.load(Ordering::Relaxed),
        16,
        "the other chunks still ran"
    );
    let after = AtomicUsize::new(0);
    ctx.for_chunks(10, true, |_| {
        after.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(after.load(Ordering::Relaxed), 10);
}

/// Threads sharing one context may dispatch at the same time (one runs on the team,
/// the others inline); contexts start and stop their workers cleanly.
#[test]
fn for_chunks_from_several_threads_and_context_teardown() {
    let ctx = TestCtx::with_threads(2).unwrap();
    std::thread::scope(|sc| {
        for t in 0..4 {
            let ctx = ctx.clone();
            sc.spawn(move || {
                for r in 0..500 {
                    let n = 1 + (t + r) % 17;
                    let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                    ctx.for_chunks(n, true, |i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    });
                    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                }
            });
        }
    });
    for _ in 0..50 {
        let c = TestCtx::with_threads(4).unwrap();
        c.for_chunks(4, true, |_| {});
    }
}

#[test]
fn creation_functions() {
    let ctx = ctx();
    // empty: shape, dtype, contiguous, pooled.
    for dtype in DType::ALL {
        let e = ctx.empty(dtype, &[3, 0, 2]).unwrap();
        assert_eq!(
            (e.dtype(), e.shape(), e.numel()),
            (dtype, &[3, 0, 2][..], 0)
        );
        drop(e);
        let e = ctx.empty(dtype, &[2, 3]).unwrap();
        assert_eq!(e.strides(), &[3, 1]);
        assert!(e.is_contiguous());
        assert!(e.buffer().capacity_bytes() >= 6 * dtype.size_of());
        assert_eq!(ctx.stats().outstanding, 1);
        drop(e);
        // zeros of every dtype, including over a recycled (dirty) buffer.
        let mut d = ctx.empty(dtype, &[7, 5]).unwrap();
        d.as_mut_bytes().unwrap().fill(0xAB);
        drop(d);
        let mut z = ctx.zeros(dtype, &[7, 5]).unwrap();
        let n = 35 * dtype.size_of();
        let bytes = z.as_mut_bytes().unwrap();
        assert!(bytes.len() >= n);
        assert!(
            bytes[..n].iter().all(|&b| b == 0),
            "zeros({dtype}) not zero"
        );
        drop(z);
        let o = ctx.full_f64(dtype, &[4], 2.0).unwrap();
        assert_eq!(o.dtype(), dtype);
        let ones = ctx.ones(dtype, &[2, 2]).unwrap();
        fucina_core::dispatch_any!(dtype, T => {
            assert!(o.to_vec::<T>().unwrap().iter().all(|v| v.to_f64() == 2.0));
            assert!(ones.to_vec::<T>().unwrap().iter().all(|v| v.to_f64() == 1.0));
        });
    }
    // full, from_slice, from_vec, scalar.
    let f = ctx.full::<f64>(&[2, 3], -1.25).unwrap();
    assert_eq!(f.to_vec::<f64>().unwrap(), vec![-1.25; 6]);
    let s = ctx.from_slice(&[1i64, -2, 3, -4], &[2, 2]).unwrap();
    assert_eq!(s.dtype(), DType::I64);
    assert_eq!(s.to_vec::<i64>().unwrap(), vec![1, -2, 3, -4]);
    assert_eq!(
        ctx.from_slice(&[1.0f32, 2.0, 3.0], &[2, 2]).unwrap_err(),
        Error::ShapeMismatch {
            op: "from_slice",
            lhs: vec![3],
            rhs: vec![2, 2]
        }
    );
    let v = ctx
        .from_vec(vec![f16::from_f32(0.5), f16::from_f32(-2.0)], &[2, 1])
        .unwrap();
    assert_eq!(
        v.to_vec::<f16>().unwrap(),
        vec![f16::from_f32(0.5), f16::from_f32(-2.0)]
    );
    assert!(matches!(
        ctx.from_vec(vec![1u8; 5], &[2, 3]),
        Err(Error::ShapeMismatch { .. })
    ));
    let sc = ctx.scalar(3.5f32).unwrap();
    assert_eq!((sc.rank(), sc.numel()), (0, 1));
    assert_eq!(sc.item::<f32>().unwrap(), 3.5);
    assert!(matches!(sc.item::<f64>(), Err(Error::DTypeMismatch { .. })));
    assert!(matches!(
        f.item::<f64>(),
        Err(Error::InvalidArgument { op: "item", .. })
    ));
    // item of a one-element view at a non-zero offset.
    assert_eq!(
        s.narrow(0, 1, 1)
            .unwrap()
            .narrow(1, 1, 1)
            .unwrap()
            .item::<i64>()
            .unwrap(),
        -4
    );

    // arange: f32, f64, integer, negative and fractional steps, empty ranges.
    assert_eq!(
        ctx.arange::<f32>(0.0, 5.0, 1.0)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![0., 1., 2., 3., 4.]
    );
    assert_eq!(
        ctx.arange::<f64>(1.0, 2.0, 0.25)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        vec![1.0, 1.25, 1.5, 1.75]
    );
    assert_eq!(ctx.arange::<f64>(0.0, 1.0, 0.3).unwrap().numel(), 4);
    assert_eq!(
        ctx.arange::<i64>(5.0, -1.0, -2.0)
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        vec![5, 3, 1]
    );
    assert_eq!(ctx.arange::<f32>(3.0, 3.0, 1.0).unwrap().shape(), &[0]);
    assert_eq!(ctx.arange::<f32>(3.0, 1.0, 1.0).unwrap().shape(), &[0]);
    for (a, b, st) in [
        (0.0, 1.0, 0.0),
        (0.0, f64::NAN, 1.0),
        (0.0, f64::INFINITY, 1.0),
    ] {
        assert!(matches!(
            ctx.arange::<f32>(a, b, st),
            Err(Error::InvalidArgument { op: "arange", .. })
        ));
    }
    drop((f, s, v, sc));
}

#[test]
fn to_vec_reads_views_in_logical_order() {
    let ctx = ctx();
    let t = ctx
        .arange::<f64>(0.0, 24.0, 1.0)
        .unwrap()
        .reshape(&[2, 3, 4])
        .unwrap();
    let v = t.permute(&[2, 0, 1]).unwrap().narrow(0, 1, 2).unwrap();
    let mut want = Vec::new();
    for a in 0..2 {
        for b in 0..2 {
            for c in 0..3 {
                want.push((b * 12 + c * 4 + a + 1) as f64);
            }
        }
    }
    assert_eq!(ctx.to_vec::<f64>(&v).unwrap(), want);
    assert!(matches!(
        ctx.to_vec::<f32>(&v),
        Err(Error::DTypeMismatch { .. })
    ));
    drop((t, v));
}

#[cfg(feature = "ndarray")]
#[test]
fn ndarray_round_trip() {
    use ndarray::{ArrayD, IxDyn};
    let ctx = ctx();
    let a = ArrayD::from_shape_fn(IxDyn(&[3, 4, 5]), |i| {
        (i[0] * 100 + i[1] * 10 + i[2]) as f32
    });
    let t = ctx.from_ndarray(&a.view()).unwrap();
    assert_eq!(t.shape(), &[3, 4, 5]);
    assert_eq!(t.to_ndarray::<f32>().unwrap(), a);
    // A non-standard-layout ndarray view goes in by logical order.
    let at = a.view().permuted_axes(IxDyn(&[2, 0, 1]));
    let tt = ctx.from_ndarray(&at).unwrap();
    assert_eq!(tt.shape(), &[5, 3, 4]);
    assert_eq!(tt.to_ndarray::<f32>().unwrap(), at.to_owned());
    // A strided fucina view comes out as the same logical array.
    let tv = t.permute(&[2, 0, 1]).unwrap();
    assert_eq!(tv.to_ndarray::<f32>().unwrap(), at.to_owned());
    // f64 and integer arrays, and a scalar.
    let b = ArrayD::from_shape_fn(IxDyn(&[2, 3]), |i| i[0] as i64 - i[1] as i64);
    assert_eq!(
        ctx.from_ndarray(&b.view())
            .unwrap()
            .to_ndarray::<i64>()
            .unwrap(),
        b
    );
    let s = ArrayD::from_elem(IxDyn(&[]), 2.5f64);
    let st = ctx.from_ndarray(&s.view()).unwrap();
    assert_eq!(st.rank(), 0);
    assert_eq!(st.to_ndarray::<f64>().unwrap(), s);
    assert!(matches!(
        t.to_ndarray::<f64>(),
        Err(Error::DTypeMismatch { .. })
    ));
    drop((t, tt, tv, st));
}

/// Values exactly representable in f16, bf16, f32 and f64 alike.
fn exact_values() -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.0,
        1.5,
        3.0,
        0.375,
        96.0,
        -256.0,
        1.0 / 1024.0,
    ];
    v.extend([f64::INFINITY, f64::NEG_INFINITY]);
    v.extend((0..64).map(|i| (i as f64 - 32.0) * 0.25));
    v
}

fn bits_of(dtype: DType, t: &fucina_core::RawTensor) -> Vec<u64> {
    fucina_core::dispatch_any!(dtype, T => {
        t.to_vec::<T>().unwrap().iter().map(|v| bytemuck_bits(*v)).collect()
    })
}

/// The raw bits of one element, widened to u64.
fn bytemuck_bits<T: Element>(v: T) -> u64 {
    let mut out = [0u8; 8];
    let bytes = bytemuck::bytes_of(&v);
    out[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(out)
}

#[test]
fn to_dtype_is_exact_where_representable() {
    let ctx = ctx();
    let floats = [DType::F32, DType::F64, DType::F16, DType::BF16];
    let vals = exact_values();
    let n = vals.len();
    for &from in &floats {
        let src = fucina_core::dispatch_any!(from, T => {
            let data: Vec<T> = vals.iter().map(|&v| T::from_f64(v)).collect();
            ctx.from_slice(&data, &[n]).unwrap()
        });
        for &to in &floats {
            let out = ctx.to_dtype(&src, to).unwrap();
            assert_eq!(out.dtype(), to);
            let got: Vec<f64> = fucina_core::dispatch_any!(to, T => {
                out.to_vec::<T>().unwrap().iter().map(|v| v.to_f64()).collect()
            });
            for (g, w) in got.iter().zip(&vals) {
                assert_eq!(g.to_bits(), w.to_bits(), "{from} -> {to}: {w}");
            }
            // And back again, bit for bit.
            let back = ctx.to_dtype(&out, from).unwrap();
            assert_eq!(
                bits_of(from, &back),
                bits_of(from, &src),
                "{from} -> {to} -> {from}"
            );
        }
        // Same dtype: a view, not a copy.
        let same = ctx.to_dtype(&src, from).unwrap();
        assert!(same.buffer().same_as(src.buffer()));
    }
    // NaN survives every conversion as NaN.
    let nan = ctx.from_slice(&[f32::NAN], &[1]).unwrap();
    for &to in &floats {
        let t = ctx.to_dtype(&nan, to).unwrap();
        fucina_core::dispatch_any!(to, T => assert!(t.item::<T>().unwrap().to_f64().is_nan()));
    }
    drop(nan);
}

#[test]
fn to_dtype_rounds_to_nearest_and_reads_views() {
    let ctx = ctx();
    let mut rng = SplitMix64::new(42);
    let data: Vec<f64> = (0..6 * 7).map(|_| rng.next_normal() * 10.0).collect();
    let src = ctx.from_slice(&data, &[6, 7]).unwrap();
    let view = src.transpose(0, 1).unwrap().narrow(0, 2, 4).unwrap(); // [4, 6], strided
    let want: Vec<f64> = (0..4)
        .flat_map(|i| (0..6).map(move |j| (i, j)))
        .map(|(i, j)| data[j * 7 + i + 2])
        .collect();
    let f32s = ctx.to_dtype(&view, DType::F32).unwrap();
    let f16s = ctx.to_dtype(&view, DType::F16).unwrap();
    let bf16s = ctx.to_dtype(&view, DType::BF16).unwrap();
    assert_eq!(f32s.shape(), &[4, 6]);
    for (k, &w) in want.iter().enumerate() {
        // f32: the nearest f32 (Rust's `as` rounds to nearest, ties to even).
        assert_eq!(
            f32s.to_vec::<f32>().unwrap()[k].to_bits(),
            (w as f32).to_bits()
        );
        // f16 / bf16: the result (bit pattern `bits`, read by `val`) is no farther from w
        // than either neighbour.
        let nearest = |what: &str, bits: u16, val: fn(u16) -> f64| {
            let got = val(bits);
            for nb in [bits + 1, bits.wrapping_sub(1)] {
                assert!(
                    (got - w).abs() <= (val(nb) - w).abs(),
                    "{what} of {w}: {got}"
                );
            }
        };
        let h = f16s.to_vec::<f16>().unwrap()[k];
        nearest("f16", h.to_bits(), |b| f16::from_bits(b).to_f64());
        let b = bf16s.to_vec::<bf16>().unwrap()[k];
        nearest("bf16", b.to_bits(), |b| bf16::from_bits(b).to_f64());
    }
    // f32 -> f64 widening is exact.
    let wide = ctx.to_dtype(&f32s, DType::F64).unwrap();
    let f32v = f32s.to_vec::<f32>().unwrap();
    assert_eq!(
        wide.to_vec::<f64>().unwrap(),
        f32v.iter().map(|&v| v as f64).collect::<Vec<_>>()
    );
    drop((src, view, f32s, f16s, bf16s, wide));
}

/// The message of a caught panic.
fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    match p.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => p
            .downcast::<&str>()
            .map(|s| s.to_string())
            .unwrap_or_default(),
    }
}

/// Runs a test body that keeps one pool buffer past its context's end and then runs
/// `rest`; the test must fail: returns its panic message, and the buffer.
fn fail_with_a_buffer_out(rest: impl FnOnce()) -> (String, Option<RawTensor>) {
    let mut kept = None;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = TestCtx::with_threads(1).unwrap();
        kept = Some(ctx.zeros(DType::F32, &[4]).unwrap());
        rest();
    }));
    (panic_message(r.expect_err("the test must fail")), kept)
}

#[test]
fn the_fixture_fails_a_test_that_ends_with_buffers_outstanding() {
    let (msg, kept) = fail_with_a_buffer_out(|| {});
    assert!(msg.contains("1 pool buffer(s) outstanding"), "{msg}");
    drop(kept);
    // An explicit opt-out passes.
    let kept;
    {
        let ctx = TestCtx::with_threads(1).unwrap().allow_outstanding();
        kept = ctx.zeros(DType::F32, &[4]).unwrap();
    }
    drop(kept);
}

#[test]
fn the_fixture_does_not_panic_again_while_a_test_is_failing() {
    // A second panic during unwinding would abort the whole test binary;
    // reaching the assert with the test's own message proves there was none.
    let (msg, kept) = fail_with_a_buffer_out(|| panic!("the test's own failure"));
    assert_eq!(msg, "the test's own failure");
    drop(kept);
}

/// `par_zip_chunks_mut` hands chunk c elements c·len.. of every buffer (of
/// different element types), clips the last, leaves an absent buffer absent,
/// and gives the same result on one thread as on four.
#[test]
fn par_zip_chunks_mut_cuts_every_buffer_alike() {
    let run = |threads: usize, with_c: bool| {
        let ctx = TestCtx::with_threads(threads).unwrap();
        let n = 1000;
        let (mut a, mut b, mut c) = (vec![0u32; n], vec![0.0f64; n], vec![0u8; n]);
        let c_opt = if with_c { Some(&mut c[..]) } else { None };
        ctx.par_zip_chunks_mut(
            (&mut a[..], &mut b[..], c_opt),
            64,
            n.div_ceil(64),
            true,
            |k, (a, b, c)| {
                assert_eq!(a.len(), b.len());
                assert_eq!(a.len(), if k == n / 64 { n % 64 } else { 64 });
                for (i, (x, y)) in a.iter_mut().zip(b.iter_mut()).enumerate() {
                    *x = (k * 64 + i) as u32;
                    *y = k as f64;
                }
                if let Some(c) = c {
                    assert_eq!(c.len(), a.len());
                    c.fill(k as u8);
                }
            },
        );
        (a, b, c)
    };
    let (a, b, c) = run(1, true);
    assert_eq!(a, (0..1000u32).collect::<Vec<_>>());
    assert!(b.iter().enumerate().all(|(i, &v)| v == (i / 64) as f64));
    assert!(c.iter().enumerate().all(|(i, &v)| v == (i / 64) as u8));
    assert_eq!(run(4, true), (a, b, c));
    assert!(run(4, false).2.iter().all(|&v| v == 0));
}
