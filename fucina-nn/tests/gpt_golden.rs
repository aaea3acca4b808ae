//! The GPT against PyTorch's `CharGPT` (tools/gen_nn_goldens.py): same
//! weights loaded by name, then logits, loss and every parameter's gradient
//! compared — f32 within 1e-5 and f64 within 1e-10, relative to each
//! reference tensor's largest magnitude.

use fucina_autograd::{ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::{Gpt, GptConfig, Init, Module};
use safetensors::SafeTensors;

mod common;
use common::{assert_close, count_with_prefix, f64s, i64s};

const GOLDEN: &[u8] = include_bytes!("goldens/gpt.safetensors");

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
        assert_eq!(
            loaded.len(),
            count_with_prefix(&st, &format!("{tag}/param/")),
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
