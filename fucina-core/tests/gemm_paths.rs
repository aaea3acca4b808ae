//! Tests of the packed GEMM's kernels side by side (`kernels::matmul::gemm_on`): every packed
//! path this CPU has (AVX-512F and/or AVX2) against the scalar reference GEMM, and **bitwise**
//! against each other and across 1 and 2 threads, over awkward shapes (m, n, k in 1..=40,
//! K over several `KC` steps, partial tiles, problems large enough to split over threads),
//! strided, narrowed and transposed A, B and C, beta 0 / 1 / other, with and without a bias,
//! in f32 and f64. The AVX-512 kernel gives the AVX2 kernel's bits because both are one
//! template (one FMA chain per element per K step, ascending K, the same epilogue).
//!
//! The AVX-512 comparisons run only where the CPU has AVX-512F; elsewhere the tests say so on
//! stderr (`skip: …`) and still check the AVX2 kernel against the reference and across threads.
//! Every test context ends with no pool buffer outstanding.

#[macro_use]
mod common;
use common::gemm::{operand, Case, BETAS};
use common::{bits, one_and_two_threads};
use fucina_core::kernels::matmul::{gemm_on, gemm_path, reference, GemmPath};
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{Error, Float, RawTensor};

/// The packed paths this CPU runs; prints the skip line when AVX-512F is missing.
fn packed_paths(test: &str) -> Vec<GemmPath> {
    if !GemmPath::PackedAvx512.available() {
        eprintln!(
            "skip: {test}: AVX-512 kernel vs reference and vs AVX2 not run: no AVX-512F on this CPU"
        );
    }
    if !GemmPath::PackedAvx2.available() {
        eprintln!("skip: {test}: AVX2 kernel not run: no AVX2/FMA on this CPU");
    }
    [GemmPath::PackedAvx512, GemmPath::PackedAvx2]
        .into_iter()
        .filter(|p| p.available())
        .collect()
}

fn rand_vec<T: Float>(rng: &mut SplitMix64, n: usize) -> Vec<T> {
    rng.vec_uniform(n, -1.0, 1.0)
        .into_iter()
        .map(T::from_f64)
        .collect()
}

/// Runs `case` on every path in `paths` on every context in `ctxs`: each result must be within
/// the reference's error bound, and all of them bitwise equal.
fn check<T: Float>(ctxs: &[&TestCtx], paths: &[GemmPath], case: Case, seed: u64) {
    let Case { m, n, k, .. } = case;
    let mut rng = SplitMix64::new(seed);
    let av = rand_vec::<T>(&mut rng, m * k);
    let bv = rand_vec::<T>(&mut rng, k * n);
    let cv = rand_vec::<T>(&mut rng, m * n);
    let biasv = rand_vec::<T>(&mut rng, n);
    // The reference: the triple loop, then the bias as a separate pass.
    let want = {
        let ctx = ctxs[0];
        let a = operand(ctx, &av, (m, k), case.a_layout, |l| rand_vec(&mut rng, l));
        let b = operand(ctx, &bv, (k, n), case.b_layout, |l| rand_vec(&mut rng, l));
        let mut c = operand(ctx, &cv, (m, n), case.c_layout, |_| unreachable!());
        reference::gemm::<T>(case.alpha, &a, &b, case.beta, &mut c).unwrap();
        let mut out = c.to_vec::<T>().unwrap();
        if case.bias {
            for (i, x) in out.iter_mut().enumerate() {
                *x += biasv[i % n];
            }
        }
        out
    };
    let eps = T::EPSILON.to_f64();
    let tol = eps * ((k as f64 + 2.0) * k as f64 * 2.0 + 4.0);
    let mut first: Option<(String, Vec<T>)> = None;
    for ctx in ctxs {
        for &path in paths {
            let a = operand(ctx, &av, (m, k), case.a_layout, |l| rand_vec(&mut rng, l));
            let b = operand(ctx, &bv, (k, n), case.b_layout, |l| rand_vec(&mut rng, l));
            let mut c = operand(ctx, &cv, (m, n), case.c_layout, |_| unreachable!());
            let bias = ctx.from_slice(&biasv, &[n]).unwrap();
            let bias = case.bias.then_some(&bias);
            gemm_on(ctx, path, case.alpha, &a, &b, case.beta, &mut c, bias).unwrap();
            let got = c.to_vec::<T>().unwrap();
            let what = format!("{path:?} on {} threads, {case:?}", ctx.num_threads());
            for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                let d = (x.to_f64() - y.to_f64()).abs();
                assert!(
                    d <= tol,
                    "{what}: element {i}: {x:?} vs reference {y:?} (|diff| {d:e} > {tol:e})"
                );
            }
            match &first {
                None => first = Some((what, got)),
                Some((w0, g0)) => {
                    assert!(bits(g0) == bits(&got), "{what} differs bitwise from {w0}")
                }
            }
        }
    }
}

/// The small-shape sweep: every (m, n) in 1..=40 squared, with k cycling through 1..=40 and
/// the layouts, beta and bias cycling independently; then every k in 1..=40 at a few (m, n).
fn small_cases() -> Vec<Case> {
    let mut out = Vec::new();
    let mut idx = 0usize;
    let mut push = |m: usize, n: usize, k: usize| {
        let layouts = [idx % 4, (idx / 4) % 4, (idx / 3) % 2];
        let alpha = if idx.is_multiple_of(5) { 0.5 } else { 1.0 };
        out.push(Case::new(
            (m, n, k),
            layouts,
            alpha,
            BETAS[idx % 3],
            idx % 7 < 3,
        ));
        idx += 1;
    };
    for m in 1..=40 {
        for n in 1..=40 {
            push(m, n, (m * 7 + n * 3) % 40 + 1);
        }
    }
    for k in 1..=40 {
        for &(m, n) in &[(6, 32), (7, 33), (12, 16), (5, 31)] {
            push(m, n, k);
        }
    }
    out
}

/// K over one and several `KC` (256) steps, full and partial tiles of either width, and
/// problems large enough that 2 threads split them (by rows and by columns).
fn large_cases() -> Vec<Case> {
    let shapes = [
        (6, 32, 256),
        (12, 64, 257),
        (13, 37, 513),
        (7, 70, 300),
        (1, 1, 600),
        (40, 1, 520),
        (1, 45, 700),
        (200, 300, 300),
        (64, 1100, 260),
        (530, 40, 270),
    ];
    let mut out = Vec::new();
    for (idx, &(m, n, k)) in shapes.iter().enumerate() {
        for layouts in 0..4 {
            let (l, r) = (layouts, layouts + idx);
            let alpha = if l == 3 { 0.5 } else { 1.0 };
            out.push(Case::new(
                (m, n, k),
                [l, r % 4, r % 2],
                alpha,
                BETAS[r % 3],
                r % 2 == 0,
            ));
        }
    }
    out
}

fn sweep<T: Float>(test: &str, cases: Vec<Case>) {
    let (c1, c2) = one_and_two_threads();
    let paths = packed_paths(test);
    for (i, case) in cases.into_iter().enumerate() {
        check::<T>(&[&c1, &c2], &paths, case, 1000 + i as u64);
    }
    assert_eq!(c1.stats().outstanding, 0);
    assert_eq!(c2.stats().outstanding, 0);
}

f32_f64_tests!(sweep(named small_cases()) => packed_kernels_small_shapes_f32, packed_kernels_small_shapes_f64);
f32_f64_tests!(sweep(named large_cases()) => packed_kernels_large_shapes_f32, packed_kernels_large_shapes_f64);

/// A one-row product over a K-contiguous B (a decoder step's `x·Wᵀ`: the packed driver's
/// unpacked row path, `gemv.rs`) gives bitwise the row the packed kernels compute when the
/// same row is one of several: columns in and past the eight-wide groups, K within one and
/// over several `KC` steps with tails, strided A, a column-major C row, every beta, a bias.
#[test]
fn one_row_over_kcontiguous_b_matches_the_packed_rows_bitwise() {
    let (c1, c2) = one_and_two_threads();
    let paths = packed_paths("one_row_over_kcontiguous_b_matches_the_packed_rows_bitwise");
    let mut rng = SplitMix64::new(77);
    let mut idx = 0usize;
    for &k in &[1usize, 7, 8, 9, 64, 255, 256, 257, 520, 700] {
        for &n in &[1usize, 5, 8, 9, 31, 32, 33, 40, 100, 300] {
            let beta = BETAS[idx % 3];
            let alpha = if idx.is_multiple_of(4) { 0.5 } else { 1.0 };
            let with_bias = idx % 3 != 1;
            idx += 1;
            let xv = rand_vec::<f32>(&mut rng, k);
            let wv = rand_vec::<f32>(&mut rng, n * k);
            let cv = rand_vec::<f32>(&mut rng, n);
            let biasv = rand_vec::<f32>(&mut rng, n);
            for ctx in [&c1, &c2] {
                for &path in &paths {
                    // B = Wᵀ: column j of B is row j of W, K-contiguous.
                    let b = ctx
                        .from_slice(&wv, &[n, k])
                        .unwrap()
                        .transpose(0, 1)
                        .unwrap();
                    let bias = ctx.from_slice(&biasv, &[n]).unwrap();
                    let bias = with_bias.then_some(&bias);
                    // One row (A every other element of a wider row: strided; C a column).
                    let a1 = operand(ctx, &xv, (1, k), 3, |l| rand_vec(&mut rng, l));
                    let mut c1row = operand(ctx, &cv, (1, n), 1, |_| unreachable!());
                    gemm_on(ctx, path, alpha, &a1, &b, beta, &mut c1row, bias).unwrap();
                    // The same row twice: the packed kernels' rows.
                    let x2: Vec<f32> = xv.iter().chain(&xv).copied().collect();
                    let c2v: Vec<f32> = cv.iter().chain(&cv).copied().collect();
                    let a2 = ctx.from_slice(&x2, &[2, k]).unwrap();
                    let mut c2rows = ctx.from_slice(&c2v, &[2, n]).unwrap();
                    gemm_on(ctx, path, alpha, &a2, &b, beta, &mut c2rows, bias).unwrap();
                    let (got, want) = (
                        c1row.to_vec::<f32>().unwrap(),
                        c2rows.to_vec::<f32>().unwrap(),
                    );
                    for r in 0..2 {
                        assert!(
                            bits(&got) == bits(&want[r * n..][..n]),
                            "{path:?}, {} threads, k {k}, n {n}, beta {beta}, alpha {alpha}, bias {with_bias}: row {r}",
                            ctx.num_threads()
                        );
                    }
                }
            }
        }
    }
    assert_eq!(c1.stats().outstanding, 0);
    assert_eq!(c2.stats().outstanding, 0);
}

/// The process's default path is the widest packed kernel the CPU has (unless `FUCINA_GEMM`
/// forces one), and every path reports itself under the name that forces it.
#[test]
fn default_path_is_the_widest_available() {
    let names: Vec<&str> = GemmPath::ALL.iter().map(|p| p.env_name()).collect();
    assert_eq!(names, ["avx512", "avx2", "tiled"]);
    assert!(GemmPath::Tiled.available());
    if std::env::var_os("FUCINA_GEMM").is_none() {
        let widest = GemmPath::ALL.into_iter().find(|p| p.available()).unwrap();
        assert_eq!(gemm_path(), widest);
    }
}

/// A path this CPU lacks is a structured error, not a crash; a bad bias is rejected.
#[test]
fn gemm_on_errors_are_structured() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let a = ctx.from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    for path in GemmPath::ALL {
        let mut c = ctx.from_slice(&[0.0f32; 4], &[2, 2]).unwrap();
        let r = gemm_on(&ctx, path, 1.0, &a, &a, 0.0, &mut c, None);
        if path.available() {
            r.unwrap();
            assert_eq!(c.to_vec::<f32>().unwrap(), vec![7.0, 10.0, 15.0, 22.0]);
        } else {
            eprintln!("skip: gemm_on_errors_are_structured: {path:?} not run: this CPU lacks it");
            assert!(
                matches!(r, Err(Error::InvalidArgument { op: "gemm_on", .. })),
                "{path:?}: {r:?}"
            );
        }
    }
    let bad_shape = ctx.from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let mut c = ctx.from_slice(&[0.0f32; 4], &[2, 2]).unwrap();
    // The tiled path with a bias that does not fit.
    let mut with_bias =
        |bias: &RawTensor| gemm_on(&ctx, GemmPath::Tiled, 1.0, &a, &a, 0.0, &mut c, Some(bias));
    let r = with_bias(&bad_shape);
    assert!(
        matches!(r, Err(Error::ShapeMismatch { op: "gemm_on", .. })),
        "{r:?}"
    );
    let bad_dtype = ctx.from_slice(&[1.0f64, 2.0], &[2]).unwrap();
    let r = with_bias(&bad_dtype);
    assert!(
        matches!(r, Err(Error::DTypeMismatch { op: "gemm_on", .. })),
        "{r:?}"
    );
    drop((a, c, bad_shape, bad_dtype));
    assert_eq!(ctx.stats().outstanding, 0);
}
