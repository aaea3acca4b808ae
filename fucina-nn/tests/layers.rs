//! Layer construction and forward errors, shapes and serde names.

use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use fucina_nn::{
    Activation, Dist, Dropout, Embedding, Error, Init, LayerNorm, Linear, Mlp, Module, RmsNorm,
};

#[test]
fn bad_configs_are_structured_errors() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let mut init = Init::new(&ctx, DType::F32, 0);
        let cfg = |r: Result<(), Error>, module: &str| match r {
            Err(Error::InvalidConfig { module: m, .. }) => assert_eq!(m, module),
            other => panic!("{module}: expected InvalidConfig, got {other:?}"),
        };
        cfg(Linear::new(&mut init, 0, 3, true).map(drop), "Linear");
        cfg(Embedding::new(&mut init, 3, 0).map(drop), "Embedding");
        cfg(LayerNorm::new(&mut init, 3, -1.0).map(drop), "LayerNorm");
        cfg(RmsNorm::new(&mut init, 0, 1e-6).map(drop), "RmsNorm");
        cfg(Dropout::with_seed(&ctx, 1.0, 0).map(drop), "Dropout");
        cfg(Mlp::new(&mut init, &[3], Activation::Relu).map(drop), "Mlp");
        cfg(
            init.param(
                &[2],
                Dist::Normal {
                    mean: 0.0,
                    std: -1.0,
                },
            )
            .map(drop),
            "Dist",
        );
        cfg(
            Init::new(&ctx, DType::I64, 0)
                .param(&[2], Dist::Zeros)
                .map(drop),
            "Init",
        );
        let w = Tensor::variable(&ctx, &[0.0f32; 6], &[2, 3]).unwrap();
        let b = Tensor::variable(&ctx, &[0.0f32; 3], &[3]).unwrap();
        cfg(Linear::from_tensors(w, Some(b)).map(drop), "Linear");
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn wrong_input_width_names_the_module_and_shape() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let mut init = Init::new(&ctx, DType::F32, 0);
        let x = Tensor::constant(&ctx, &[0.0f32; 8], &[2, 4]).unwrap();
        match Linear::new(&mut init, 3, 2, true).unwrap().forward(&x) {
            Err(Error::BadInput {
                module: "Linear",
                shape,
                ..
            }) => assert_eq!(shape, [2, 4]),
            other => panic!("expected BadInput, got {other:?}"),
        }
        let e = LayerNorm::new(&mut init, 3, 1e-5)
            .unwrap()
            .forward(&x)
            .unwrap_err();
        assert!(
            e.to_string().contains("LayerNorm") && e.to_string().contains("[2, 4]"),
            "{e}"
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn pytorch_default_init_bounds() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let mut init = Init::new(&ctx, DType::F64, 1);
        let lin = Linear::new(&mut init, 16, 32, true).unwrap();
        let bound = 0.25;
        for p in lin.parameters() {
            let v = p.to_vec::<f64>().unwrap();
            assert!(v.iter().all(|x| x.abs() <= bound));
            assert!(v.iter().any(|x| x.abs() > 0.8 * bound), "fills the range");
        }
        let emb = Embedding::new(&mut init, 100, 50).unwrap();
        let v = emb.weight.to_vec::<f64>().unwrap();
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let s = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        assert!(
            m.abs() < 0.05 && (s - 1.0).abs() < 0.05,
            "N(0, 1): mean {m} std {s}"
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn activation_serde_uses_hugging_face_names() {
    let parse = |s: &str| serde_json::from_str::<Activation>(&format!("\"{s}\"")).unwrap();
    assert_eq!(parse("gelu"), Activation::Gelu);
    assert_eq!(parse("gelu_new"), Activation::GeluTanh);
    assert_eq!(parse("gelu_pytorch_tanh"), Activation::GeluTanh);
    assert_eq!(parse("relu"), Activation::Relu);
    assert_eq!(parse("swish"), Activation::Silu);
    assert_eq!(parse("mish"), Activation::Mish);
    assert_eq!(parse("hardswish"), Activation::Hardswish);
    assert_eq!(parse("softplus"), Activation::Softplus);
    assert!(serde_json::from_str::<Activation>("\"nope\"").is_err());
}
