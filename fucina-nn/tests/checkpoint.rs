//! Activation checkpointing over real layers: a GPT block and a BERT layer
//! run under `fucina_autograd::checkpoint`, their parameters captured by the
//! block (not passed as inputs), give every parameter and the input bitwise
//! the gradient of the plain run, on 1 and 2 threads; the gradients also
//! agree across the thread counts. Each context ends with no pool buffer
//! outstanding and no graph node alive (autograd's `TestCtx`).

use std::sync::{Arc, Mutex};

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{checkpoint, Block, CrossEntropyOpts, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::DType;
use fucina_nn::models::bert::BertLayer;
use fucina_nn::{BertConfig, BertModel, Gpt, Init, Module, TransformerBlock};

/// Each parameter's gradient as bits (`None`: no gradient), in name order.
type Grads = Vec<(String, Option<Vec<u32>>)>;

#[path = "common/tiny.rs"]
mod tiny_models;

fn grads(named: &[(String, Tensor)]) -> Grads {
    named
        .iter()
        .map(|(n, t)| {
            let bits = t.grad().map(|g| {
                g.to_vec::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            });
            (n.clone(), bits)
        })
        .collect()
}

fn zero(named: &[(String, Tensor)]) {
    for (_, t) in named {
        t.zero_grad();
    }
}

/// An nn error from inside a block, as the autograd error a `Block` returns.
fn autograd(e: fucina_nn::Error) -> fucina_autograd::Error {
    match e {
        fucina_nn::Error::Autograd(e) => e,
        fucina_nn::Error::Core(e) => e.into(),
        other => panic!("layer error inside a checkpointed block: {other}"),
    }
}

/// `x` through each locked layer in turn (`forward` runs one), each as a
/// [`Block`], checkpointed when `ck`.
fn through<L: Send + 'static>(
    layers: &[Arc<Mutex<L>>],
    mut x: Tensor,
    ck: bool,
    forward: impl Fn(&L, &Tensor) -> fucina_nn::Result<Tensor> + Clone + Send + Sync + 'static,
) -> Tensor {
    for l in layers {
        let (l, forward) = (l.clone(), forward.clone());
        let block: Block = Arc::new(move |xs: &[Tensor]| {
            let layer = l.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            forward(&layer, &xs[0]).map_err(autograd)
        });
        x = if ck {
            checkpoint(block, &[&x]).unwrap()
        } else {
            block(std::slice::from_ref(&x)).unwrap()
        };
    }
    x
}

/// `n` uniform draws in [-1, 1) from seed `seed`, as f32.
fn uniform_f32(seed: u64, n: usize) -> Vec<f32> {
    SplitMix64::new(seed)
        .vec_uniform(n, -1.0, 1.0)
        .iter()
        .map(|&v| v as f32)
        .collect()
}

/// Runs the plain and the checkpointed step, checks every gradient is there
/// and bitwise equal, and returns them.
fn compare(named: &[(String, Tensor)], step: impl Fn(bool)) -> Grads {
    zero(named);
    step(false);
    let plain = grads(named);
    zero(named);
    step(true);
    let ck = grads(named);
    zero(named);
    for ((name, p), (_, c)) in plain.iter().zip(&ck) {
        assert!(p.is_some(), "{name}: no gradient in the plain run");
        assert!(c.is_some(), "{name}: no gradient under checkpoint");
        assert!(
            p == c,
            "{name}: checkpointed gradient differs from the plain run's"
        );
    }
    plain
}

/// Runs `grads` on 1 and on 2 threads and checks the gradients are bitwise equal.
fn same_on_1_and_2_threads(grads: fn(usize) -> Grads) {
    let one = grads(1);
    let two = grads(2);
    assert!(one == two, "1 and 2 threads disagree");
}

fn gpt_grads(threads: usize) -> Grads {
    let ctx = TestCtx::with_threads(threads).unwrap();
    let cfg = tiny_models::tiny_gpt();
    let mut gpt = Gpt::new(&mut Init::new(&ctx, DType::F32, 5), &cfg).unwrap();
    // The blocks move behind a lock: a `Block` must be `Send + Sync`, and a
    // `Linear` is not `Sync` (its LoRA merge slot is a `RefCell`).
    let blocks: Vec<Arc<Mutex<TransformerBlock>>> = std::mem::take(&mut gpt.blocks)
        .into_iter()
        .map(|b| Arc::new(Mutex::new(b)))
        .collect();
    let mut named = gpt.named_parameters();
    for (i, b) in blocks.iter().enumerate() {
        for (n, t) in b.lock().unwrap().named_parameters() {
            named.push((format!("blocks.{i}.{n}"), t));
        }
    }
    let ids: Vec<i64> = (0..16).map(|i| (i * 7 + 3) % 13).collect();
    let idx = Tensor::constant(&ctx, &ids[..], &[2, 8]).unwrap();
    let targets = Tensor::constant(
        &ctx,
        &ids[1..].iter().chain(&[0]).copied().collect::<Vec<_>>()[..],
        &[2, 8],
    )
    .unwrap();
    let pos = Tensor::constant(&ctx, &(0..8i64).collect::<Vec<_>>()[..], &[8]).unwrap();
    let step = |ck: bool| {
        let x = gpt.wte.forward(&idx).unwrap();
        let x = x.add(&gpt.wpe.forward(&pos).unwrap()).unwrap();
        let x = through(&blocks, x, ck, |b: &TransformerBlock, x| b.forward(x, None));
        let x = gpt.ln_f.forward(&x).unwrap();
        let logits = x.linear(&gpt.wte.weight, None).unwrap(); // tied head
        let loss = logits
            .reshape([-1, 13])
            .unwrap()
            .cross_entropy(&targets.reshape([-1]).unwrap(), CrossEntropyOpts::default())
            .unwrap();
        loss.backward().unwrap();
    };
    // Every local (the parameters' handles included) drops before `ctx`.
    compare(&named, step)
}

#[test]
fn gpt_blocks_with_captured_parameters_give_the_plain_gradients() {
    same_on_1_and_2_threads(gpt_grads);
}

fn bert_grads(threads: usize) -> Grads {
    let ctx = TestCtx::with_threads(threads).unwrap();
    let cfg = BertConfig {
        hidden_size: 16,
        intermediate_size: 24,
        hidden_dropout_prob: 0.0,
        attention_probs_dropout_prob: 0.0,
        initializer_range: 0.2,
        ..tiny_models::tiny_bert(2)
    };
    let mut model = BertModel::new(&mut Init::new(&ctx, DType::F32, 9), &cfg, false).unwrap();
    let layers: Vec<Arc<Mutex<BertLayer>>> = std::mem::take(&mut model.encoder.layer)
        .into_iter()
        .map(|l| Arc::new(Mutex::new(l)))
        .collect();
    drop(model);
    let (b, t, h) = (2, 5, 16);
    let x = Tensor::variable(&ctx, &uniform_f32(3, b * t * h), &[b, t, h]).unwrap();
    let weights = Tensor::constant(&ctx, &uniform_f32(4, b * t * h), &[b, t, h]).unwrap();
    let mask = Tensor::constant(&ctx, &[1u8, 1, 1, 1, 1, 1, 1, 1, 0, 0], &[b, t]).unwrap();
    let mut named = vec![("input".to_string(), x.clone())];
    for (i, l) in layers.iter().enumerate() {
        for (n, p) in l.lock().unwrap().named_parameters() {
            named.push((format!("encoder.layer.{i}.{n}"), p));
        }
    }
    let step = |ck: bool| {
        let m = mask.clone();
        let hs = through(&layers, x.clone(), ck, move |l: &BertLayer, x| {
            l.forward(x, Some(&m))
        });
        hs.mul(&weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
    };
    compare(&named, step)
}

#[test]
fn bert_layers_with_captured_parameters_give_the_plain_gradients() {
    same_on_1_and_2_threads(bert_grads);
}

/// Dropout inside a checkpointed block: the recompute applies the
/// forward's masks (the draws replay), so the gradients are bitwise the
/// plain run's and each counter advances once per forward, as there.
#[test]
fn checkpointed_dropout_replays_its_masks() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let run = |checkpointed: bool| -> (Grads, Vec<u64>) {
            let mut init = Init::new(&ctx, DType::F32, 3);
            let w = init.param(&[6, 6], fucina_nn::Dist::normal(0.5)).unwrap();
            let drop = Arc::new(fucina_nn::Dropout::new(&mut init, 0.4).unwrap());
            let x = Tensor::randn(&ctx, DType::F32, &[4, 6], 5).unwrap();
            x.set_requires_grad(true).unwrap();
            let (w2, d2) = (w.clone(), Arc::clone(&drop));
            let block: Block = Arc::new(move |xs: &[Tensor]| {
                let h = d2.forward(&xs[0]).map_err(|e| match e {
                    fucina_nn::Error::Autograd(a) => a,
                    fucina_nn::Error::Core(c) => c.into(),
                    other => panic!("{other}"),
                })?;
                h.linear(&w2, None)?.tanh()
            });
            // Two steps, so the second uses counter 1 in both runs.
            let mut calls = Vec::new();
            let named = vec![("w".to_string(), w.clone()), ("x".to_string(), x.clone())];
            for _ in 0..2 {
                zero(&named);
                let y = if checkpointed {
                    checkpoint(Arc::clone(&block), &[&x]).unwrap()
                } else {
                    block(std::slice::from_ref(&x)).unwrap()
                };
                y.sum_all().unwrap().backward().unwrap();
                calls.push(drop.calls().unwrap());
            }
            (grads(&named), calls)
        };
        let (plain, plain_calls) = run(false);
        let (ck, ck_calls) = run(true);
        assert_eq!(plain_calls, [1, 2]);
        assert_eq!(ck_calls, plain_calls);
        assert_eq!(ck, plain);
    }
}
