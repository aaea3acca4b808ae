//! Fuzzing harness of the file loaders (issue 11): mutated safetensors model
//! files and optimizer-state files (bit flips, byte edits in the JSON header,
//! lying header lengths, truncations at every offset, splices) fed to
//! `load_model_bytes` and `Optimizer::load_state_bytes`, each under
//! `catch_unwind`. Every load either succeeds or returns an `Err` that
//! leaves the parameters and the optimizer state bit-identical (no partial
//! load), and no pool buffer leaks.
//!
//! CI budget (fixed seed): every truncation of both files, plus
//! `FUZZ_FILE_CASES` (default 35,000) random cases, each mutating all three
//! files: over 100,000 mutated files. The soak (`--ignored`) runs
//! `FUZZ_FILE_SOAK_CASES` (default 300,000) cases; figures in
//! docs/RELIABILITY.md. Files are kept small so a case is cheap.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::mutate::{apply, env_cases, mutation, seeded_runner};
use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;
use fucina_optim::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// A small model (three parameters, two dtypes) and two optimizers with
/// state, plus the pristine bytes of every file.
struct Fixture {
    ctx: TestCtx,
    params: Vec<(String, Tensor)>,
    adam: AdamW,
    sgd: Sgd,
    model: Vec<u8>,
    adam_state: Vec<u8>,
    sgd_state: Vec<u8>,
    baseline_outstanding: usize,
}

fn fixture() -> Fixture {
    let ctx = TestCtx::with_threads(1).unwrap();
    let params = vec![
        (
            "w".to_string(),
            Tensor::variable(&ctx, &[0.5f32, -1.0, 2.0, 0.25, 3.0, -0.5], &[3, 2]).unwrap(),
        ),
        (
            "b".to_string(),
            Tensor::variable(&ctx, &[1.0f64, 2.0], &[2]).unwrap(),
        ),
        (
            "s".to_string(),
            Tensor::variable(&ctx, &[7.0f32], &[]).unwrap(),
        ),
    ];
    let ts: Vec<Tensor> = params.iter().map(|(_, t)| t.clone()).collect();
    for t in &ts {
        let g = ctx.full_f64(t.dtype(), t.shape(), 0.125).unwrap();
        t.set_grad(Some(g)).unwrap();
    }
    let mut adam = AdamW::single(ts.clone(), AdamConfig::adamw(1e-2)).unwrap();
    adam.step().unwrap();
    let mut sgd = Sgd::single(
        ts,
        SgdConfig {
            momentum: 0.9,
            bf16_momentum: true,
            ..SgdConfig::new(0.1)
        },
    )
    .unwrap();
    sgd.step().unwrap();
    let model = model_bytes(&params).unwrap();
    let adam_state = adam.state_bytes().unwrap();
    let sgd_state = sgd.state_bytes().unwrap();
    let baseline_outstanding = ctx.stats().outstanding;
    Fixture {
        ctx,
        params,
        adam,
        sgd,
        model,
        adam_state,
        sgd_state,
        baseline_outstanding,
    }
}

impl Fixture {
    fn values(&self) -> Vec<Vec<f64>> {
        self.params
            .iter()
            .map(|(_, t)| t.to_vec_f64().unwrap())
            .collect()
    }

    /// Loads `file` as a model, then as Adam and SGD state; checks the
    /// all-or-nothing rule and the leak count; restores on success.
    fn feed(&mut self, file: &[u8], which: usize) -> Result<(), String> {
        let before = self.values();
        let adam_before = self.adam.state_bytes().map_err(|e| e.to_string())?;
        let sgd_before = self.sgd.state_bytes().map_err(|e| e.to_string())?;
        let r = catch_unwind(AssertUnwindSafe(|| match which {
            0 => load_model_bytes(file, &self.params).is_ok(),
            1 => self.adam.load_state_bytes(file).is_ok(),
            _ => self.sgd.load_state_bytes(file).is_ok(),
        }));
        let ok = match r {
            Ok(ok) => ok,
            Err(_) => {
                return Err(format!(
                    "loader {which} panicked on a {}-byte file",
                    file.len()
                ))
            }
        };
        if ok {
            // A mutation the format cannot see (a flipped data bit): restore.
            load_model_bytes(&self.model, &self.params).map_err(|e| e.to_string())?;
            self.adam
                .load_state_bytes(&self.adam_state)
                .map_err(|e| e.to_string())?;
            self.sgd
                .load_state_bytes(&self.sgd_state)
                .map_err(|e| e.to_string())?;
        } else {
            if self.values() != before {
                return Err(format!(
                    "loader {which}: a failed load changed the parameters"
                ));
            }
            if self.adam.state_bytes().map_err(|e| e.to_string())? != adam_before
                || self.sgd.state_bytes().map_err(|e| e.to_string())? != sgd_before
            {
                return Err(format!(
                    "loader {which}: a failed load changed optimizer state"
                ));
            }
        }
        let n = self.ctx.stats().outstanding;
        if n != self.baseline_outstanding {
            return Err(format!(
                "loader {which}: {n} buffers outstanding, {} before",
                self.baseline_outstanding
            ));
        }
        Ok(())
    }

    fn file(&self, which: usize) -> &[u8] {
        match which {
            0 => &self.model,
            1 => &self.adam_state,
            _ => &self.sgd_state,
        }
    }
}

/// Every truncation of every file: returns how many files were fed.
fn truncations(fx: &mut Fixture) -> usize {
    let mut fed = 0;
    for which in 0..3 {
        let file = fx.file(which).to_vec();
        for cut in 0..file.len() {
            // Each truncated file goes to all three loaders.
            for loader in 0..3 {
                if let Err(e) = fx.feed(&file[..cut], loader) {
                    panic!("file {which} cut at {cut}: {e}");
                }
                fed += 1;
            }
        }
    }
    fed
}

fn random_cases(fx: &mut Fixture, cases: u32, seed: u8) -> usize {
    let mut runner = seeded_runner(cases, seed);
    let fed = std::cell::Cell::new(0usize);
    let fx = std::cell::RefCell::new(fx);
    let strategy = prop::collection::vec(mutation(), 1..4);
    let r = runner.run(&strategy, |muts| {
        let mut fx = fx.borrow_mut();
        // Each case mutates every file and feeds it to its own loader.
        for which in 0..3 {
            let f = apply(fx.file(which), &muts);
            fx.feed(&f, which).map_err(TestCaseError::fail)?;
            fed.set(fed.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = r {
        panic!("fuzz_files found a failing case: {e}");
    }
    fed.get()
}

fn finish(fx: Fixture) {
    // The fixture's context checks for leaks when `_ctx` drops, last.
    let Fixture {
        ctx: _ctx,
        params,
        adam,
        sgd,
        ..
    } = fx;
    drop((params, adam, sgd));
}

#[test]
fn fuzz_files_ci_budget() {
    let mut fx = fixture();
    let t = truncations(&mut fx);
    let r = random_cases(&mut fx, env_cases("FUZZ_FILE_CASES", 35_000), 5);
    eprintln!("fuzz_files: {t} truncated + {r} randomly mutated files, 0 failures");
    assert!(t + r >= 100_000 || std::env::var("FUZZ_FILE_CASES").is_ok());
    finish(fx);
}

#[test]
#[ignore = "soak: run with --ignored (figures in docs/RELIABILITY.md)"]
fn fuzz_files_soak() {
    let mut fx = fixture();
    let r = random_cases(&mut fx, env_cases("FUZZ_FILE_SOAK_CASES", 300_000), 71);
    eprintln!("fuzz_files soak: {r} randomly mutated files, 0 failures");
    finish(fx);
}
