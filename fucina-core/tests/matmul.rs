//! Tests of the GEMM kernels: fast `gemm`/`matmul`/`linear` against the triple-loop reference at
//! awkward sizes, on transposed, narrowed and broadcast views, batched, with alpha/beta, in f32
//! and f64; bitwise equality across thread counts; structured errors. Every test ends with no
//! pool buffer outstanding.

#[macro_use]
mod common;
use common::{arange_f32, one_and_two_threads, rand_in, sizes};
use fucina_core::kernels::matmul::{reference, GemmPath};
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Error, ExecContext, Float, RawTensor};

/// A contiguous tensor of `shape` with values uniform in [-1, 1) (the γ_K bounds assume it).
fn rand_tensor<T: Float>(ctx: &ExecContext, rng: &mut SplitMix64, shape: &[usize]) -> RawTensor {
    rand_in::<T>(ctx, rng, shape, -1.0, 1.0)
}

/// Asserts |x - y| <= tol for every element (tol from the γ_K bound for inputs in [-1, 1]).
fn assert_close<T: Float>(fast: &RawTensor, refr: &RawTensor, k: usize, scale: f64, what: &str) {
    assert_eq!(fast.shape(), refr.shape(), "{what}: shapes");
    let f = fast.to_vec::<T>().unwrap();
    let r = refr.to_vec::<T>().unwrap();
    let eps = T::EPSILON.to_f64();
    let tol = eps * (k as f64 + 2.0) * (k as f64).max(1.0) * scale + eps;
    for (i, (a, b)) in f.iter().zip(&r).enumerate() {
        let d = (a.to_f64() - b.to_f64()).abs();
        assert!(
            d <= tol,
            "{what}: element {i}: fast {a:?} vs reference {b:?} (|diff| {d:e} > tol {tol:e})"
        );
    }
}

/// A (m, k, n) triple list covering every awkward size on each axis, kept affordable.
fn triples() -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let sz = sizes();
    for (i, &s) in sz.iter().enumerate() {
        let o1 = sz[(i + 4) % sz.len()];
        let o2 = sz[(i + 7) % sz.len()];
        out.push((s, o1, o2));
        out.push((o2, s, o1));
        out.push((o1, o2, s));
    }
    out.push((257, 257, 257));
    out.push((1, 1, 1));
    out
}

fn matmul_vs_reference<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(11);
    for (m, k, n) in triples() {
        let a = rand_tensor::<T>(&ctx, &mut rng, &[m, k]);
        let b = rand_tensor::<T>(&ctx, &mut rng, &[k, n]);
        let fast = ctx.matmul(&a, &b).unwrap();
        let refr = reference::matmul::<T>(&ctx, &a, &b).unwrap();
        assert_close::<T>(&fast, &refr, k, 1.0, &format!("{m}x{k}x{n}"));
    }
}

f32_f64_tests!(matmul_vs_reference => matmul_matches_reference_f32, matmul_matches_reference_f64);

/// Aᵀ·B, A·Bᵀ, Aᵀ·Bᵀ and narrowed (strided, offset) operands, without any copy by the caller.
fn transposed_and_narrowed<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(12);
    // Under valgrind (FUCINA_REDUCED_SIZES) every fourth triple: this test is the slowest there.
    let step = if std::env::var_os("FUCINA_REDUCED_SIZES").is_some() {
        4
    } else {
        2
    };
    for (m, k, n) in triples().into_iter().step_by(step) {
        let at = rand_tensor::<T>(&ctx, &mut rng, &[k, m])
            .transpose(0, 1)
            .unwrap();
        let bt = rand_tensor::<T>(&ctx, &mut rng, &[n, k])
            .transpose(0, 1)
            .unwrap();
        let a = rand_tensor::<T>(&ctx, &mut rng, &[m, k]);
        let b = rand_tensor::<T>(&ctx, &mut rng, &[k, n]);
        // Narrowed: a window inside a larger matrix (row stride > cols, non-zero offset).
        let an = rand_tensor::<T>(&ctx, &mut rng, &[m + 3, k + 5])
            .narrow(0, 2, m)
            .unwrap()
            .narrow(1, 3, k)
            .unwrap();
        // Column-strided: every other column of a wider matrix.
        let bs = rand_tensor::<T>(&ctx, &mut rng, &[k, 2 * n])
            .view_with_strides(&[k, n], &[2 * n, 2], 1)
            .unwrap();
        for (name, x, y) in [
            ("tn", &at, &b),
            ("nt", &a, &bt),
            ("tt", &at, &bt),
            ("narrow-a", &an, &b),
            ("strided-b", &a, &bs),
            ("narrow-a-tb", &an, &bt),
        ] {
            let fast = ctx.matmul(x, y).unwrap();
            let refr = reference::matmul::<T>(&ctx, x, y).unwrap();
            assert_close::<T>(&fast, &refr, k, 1.0, &format!("{name} {m}x{k}x{n}"));
        }
    }
}

f32_f64_tests!(transposed_and_narrowed => transposed_and_narrowed_f32, transposed_and_narrowed_f64);

/// Batched with broadcast batch dims (stride-0 batch) and a rank difference.
fn batched_broadcast<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(13);
    for &(m, k, n) in &[(3, 7, 5), (17, 33, 16), (65, 31, 63), (1, 257, 15)] {
        let a = rand_tensor::<T>(&ctx, &mut rng, &[2, 1, m, k]);
        let b = rand_tensor::<T>(&ctx, &mut rng, &[3, k, n]);
        let fast = ctx.matmul(&a, &b).unwrap();
        assert_eq!(fast.shape(), &[2, 3, m, n]);
        let refr = reference::matmul::<T>(&ctx, &a, &b).unwrap();
        assert_close::<T>(&fast, &refr, k, 1.0, &format!("batched {m}x{k}x{n}"));
        // A 2-D b broadcast across a batched, transposed a (attention-like Qᵀ layouts).
        let a3 = rand_tensor::<T>(&ctx, &mut rng, &[4, k, m])
            .transpose(1, 2)
            .unwrap();
        let b2 = rand_tensor::<T>(&ctx, &mut rng, &[k, n]);
        let fast = ctx.matmul(&a3, &b2).unwrap();
        let refr = reference::matmul::<T>(&ctx, &a3, &b2).unwrap();
        assert_close::<T>(&fast, &refr, k, 1.0, &format!("batched-t {m}x{k}x{n}"));
        // A shared b with a contiguous batched a: the batch folds into M (one larger GEMM).
        let a4 = rand_tensor::<T>(&ctx, &mut rng, &[2, 3, m, k]);
        let b1 = rand_tensor::<T>(&ctx, &mut rng, &[1, k, n]);
        for bb in [&b2, &b1] {
            let fast = ctx.matmul(&a4, bb).unwrap();
            assert_eq!(fast.shape(), &[2, 3, m, n]);
            let refr = reference::matmul::<T>(&ctx, &a4, bb).unwrap();
            assert_close::<T>(&fast, &refr, k, 1.0, &format!("folded {m}x{k}x{n}"));
        }
        // Explicit stride-0 batch on b via broadcast_to.
        let bb = b2.broadcast_to(&[4, k, n]).unwrap();
        let fast2 = ctx.matmul(&a3, &bb).unwrap();
        assert_eq!(
            fast.to_vec::<T>().unwrap(),
            fast2.to_vec::<T>().unwrap(),
            "broadcast_to batch must equal implicit broadcast"
        );
    }
}

f32_f64_tests!(batched_broadcast => batched_broadcast_f32, batched_broadcast_f64);

/// C = alpha·A·B + beta·C into fresh and non-contiguous outputs; beta == 0 ignores NaN in C.
fn alpha_beta<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(14);
    for &(m, k, n) in &[
        (7, 15, 33),
        (65, 17, 31),
        (127, 63, 16),
        (257, 3, 65),
        (16, 0, 7),
    ] {
        let a = rand_tensor::<T>(&ctx, &mut rng, &[m, k]);
        let b = rand_tensor::<T>(&ctx, &mut rng, &[k, n]);
        let c0 = rand_tensor::<T>(&ctx, &mut rng, &[m, n]);
        for &(alpha, beta) in &[(1.0, 0.0), (0.5, 1.0), (-2.0, 0.25), (0.0, 3.0)] {
            let mut fast = ctx.copy(&c0).unwrap();
            let mut refr = ctx.copy(&c0).unwrap();
            ctx.gemm(alpha, &a, &b, beta, &mut fast).unwrap();
            reference::gemm::<T>(alpha, &a, &b, beta, &mut refr).unwrap();
            assert_close::<T>(
                &fast,
                &refr,
                k,
                4.0,
                &format!("a={alpha} b={beta} {m}x{k}x{n}"),
            );
        }
        // beta == 0 must not read C: a NaN-filled C gives finite results.
        let mut nan_c = ctx.full::<T>(&[m, n], T::from_f64(f64::NAN)).unwrap();
        ctx.gemm(1.0, &a, &b, 0.0, &mut nan_c).unwrap();
        assert!(nan_c.to_vec::<T>().unwrap().iter().all(|v| !v.is_nan()));
        // A column-major (transposed) output view of a uniquely owned buffer.
        let mut ct = ctx
            .copy(&c0.transpose(0, 1).unwrap())
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        let mut refr = ctx.copy(&c0).unwrap();
        ctx.gemm(1.5, &a, &b, -1.0, &mut ct).unwrap();
        reference::gemm::<T>(1.5, &a, &b, -1.0, &mut refr).unwrap();
        assert_close::<T>(&ct, &refr, k, 4.0, &format!("col-major C {m}x{k}x{n}"));
    }
}

f32_f64_tests!(alpha_beta => alpha_beta_f32, alpha_beta_f64);

fn linear_vs_reference<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(15);
    for &(rows, k, n) in &[
        (1, 3, 7),
        (64, 2, 64),
        (33, 65, 17),
        (128, 257, 31),
        (7, 16, 257),
    ] {
        let x = rand_tensor::<T>(&ctx, &mut rng, &[2, rows, k]);
        let w = rand_tensor::<T>(&ctx, &mut rng, &[n, k]);
        let bias = rand_tensor::<T>(&ctx, &mut rng, &[n]);
        let fast = ctx.linear(&x, &w, Some(&bias)).unwrap();
        assert_eq!(fast.shape(), &[2, rows, n]);
        let refr = reference::linear::<T>(&ctx, &x, &w, Some(&bias)).unwrap();
        assert_close::<T>(&fast, &refr, k, 2.0, &format!("linear {rows}x{k}x{n}"));
        let fast = ctx.linear(&x, &w, None).unwrap();
        let refr = reference::linear::<T>(&ctx, &x, &w, None).unwrap();
        assert_close::<T>(
            &fast,
            &refr,
            k,
            1.0,
            &format!("linear nobias {rows}x{k}x{n}"),
        );
        // A non-contiguous x (transposed batch/rows) that cannot be flattened as a view.
        let xt = rand_tensor::<T>(&ctx, &mut rng, &[rows, 2, k])
            .transpose(0, 1)
            .unwrap();
        let fast = ctx.linear(&xt, &w, Some(&bias)).unwrap();
        let refr = reference::linear::<T>(&ctx, &xt, &w, Some(&bias)).unwrap();
        assert_close::<T>(&fast, &refr, k, 2.0, &format!("linear xt {rows}x{k}x{n}"));
    }
}

f32_f64_tests!(linear_vs_reference => linear_matches_reference_f32, linear_matches_reference_f64);

#[test]
fn matmul_vectors_like_torch() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let a = arange_f32(&ctx, &[2, 3]);
    let v = ctx.from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let w = ctx.from_slice(&[1.0f32, -1.0], &[2]).unwrap();
    let mv = ctx.matmul(&a, &v).unwrap();
    assert_eq!(mv.shape(), &[2]);
    assert_eq!(mv.to_vec::<f32>().unwrap(), vec![8.0, 26.0]);
    let vm = ctx.matmul(&w, &a).unwrap();
    assert_eq!(vm.shape(), &[3]);
    assert_eq!(vm.to_vec::<f32>().unwrap(), vec![-3.0, -3.0, -3.0]);
    let dot = ctx.matmul(&v, &v).unwrap();
    assert_eq!(dot.shape(), &[] as &[usize]);
    assert_eq!(dot.item::<f32>().unwrap(), 14.0);
    drop((a, v, w, mv, vm, dot));
}

/// Results are bitwise identical on 1 and 2 threads, for shapes large enough to be tiled.
fn thread_determinism<T: Float>() {
    let (c1, c2) = one_and_two_threads();
    let c3 = TestCtx::with_threads(3).unwrap();
    let mut rng = SplitMix64::new(16);
    for &(batch, m, k, n) in &[
        (1usize, 300usize, 257usize, 520usize),
        (1, 64, 1000, 2049),
        (1, 1023, 129, 257),
        (3, 129, 300, 65),
    ] {
        let av: Vec<T> = rng
            .vec_uniform(batch * m * k, -1.0, 1.0)
            .into_iter()
            .map(T::from_f64)
            .collect();
        let bv: Vec<T> = rng
            .vec_uniform(k * n, -1.0, 1.0)
            .into_iter()
            .map(T::from_f64)
            .collect();
        let bias: Vec<T> = rng
            .vec_uniform(n, -1.0, 1.0)
            .into_iter()
            .map(T::from_f64)
            .collect();
        let mut outs = Vec::new();
        for ctx in [&c1, &c2, &c3] {
            let a = ctx.from_slice(&av, &[batch, m, k]).unwrap();
            let b = ctx.from_slice(&bv, &[k, n]).unwrap();
            let bt = ctx.from_slice(&bv, &[n, k]).unwrap();
            let bb = ctx.from_slice(&bias, &[n]).unwrap();
            let mm = ctx.matmul(&a, &b).unwrap().to_vec::<T>().unwrap();
            let lin = ctx
                .linear(&a, &bt, Some(&bb))
                .unwrap()
                .to_vec::<T>()
                .unwrap();
            let mut c = ctx.ones(T::DTYPE, &[batch, m, n]).unwrap();
            ctx.gemm(0.75, &a, &b, -0.5, &mut c).unwrap();
            outs.push((mm, lin, c.to_vec::<T>().unwrap()));
        }
        let bits = |v: &Vec<T>| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<u64>>();
        for (t, other) in outs.iter().enumerate().skip(1) {
            for (which, x, y) in [
                ("matmul", &outs[0].0, &other.0),
                ("linear", &outs[0].1, &other.1),
                ("gemm", &outs[0].2, &other.2),
            ] {
                assert!(
                    bits(x) == bits(y),
                    "{which} {batch}x{m}x{k}x{n}: 1-thread and {}-thread results differ",
                    t + 1
                );
            }
        }
    }
    for ctx in [&c1, &c2, &c3] {
        assert_eq!(ctx.stats().outstanding, 0);
    }
}

f32_f64_tests!(thread_determinism => bitwise_equal_across_threads_f32, bitwise_equal_across_threads_f64);

/// Shapes spanning several K steps and column blocks of the packed path, on transposed views,
/// with alpha and beta, against the reference.
fn large_blocks<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(23);
    let shapes: &[(usize, usize, usize)] = if std::env::var_os("FUCINA_REDUCED_SIZES").is_some() {
        // Still two K steps, two column blocks and two row blocks, at sizes valgrind runs quickly.
        &[(7, 300, 40), (13, 20, 530), (100, 10, 20)]
    } else {
        &[(70, 600, 1100), (13, 1030, 40), (600, 20, 530)]
    };
    for &(m, k, n) in shapes {
        let a = rand_tensor::<T>(&ctx, &mut rng, &[k, m]);
        let b = rand_tensor::<T>(&ctx, &mut rng, &[n, k]);
        let c0 = rand_tensor::<T>(&ctx, &mut rng, &[m, n]);
        let (at, bt) = (a.transpose(0, 1).unwrap(), b.transpose(0, 1).unwrap());
        let mut fast = ctx.copy(&c0).unwrap();
        ctx.gemm(0.5, &at, &bt, 1.5, &mut fast).unwrap();
        let mut refr = ctx.copy(&c0).unwrap();
        reference::gemm::<T>(0.5, &at, &bt, 1.5, &mut refr).unwrap();
        assert_close::<T>(&fast, &refr, k, 2.0, &format!("aᵀbᵀ {m}x{k}x{n}"));
        let fast = ctx.matmul(&ctx.copy(&at).unwrap(), &bt).unwrap();
        let refr = reference::matmul::<T>(&ctx, &at, &bt).unwrap();
        assert_close::<T>(&fast, &refr, k, 1.0, &format!("a·bᵀ {m}x{k}x{n}"));
    }
}

f32_f64_tests!(large_blocks => large_blocks_match_reference_f32, large_blocks_match_reference_f64);

/// Runs this test binary again with `FUCINA_GEMM` forcing each GEMM path this CPU has, so
/// every one stays tested whichever one this CPU picks by default.
#[test]
fn every_gemm_path_passes_this_suite() {
    if std::env::var_os("FUCINA_GEMM").is_some() {
        return;
    }
    for path in GemmPath::ALL.into_iter().filter(|p| p.available()) {
        let path = path.env_name();
        let exe = std::env::current_exe().expect("test binary path");
        let out = std::process::Command::new(exe)
            .args([
                "--skip",
                "every_gemm_path_passes_this_suite",
                "--test-threads=2",
            ])
            .env("FUCINA_GEMM", path)
            .output()
            .expect("spawn the test binary");
        assert!(
            out.status.success(),
            "FUCINA_GEMM={path}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn errors_are_structured() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let a = ctx.zeros(DType::F32, &[3, 4]).unwrap();
    let b = ctx.zeros(DType::F32, &[5, 6]).unwrap();
    match ctx.matmul(&a, &b) {
        Err(Error::ShapeMismatch { op, lhs, rhs }) => {
            assert_eq!(op, "matmul");
            assert_eq!(lhs, vec![3, 4]);
            assert_eq!(rhs, vec![5, 6]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    let bd = ctx.zeros(DType::F64, &[4, 6]).unwrap();
    assert!(matches!(
        ctx.matmul(&a, &bd),
        Err(Error::DTypeMismatch { op: "matmul", .. })
    ));
    let ai = ctx.zeros(DType::I32, &[3, 4]).unwrap();
    let bi = ctx.zeros(DType::I32, &[4, 2]).unwrap();
    assert!(matches!(
        ctx.matmul(&ai, &bi),
        Err(Error::UnsupportedDType { op: "matmul", .. })
    ));
    let s = ctx.scalar(1.0f32).unwrap();
    assert!(matches!(
        ctx.matmul(&s, &a),
        Err(Error::InvalidArgument { op: "matmul", .. })
    ));
    // Batch dims that do not broadcast.
    let ab = ctx.zeros(DType::F32, &[2, 3, 4]).unwrap();
    let bb = ctx.zeros(DType::F32, &[3, 4, 2]).unwrap();
    assert!(matches!(
        ctx.matmul(&ab, &bb),
        Err(Error::Broadcast { op: "matmul", .. })
    ));
    // gemm: wrong C shape, shared C, overlapping C, 1-D operand.
    let b2 = ctx.zeros(DType::F32, &[4, 2]).unwrap();
    let mut c_bad = ctx.zeros(DType::F32, &[3, 3]).unwrap();
    assert!(matches!(
        ctx.gemm(1.0, &a, &b2, 0.0, &mut c_bad),
        Err(Error::ShapeMismatch { op: "gemm", .. })
    ));
    let c_owner = ctx.zeros(DType::F32, &[3, 2]).unwrap();
    let mut c_shared = c_owner.clone_view();
    assert!(matches!(
        ctx.gemm(1.0, &a, &b2, 0.0, &mut c_shared),
        Err(Error::SharedBuffer { .. })
    ));
    let mut c_overlap = ctx
        .zeros(DType::F32, &[2])
        .unwrap()
        .view_with_strides(&[3, 2], &[0, 1], 0)
        .unwrap();
    assert!(matches!(
        ctx.gemm(1.0, &a, &b2, 0.0, &mut c_overlap),
        Err(Error::InvalidArgument { op: "gemm", .. })
    ));
    let v = ctx.zeros(DType::F32, &[4]).unwrap();
    let mut c2 = ctx.zeros(DType::F32, &[3, 2]).unwrap();
    assert!(matches!(
        ctx.gemm(1.0, &v, &b2, 0.0, &mut c2),
        Err(Error::InvalidArgument { op: "gemm", .. })
    ));
    // linear: wrong K, wrong bias shape, wrong w rank.
    let w = ctx.zeros(DType::F32, &[5, 3]).unwrap();
    assert!(matches!(
        ctx.linear(&a, &w, None),
        Err(Error::ShapeMismatch { op: "linear", .. })
    ));
    let w4 = ctx.zeros(DType::F32, &[5, 4]).unwrap();
    let bias = ctx.zeros(DType::F32, &[4]).unwrap();
    assert!(matches!(
        ctx.linear(&a, &w4, Some(&bias)),
        Err(Error::ShapeMismatch { op: "linear", .. })
    ));
    assert!(matches!(
        ctx.linear(&a, &v, None),
        Err(Error::InvalidArgument { op: "linear", .. })
    ));
    drop((
        a, b, bd, ai, bi, s, ab, bb, b2, c_bad, c_owner, c_shared, c_overlap, v, c2, w, w4, bias,
    ));
}

#[test]
fn empty_dimensions() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let a = ctx.zeros(DType::F32, &[0, 4]).unwrap();
    let b = ctx.ones(DType::F32, &[4, 3]).unwrap();
    assert_eq!(ctx.matmul(&a, &b).unwrap().shape(), &[0, 3]);
    // K == 0: the product is all zeros.
    let a0 = ctx.zeros(DType::F64, &[3, 0]).unwrap();
    let b0 = ctx.zeros(DType::F64, &[0, 2]).unwrap();
    let z = ctx.matmul(&a0, &b0).unwrap();
    assert_eq!(z.to_vec::<f64>().unwrap(), vec![0.0; 6]);
    drop((a, b, a0, b0, z));
}
