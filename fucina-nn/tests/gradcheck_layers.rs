//! `gradcheck_module` over every layer of the crate (f64, PyTorch's
//! tolerances): every trainable parameter and every differentiable input,
//! and a failing case that names the parameter.

use fucina_autograd::{GradcheckOpts, Tensor};
use fucina_core::{rng, DType, ExecContext};
use fucina_nn::attention::padding_mask;
use fucina_nn::{
    gradcheck_module, gradcheck_module_with, Activation, BlockConfig, Dropout, Embedding, Error,
    Gpt, GptConfig, Init, LayerNorm, Linear, Mlp, Module, RmsNorm, SelfAttention, Sequential,
    TransformerBlock,
};

fn ctx() -> ExecContext {
    ExecContext::with_threads(2).unwrap()
}

fn init(ctx: &ExecContext) -> Init {
    Init::new(ctx, DType::F64, 42)
}

/// A variable with values in ±[0.1, 1.1) (away from relu's kink at 0).
fn input(ctx: &ExecContext, shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n as u64)
        .map(|i| {
            let u = rng::uniform(seed, i);
            if u < 0.5 {
                -0.1 - 2.0 * u
            } else {
                0.1 + 2.0 * (u - 0.5)
            }
        })
        .collect();
    Tensor::variable(ctx, &v, shape).unwrap()
}

fn opts() -> GradcheckOpts {
    GradcheckOpts::f64()
}

#[test]
fn linear_with_and_without_bias() {
    let ctx = ctx();
    {
        let mut init = init(&ctx);
        let lin = Linear::new(&mut init, 4, 3, true).unwrap();
        let r = gradcheck_module(&lin, &input(&ctx, &[2, 2, 4], 1), &opts()).unwrap();
        assert_eq!(r.tensors, ["input.0", "weight", "bias"]);
        assert_eq!(r.checked, 16 + 12 + 3);
        let lin = Linear::new(&mut init, 4, 3, false).unwrap();
        let r = gradcheck_module(&lin, &input(&ctx, &[3, 4], 2), &opts()).unwrap();
        assert_eq!(r.tensors, ["input.0", "weight"]);
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn embedding_with_repeated_ids() {
    let ctx = ctx();
    {
        let emb = Embedding::new(&mut init(&ctx), 5, 3).unwrap();
        let ids = Tensor::constant(&ctx, &[0i64, 4, 4, 2, 0, 1], &[2, 3]).unwrap();
        let r = gradcheck_module(&emb, &ids, &opts()).unwrap();
        assert_eq!(r.tensors, ["weight"]);
        assert_eq!(r.checked, 15);
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn norms() {
    let ctx = ctx();
    {
        let mut init = init(&ctx);
        let ln = LayerNorm::new(&mut init, 5, 1e-5).unwrap();
        // Non-trivial affine parameters so their gradients are exercised.
        ln.weight
            .set_value(input(&ctx, &[5], 3).raw().unwrap())
            .unwrap();
        let r = gradcheck_module(&ln, &input(&ctx, &[3, 5], 4), &opts()).unwrap();
        assert_eq!(r.tensors, ["input.0", "weight", "bias"]);
        let ln = LayerNorm::with_bias(&mut init, 5, 1e-5, false).unwrap();
        gradcheck_module(&ln, &input(&ctx, &[3, 5], 5), &opts()).unwrap();
        let rms = RmsNorm::new(&mut init, 5, 1e-6).unwrap();
        rms.weight
            .set_value(input(&ctx, &[5], 6).raw().unwrap())
            .unwrap();
        let r = gradcheck_module(&rms, &input(&ctx, &[2, 2, 5], 7), &opts()).unwrap();
        assert_eq!(r.tensors, ["input.0", "weight"]);
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn activations() {
    let ctx = ctx();
    {
        for act in [
            Activation::Relu,
            Activation::Gelu,
            Activation::GeluTanh,
            Activation::Tanh,
            Activation::Sigmoid,
            Activation::Silu,
            Activation::Softplus,
            Activation::Mish,
            Activation::Hardswish,
            Activation::Identity,
        ] {
            let r = gradcheck_module(&act, &input(&ctx, &[2, 6], 8), &opts())
                .unwrap_or_else(|e| panic!("{act:?}: {e}"));
            assert_eq!(r.checked, 12, "{act:?}");
        }
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn dropout_in_training_with_a_replayed_mask() {
    let ctx = ctx();
    {
        let drop = Dropout::with_seed(&ctx, 0.3, 9).unwrap();
        // Each forward draws a new mask; replaying call 0 fixes it for the check.
        let r = gradcheck_module_with(
            &drop,
            &[input(&ctx, &[4, 8], 10)],
            |m, xs| {
                m.set_calls(0).unwrap();
                m.forward(&xs[0])
            },
            &opts(),
        )
        .unwrap();
        assert_eq!(r.checked, 32);
        drop.eval();
        gradcheck_module(&drop, &input(&ctx, &[4, 8], 10), &opts()).unwrap();
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn sequential_and_mlp() {
    let ctx = ctx();
    {
        let mut init = init(&ctx);
        let seq = Sequential::new()
            .with(Linear::new(&mut init, 3, 4, true).unwrap())
            .with(Activation::Tanh)
            .with(LayerNorm::new(&mut init, 4, 1e-5).unwrap())
            .with(Linear::new(&mut init, 4, 2, true).unwrap());
        let r = gradcheck_module(&seq, &input(&ctx, &[2, 3], 11), &opts()).unwrap();
        assert_eq!(
            r.tensors,
            ["input.0", "0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"]
        );
        let mlp = Mlp::new(&mut init, &[3, 5, 5, 2], Activation::Silu).unwrap();
        let r = gradcheck_module(&mlp, &input(&ctx, &[2, 3], 12), &opts()).unwrap();
        assert_eq!(r.tensors.len(), 7);
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn attention_causal_and_padded() {
    let ctx = ctx();
    {
        let mut init = init(&ctx);
        let attn = SelfAttention::new(&mut init, 6, 2, true).unwrap();
        let x = input(&ctx, &[2, 3, 6], 13);
        let r = gradcheck_module_with(
            &attn,
            std::slice::from_ref(&x),
            |m, xs| m.forward(&xs[0], None),
            &opts(),
        )
        .unwrap();
        assert_eq!(
            r.tensors,
            [
                "input.0",
                "qkv.weight",
                "qkv.bias",
                "proj.weight",
                "proj.bias"
            ]
        );
        let enc = SelfAttention::new(&mut init, 6, 3, false).unwrap();
        let mask = padding_mask(&ctx, &[2, 3], 3).unwrap();
        gradcheck_module_with(&enc, &[x], |m, xs| m.forward(&xs[0], Some(&mask)), &opts()).unwrap();
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn transformer_blocks_pre_and_post_ln() {
    let ctx = ctx();
    {
        let mut init = init(&ctx);
        for norm_first in [true, false] {
            let cfg = BlockConfig {
                d_model: 4,
                n_head: 2,
                d_ff: 8,
                norm_first,
                causal: norm_first,
                activation: if norm_first {
                    Activation::GeluTanh
                } else {
                    Activation::Gelu
                },
                ..BlockConfig::default()
            };
            let blk = TransformerBlock::new(&mut init, &cfg, None).unwrap();
            let mask = padding_mask(&ctx, &[3, 2], 3).unwrap();
            let r = gradcheck_module_with(
                &blk,
                &[input(&ctx, &[2, 3, 4], 14)],
                |m, xs| m.forward(&xs[0], Some(&mask)),
                &opts(),
            )
            .unwrap_or_else(|e| panic!("norm_first {norm_first}: {e}"));
            assert_eq!(r.tensors.len(), 1 + 12);
        }
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn tiny_gpt_every_parameter() {
    let ctx = ctx();
    {
        let cfg = GptConfig {
            vocab_size: 7,
            block_size: 4,
            n_layer: 2,
            n_head: 2,
            n_embd: 4,
            init_std: 0.5,
            ..GptConfig::default()
        };
        let gpt = Gpt::new(&mut init(&ctx), &cfg).unwrap();
        let ids = Tensor::constant(&ctx, &[1i64, 5, 6, 0, 2, 2], &[2, 3]).unwrap();
        let tgt = Tensor::constant(&ctx, &[5i64, 6, 0, 2, 2, 3], &[2, 3]).unwrap();
        let r = gradcheck_module_with(
            &gpt,
            std::slice::from_ref(&ids),
            |m, xs| m.loss(&xs[0], &tgt),
            &opts(),
        )
        .unwrap();
        assert_eq!(r.checked, gpt.num_parameters());
        assert_eq!(r.tensors.len(), gpt.parameters().len());
        let untied = Gpt::new(
            &mut init(&ctx),
            &GptConfig {
                tied_head: false,
                ..cfg
            },
        )
        .unwrap();
        assert!(untied.parameter("lm_head.weight").is_some());
        gradcheck_module_with(&untied, &[ids], |m, xs| m.forward(&xs[0]), &opts()).unwrap();
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn a_wrong_gradient_names_the_parameter() {
    // A layer whose forward detaches its bias: backward gives the bias no
    // gradient, finite differences see it.
    #[derive(Module)]
    struct Cut {
        lin: Linear,
    }
    let ctx = ctx();
    {
        let m = Cut {
            lin: Linear::new(&mut init(&ctx), 3, 2, true).unwrap(),
        };
        let err = gradcheck_module_with(
            &m,
            &[input(&ctx, &[2, 3], 15)],
            |m, xs| {
                let b = m.lin.bias.as_ref().unwrap().detach()?;
                Ok(xs[0].linear(&m.lin.weight, Some(&b))?)
            },
            &opts(),
        )
        .unwrap_err();
        let msg = err.to_string();
        match err {
            Error::GradcheckFailed {
                name,
                index,
                failure,
                ..
            } => {
                assert_eq!(name, "lin.bias");
                // Both bias elements get no gradient; the worst is either.
                assert!(index < 2);
                assert_eq!(failure.failing, 2);
                assert_eq!(failure.op.as_deref(), Some("Cut"));
                for want in [
                    "for `Cut`",
                    "(`lin.bias`) of shape [2]",
                    "2 of 14 elements fail",
                ] {
                    assert!(msg.contains(want), "missing {want:?} in {msg}");
                }
            }
            other => panic!("expected GradcheckFailed, got {other}"),
        }
    }
    assert_eq!(ctx.stats().outstanding, 0);
}
