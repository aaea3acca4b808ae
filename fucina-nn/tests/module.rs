//! The Module trait and its derive: names (fields, Vec, Option, rename,
//! flatten, skip, tuple structs), dedup of tied tensors, modes, freezing by
//! pattern, groups, zero_grad, the mutable visit, and deterministic init.

mod common;

use common::f32_bits;
use fucina_autograd::{ScopeExt, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::module::matches;
use fucina_nn::{Dist, Dropout, Init, LayerNorm, Linear, Module};

#[derive(Module)]
struct Inner {
    lin: Linear,
    drop: Dropout,
}

#[derive(Module)]
struct Pair(Tensor, Option<Tensor>);

#[derive(Module)]
struct Outer {
    #[module(rename = "LayerNorm")]
    norm: LayerNorm,
    layer: Vec<Inner>,
    #[module(flatten)]
    flat: Pair,
    head: Option<Linear>,
    #[module(skip)]
    _width: usize,
}

fn build(ctx: &ExecContext, seed: u64) -> Outer {
    let mut init = Init::new(ctx, DType::F32, seed);
    let mut inner = || Inner {
        lin: Linear::new(&mut init, 3, 3, true).unwrap(),
        drop: Dropout::new(&mut init, 0.5).unwrap(),
    };
    let layer = vec![inner(), inner()];
    let mut init = Init::new(ctx, DType::F32, seed ^ 1);
    Outer {
        norm: LayerNorm::new(&mut init, 3, 1e-5).unwrap(),
        layer,
        flat: Pair(init.param(&[2], Dist::Ones).unwrap(), None),
        head: None,
        _width: 3,
    }
}

#[test]
fn derive_names_every_parameter_in_order() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let m = build(&ctx, 0);
        let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "LayerNorm.weight",
                "LayerNorm.bias",
                "layer.0.lin.weight",
                "layer.0.lin.bias",
                "layer.1.lin.weight",
                "layer.1.lin.bias",
                "0",
            ]
        );
        assert_eq!(m.num_parameters(), 3 + 3 + 2 * (9 + 3) + 2);
        assert_eq!(m.parameter("layer.1.lin.bias").unwrap().shape(), &[3]);
        assert!(m.parameter("layer.2.lin.bias").is_none());
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn tied_tensor_is_listed_once() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let w = Tensor::variable(&ctx, &[1.0f32; 4], &[2, 2]).unwrap();
        let p = Pair(w.clone(), Some(w));
        let named = p.named_parameters();
        assert_eq!(named.len(), 1);
        assert_eq!(named[0].0, "0");
        assert_eq!(p.num_parameters(), 4);
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn train_eval_reaches_nested_dropout() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let m = build(&ctx, 0);
        assert!(m.layer.iter().all(|l| l.drop.mode.is_training()));
        m.eval();
        assert!(m.layer.iter().all(|l| !l.drop.mode.is_training()));
        let x = Tensor::constant(&ctx, &[1.0f32; 16], &[16]).unwrap();
        assert_eq!(
            m.layer[1]
                .drop
                .forward(&x)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![1.0; 16]
        );
        m.train();
        assert!(m.layer.iter().all(|l| l.drop.mode.is_training()));
        let y = m.layer[1]
            .drop
            .forward(&x)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert!(y.contains(&0.0) && y.contains(&2.0));
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn patterns_glob_and_substring() {
    assert!(matches("*.bias", "layer.0.lin.bias"));
    assert!(matches("layer.*.lin.*", "layer.10.lin.weight"));
    assert!(!matches("layer.*.lin.bias", "layer.0.lin.weight"));
    assert!(matches("lin", "layer.0.lin.weight"));
    assert!(!matches("LayerNorm.bias", "LayerNorm.weight"));
    assert!(matches("*", "anything"));
    assert!(matches("", "anything"));
    assert!(matches("a*b*c", "aXbYbc"));
    assert!(!matches("a*b*c", "aXbYbcd"));
}

#[test]
fn freeze_unfreeze_and_groups() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let m = build(&ctx, 0);
        assert_eq!(m.freeze("layer.*"), 4);
        assert_eq!(m.trainable_parameters().len(), 3);
        assert!(!m.layer[0].lin.weight.requires_grad());
        assert_eq!(m.unfreeze("*.bias"), 3);
        assert_eq!(m.trainable_parameters().len(), 5);
        m.unfreeze("");
        let groups = m.param_groups(&mut |name, _| usize::from(name.ends_with("bias")));
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].len(), 4);
        assert_eq!(groups[1].len(), 3);
        let [decay, no_decay] = m.decay_groups();
        assert_eq!(decay.len(), 2); // the two [3, 3] weights
        assert_eq!(no_decay.len(), 5);
        m.freeze("LayerNorm");
        let [_, no_decay] = m.decay_groups();
        assert_eq!(
            no_decay.len(),
            3,
            "frozen parameters are left out of groups"
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn zero_grad_clears_every_parameter() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let m = build(&ctx, 0);
        m.eval();
        {
            let _s = ctx.scope();
            let x = Tensor::constant(&ctx, &[0.5f32; 6], &[2, 3]).unwrap();
            let h = m.norm.forward(&x).unwrap();
            let y = m.layer[0].lin.forward(&h).unwrap();
            let y = m.layer[1].lin.forward(&y).unwrap();
            y.sum_all().unwrap().backward().unwrap();
        }
        assert!(m.layer[1].lin.weight.grad().is_some());
        m.zero_grad();
        assert!(m.parameters().iter().all(|p| p.grad().is_none()));
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn visit_mut_replaces_parameters_by_name() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let mut m = build(&ctx, 0);
        let mut seen = Vec::new();
        m.visit_params_mut("model", &mut |name, t| {
            seen.push(name.to_string());
            if name == "model.LayerNorm.bias" {
                *t = Tensor::variable(&ctx, &[7.0f32; 3], &[3]).unwrap();
            }
        });
        assert_eq!(seen[0], "model.LayerNorm.weight");
        assert_eq!(seen.len(), 7);
        assert_eq!(
            m.norm.bias.as_ref().unwrap().to_vec::<f32>().unwrap(),
            vec![7.0; 3]
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn same_seed_same_weights_any_thread_count() {
    let c1 = ExecContext::with_threads(1).unwrap();
    let c2 = ExecContext::with_threads(2).unwrap();
    {
        let bits = |m: &Outer| -> Vec<Vec<u32>> { m.parameters().iter().map(f32_bits).collect() };
        let (a, b, c) = (build(&c1, 5), build(&c2, 5), build(&c1, 6));
        assert_eq!(bits(&a), bits(&b));
        assert_ne!(bits(&a), bits(&c));
        // Kaiming-uniform bounds: |w| ≤ 1/√3 for in_features 3.
        let w = a.layer[0].lin.weight.to_vec::<f32>().unwrap();
        assert!(w.iter().all(|x| x.abs() <= 1.0 / 3f32.sqrt()));
        assert_ne!(
            w,
            a.layer[1].lin.weight.to_vec::<f32>().unwrap(),
            "each parameter has its own stream"
        );
    }
    assert_eq!(c1.stats().outstanding, 0);
    assert_eq!(c2.stats().outstanding, 0);
}

#[derive(Module)]
struct Wrap<T: Module> {
    inner: T,
}

#[test]
fn typed_sub_module_visits() {
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let mut m = build(&ctx, 0);
        let mut all = Vec::new();
        m.visit_modules("", &mut |p, _| all.push(p.to_string()));
        // Parents first; Vec/Option are transparent; the flattened Pair shares the root path.
        assert_eq!(
            all,
            [
                "",
                "LayerNorm",
                "layer.0",
                "layer.0.lin",
                "layer.0.drop",
                "layer.1",
                "layer.1.lin",
                "layer.1.drop",
                ""
            ]
        );
        let mut lins = Vec::new();
        fucina_nn::module::for_each::<Linear, _>(&m, |p, l| {
            lins.push((p.to_string(), l.in_features()))
        });
        assert_eq!(
            lins,
            [
                ("layer.0.lin".to_string(), 3),
                ("layer.1.lin".to_string(), 3)
            ]
        );
        // Swap the bias of every Linear under `layer.1` for a fresh one.
        fucina_nn::module::for_each_mut::<Linear, _>(&mut m, |p, l| {
            if matches("layer.1.*", p) {
                l.bias = Some(Tensor::variable(&ctx, &[9.0f32; 3], &[3]).unwrap());
            }
        });
        assert_eq!(
            m.parameter("layer.1.lin.bias")
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![9.0; 3]
        );
        assert_ne!(
            m.parameter("layer.0.lin.bias")
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![9.0; 3]
        );
        // Generic modules derive too.
        let w = Wrap { inner: m };
        assert_eq!(w.named_parameters()[0].0, "inner.LayerNorm.weight");
        w.eval();
        assert!(!w.inner.layer[0].drop.mode.is_training());
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn load_state_dict_with_a_released_parameter_changes_nothing() {
    use fucina_autograd::{ExecScope, LoadOptions};
    use fucina_nn::StateDict;
    let ctx = ExecContext::with_threads(1).unwrap();
    let src = Linear::new(&mut Init::new(&ctx, DType::F32, 1), 3, 2, true).unwrap();
    let path = std::env::temp_dir().join(format!(
        "fucina-nn-released-{}.safetensors",
        std::process::id()
    ));
    src.save_state_dict(&path).unwrap();
    let mut dst = Linear::new(&mut Init::new(&ctx, DType::F32, 2), 3, 2, true).unwrap();
    // `bias` comes after `weight`: a bias whose scope has closed.
    let scope = ExecScope::open();
    let b = dst.bias.as_ref().unwrap().mul_scalar(1.0).unwrap();
    scope.close();
    dst.bias = Some(b);
    let before = dst.weight.to_vec::<f32>().unwrap();
    let err = dst.load_state_dict(&path, &LoadOptions::new()).unwrap_err();
    assert!(err.to_string().contains("bias"), "{err}");
    assert_eq!(
        dst.weight.to_vec::<f32>().unwrap(),
        before,
        "weight was assigned"
    );
    std::fs::remove_file(&path).ok();
}
