//! The GPT against PyTorch's `CharGPT` (tools/gen_nn_goldens.py): same
//! weights loaded by name, then logits, loss and every parameter's gradient
//! compared — f32 within 1e-5 and f64 within 1e-10, relative to each
//! reference tensor's largest magnitude.

use fucina_autograd::{ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::{Gpt, GptConfig, Init, Module};
use safetensors::{Dtype, SafeTensors};

const GOLDEN: &[u8] = include_bytes!("goldens/gpt.safetensors");

fn f64s(st: &SafeTensors, name: &str) -> (Vec<f64>, Vec<usize>) {
    let t = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("golden `{name}`: {e}"));
    let d = t.data();
    let v = match t.dtype() {
        Dtype::F32 => d
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        Dtype::F64 => d
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        other => panic!("golden `{name}`: unexpected dtype {other:?}"),
    };
    (v, t.shape().to_vec())
}

fn i64s(st: &SafeTensors, name: &str) -> (Vec<i64>, Vec<usize>) {
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), Dtype::I64);
    let v = t
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (v, t.shape().to_vec())
}

fn assert_close(name: &str, got: &[f64], want: &[f64], rtol: f64) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
    let worst = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .enumerate()
        .fold((0, 0.0f64), |w, (i, e)| if e > w.1 { (i, e) } else { w });
    assert!(
        worst.1 <= rtol * scale,
        "{name}: element {} differs by {:e} (tolerance {:e}): got {} want {}",
        worst.0,
        worst.1,
        rtol * scale,
        got[worst.0],
        want[worst.0]
    );
}

fn check(dtype: DType, tag: &str, rtol: f64) {
    let st = SafeTensors::deserialize(GOLDEN).unwrap();
    let (cfgv, _) = i64s(&st, "config");
    let cfg = GptConfig {
        vocab_size: cfgv[0] as usize,
        block_size: cfgv[1] as usize,
        n_layer: cfgv[2] as usize,
        n_head: cfgv[3] as usize,
        n_embd: cfgv[4] as usize,
        ..GptConfig::default()
    };
    let ctx = ExecContext::with_threads(2).unwrap();
    {
        let mut gpt = Gpt::new(&mut Init::new(&ctx, dtype, 0), &cfg).unwrap();
        // Load every parameter by name; every golden parameter must be used.
        let mut loaded = Vec::new();
        gpt.visit_params_mut("", &mut |name, t| {
            let (v, shape) = f64s(&st, &format!("{tag}/param/{name}"));
            assert_eq!(shape, t.shape(), "{name}: shape");
            let raw = ctx.from_slice(&v, &shape).unwrap();
            t.set_value(ctx.to_dtype(&raw, dtype).unwrap()).unwrap();
            loaded.push(name.to_string());
        });
        let golden_params = st
            .names()
            .into_iter()
            .filter(|n| n.starts_with(&format!("{tag}/param/")))
            .count();
        assert_eq!(
            loaded.len(),
            golden_params,
            "every golden parameter is a model parameter"
        );
        let (idx, shape) = i64s(&st, "idx");
        let (tgt, _) = i64s(&st, "tgt");
        let idx = Tensor::constant(&ctx, &idx, &shape).unwrap();
        let tgt = Tensor::constant(&ctx, &tgt, &shape).unwrap();
        {
            let _scope = ctx.scope();
            let logits = gpt.forward(&idx).unwrap();
            assert_close(
                "logits",
                &logits.to_vec_f64().unwrap(),
                &f64s(&st, &format!("{tag}/logits")).0,
                rtol,
            );
            let loss = gpt.loss(&idx, &tgt).unwrap();
            assert_close(
                "loss",
                &loss.to_vec_f64().unwrap(),
                &f64s(&st, &format!("{tag}/loss")).0,
                rtol,
            );
            loss.backward().unwrap();
        }
        for (name, p) in gpt.named_parameters() {
            let g = p.grad().unwrap_or_else(|| panic!("{name}: no gradient"));
            let (want, _) = f64s(&st, &format!("{tag}/grad/{name}"));
            assert_close(
                &format!("grad {name}"),
                &g.to_vec_f64().unwrap(),
                &want,
                rtol,
            );
        }
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn gpt_matches_torch_f32() {
    check(DType::F32, "f32", 1e-5);
}

#[test]
fn gpt_matches_torch_f64() {
    check(DType::F64, "f64", 1e-10);
}
