//! Sizes from arguments and shapes that cannot be allocated are clean
//! errors, never an abort, and nothing is filled before the pool is asked:
//! a 10000×10000 `Linear` under a 1 MiB pool limit, LoRA's `r`,
//! `padding_mask`, `from_ndarray` of a broadcast view, `Display` of a
//! broadcast tensor (it reads only what it prints). One test, so the process's peak RSS (`VmHWM`) is this
//! test's own.

mod common;

use common::peak_kb;
use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_nn::{apply_lora, Init, Linear, LoraConfig};

const HUGE: usize = 1 << 40;

#[derive(fucina_nn::Module)]
struct Proj {
    proj: Linear,
}

#[test]
fn huge_sizes_are_clean_errors_before_anything_is_filled() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let before = peak_kb();
    {
        // The pool's limit holds for parameters: nothing filled on the host first.
        ctx.pool().set_memory_limit(Some(1 << 20));
        let mut init = Init::new(&ctx, DType::F32, 0);
        assert!(Linear::new(&mut init, 10_000, 10_000, true).is_err());
        ctx.pool().set_memory_limit(None);

        // LoRA's r sizes its matrices: a clean error from the pool.
        let mut m = Proj {
            proj: Linear::new(&mut init, 4, 4, false).unwrap(),
        };
        let e = apply_lora(&mut m, &LoraConfig::new(HUGE, 16.0, &["proj"]), &mut init)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("out of memory") || e.contains("overflow"),
            "LoRA r 2^40: {e}"
        );
        assert!(m.proj.lora.is_none());

        let e = fucina_nn::attention::padding_mask(&ctx, &[1, 2], HUGE);
        assert!(e.is_err(), "a 2^41-element mask must not build");

        let one = ndarray::ArrayD::<f32>::from_elem(ndarray::IxDyn(&[1, 1]), 1.0);
        let wide = one.broadcast(ndarray::IxDyn(&[1 << 20, 1 << 20])).unwrap();
        assert!(ctx.from_ndarray(&wide).is_err());

        let t = Tensor::constant(&ctx, &[1.5f32], &[1, 1]).unwrap();
        let b = t.broadcast_to(&[1 << 20, 1 << 20]).unwrap();
        let shown = format!("{b}");
        assert!(shown.contains("1.5000") && shown.contains("..."), "{shown}");
        // A short first axis over a huge second one: cutting axis 0 first
        // would copy 6 x 2^30 elements; only the corners are copied.
        let b = t.broadcast_to(&[7, 1 << 30]).unwrap();
        let shown = format!("{b}");
        assert!(shown.contains("1.5000") && shown.contains("..."), "{shown}");
    }
    let peak = peak_kb();
    assert!(
        peak.saturating_sub(before) < 100 * 1024,
        "peak grew by {} kB",
        peak - before
    );
    assert_eq!(ctx.stats().outstanding, 0);
}
