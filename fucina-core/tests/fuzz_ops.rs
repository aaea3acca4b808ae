//! Fuzzing harness (issue 11): random programs of core ops over random
//! shapes, strides, views and dtypes, with adversarial sizes (0, 1, huge,
//! overflowing). Each program runs under `catch_unwind`; an op that succeeds
//! is compared with the reference kernels (`kernels::*::reference`, and the
//! strided iteration that is the spec of every copy); an op that fails must
//! fail with an `Err`. At the end of every program no buffer is outstanding.
//!
//! The CI budget is fixed-seed: `FUZZ_CASES` programs (default 10,000). The
//! soak (`cargo test --release -p fucina-core --test fuzz_ops -- --ignored`)
//! runs `FUZZ_SOAK_CASES` (default 200,000) from another seed; its figures
//! are in docs/RELIABILITY.md. proptest shrinks a failing program to a
//! minimal one and prints it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

use fucina_core::kernels::elementwise::{reference as ew, BinaryOp, UnaryOp};
use fucina_core::kernels::reduce::{reference as red, ReduceOp};
use fucina_core::kernels::{concat, fused::softmax, matmul};
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Element, ExecContext, Float, RawTensor};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

/// The pool limit of every program: any request beyond is a clean OutOfMemory.
const LIMIT: usize = 64 << 20;
/// Ops whose work grows with the input run only on inputs up to this many
/// elements, or on inputs so large the output allocation must fail.
const SMALL: usize = 4096;

/// A size drawn to hit the edges: small, 0, 1, or huge and overflowing.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..6,
        1 => Just(1usize << 31),
        1 => Just(1usize << 62),
        1 => Just(usize::MAX),
        1 => Just(usize::MAX / 2 + 1),
        1 => any::<usize>(),
    ]
}

/// A small size (shapes of fresh tensors).
fn small() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 1usize..5, 1 => Just(0usize)]
}

/// Steps run, and steps whose op returned a tensor (checked against the reference).
static STEPS: AtomicUsize = AtomicUsize::new(0);
static OK_STEPS: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone, Debug)]
enum Step {
    Narrow(usize, usize, usize, usize),
    Permute(usize, Vec<usize>),
    Transpose(usize, usize, usize),
    Broadcast(usize, Vec<usize>),
    Strided(usize, Vec<usize>, Vec<usize>, usize),
    Reshape(usize, Vec<usize>),
    Unsqueeze(usize, usize),
    Squeeze(usize, usize),
    Copy(usize),
    ToVec(usize),
    Concat(usize, usize, usize),
    Pad(usize, Vec<(usize, usize)>),
    Split(usize, usize, Vec<usize>),
    Unary(usize, u8),
    Binary(usize, usize, u8),
    Reduce(usize, u8, Vec<usize>),
    Matmul(usize, usize),
    Softmax(usize, usize),
    Fresh(Vec<usize>),
}

fn step() -> impl Strategy<Value = Step> {
    let idx = || 0usize..8;
    let dims = || prop::collection::vec(size(), 0..4);
    prop_oneof![
        (idx(), size(), size(), size()).prop_map(|(t, a, s, l)| Step::Narrow(t, a, s, l)),
        (idx(), prop::collection::vec(0usize..4, 0..4)).prop_map(|(t, p)| Step::Permute(t, p)),
        (idx(), 0usize..4, 0usize..4).prop_map(|(t, a, b)| Step::Transpose(t, a, b)),
        (idx(), dims()).prop_map(|(t, s)| Step::Broadcast(t, s)),
        (idx(), dims(), prop::collection::vec(size(), 0..4), size())
            .prop_map(|(t, s, st, o)| Step::Strided(t, s, st, o)),
        (idx(), dims()).prop_map(|(t, s)| Step::Reshape(t, s)),
        (idx(), 0usize..5).prop_map(|(t, a)| Step::Unsqueeze(t, a)),
        (idx(), 0usize..4).prop_map(|(t, a)| Step::Squeeze(t, a)),
        idx().prop_map(Step::Copy),
        idx().prop_map(Step::ToVec),
        (idx(), idx(), 0usize..4).prop_map(|(a, b, x)| Step::Concat(a, b, x)),
        (idx(), prop::collection::vec((size(), size()), 0..4)).prop_map(|(t, p)| Step::Pad(t, p)),
        (idx(), 0usize..4, prop::collection::vec(size(), 0..4))
            .prop_map(|(t, a, s)| Step::Split(t, a, s)),
        (idx(), 0u8..4).prop_map(|(t, o)| Step::Unary(t, o)),
        (idx(), idx(), 0u8..4).prop_map(|(a, b, o)| Step::Binary(a, b, o)),
        (idx(), 0u8..4, prop::collection::vec(0usize..4, 0..3))
            .prop_map(|(t, o, a)| Step::Reduce(t, o, a)),
        (idx(), idx()).prop_map(|(a, b)| Step::Matmul(a, b)),
        (idx(), 0usize..4).prop_map(|(t, a)| Step::Softmax(t, a)),
        prop::collection::vec(small(), 0..4).prop_map(Step::Fresh),
    ]
}

/// A program: a dtype, thread count, two starting shapes and the steps.
#[derive(Clone, Debug)]
struct Program {
    f64: bool,
    threads: usize,
    a: Vec<usize>,
    b: Vec<usize>,
    steps: Vec<Step>,
}

fn program() -> impl Strategy<Value = Program> {
    (
        any::<bool>(),
        prop_oneof![7 => Just(1usize), 1 => Just(2usize)],
        prop::collection::vec(small(), 0..4),
        prop::collection::vec(small(), 0..4),
        prop::collection::vec(step(), 1..10),
    )
        .prop_map(|(f64, threads, a, b, steps)| Program {
            f64,
            threads,
            a,
            b,
            steps,
        })
}

/// Element-wise agreement up to `tol` (relative), NaN matching NaN.
fn close(got: &[f64], want: &[f64], tol: f64, what: &str) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values, reference {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan())
            || g == w
            || (g - w).abs() <= tol * (1.0 + w.abs().max(g.abs()));
        if !ok {
            return Err(format!("{what}: element {i} is {g}, reference {w}"));
        }
    }
    Ok(())
}

fn vals<T: Element>(t: &RawTensor) -> Vec<f64> {
    match t.to_vec::<T>() {
        Ok(v) => v.iter().map(|x| x.to_f64()).collect(),
        Err(e) => panic!("to_vec of a small tensor failed: {e}"),
    }
}

/// The spec of every copy: the strided walk over storage.
/// [`close`] of `got`'s elements against the reference values `want` (both in `T`).
fn close_to<T: Element>(got: &RawTensor, want: &[T], tol: f64, what: &str) -> Result<(), String> {
    let want: Vec<f64> = want.iter().map(|v| v.to_f64()).collect();
    close(&vals::<T>(got), &want, tol, what)
}

fn spec<T: Element>(t: &RawTensor) -> Vec<f64> {
    let st = t.storage::<T>().expect("storage");
    t.offsets().map(|o| st[o].to_f64()).collect()
}

struct Run<'a> {
    ctx: &'a ExecContext,
    live: Vec<RawTensor>,
    next: u64,
}

impl Run<'_> {
    fn pick(&self, i: usize) -> RawTensor {
        self.live[i % self.live.len()].clone_view()
    }
    /// [`Run::pick`] for the ops checked only on small operands: `None` past [`SMALL`].
    fn pick_small(&self, i: usize) -> Option<RawTensor> {
        let x = self.pick(i);
        (x.numel() <= SMALL).then_some(x)
    }
    fn push(&mut self, t: RawTensor) {
        if self.live.len() >= 6 {
            self.live.remove(0);
        }
        self.live.push(t);
    }
    fn fresh<T: Float>(&mut self, shape: &[usize]) -> Result<RawTensor, String> {
        let n: usize = shape.iter().product();
        let data: Vec<T> = (0..n)
            .map(|i| {
                self.next = self
                    .next
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                T::from_f64(
                    ((self.next >> 40) as f64 / (1u64 << 24) as f64) * 4.0 - 2.0 + i as f64 * 0.0,
                )
            })
            .collect();
        self.ctx
            .from_slice(&data, shape)
            .map_err(|e| format!("fresh {shape:?}: {e}"))
    }
}

/// Work an op on `t` may do: fine when small, or when so large that its
/// output cannot be allocated under [`LIMIT`] (a clean, immediate error).
fn affordable(numel: usize) -> bool {
    numel <= SMALL || numel.saturating_mul(8) > LIMIT.saturating_mul(4)
}

fn exec<T: Float>(prog: &Program) -> Result<(), String> {
    let ctx = TestCtx::with_threads(prog.threads).map_err(|e| e.to_string())?;
    ctx.pool().set_memory_limit(Some(LIMIT));
    let tol = if T::DTYPE == DType::F64 { 1e-9 } else { 2e-4 };
    {
        let mut run = Run {
            ctx: &ctx,
            live: Vec::new(),
            next: 0x9E3779B97F4A7C15,
        };
        let a = run.fresh::<T>(&prog.a)?;
        let b = run.fresh::<T>(&prog.b)?;
        run.push(a);
        run.push(b);
        for (k, s) in prog.steps.iter().enumerate() {
            let what = format!("step {k} {s:?}");
            STEPS.fetch_add(1, Ordering::Relaxed);
            let out: Option<RawTensor> = match s {
                Step::Narrow(t, a, st, l) => run.pick(*t).narrow(*a, *st, *l).ok(),
                Step::Permute(t, p) => run.pick(*t).permute(p).ok(),
                Step::Transpose(t, a, b) => run.pick(*t).transpose(*a, *b).ok(),
                Step::Broadcast(t, sh) => run.pick(*t).broadcast_to(sh).ok(),
                Step::Strided(t, sh, st, o) => run.pick(*t).view_with_strides(sh, st, *o).ok(),
                Step::Reshape(t, sh) => ctx.reshape(&run.pick(*t), sh).ok(),
                Step::Unsqueeze(t, a) => run.pick(*t).unsqueeze(*a).ok(),
                Step::Squeeze(t, a) => run.pick(*t).squeeze(*a).ok(),
                Step::Copy(t) => {
                    let x = run.pick(*t);
                    if !affordable(x.numel()) {
                        continue;
                    }
                    match ctx.copy(&x) {
                        Ok(c) => {
                            close(&vals::<T>(&c), &spec::<T>(&x), 0.0, &what)?;
                            Some(c)
                        }
                        Err(_) if x.numel() > SMALL => None,
                        Err(e) => return Err(format!("{what}: {e}")),
                    }
                }
                Step::ToVec(t) => {
                    let x = run.pick(*t);
                    if x.numel() <= SMALL {
                        close(&vals::<T>(&x), &spec::<T>(&x), 0.0, &what)?;
                    } else if x.numel() > 1 << 40 && x.to_vec::<T>().is_ok() {
                        return Err(format!(
                            "{what}: to_vec of {} elements succeeded",
                            x.numel()
                        ));
                    }
                    None
                }
                Step::Concat(a, b, ax) => {
                    let (x, y) = (run.pick(*a), run.pick(*b));
                    if !affordable(x.numel()) || !affordable(y.numel()) {
                        continue;
                    }
                    match ctx.concat(&[&x, &y], *ax) {
                        Ok(c) => {
                            let (xs, ys) = (x.to_vec::<T>().unwrap(), y.to_vec::<T>().unwrap());
                            let want = concat::reference::concat(
                                &[&xs, &ys],
                                &[x.shape(), y.shape()],
                                *ax,
                            );
                            close_to(&c, &want, 0.0, &what)?;
                            Some(c)
                        }
                        Err(_) => None,
                    }
                }
                Step::Pad(t, pads) => {
                    let Some(x) = run.pick_small(*t) else {
                        continue;
                    };
                    match ctx.pad(&x, pads, 0.5) {
                        Ok(c) => {
                            if c.numel() <= 1 << 16 {
                                let xs = x.to_vec::<T>().unwrap();
                                let want =
                                    concat::reference::pad(&xs, x.shape(), pads, T::from_f64(0.5));
                                close_to(&c, &want, 0.0, &what)?;
                            }
                            Some(c)
                        }
                        Err(_) => None,
                    }
                }
                Step::Split(t, ax, sizes) => {
                    let x = run.pick(*t);
                    if let Ok(parts) = concat::split(&x, *ax, sizes) {
                        if parts.len() != sizes.len() {
                            return Err(format!("{what}: {} parts", parts.len()));
                        }
                        parts.into_iter().last()
                    } else {
                        None
                    }
                }
                Step::Unary(t, o) => {
                    let x = run.pick(*t);
                    if !affordable(x.numel()) {
                        continue;
                    }
                    let op = [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Exp, UnaryOp::Tanh][*o as usize];
                    match ctx.unary(&x, op) {
                        Ok(y) => {
                            let want: Vec<f64> = ew::unary::<T>(&x, op)
                                .map_err(|e| format!("{what}: reference {e}"))?
                                .iter()
                                .map(|v| v.to_f64())
                                .collect();
                            close(&vals::<T>(&y), &want, tol, &what)?;
                            Some(y)
                        }
                        Err(_) if x.numel() > SMALL => None,
                        Err(e) => return Err(format!("{what}: {e}")),
                    }
                }
                Step::Binary(a, b, o) => {
                    let (x, y) = (run.pick(*a), run.pick(*b));
                    if !affordable(x.numel()) || !affordable(y.numel()) {
                        continue;
                    }
                    let op = [
                        BinaryOp::Add,
                        BinaryOp::Sub,
                        BinaryOp::Mul,
                        BinaryOp::Maximum,
                    ][*o as usize];
                    match ctx.binary(&x, &y, op) {
                        Ok(z) => {
                            if z.numel() <= 1 << 16 {
                                let (shape, want) = ew::binary::<T>(&x, &y, op)
                                    .map_err(|e| format!("{what}: reference {e}"))?;
                                if shape != z.shape() {
                                    return Err(format!(
                                        "{what}: shape {:?}, reference {shape:?}",
                                        z.shape()
                                    ));
                                }
                                close_to(&z, &want, tol, &what)?;
                            }
                            Some(z)
                        }
                        Err(_) => None,
                    }
                }
                Step::Reduce(t, o, axes) => {
                    let Some(x) = run.pick_small(*t) else {
                        continue;
                    };
                    let op =
                        [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min][*o as usize];
                    match ctx.reduce(&x, op, axes, false) {
                        Ok(y) => {
                            let mut ax = axes.clone();
                            ax.sort_unstable();
                            ax.dedup();
                            if let Ok(want) = red::reduce::<T>(&x, op, &ax) {
                                close(&vals::<T>(&y), &want, tol, &what)?;
                            }
                            Some(y)
                        }
                        Err(_) => None,
                    }
                }
                Step::Matmul(a, b) => {
                    let (Some(x), Some(y)) = (run.pick_small(*a), run.pick_small(*b)) else {
                        continue;
                    };
                    match ctx.matmul(&x, &y) {
                        Ok(z) => {
                            if z.numel() <= 1 << 16 {
                                let want = matmul::reference::matmul::<T>(&ctx, &x, &y)
                                    .map_err(|e| format!("{what}: reference {e}"))?;
                                close(&vals::<T>(&z), &vals::<T>(&want), tol * 10.0, &what)?;
                            }
                            Some(z)
                        }
                        Err(_) => None,
                    }
                }
                Step::Softmax(t, ax) => {
                    let Some(x) = run.pick_small(*t) else {
                        continue;
                    };
                    match ctx.softmax(&x, *ax) {
                        Ok(y) => {
                            let xs = x.to_vec::<T>().unwrap();
                            let want = softmax::reference::softmax(&xs, x.shape(), *ax);
                            close_to(&y, &want, tol, &what)?;
                            Some(y)
                        }
                        Err(_) => None,
                    }
                }
                Step::Fresh(sh) => Some(run.fresh::<T>(sh)?),
            };
            if let Some(t) = out {
                OK_STEPS.fetch_add(1, Ordering::Relaxed);
                // Every view a program holds stays inside its tensor's extent.
                let reach = fucina_core::shape::view_reach(t.shape(), t.strides(), t.offset());
                if reach.is_none_or(|r| r > t.extent()) {
                    return Err(format!(
                        "{what}: view {t:?} reaches past extent {}",
                        t.extent()
                    ));
                }
                run.push(t);
            }
        }
    }
    let n = ctx.stats().outstanding;
    if n != 0 {
        return Err(format!("{n} buffers outstanding at the end"));
    }
    Ok(())
}

/// Runs one program under `catch_unwind`: a panic is a failure like any other.
fn check(prog: &Program) -> Result<(), TestCaseError> {
    let r = catch_unwind(AssertUnwindSafe(|| {
        if prog.f64 {
            exec::<f64>(prog)
        } else {
            exec::<f32>(prog)
        }
    }));
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(TestCaseError::fail(e)),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(TestCaseError::fail(format!("panic: {msg}")))
        }
    }
}

fn run_budget(cases: u32, seed: u8) {
    let config = Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    if let Err(e) = runner.run(&program(), |p| check(&p)) {
        panic!("fuzz_ops found a failing program: {e}");
    }
    eprintln!(
        "fuzz_ops: {cases} programs, {} steps, {} returned a tensor",
        STEPS.load(Ordering::Relaxed),
        OK_STEPS.load(Ordering::Relaxed)
    );
}

fn env_cases(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn fuzz_op_programs_ci_budget() {
    run_budget(env_cases("FUZZ_CASES", 10_000), 11);
}

#[test]
#[ignore = "soak: run with --ignored (figures in docs/RELIABILITY.md)"]
fn fuzz_op_programs_soak() {
    run_budget(env_cases("FUZZ_SOAK_CASES", 200_000), 97);
}
