//! `Rope` and `RopeScaling` against transformers' own rotary code
//! (golden from `tools/gen_rope_goldens.py`): inv_freq for default, linear and
//! llama3 scaling, the float32 cos/sin tables of `LlamaRotaryEmbedding`, and
//! `apply_rotary_pos_emb` on fixed q, k; plus the config parser's and the
//! constructor's errors.

use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_nn::rope::{inv_freq, inv_freq_f32};
use fucina_nn::{Error, Llama3Scaling, Rope, RopeScaling};
use serde_json::{json, Value};

fn golden() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/goldens/rope.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A golden array: every value is an f32 written as a decimal double; serde_json's
/// default parse may miss that double by an ulp, so it is rounded back to its f32.
fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| f64::from(x.as_f64().unwrap() as f32))
        .collect()
}

/// A golden array of integers, nested rows flattened in order.
fn ints(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(a) => a.iter().flat_map(ints).collect(),
        x => vec![x.as_i64().unwrap()],
    }
}

/// An f32 tensor's values, widened to f64.
fn widened(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect()
}

fn assert_rel(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs(),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

fn assert_abs(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol, "{what}[{i}]: got {g}, want {w}");
    }
}

/// `[B, H, T, D]` HF-layout values rotated by `rope` at `pos`, returned in HF's layout.
fn rotate_hf(ctx: &ExecContext, rope: &Rope, v: &[f64], shape: &[usize], pos: &Tensor) -> Vec<f64> {
    let data: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    let x = Tensor::constant(ctx, &data, shape).unwrap();
    let y = rope.apply(&x.permute(&[0, 2, 1, 3]).unwrap(), pos).unwrap();
    widened(&y.permute(&[0, 2, 1, 3]).unwrap().contiguous().unwrap())
}

#[test]
fn matches_transformers() {
    let g = golden();
    let ctx = ExecContext::with_threads(2).unwrap();
    let d = g["head_dim"].as_u64().unwrap() as usize;
    let theta = g["theta"].as_f64().unwrap();
    let p = g["max_positions"].as_u64().unwrap() as usize;
    let shape: Vec<usize> = ints(&g["qk_shape"])
        .into_iter()
        .map(|x| x as usize)
        .collect();
    let posv = ints(&g["positions"]);
    let pos = Tensor::constant(&ctx, &posv, &[shape[0], shape[2]]).unwrap();
    let (q, k) = (floats(&g["q"]), floats(&g["k"]));
    let cases = g["cases"].as_object().unwrap();
    assert_eq!(cases.len(), 3);
    for (name, case) in cases {
        let scaling = RopeScaling::from_hf(Some(&case["rope_scaling"])).unwrap();
        let want_kind = match name.as_str() {
            "default" => matches!(scaling, RopeScaling::Default),
            "linear" => scaling == RopeScaling::Linear { factor: 2.0 },
            "llama3" => matches!(scaling, RopeScaling::Llama3(_)),
            other => panic!("unexpected case {other}"),
        };
        assert!(want_kind, "{name}: parsed {scaling:?}");
        let hf_inv = floats(&case["inv_freq"]);
        // HF computes inv_freq in float32: the f64 frequencies agree to f32 precision,
        // the f32 replication to within an f32 ulp.
        assert_rel(
            &inv_freq(d, theta, &scaling),
            &hf_inv,
            1e-6,
            &format!("{name} inv_freq (f64)"),
        );
        let inv32: Vec<f64> = inv_freq_f32(d, theta, &scaling)
            .into_iter()
            .map(f64::from)
            .collect();
        assert_rel(&inv32, &hf_inv, 1.2e-7, &format!("{name} inv_freq (f32)"));

        let rope = Rope::new(&ctx, DType::F32, d, p, theta, &scaling).unwrap();
        assert_eq!((rope.head_dim(), rope.max_positions()), (d, p));
        assert_eq!(rope.cos.shape(), &[p, d / 2]);
        let (cos, sin) = (widened(&rope.cos), widened(&rope.sin));
        assert_abs(&cos, &floats(&case["cos"]), 1e-6, &format!("{name} cos"));
        assert_abs(&sin, &floats(&case["sin"]), 1e-6, &format!("{name} sin"));

        let qe = rotate_hf(&ctx, &rope, &q, &shape, &pos);
        let ke = rotate_hf(&ctx, &rope, &k, &shape, &pos);
        assert_abs(
            &qe,
            &floats(&case["q_embed"]),
            1e-6,
            &format!("{name} q_embed"),
        );
        assert_abs(
            &ke,
            &floats(&case["k_embed"]),
            1e-6,
            &format!("{name} k_embed"),
        );

        // F64 tables: every step in f64, so they differ from HF's float32 tables only by
        // float32's angle rounding (position ≤ 63: a few 1e-6).
        let r64 = Rope::new(&ctx, DType::F64, d, p, theta, &scaling).unwrap();
        assert_abs(
            &r64.cos.to_vec::<f64>().unwrap(),
            &floats(&case["cos"]),
            2e-5,
            &format!("{name} cos (f64)"),
        );
    }
}

/// Llama3 leaves the high frequencies alone, divides the low ones by the
/// factor and interpolates the band between (the golden's config puts two of
/// the eight there).
#[test]
fn llama3_bands() {
    let s = RopeScaling::Llama3(Llama3Scaling {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 64,
    });
    let base = inv_freq(16, 10000.0, &RopeScaling::Default);
    let l = inv_freq(16, 10000.0, &s);
    assert_eq!(l[0], base[0], "wavelength 2π < 16: unchanged");
    for i in [1, 2] {
        assert!(
            l[i] < base[i] && l[i] > base[i] / 8.0,
            "band {i}: {} vs {}",
            l[i],
            base[i]
        );
    }
    for i in 3..8 {
        assert_eq!(
            l[i],
            base[i] / 8.0,
            "wavelength > 64: divided by the factor"
        );
    }
}

fn config_msg(r: Result<RopeScaling, Error>) -> String {
    match r {
        Err(Error::InvalidConfig { module, msg }) => {
            assert_eq!(module, "RopeScaling");
            msg
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn parser_accepts_hf_forms() {
    assert_eq!(RopeScaling::from_hf(None).unwrap(), RopeScaling::Default);
    assert_eq!(
        RopeScaling::from_hf(Some(&Value::Null)).unwrap(),
        RopeScaling::Default
    );
    let v = json!({"rope_type": "default", "rope_theta": 500000.0});
    assert_eq!(
        RopeScaling::from_hf(Some(&v)).unwrap(),
        RopeScaling::Default
    );
    // Legacy `type`, an integer factor.
    let v = json!({"type": "linear", "factor": 4});
    assert_eq!(
        RopeScaling::from_hf(Some(&v)).unwrap(),
        RopeScaling::Linear { factor: 4.0 }
    );
    // Llama 3.1's own config.
    let v = json!({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"});
    assert_eq!(
        RopeScaling::from_hf(Some(&v)).unwrap(),
        RopeScaling::Llama3(Llama3Scaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192
        })
    );
}

#[test]
fn parser_errors_name_the_type_or_field() {
    let m = config_msg(RopeScaling::from_hf(Some(
        &json!({"rope_type": "yarn", "factor": 4.0}),
    )));
    assert_eq!(
        m,
        "rope_scaling type `yarn` is not supported (supported: default, linear, llama3)"
    );
    let m = config_msg(RopeScaling::from_hf(Some(&json!({"type": "dynamic"}))));
    assert!(m.contains("`dynamic`"), "{m}");
    let m = config_msg(RopeScaling::from_hf(Some(&json!({"rope_type": "linear"}))));
    assert!(m.contains("`factor`"), "{m}");
    let m = config_msg(RopeScaling::from_hf(Some(
        &json!({"rope_type": "linear", "factor": "2"}),
    )));
    assert!(m.contains("`factor`"), "{m}");
    let m = config_msg(RopeScaling::from_hf(Some(
        &json!({"rope_type": "linear", "factor": -1.0}),
    )));
    assert!(m.contains("`factor`"), "{m}");
    let llama = |drop: &str| {
        let mut v = json!({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192, "rope_type": "llama3"});
        v.as_object_mut().unwrap().remove(drop);
        config_msg(RopeScaling::from_hf(Some(&v)))
    };
    for field in [
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "original_max_position_embeddings",
    ] {
        let m = llama(field);
        assert!(m.contains(&format!("`{field}`")), "{field}: {m}");
    }
    let m = config_msg(RopeScaling::from_hf(Some(
        &json!({"factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 81.5, "rope_type": "llama3"}),
    )));
    assert!(m.contains("`original_max_position_embeddings`"), "{m}");
    let m = config_msg(RopeScaling::from_hf(Some(
        &json!({"factor": 8.0, "low_freq_factor": 4.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}),
    )));
    assert!(m.contains("`low_freq_factor`"), "{m}");
    let m = config_msg(RopeScaling::from_hf(Some(&json!({"factor": 8.0}))));
    assert!(m.contains("`rope_type`"), "{m}");
    let m = config_msg(RopeScaling::from_hf(Some(&json!({"rope_type": 3}))));
    assert!(m.contains("`rope_type`"), "{m}");
    let m = config_msg(RopeScaling::from_hf(Some(&json!([1, 2]))));
    assert!(m.contains("object"), "{m}");
}

#[test]
fn constructor_and_apply_errors() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let d = RopeScaling::Default;
    let bad = |r: Result<Rope, Error>, what: &str| match r {
        Err(Error::InvalidConfig { module, msg }) => {
            assert!(
                module == "Rope" || module == "RopeScaling",
                "{what}: {module}"
            );
            msg
        }
        other => panic!("{what}: expected InvalidConfig, got {other:?}"),
    };
    assert!(bad(Rope::new(&ctx, DType::F32, 0, 8, 1e4, &d), "head_dim 0").contains("head_dim"));
    assert!(bad(Rope::new(&ctx, DType::F32, 7, 8, 1e4, &d), "odd").contains("head_dim"));
    assert!(
        bad(Rope::new(&ctx, DType::F32, 8, 0, 1e4, &d), "no positions").contains("max_positions")
    );
    assert!(bad(Rope::new(&ctx, DType::F32, 8, 8, 0.0, &d), "theta").contains("theta"));
    assert!(bad(Rope::new(&ctx, DType::F32, 8, 8, f64::NAN, &d), "nan").contains("theta"));
    assert!(bad(Rope::new(&ctx, DType::I64, 8, 8, 1e4, &d), "dtype").contains("dtype"));
    assert!(bad(
        Rope::new(&ctx, DType::F32, 8, usize::MAX, 1e4, &d),
        "overflow"
    )
    .contains("overflows"));
    let zero = RopeScaling::Linear { factor: 0.0 };
    assert!(bad(Rope::new(&ctx, DType::F32, 8, 8, 1e4, &zero), "factor").contains("factor"));

    let rope = Rope::new(&ctx, DType::F64, 8, 4, 1e4, &d).unwrap();
    let pos = Tensor::constant(&ctx, &[0i64, 1, 2], &[1, 3]).unwrap();
    let x = Tensor::zeros(&ctx, DType::F64, &[1, 3, 2, 6]).unwrap();
    assert!(matches!(
        rope.apply(&x, &pos),
        Err(Error::BadInput { module: "Rope", .. })
    ));
    let x = Tensor::zeros(&ctx, DType::F64, &[1, 3, 2, 8]).unwrap();
    assert!(rope.apply(&x, &pos).is_ok());
    let far = Tensor::constant(&ctx, &[0i64, 1, 4], &[1, 3]).unwrap();
    let e = rope.apply(&x, &far).unwrap_err().to_string();
    assert!(e.starts_with("rope:"), "{e}");
}

/// Gradients flow through `apply` to x (the rotation's transpose), not to the tables.
#[test]
fn apply_is_differentiable_in_x() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let rope = Rope::new(&ctx, DType::F64, 4, 6, 100.0, &RopeScaling::Default).unwrap();
    let x = Tensor::randn(&ctx, DType::F64, &[2, 3, 1, 4], 3)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let pos = Tensor::constant(&ctx, &[0i64, 1, 2, 5, 4, 3], &[2, 3]).unwrap();
    let y = rope.apply(&x, &pos).unwrap();
    // Σ y² = Σ x² (a rotation): its gradient is 2x.
    y.square().unwrap().sum_all().unwrap().backward().unwrap();
    let gx = x.grad().unwrap().to_vec::<f64>().unwrap();
    let xv = x.to_vec::<f64>().unwrap();
    for (g, v) in gx.iter().zip(&xv) {
        assert!((g - 2.0 * v).abs() < 1e-12, "{g} vs {}", 2.0 * v);
    }
    assert!(rope.cos.grad().is_none());
}
