//! Tests of the mixed-dtype GEMM: a bf16 or f16 B (the weight) with f32/f64 A and C, widened
//! inside B's packing. Because widening is exact, the result must be **bitwise** the GEMM of
//! the fully widened B: checked on every `GemmPath` this CPU has (`gemm_on`; a `skip:` line
//! on stderr for a path it lacks), over ragged shapes, K over several packing steps, tiles
//! of the tiled path split into several widened column panels, transposed, narrowed and column-strided A and B, column-major C,
//! alpha/beta and bias, on 1 and 2 threads; and through `linear`, `matmul` and `gemm`. Every
//! other mixed combination is a `DTypeMismatch`. Every context ends with no buffer
//! outstanding.

mod common;
use common::gemm::{operand, Case, BETAS};
use common::one_and_two_threads;
use fucina_core::kernels::matmul::{gemm_on, GemmPath};
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Element, Error, ExecContext, RawTensor};
use half::{bf16, f16};

/// The paths this CPU runs; prints a skip line for each one it lacks.
fn paths(test: &str) -> Vec<GemmPath> {
    GemmPath::ALL
        .into_iter()
        .filter(|p| {
            if !p.available() {
                eprintln!("skip: {test}: {p:?} not run: this CPU lacks its features");
            }
            p.available()
        })
        .collect()
}

/// Values in [-1, 1] that `S` represents exactly (so the `S` and the widened tensors hold
/// the same numbers).
fn values<S: Element>(rng: &mut SplitMix64, n: usize) -> Vec<f64> {
    rng.vec_uniform(n, -1.0, 1.0)
        .into_iter()
        .map(|x| S::from_f64(x).to_f64())
        .collect()
}

/// An `r × c` operand of element type `T` holding `v` (row-major), laid out as `layout`
/// ([`operand`]); the filler outside the view cycles through `fill` (any numbers).
fn operand_of<T: Element>(
    ctx: &ExecContext,
    v: &[f64],
    fill: &[f64],
    shape: (usize, usize),
    layout: usize,
) -> RawTensor {
    let conv = |x: &[f64]| x.iter().map(|&y| T::from_f64(y)).collect::<Vec<T>>();
    operand(ctx, &conv(v), shape, layout, |len| {
        (0..len)
            .map(|i| T::from_f64(fill[i % fill.len()]))
            .collect()
    })
}

/// Runs `case` with A and C of `T`, B of `S` and, separately, with B widened to `T` in full
/// (same values, same layout), on `path` and `ctx`: the two C must be bitwise equal.
fn check<T: Element, S: Element>(ctx: &ExecContext, path: GemmPath, case: Case, seed: u64) {
    let Case { m, n, k, .. } = case;
    let mut rng = SplitMix64::new(seed);
    let av = values::<T>(&mut rng, m * k);
    let bv = values::<S>(&mut rng, k * n);
    let cv = values::<T>(&mut rng, m * n);
    let fill = values::<S>(&mut rng, 13);
    let biasv = values::<T>(&mut rng, n);
    let run = |b: &RawTensor| -> Vec<u64> {
        let a = operand_of::<T>(ctx, &av, &fill, (m, k), case.a_layout);
        let mut c = operand_of::<T>(ctx, &cv, &fill, (m, n), case.c_layout);
        let bias = ctx
            .from_slice(
                &biasv.iter().map(|&x| T::from_f64(x)).collect::<Vec<T>>(),
                &[n],
            )
            .unwrap();
        gemm_on(
            ctx,
            path,
            case.alpha,
            &a,
            b,
            case.beta,
            &mut c,
            case.bias.then_some(&bias),
        )
        .unwrap();
        c.to_vec::<T>()
            .unwrap()
            .iter()
            .map(|x| x.to_f64().to_bits())
            .collect()
    };
    let b_low = operand_of::<S>(ctx, &bv, &fill, (k, n), case.b_layout);
    let b_wide = operand_of::<T>(ctx, &bv, &fill, (k, n), case.b_layout);
    assert_eq!(b_low.dtype(), S::DTYPE);
    let got = run(&b_low);
    let want = run(&b_wide);
    assert!(
        got == want,
        "{path:?} on {} threads, {case:?}, B {}: differs bitwise from the widened B",
        ctx.num_threads(),
        S::DTYPE
    );
}

/// Ragged and blocked shapes with the layouts, alpha/beta and bias cycling.
fn cases() -> Vec<Case> {
    let shapes = [
        (1, 1, 1),
        (1, 7, 5),
        (3, 17, 33),
        (7, 31, 16),
        (13, 65, 63),
        (6, 16, 257),
        (33, 40, 300),
        (2, 1, 520),
        // Large enough to split over 2 threads, K over 3 packing steps, columns over one
        // `NC` block, and over two widened column panels on the tiled path.
        (70, 600, 700),
        (130, 97, 1030),
        // One tiled tile wider than a widened panel (384 + 316 columns at K = 600), and
        // tiles of 240 columns cut into 128-column panels at K = 2000.
        (2, 700, 600),
        (3, 450, 2000),
    ];
    let mut out = Vec::new();
    for (i, &(m, n, k)) in shapes.iter().enumerate() {
        for j in 0..4 {
            let idx = i * 4 + j;
            let alpha = if idx % 5 == 0 { 0.5 } else { 1.0 };
            let layouts = [idx % 4, j, (idx / 3) % 2];
            out.push(Case::new(
                (m, n, k),
                layouts,
                alpha,
                BETAS[idx % 3],
                idx % 7 < 3,
            ));
        }
    }
    out
}

fn sweep<T: Element, S: Element>(test: &str) {
    let (c1, c2) = one_and_two_threads();
    for path in paths(test) {
        for (i, case) in cases().into_iter().enumerate() {
            for ctx in [&c1, &c2] {
                check::<T, S>(ctx, path, case, 100 + i as u64);
            }
        }
    }
}

#[test]
fn bf16_b_is_bitwise_the_widened_gemm_f32() {
    sweep::<f32, bf16>("bf16_b_is_bitwise_the_widened_gemm_f32");
}

#[test]
fn f16_b_is_bitwise_the_widened_gemm_f32() {
    sweep::<f32, f16>("f16_b_is_bitwise_the_widened_gemm_f32");
}

#[test]
fn bf16_b_is_bitwise_the_widened_gemm_f64() {
    sweep::<f64, bf16>("bf16_b_is_bitwise_the_widened_gemm_f64");
}

/// `linear` (`w [N, K]` read transposed, with and without bias, x of rank 3), `matmul` (the
/// input-gradient shape `dy·W`, W as is, and a transposed W view; a batched A over a shared
/// B) and `gemm` accept a bf16 B and give the bits of the widened one, on 1 and 2 threads.
#[test]
fn linear_matmul_and_gemm_accept_a_bf16_weight() {
    for threads in [1, 2] {
        let ctx = TestCtx::with_threads(threads).unwrap();
        let mut rng = SplitMix64::new(7);
        let (b, t, k, n) = (3, 11, 300, 97);
        let xv: Vec<f32> = values::<f32>(&mut rng, b * t * k)
            .iter()
            .map(|&x| x as f32)
            .collect();
        let wv: Vec<bf16> = values::<bf16>(&mut rng, n * k)
            .iter()
            .map(|&x| bf16::from_f64(x))
            .collect();
        let bias: Vec<f32> = values::<f32>(&mut rng, n)
            .iter()
            .map(|&x| x as f32)
            .collect();
        let x = ctx.from_slice(&xv, &[b, t, k]).unwrap();
        let w16 = ctx.from_slice(&wv, &[n, k]).unwrap();
        let w32 = ctx.to_dtype(&w16, DType::F32).unwrap();
        let bias = ctx.from_slice(&bias, &[n]).unwrap();
        let bits = |r: RawTensor| -> Vec<u32> {
            assert_eq!(r.dtype(), DType::F32);
            r.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        for bias in [None, Some(&bias)] {
            let got = bits(ctx.linear(&x, &w16, bias).unwrap());
            let want = bits(ctx.linear(&x, &w32, bias).unwrap());
            assert!(got == want, "linear, bias {}", bias.is_some());
        }
        // dx = dy·W: dy [B, T, N] @ W [N, K].
        let dy: Vec<f32> = values::<f32>(&mut rng, b * t * n)
            .iter()
            .map(|&x| x as f32)
            .collect();
        let dy = ctx.from_slice(&dy, &[b, t, n]).unwrap();
        assert!(bits(ctx.matmul(&dy, &w16).unwrap()) == bits(ctx.matmul(&dy, &w32).unwrap()));
        // x @ Wᵀ as a transposed view.
        let (w16t, w32t) = (w16.transpose(0, 1).unwrap(), w32.transpose(0, 1).unwrap());
        assert!(bits(ctx.matmul(&x, &w16t).unwrap()) == bits(ctx.matmul(&x, &w32t).unwrap()));
        // gemm with beta into an existing C.
        let x2 = ctx.reshape(&x, &[b * t, k]).unwrap();
        let mut c16 = ctx.ones(DType::F32, &[b * t, n]).unwrap();
        let mut c32 = ctx.ones(DType::F32, &[b * t, n]).unwrap();
        ctx.gemm(0.5, &x2, &w16t, 2.0, &mut c16).unwrap();
        ctx.gemm(0.5, &x2, &w32t, 2.0, &mut c32).unwrap();
        assert!(bits(c16) == bits(c32));
    }
}

/// The only mixed combination is a bf16/f16 B with f32/f64 A and C: anything else is a
/// `DTypeMismatch` naming the op (a bf16 A, an f32 B with an f64 A, an integer B, a bf16
/// bias, a C of another dtype); bf16 for every operand stays `UnsupportedDType`.
#[test]
fn other_mixed_dtypes_are_structured_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x32 = ctx.ones(DType::F32, &[2, 3]).unwrap();
    let x64 = ctx.ones(DType::F64, &[2, 3]).unwrap();
    let x16 = ctx.ones(DType::BF16, &[2, 3]).unwrap();
    let w32 = ctx.ones(DType::F32, &[4, 3]).unwrap();
    let w16 = ctx.ones(DType::BF16, &[4, 3]).unwrap();
    let wi = ctx.zeros(DType::I32, &[4, 3]).unwrap();
    let b16 = ctx.ones(DType::BF16, &[4]).unwrap();
    let mismatch = |r: fucina_core::Result<RawTensor>, what: &str, want_op: &str| match r {
        Err(Error::DTypeMismatch { op, .. }) => assert_eq!(op, want_op, "{what}"),
        other => panic!("{what}: expected DTypeMismatch, got {other:?}"),
    };
    mismatch(ctx.linear(&x16, &w32, None), "bf16 x, f32 w", "linear");
    mismatch(ctx.linear(&x64, &w32, None), "f64 x, f32 w", "linear");
    mismatch(ctx.linear(&x32, &wi, None), "f32 x, i32 w", "linear");
    mismatch(ctx.linear(&x32, &w16, Some(&b16)), "bf16 bias", "linear");
    let w16t = w16.transpose(0, 1).unwrap();
    mismatch(
        ctx.matmul(&x16, &w32.transpose(0, 1).unwrap()),
        "bf16 a",
        "matmul",
    );
    mismatch(
        ctx.matmul(&x32, &wi.transpose(0, 1).unwrap()),
        "i32 b",
        "matmul",
    );
    let mut c64 = ctx.zeros(DType::F64, &[2, 4]).unwrap();
    assert!(matches!(
        ctx.gemm(1.0, &x32, &w16t, 0.0, &mut c64),
        Err(Error::DTypeMismatch { op: "gemm", .. })
    ));
    assert!(matches!(
        ctx.linear(&x16, &w16, None),
        Err(Error::UnsupportedDType { op: "linear", .. })
    ));
}
