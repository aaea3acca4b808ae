//! The attention tests' cases and inputs, shared by `fucina-core/tests/attention.rs` (the
//! streaming kernel) and `benches/tests/materialising.rs` (the benchmark's materialising
//! kernel, by `#[path]`): random operands in three layouts, the mask kinds, the case
//! tables, and [`Problem`], one case's inputs with the scalar reference's results.
#![allow(dead_code)]

use fucina_core::kernels::fused::attention::reference::{self, AttnDims, RefMask};
use fucina_core::kernels::fused::attention::AttentionOpts;
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{Element, ExecContext, Float, RawTensor};

pub fn bits<T: Element>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

pub fn rand_vec<T: Element>(rng: &mut SplitMix64, n: usize) -> Vec<T> {
    rng.vec_uniform(n, -1.5, 1.5)
        .into_iter()
        .map(T::from_f64)
        .collect()
}

/// A `[B, H, L, D]` view laid out as `[B, L, H, D]` in storage (the usual head split).
pub fn heads_view<T: Element>(ctx: &ExecContext, rng: &mut SplitMix64, s: [usize; 4]) -> RawTensor {
    let v = rand_vec::<T>(rng, s.iter().product());
    ctx.from_slice(&v, &[s[0], s[2], s[1], s[3]])
        .unwrap()
        .permute(&[0, 2, 1, 3])
        .unwrap()
}

/// A `[B, H, L, D]` view whose last axis is strided (stored as `[B, H, D, L]`).
pub fn last_strided<T: Element>(
    ctx: &ExecContext,
    rng: &mut SplitMix64,
    s: [usize; 4],
) -> RawTensor {
    let v = rand_vec::<T>(rng, s.iter().product());
    ctx.from_slice(&v, &[s[0], s[1], s[3], s[2]])
        .unwrap()
        .transpose(2, 3)
        .unwrap()
}

/// Runs `f` after resetting the pool's peak: its result, and the peak live
/// bytes while it ran above `base` (what was live before the measured step).
pub fn peak_above<R>(ctx: &ExecContext, base: usize, f: impl FnOnce() -> R) -> (R, usize) {
    ctx.pool().reset_peak();
    let r = f();
    (r, ctx.stats().peak_live_bytes - base)
}

pub fn close<T: Float>(got: &[T], want: &[T], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

#[derive(Clone, Copy, Debug)]
pub enum MaskKind {
    None,
    Causal,
    PadBias,
    Keep,
    /// A `[1, H, T, S]` bias that differs per query head (and row).
    HeadBias,
}

/// Builds the mask tensor for a case and its full `[B,H,T,S]` expansion.
pub fn make_mask<T: Element>(
    ctx: &ExecContext,
    rng: &mut SplitMix64,
    kind: MaskKind,
    d: AttnDims,
) -> (Option<RawTensor>, Vec<T>, Vec<u8>) {
    let full = [d.b, d.h, d.t, d.s];
    match kind {
        MaskKind::None | MaskKind::Causal => (None, vec![], vec![]),
        MaskKind::PadBias => {
            // [B,1,1,S]: -inf on padded keys (batch b pads its last b keys), -1e4 on one.
            let mut m = vec![T::from_f64(0.0); d.b * d.s];
            for b in 0..d.b {
                for j in d.s.saturating_sub(b)..d.s {
                    m[b * d.s + j] = T::from_f64(f64::NEG_INFINITY);
                }
                if d.s > 2 {
                    m[b * d.s + 1] = T::from_f64(-1e4);
                }
            }
            let t = ctx.from_slice(&m, &[d.b, 1, 1, d.s]).unwrap();
            let f = t.broadcast_to(&full).unwrap().to_vec::<T>().unwrap();
            (Some(t), f, vec![])
        }
        MaskKind::Keep => {
            // [B,1,T,S] keep-mask with random holes; row 0 of batch 0 fully masked.
            let mut m: Vec<u8> = (0..d.b * d.t * d.s)
                .map(|_| (rng.below(4) != 0) as u8)
                .collect();
            for j in 0..d.s {
                m[j] = 0;
            }
            let t = ctx.from_slice(&m, &[d.b, 1, d.t, d.s]).unwrap();
            let f = t.broadcast_to(&full).unwrap().to_vec::<u8>().unwrap();
            (Some(t), vec![], f)
        }
        MaskKind::HeadBias => {
            let m = rand_vec::<T>(rng, d.h * d.t * d.s);
            let t = ctx.from_slice(&m, &[1, d.h, d.t, d.s]).unwrap();
            let f = t.broadcast_to(&full).unwrap().to_vec::<T>().unwrap();
            (Some(t), f, vec![])
        }
    }
}

/// One problem: shapes, mask, layouts; checked against the reference at 1 and 2 threads.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Its sizes, as the kernel's reference takes them.
    pub dims: AttnDims,
    pub kind: MaskKind,
    pub causal: bool,
    /// 0: [B,L,H,D] head views; 1: k with a strided last axis; 2: contiguous.
    pub layout: usize,
    pub scale: Option<f64>,
}

/// The sizes the brief asks for: T, S in {1, 3, 17, 33, 65, 127} (every pair), head dims
/// cycling through {1, 7, 16, 64}, every mask kind with and without causal, three layouts;
/// plus a few multi-block shapes (T < S and T > S).
pub fn cases() -> Vec<Case> {
    const LENS: [usize; 6] = [1, 3, 17, 33, 65, 127];
    const DIMS: [usize; 4] = [1, 7, 16, 64];
    let kinds = [MaskKind::None, MaskKind::PadBias, MaskKind::Keep];
    let mut out = Vec::new();
    let mut n = 0;
    for &t in &LENS {
        for &s in &LENS {
            let (b, h) = if t * s >= 64 * 64 { (1, 2) } else { (2, 3) };
            out.push(Case {
                dims: AttnDims {
                    b,
                    h,
                    hkv: h,
                    t,
                    s,
                    d: DIMS[n % 4],
                    dv: DIMS[(n / 4 + n) % 4],
                },
                kind: kinds[n % 3],
                causal: (n / 3) % 2 == 1,
                layout: n % 3,
                scale: if n % 5 == 0 { Some(0.3) } else { None },
            });
            n += 1;
        }
    }
    for (t, s, d, kind, causal) in [
        (130, 257, 16, MaskKind::PadBias, true),
        (257, 130, 33, MaskKind::Keep, true),
        (200, 200, 64, MaskKind::None, true),
        (129, 190, 40, MaskKind::PadBias, false),
    ] {
        out.push(Case {
            dims: AttnDims {
                b: 1,
                h: 2,
                hkv: 2,
                t,
                s,
                d,
                dv: d,
            },
            kind,
            causal,
            layout: n % 3,
            scale: None,
        });
        n += 1;
    }
    out
}

pub fn layout_tensor<T: Element>(
    ctx: &ExecContext,
    rng: &mut SplitMix64,
    layout: usize,
    s: [usize; 4],
) -> RawTensor {
    match layout {
        0 => heads_view::<T>(ctx, rng, s),
        1 => last_strided::<T>(ctx, rng, s),
        _ => ctx
            .from_slice(&rand_vec::<T>(rng, s.iter().product()), &s)
            .unwrap(),
    }
}

/// Grouped-query cases: (H, Hkv) in (4, 2), (6, 2), (8, 2), (8, 1) and (3, 1) (groups of 2,
/// 3, 4, 8 and 3 query heads; the last two multi-query), T, S in {1, 7, 63, 65, 130} (every
/// pair, twice), every mask kind (a per-query-head bias included) with and without causal,
/// three layouts.
pub fn gqa_cases() -> Vec<Case> {
    const LENS: [usize; 5] = [1, 7, 63, 65, 130];
    const DIMS: [usize; 4] = [1, 7, 16, 33];
    const HEADS: [(usize, usize); 5] = [(4, 2), (6, 2), (8, 2), (8, 1), (3, 1)];
    let kinds = [
        MaskKind::None,
        MaskKind::PadBias,
        MaskKind::Keep,
        MaskKind::HeadBias,
    ];
    let mut out = Vec::new();
    let mut n = 0;
    for pass in 0..2 {
        for &t in &LENS {
            for &s in &LENS {
                let (h, hkv) = HEADS[(n + pass) % 5];
                out.push(Case {
                    dims: AttnDims {
                        b: if t * s >= 64 * 64 { 1 } else { 2 },
                        h,
                        hkv,
                        t,
                        s,
                        d: DIMS[n % 4],
                        dv: DIMS[(n / 4 + n + 1) % 4],
                    },
                    kind: kinds[n % 4],
                    causal: (n / 2) % 2 == 1,
                    layout: n % 3,
                    scale: if n % 5 == 0 { Some(0.3) } else { None },
                });
                n += 1;
            }
        }
    }
    out
}

/// A case's inputs, drawn from `rng` on `ctx` (q, k, v, the mask, then the upstream
/// gradient `g`, a head view), and the reference's forward and backward for them.
pub struct Problem<T> {
    /// The case.
    pub case: Case,
    /// Its sizes, as the reference takes them.
    pub dims: AttnDims,
    /// Its options and the scale they give.
    pub opts: AttentionOpts,
    /// The score scale.
    pub sc: f64,
    /// The operands (in the case's layouts) and the mask tensor.
    pub q: RawTensor,
    /// Keys.
    pub k: RawTensor,
    /// Values.
    pub v: RawTensor,
    /// The mask tensor (none for `None` and `Causal`).
    pub mask: Option<RawTensor>,
    /// The upstream gradient `[B, H, T, Dv]`, a head view.
    pub g: RawTensor,
    /// q, k, v in row-major order.
    pub qv: Vec<T>,
    /// See `qv`.
    pub kv: Vec<T>,
    /// See `qv`.
    pub vv: Vec<T>,
    fbias: Vec<T>,
    fkeep: Vec<u8>,
    /// The reference output and probabilities.
    pub want_o: Vec<T>,
    /// See `want_o`.
    pub want_p: Vec<T>,
    /// The reference gq, gk, gv for `g`.
    pub want_g: [Vec<T>; 3],
}

impl<T: Float> Problem<T> {
    /// Draws case `case`'s inputs and computes the reference.
    pub fn new(ctx: &ExecContext, rng: &mut SplitMix64, case: Case) -> Problem<T> {
        let Case {
            dims,
            kind,
            causal,
            layout,
            scale,
        } = case;
        let AttnDims {
            b,
            h,
            hkv,
            t,
            s,
            d,
            dv,
        } = dims;
        let q = heads_view::<T>(ctx, rng, [b, h, t, d]);
        let k = layout_tensor::<T>(ctx, rng, layout, [b, hkv, s, d]);
        let v = layout_tensor::<T>(ctx, rng, (layout + 2) % 3, [b, hkv, s, dv]);
        let (mask, fbias, fkeep) = make_mask::<T>(ctx, rng, kind, dims);
        let g = heads_view::<T>(ctx, rng, [b, h, t, dv]);
        let opts = AttentionOpts { causal, scale };
        let sc = opts.scale_for(d);
        let (qv, kv, vv) = (
            q.to_vec::<T>().unwrap(),
            k.to_vec::<T>().unwrap(),
            v.to_vec::<T>().unwrap(),
        );
        let mut p = Problem {
            case,
            dims,
            opts,
            sc,
            q,
            k,
            v,
            mask,
            g,
            qv,
            kv,
            vv,
            fbias,
            fkeep,
            want_o: vec![],
            want_p: vec![],
            want_g: [vec![], vec![], vec![]],
        };
        let (o, pr) = reference::attention(&p.qv, &p.kv, &p.vv, dims, p.rmask(), causal, sc);
        let gv = p.g.to_vec::<T>().unwrap();
        let (wq, wk, wv) = reference::attention_backward(&p.qv, &p.kv, &p.vv, &pr, &gv, dims, sc);
        (p.want_o, p.want_p, p.want_g) = (o, pr, [wq, wk, wv]);
        p
    }

    /// The mask as the reference reads it (expanded to `[B, H, T, S]`).
    pub fn rmask(&self) -> RefMask<'_, T> {
        match self.case.kind {
            MaskKind::PadBias | MaskKind::HeadBias => RefMask::Bias(&self.fbias),
            MaskKind::Keep => RefMask::Keep(&self.fkeep),
            _ => RefMask::None,
        }
    }
}

/// Runs `check(c1, c2, n, case, problem)` on every case in order: its [`Problem`] drawn on
/// the 1-thread context `c1` from the one stream `seed`, beside a 2-thread context `c2`.
pub fn each_problem<T: Float>(
    cases: &[Case],
    seed: u64,
    mut check: impl FnMut(&TestCtx, &TestCtx, usize, Case, &Problem<T>),
) {
    let c1 = TestCtx::with_threads(1).unwrap();
    let c2 = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(seed);
    for (n, &case) in cases.iter().enumerate() {
        let p = Problem::<T>::new(&c1, &mut rng, case);
        check(&c1, &c2, n, case, &p);
    }
}
