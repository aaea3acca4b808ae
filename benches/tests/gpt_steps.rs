//! The `gpt` workload is the same computation as torch's: from the weights torch
//! started from (exchanged as safetensors, loaded strictly by name into
//! fucina-nn's `Gpt`) and the same ids and targets, 20 steps of the workload's own
//! step (`GptTrain`: zero_grad + forward + cross-entropy + backward + AdamW with
//! the workload's lr and weight decay) give torch's 20 losses, and the loss after
//! the last update, within 1e-3 relative (the bar). That bar alone is
//! too loose to see an optimizer slip (AdamW with no weight decay at all moves
//! these losses by ~1e-4 relative), so the worst difference must also stay under
//! 1e-5 (measured: ~1.2e-7 on x86-64 AVX2; the margin covers other GEMM paths'
//! summation orders). The golden is a reduced-size `CharGPT`
//! (vocab 65, 2 layers, 2 heads, width 32, batch 4 × 32) written by
//! `tools/gen_gpt_steps_golden.py`; it also records the optimizer
//! hyperparameters, which must be the workload's.
//!
//! The run is also bitwise identical on 1 and 2 threads, and returns every pool
//! buffer once the model and optimizer are dropped.

use std::path::PathBuf;

use fucina_autograd::io::{LoadOptions, SafetensorsFile};
use fucina_autograd::Tensor;
use fucina_benches::workloads::gpt::{GptTrain, LR, WEIGHT_DECAY};
use fucina_core::{DType, ExecContext};
use fucina_nn::{Gpt, GptConfig, Init, Module, StateDict};

const DATA: &[u8] = include_bytes!("goldens/gpt_steps.safetensors");
const RTOL: f64 = 1e-3;
/// The tight bound on the worst relative difference (see the header).
const TIGHT: f64 = 1e-5;

fn weights_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/gpt_steps_weights.safetensors")
}

fn read<T: fucina_core::Element>(
    ctx: &ExecContext,
    st: &SafetensorsFile<'_>,
    name: &str,
) -> (Vec<T>, Vec<usize>) {
    let raw = st
        .read(ctx, name)
        .unwrap_or_else(|e| panic!("golden `{name}`: {e}"));
    (raw.to_vec::<T>().unwrap(), raw.shape().to_vec())
}

/// Runs the golden's steps on `threads` threads: (step losses, final loss).
fn run(threads: usize) -> (Vec<f64>, f64) {
    let ctx = ExecContext::with_threads(threads).unwrap();
    let out = {
        let st = SafetensorsFile::from_bytes("gpt_steps.safetensors", DATA).unwrap();
        let (c, _) = read::<i64>(&ctx, &st, "config");
        let (hyper, _) = read::<f64>(&ctx, &st, "hyper");
        assert_eq!(
            hyper,
            [LR, WEIGHT_DECAY],
            "golden made with the workload's AdamW"
        );
        let cfg = GptConfig {
            vocab_size: c[0] as usize,
            block_size: c[1] as usize,
            n_layer: c[2] as usize,
            n_head: c[3] as usize,
            n_embd: c[4] as usize,
            ..GptConfig::default()
        };
        let steps = c[7] as usize;
        // A different seed than anything torch could match: every weight must come from the file.
        let model = Gpt::new(&mut Init::new(&ctx, DType::F32, 12345), &cfg).unwrap();
        let report = model
            .load_parameters(&weights_path(), &LoadOptions::new())
            .unwrap();
        assert!(report.is_complete(), "{report:?}");
        assert_eq!(report.loaded.len(), model.named_parameters().len());
        let (idx, shape) = read::<i64>(&ctx, &st, "idx");
        assert_eq!(shape, [c[5] as usize, c[6] as usize]);
        let (tgt, _) = read::<i64>(&ctx, &st, "tgt");
        let idx = Tensor::constant(&ctx, &idx, &shape).unwrap();
        let tgt = Tensor::constant(&ctx, &tgt, &shape).unwrap();
        let mut w = GptTrain::from_parts(&ctx, model, idx, tgt).unwrap();
        let losses: Vec<f64> = (0..steps).map(|_| w.train_step().unwrap()).collect();
        (losses, w.eval_loss().unwrap())
    };
    assert_eq!(ctx.stats().outstanding, 0);
    out
}

fn check(what: &str, got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: count");
    let mut worst = 0.0f64;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let rel = (g - w).abs() / w.abs();
        assert!(
            rel <= RTOL,
            "{what} {i}: fucina {g} vs torch {w} (relative {rel:e} > {RTOL:e})"
        );
        worst = worst.max(rel);
    }
    worst
}

#[test]
fn gpt_losses_match_torch_over_20_adamw_steps() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let st = SafetensorsFile::from_bytes("gpt_steps.safetensors", DATA).unwrap();
    let (want, _) = read::<f64>(&ctx, &st, "losses");
    let (want_final, _) = read::<f64>(&ctx, &st, "final_loss");
    assert_eq!(want.len(), 20);
    assert!(
        want[19] < want[0] - 0.1,
        "the golden's run must train (losses {want:?})"
    );

    let (losses, fin) = run(2);
    let worst = check("loss of step", &losses, &want).max(check("final loss", &[fin], &want_final));
    eprintln!("gpt steps: worst relative loss difference to torch {worst:e} over 20 steps + final");
    assert!(
        worst <= TIGHT,
        "worst relative loss difference {worst:e} > {TIGHT:e}: within the issue's 1e-3 but \
         larger than rounding explains (a weight-decay or optimizer slip?)"
    );

    let (losses1, fin1) = run(1);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&losses1), bits(&losses), "1 vs 2 threads: bitwise");
    assert_eq!(fin1.to_bits(), fin.to_bits(), "1 vs 2 threads: final loss");
    drop(st);
    assert_eq!(ctx.stats().outstanding, 0);
}
