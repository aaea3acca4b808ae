//! RoPE against transformers (`tools/gen_rope_goldens.py`): the inverse
//! frequencies of `default`, `linear` and `llama3` scaling, llama3's f32
//! cos/sin tables, and rotate-half applied to fixed q and k at scattered
//! positions; an f64 gradcheck of `Rope::apply`; scaling parse errors.

use fucina_autograd::{gradcheck, GradcheckOpts, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::rope::inv_freq;
use fucina_nn::{Rope, RopeScaling};
use serde_json::{json, Value};

fn golden() -> Value {
    serde_json::from_str(include_str!("goldens/rope.json")).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(name: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{name}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * b.abs().max(1.0),
            "{name}[{i}]: {a} vs {b}"
        );
    }
}

#[test]
fn inv_freq_matches_transformers() {
    let g = golden();
    let llama3 = RopeScaling::from_hf(Some(&g["llama3"])).unwrap();
    for (name, s) in [
        ("default", RopeScaling::Default),
        ("linear", RopeScaling::Linear { factor: 2.0 }),
        ("llama3", llama3),
    ] {
        // transformers returns float32 frequencies: compare at f32's resolution.
        close(
            name,
            &inv_freq(16, 10000.0, &s),
            &floats(&g[format!("inv_freq_{name}")]),
            1e-6,
        );
    }
}

#[test]
fn llama3_tables_and_rotation_match_transformers() {
    let g = golden();
    let ctx = ExecContext::with_threads(1).unwrap();
    let s = RopeScaling::from_hf(Some(&g["llama3"])).unwrap();
    let rope = Rope::new(&ctx, DType::F32, 16, 64, 10000.0, &s).unwrap();
    // Row p of the tables is [c, c]: compare its first half.
    let half = |t: &Tensor| -> Vec<f64> {
        let v = t.to_vec_f64().unwrap();
        v.chunks(16).flat_map(|r| r[..8].to_vec()).collect()
    };
    close("cos", &half(&rope.cos), &floats(&g["cos_llama3"]), 1e-6);
    close("sin", &half(&rope.sin), &floats(&g["sin_llama3"]), 1e-6);
    let pos: Vec<i64> = g["positions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    let positions = Tensor::constant(&ctx, &pos, &[1, 5]).unwrap();
    for (x, want) in [("q", "q_rot"), ("k", "k_rot")] {
        // The golden is [B, H, T, D]; Rope::apply takes [B, T, H, D].
        let v: Vec<f32> = floats(&g[x]).into_iter().map(|f| f as f32).collect();
        let t = Tensor::constant(&ctx, &v, &[1, 2, 5, 16])
            .unwrap()
            .permute(&[0, 2, 1, 3])
            .unwrap();
        let y = rope
            .apply(&t, &positions)
            .unwrap()
            .permute(&[0, 2, 1, 3])
            .unwrap()
            .contiguous()
            .unwrap();
        close(want, &y.to_vec_f64().unwrap(), &floats(&g[want]), 1e-6);
    }
}

#[test]
fn rope_apply_gradcheck_f64() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let s = RopeScaling::Linear { factor: 2.0 };
    let rope = Rope::new(&ctx, DType::F64, 6, 9, 100.0, &s).unwrap();
    let x = Tensor::randn(&ctx, DType::F64, &[2, 3, 2, 6], 3)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let pos = Tensor::constant(&ctx, &[1i64, 0, 8, 2, 5, 3], &[2, 3]).unwrap();
    let f = |xs: &[Tensor]| Ok(rope.apply(&xs[0], &pos).expect("rope.apply"));
    let report = gradcheck(f, &[x], &GradcheckOpts::default()).unwrap();
    assert!(report.checked > 0);
}

#[test]
fn unsupported_scalings_are_errors_naming_them() {
    let e = RopeScaling::from_hf(Some(&json!({"rope_type": "yarn", "factor": 4.0}))).unwrap_err();
    assert!(e.to_string().contains("yarn"), "{e}");
    let e = RopeScaling::from_hf(Some(&json!({"type": "linear"}))).unwrap_err();
    assert!(e.to_string().contains("factor"), "{e}");
    let e = RopeScaling::from_hf(Some(&json!({"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 4.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 32})))
    .unwrap_err();
    assert!(e.to_string().contains("high_freq_factor"), "{e}");
    assert_eq!(RopeScaling::from_hf(None).unwrap(), RopeScaling::Default);
    assert!(Rope::new(
        &ExecContext::with_threads(1).unwrap(),
        DType::F32,
        7,
        4,
        1e4,
        &RopeScaling::Default
    )
    .is_err());
}
