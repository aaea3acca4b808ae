//! PyTorch parity: replays every case of `tests/goldens/ops.safetensors`
//! (written by `tools/gen_op_goldens.py`) and compares forward outputs and
//! input gradients: f64 within 1e-10 and f32 within 1e-5, relative to the
//! largest reference magnitude.

use fucina_autograd::suite::cases;
use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;
use fucina_core::{ExecContext, RawTensor};
use safetensors::{Dtype, SafeTensors};

const GOLDENS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/goldens/ops.safetensors");

fn load(ctx: &ExecContext, st: &SafeTensors, key: &str) -> Option<RawTensor> {
    let v = st.tensor(key).ok()?;
    let shape = v.shape().to_vec();
    let b = v.data();
    Some(match v.dtype() {
        Dtype::F64 => ctx
            .from_slice(&bytemuck::pod_collect_to_vec::<u8, f64>(b), &shape)
            .unwrap(),
        Dtype::F32 => ctx
            .from_slice(&bytemuck::pod_collect_to_vec::<u8, f32>(b), &shape)
            .unwrap(),
        Dtype::I64 => ctx
            .from_slice(&bytemuck::pod_collect_to_vec::<u8, i64>(b), &shape)
            .unwrap(),
        Dtype::U8 => ctx.from_slice(b, &shape).unwrap(),
        d => panic!("{key}: unexpected dtype {d:?}"),
    })
}

fn to_f64(t: &RawTensor) -> Vec<f64> {
    Tensor::from_raw(&TestCtx::with_threads(1).unwrap(), t.clone(), false)
        .unwrap()
        .to_vec_f64()
        .unwrap()
}

/// max |a − b| / max |ref| (infinities must match exactly).
fn rel_err(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()))
        .max(1e-300);
    let mut worst = 0.0f64;
    for (g, w) in got.iter().zip(want) {
        if w.is_infinite() || g.is_infinite() {
            if g != w {
                return f64::INFINITY;
            }
            continue;
        }
        worst = worst.max((g - w).abs() / scale);
    }
    worst
}

#[test]
fn ops_match_pytorch_forward_and_backward() {
    let bytes = std::fs::read(GOLDENS)
        .expect("tests/goldens/ops.safetensors (run tools/gen_op_goldens.py)");
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in cases() {
        for (dname, tol) in [("f64", 1e-10), ("f32", 1e-5)] {
            let key = format!("{dname}/{}", case.name);
            let Some(out_ref) = load(&ctx, &st, &format!("{key}/out")) else {
                failures.push(format!(
                    "{key}: no golden (regenerate with tools/gen_op_goldens.py)"
                ));
                continue;
            };
            let inputs: Vec<Tensor> = (0..case.inputs.len())
                .map(|i| {
                    let r = load(&ctx, &st, &format!("{key}/in{i}")).unwrap();
                    let float = r.dtype().is_float();
                    Tensor::from_raw(&ctx, r, float).unwrap()
                })
                .collect();
            let y = (case.f)(&inputs).unwrap();
            let e = rel_err(&y.to_vec_f64().unwrap(), &to_f64(&out_ref));
            if e.is_nan() || e > tol {
                failures.push(format!("{key}: forward rel err {e:e}"));
            }
            let gy = load(&ctx, &st, &format!("{key}/gy")).unwrap();
            y.backward_with(&gy).unwrap();
            for (i, x) in inputs.iter().enumerate() {
                if let Some(g_ref) = load(&ctx, &st, &format!("{key}/grad{i}")) {
                    let g = x
                        .grad_raw()
                        .map(|g| to_f64(&g))
                        .unwrap_or_else(|| vec![0.0; x.numel()]);
                    let e = rel_err(&g, &to_f64(&g_ref));
                    if e.is_nan() || e > tol {
                        failures.push(format!("{key}: grad{i} rel err {e:e}"));
                    }
                }
            }
            checked += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 2 * 90, "only {checked} cases checked");
}
