//! `TransformerBlock` against PyTorch's `nn.TransformerEncoderLayer`
//! (tools/gen_nn_goldens.py): post-LN and pre-LN, exact GELU,
//! bidirectional attention with a key-padding mask; output, input gradient
//! and every parameter's gradient within 1e-10 (f64).

use fucina_autograd::{ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::attention::padding_mask;
use fucina_nn::{Activation, BlockConfig, Init, Module, TransformerBlock};
use safetensors::SafeTensors;

mod common;
use common::{assert_close, f64s, i64s};

const GOLDEN: &[u8] = include_bytes!("goldens/block.safetensors");

fn check(key: &str, norm_first: bool) {
    let st = SafeTensors::deserialize(GOLDEN).unwrap();
    let ctx = ExecContext::with_threads(2).unwrap();
    {
        let cfg = BlockConfig {
            d_model: 8,
            n_head: 2,
            d_ff: 16,
            activation: Activation::Gelu,
            norm_first,
            causal: false,
            ..BlockConfig::default()
        };
        let mut blk =
            TransformerBlock::new(&mut Init::new(&ctx, DType::F64, 0), &cfg, None).unwrap();
        let mut n = 0;
        blk.visit_params_mut("", &mut |name, t| {
            let (v, shape) = f64s(&st, &format!("{key}/param/{name}"));
            t.set_value(ctx.from_slice(&v, &shape).unwrap()).unwrap();
            n += 1;
        });
        assert_eq!(n, 12);
        let (lengths, _) = i64s(&st, "lengths");
        let lengths: Vec<usize> = lengths.iter().map(|&l| l as usize).collect();
        let (xv, shape) = f64s(&st, &format!("{key}/x"));
        let x = Tensor::variable(&ctx, &xv, &shape).unwrap();
        let mask = padding_mask(&ctx, &lengths, shape[1]).unwrap();
        let (gy, _) = f64s(&st, &format!("{key}/gy"));
        {
            let _scope = ctx.scope();
            let y = blk.forward(&x, Some(&mask)).unwrap();
            assert_close(
                &format!("{key} y"),
                &y.to_vec_f64().unwrap(),
                &f64s(&st, &format!("{key}/y")).0,
                1e-10,
            );
            y.backward_with(&ctx.from_slice(&gy, &shape).unwrap())
                .unwrap();
        }
        // A gradient against the golden's `{key}/grad/{name}` within 1e-10.
        let grad_close = |name: &str, t: &Tensor| {
            assert_close(
                &format!("{key} grad {name}"),
                &t.grad().unwrap().to_vec_f64().unwrap(),
                &f64s(&st, &format!("{key}/grad/{name}")).0,
                1e-10,
            );
        };
        grad_close("x", &x);
        for (name, p) in blk.named_parameters() {
            grad_close(&name, &p);
        }
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn post_ln_block_matches_torch_encoder_layer() {
    check("post", false);
}

#[test]
fn pre_ln_block_matches_torch_encoder_layer() {
    check("pre", true);
}
