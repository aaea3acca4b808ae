//! NaN in, NaN out in the streaming attention kernels, forward and backward, f32 and f64,
//! with grouped k/v heads: a NaN in a query row, a NaN in a key, a NaN scale. The rows a
//! NaN reaches are NaN (they used to come out 0: the online softmax's max skips NaN, so an
//! all-NaN row looked fully masked); every row and gradient it cannot reach is bitwise the
//! NaN-free run's; fully masked rows stay exactly 0 (even with a NaN scale); the reference
//! has the same NaN rows; and the bits are the same on 1 and 2 threads.

#[macro_use]
mod common;
use fucina_core::kernels::fused::attention::reference::{self, AttnDims, RefMask};
use fucina_core::kernels::fused::attention::AttentionOpts;
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Element, ExecContext, Float, RawTensor};

/// Query heads, k/v heads (grouped: query head h reads k/v head h / 2), query rows (two
/// query blocks), keys (two key blocks), head dim.
const B: usize = 1;
const H: usize = 4;
const HKV: usize = 2;
const T: usize = 70;
const S: usize = 77;
const D: usize = 8;

/// Everything one forward and backward gives, as f64 (NaN stays NaN).
#[derive(Debug)]
struct Run {
    out: Vec<f64>,
    lse: Vec<f64>,
    gq: Vec<f64>,
    gk: Vec<f64>,
    gv: Vec<f64>,
    /// The same, as bits of the native type (for the thread-count comparison).
    bits: Vec<u64>,
}

struct Inputs<T> {
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    g: Vec<T>,
    keep: Option<Vec<u8>>,
    opts: AttentionOpts,
}

fn inputs<T: Element>(seed: u64, causal: bool) -> Inputs<T> {
    let mut rng = SplitMix64::new(seed);
    let mut draw = |n: usize| -> Vec<T> {
        rng.vec_uniform(n, -1.5, 1.5)
            .into_iter()
            .map(T::from_f64)
            .collect()
    };
    Inputs {
        q: draw(B * H * T * D),
        k: draw(B * HKV * S * D),
        v: draw(B * HKV * S * D),
        g: draw(B * H * T * D),
        keep: None,
        opts: AttentionOpts {
            causal,
            scale: None,
        },
    }
}

/// `t`'s elements (f32 or f64), each mapped by `f32` or `f64`.
fn per_element<R>(t: &RawTensor, f32: impl Fn(f32) -> R, f64: impl Fn(f64) -> R) -> Vec<R> {
    match t.dtype() {
        DType::F32 => t.to_vec::<f32>().unwrap().into_iter().map(f32).collect(),
        _ => t.to_vec::<f64>().unwrap().into_iter().map(f64).collect(),
    }
}

fn to_f64(t: &RawTensor) -> Vec<f64> {
    per_element(t, f64::from, |x| x)
}

/// The elements' own bit patterns (an f32's 32 bits, widened to u64).
fn to_bits(t: &RawTensor) -> Vec<u64> {
    per_element(t, |x| x.to_bits() as u64, f64::to_bits)
}

fn run<T: Float>(ctx: &ExecContext, x: &Inputs<T>) -> Run {
    let q = ctx.from_slice(&x.q, &[B, H, T, D]).unwrap();
    let k = ctx.from_slice(&x.k, &[B, HKV, S, D]).unwrap();
    let v = ctx.from_slice(&x.v, &[B, HKV, S, D]).unwrap();
    let g = ctx.from_slice(&x.g, &[B, H, T, D]).unwrap();
    let mask = x
        .keep
        .as_ref()
        .map(|m| ctx.from_slice(m, &[1, 1, T, S]).unwrap());
    let (out, lse) = ctx.attention(&q, &k, &v, mask.as_ref(), x.opts).unwrap();
    let (gq, gk, gv) = ctx
        .attention_backward(&q, &k, &v, mask.as_ref(), &out, &lse, &g, x.opts, [true; 3])
        .unwrap();
    let (gq, gk, gv) = (gq.unwrap(), gk.unwrap(), gv.unwrap());
    let bits = [&out, &lse, &gq, &gk, &gv]
        .iter()
        .flat_map(|t| to_bits(t))
        .collect();
    Run {
        out: to_f64(&out),
        lse: to_f64(&lse),
        gq: to_f64(&gq),
        gk: to_f64(&gk),
        gv: to_f64(&gv),
        bits,
    }
}

/// Runs on 1 and 2 threads (same bits required) and returns the run.
fn run_both<T: Float>(x: &Inputs<T>) -> Run {
    let one = run(&TestCtx::with_threads(1).unwrap(), x);
    let two = run(&TestCtx::with_threads(2).unwrap(), x);
    assert!(one.bits == two.bits, "1 and 2 threads disagree");
    one
}

/// Rows `rows` of width `w` of `v` (row r is `v[r·w..(r + 1)·w]`).
fn rows(v: &[f64], w: usize, rows: impl Iterator<Item = usize>) -> Vec<u64> {
    rows.flat_map(|r| v[r * w..(r + 1) * w].iter().map(|x| x.to_bits()))
        .collect()
}

/// Asserts that `a` and `b` hold the same bits in rows `rs` (of width `w`).
fn same_rows(a: &[f64], b: &[f64], w: usize, rs: impl Iterator<Item = usize> + Clone) {
    assert_eq!(rows(a, w, rs.clone()), rows(b, w, rs));
}

fn all_nan(v: &[f64], w: usize, rows: impl Iterator<Item = usize>, what: &str) {
    for r in rows {
        let row = &v[r * w..(r + 1) * w];
        assert!(
            row.iter().all(|x| x.is_nan()),
            "{what} row {r} is not NaN: {row:?}"
        );
    }
}

/// The reference forward has NaN exactly where the kernel has it.
fn reference_agrees<T: Float>(x: &Inputs<T>, got: &Run) {
    let dims = AttnDims {
        b: B,
        h: H,
        hkv: HKV,
        t: T,
        s: S,
        d: D,
        dv: D,
    };
    // The reference reads the mask broadcast to [B, H, T, S].
    let full: Option<Vec<u8>> = x.keep.as_ref().map(|m| m.repeat(B * H));
    let mask = match &full {
        Some(m) => RefMask::Keep(m),
        None => RefMask::None,
    };
    let scale = x.opts.scale_for(D);
    let causal = x.opts.causal;
    let (out, _) = reference::attention(&x.q, &x.k, &x.v, dims, mask, causal, scale);
    let lse = reference::attention_lse(&x.q, &x.k, dims, mask, causal, scale);
    let nan = |v: &[f64]| v.iter().map(|x| x.is_nan()).collect::<Vec<_>>();
    let nan_t = |v: &[T]| v.iter().map(|x| x.to_f64().is_nan()).collect::<Vec<_>>();
    assert_eq!(nan_t(&out), nan(&got.out), "reference output NaN pattern");
    assert_eq!(nan_t(&lse), nan(&got.lse), "reference lse NaN pattern");
}

/// Query rows (as `bh·T + i`) of query heads `heads`.
fn q_rows(
    heads: impl Iterator<Item = usize> + Clone,
    i: impl Iterator<Item = usize> + Clone,
) -> Vec<usize> {
    heads
        .flat_map(|h| i.clone().map(move |i| h * T + i))
        .collect()
}

/// Keys a causal row `i` sees: `0..=i + S − T`.
fn seen_by(i: usize, causal: bool) -> usize {
    if causal {
        i + S - T + 1
    } else {
        S
    }
}

fn nan_query_row<T: Float>(causal: bool) {
    // Query head 1, row 5 (reads k/v head 0).
    let (h, i) = (1, 5);
    let clean = inputs::<T>(1, causal);
    let mut bad = inputs::<T>(1, causal);
    bad.q[(h * T + i) * D + 3] = T::from_f64(f64::NAN);
    let (c, n) = (run_both(&clean), run_both(&bad));
    let row = h * T + i;
    let others: Vec<usize> = (0..H * T).filter(|&r| r != row).collect();
    all_nan(&n.out, D, std::iter::once(row), "out");
    assert!(n.lse[row].is_nan());
    same_rows(&n.out, &c.out, D, others.iter().copied());
    same_rows(&n.lse, &c.lse, 1, others.iter().copied());
    // Backward: the row's gq, and gk, gv of every key it sees in k/v head 0.
    all_nan(&n.gq, D, std::iter::once(row), "gq");
    let seen = 0..seen_by(i, causal);
    all_nan(&n.gk, D, seen.clone(), "gk");
    all_nan(&n.gv, D, seen, "gv");
    // Every other gq row, and k/v head 1, are untouched.
    same_rows(&n.gq, &c.gq, D, others.iter().copied());
    same_rows(&n.gk, &c.gk, D, S..2 * S);
    same_rows(&n.gv, &c.gv, D, S..2 * S);
    reference_agrees(&bad, &n);
}

fn nan_key<T: Float>(causal: bool) {
    // K/v head 1 (query heads 2 and 3), key 20.
    let j = 20;
    let clean = inputs::<T>(2, causal);
    let mut bad = inputs::<T>(2, causal);
    bad.k[(S + j) * D + 2] = T::from_f64(f64::NAN);
    let (c, n) = (run_both(&clean), run_both(&bad));
    // Rows that see key j: causal i + S − T ≥ j.
    let first = if causal { j + T - S } else { 0 };
    let hit = q_rows(2..4, first..T);
    let missed = q_rows(2..4, 0..first);
    let heads01 = q_rows(0..2, 0..T);
    all_nan(&n.out, D, hit.iter().copied(), "out");
    assert!(hit.iter().all(|&r| n.lse[r].is_nan()));
    for rs in [&missed, &heads01] {
        same_rows(&n.out, &c.out, D, rs.iter().copied());
        same_rows(&n.lse, &c.lse, 1, rs.iter().copied());
    }
    all_nan(&n.gq, D, hit.iter().copied(), "gq");
    all_nan(&n.gk, D, std::iter::once(S + j), "gk");
    // The last row sees every key: all of k/v head 1's gv is NaN.
    all_nan(&n.gv, D, S..2 * S, "gv");
    // Query heads 0 and 1 and k/v head 0 never read the NaN.
    same_rows(&n.gq, &c.gq, D, heads01.iter().copied());
    same_rows(&n.gk, &c.gk, D, 0..S);
    same_rows(&n.gv, &c.gv, D, 0..S);
    reference_agrees(&bad, &n);
}

fn nan_scale<T: Float>(causal: bool) {
    let mut x = inputs::<T>(3, causal);
    x.opts.scale = Some(f64::NAN);
    // Query row 3 of every head fully masked by the keep-mask.
    let masked = 3;
    let mut keep = vec![1u8; T * S];
    keep[masked * S..(masked + 1) * S].fill(0);
    x.keep = Some(keep);
    let n = run_both(&x);
    let masked_rows: Vec<usize> = (0..H).map(|h| h * T + masked).collect();
    let live: Vec<usize> = (0..H * T).filter(|r| !masked_rows.contains(r)).collect();
    all_nan(&n.out, D, live.iter().copied(), "out");
    all_nan(&n.gq, D, live.iter().copied(), "gq");
    all_nan(&n.gk, D, 0..HKV * S, "gk");
    all_nan(&n.gv, D, 0..HKV * S, "gv");
    // The fully masked rows keep their behaviour: output 0, lse −∞, gq 0.
    for &r in &masked_rows {
        assert!(n.out[r * D..(r + 1) * D].iter().all(|&x| x == 0.0));
        assert_eq!(n.lse[r], f64::NEG_INFINITY);
        assert!(
            n.gq[r * D..(r + 1) * D].iter().all(|&x| x == 0.0),
            "gq row {r}"
        );
    }
    reference_agrees(&x, &n);
    // Without a mask every row is NaN.
    x.keep = None;
    let n = run_both(&x);
    all_nan(&n.out, D, 0..H * T, "out");
    all_nan(&n.gq, D, 0..H * T, "gq");
    reference_agrees(&x, &n);
}

f32_f64_tests!(nan_query_row(false, true) => a_nan_query_row_gives_nan_not_zero_f32, a_nan_query_row_gives_nan_not_zero_f64);

f32_f64_tests!(nan_key(false, true) => a_nan_key_gives_nan_in_the_rows_that_see_it_f32, a_nan_key_gives_nan_in_the_rows_that_see_it_f64);

f32_f64_tests!(nan_scale(false, true) => a_nan_scale_gives_nan_except_in_fully_masked_rows_f32, a_nan_scale_gives_nan_except_in_fully_masked_rows_f64);
