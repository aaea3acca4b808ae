//! Modules are `Send + Sync`: a model shared by reference with a second
//! thread, which evaluates it under no-grad while the first thread trains
//! it, gives the training thread the same losses and gradients, bit for bit,
//! as a single-threaded run, and the evaluating thread the outputs the
//! single-threaded run computes at the same step.

use std::sync::mpsc;

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{no_grad, ScopeExt, Tensor};
use fucina_core::DType;
use fucina_nn::{
    Activation, BertModel, CausalLm, Dropout, Embedding, FeedForward, Gpt, Init, LayerNorm, Linear,
    LoraAdapter, Mlp, Mode, Module, RmsNorm, Rope, SelfAttention, Sequential, TransformerBlock,
};
use fucina_optim::{AdamConfig, AdamW, Optimizer};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn every_module_type_is_send_and_sync() {
    // `Module: Send + Sync` makes this true of every module; the list names
    // the ones that keep state behind `&self` (Mode, Dropout's counter,
    // LoRA's merge slot) and the models that hold them.
    assert_send_sync::<Mode>();
    assert_send_sync::<fucina_nn::Buffer>();
    assert_send_sync::<Dropout>();
    assert_send_sync::<Linear>();
    assert_send_sync::<LoraAdapter>();
    assert_send_sync::<Embedding>();
    assert_send_sync::<LayerNorm>();
    assert_send_sync::<RmsNorm>();
    assert_send_sync::<Rope>();
    assert_send_sync::<Mlp>();
    assert_send_sync::<Sequential>();
    assert_send_sync::<SelfAttention>();
    assert_send_sync::<FeedForward>();
    assert_send_sync::<TransformerBlock>();
    assert_send_sync::<Gpt>();
    assert_send_sync::<CausalLm>();
    assert_send_sync::<BertModel>();
}

#[derive(fucina_nn::Module)]
struct Net {
    body: Mlp,
    norm: LayerNorm,
    head: Linear,
}

impl Net {
    fn new(init: &mut Init) -> Net {
        Net {
            body: Mlp::new(init, &[6, 16, 8], Activation::Gelu).unwrap(),
            norm: LayerNorm::new(init, 8, 1e-5).unwrap(),
            head: Linear::new(init, 8, 3, true).unwrap(),
        }
    }
    fn forward(&self, x: &Tensor) -> fucina_nn::Result<Tensor> {
        self.head
            .forward(&self.norm.forward(&self.body.forward(x)?)?)
    }
}

/// What one run saw: per step, the training loss, every gradient and the
/// evaluation of the model (as it was before that step's update), as bits.
#[derive(Debug, PartialEq)]
struct Run {
    losses: Vec<u64>,
    grads: Vec<Vec<Vec<u64>>>,
    evals: Vec<Vec<u64>>,
}

const STEPS: usize = 6;

fn data(ctx: &TestCtx, seed: u64) -> Tensor {
    Tensor::randn(ctx, DType::F64, &[5, 6], seed).unwrap()
}

fn evaluate(net: &Net, x: &Tensor) -> Vec<u64> {
    let _ng = no_grad();
    let y = net.forward(x).unwrap();
    y.to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Trains `STEPS` AdamW steps; `eval_step(k)` returns the evaluation of the
/// model as it stands at step `k`, computed wherever the caller says, and
/// runs while this thread's forward and backward do.
fn train(
    ctx: &TestCtx,
    net: &Net,
    mut eval_start: impl FnMut(usize),
    mut eval_wait: impl FnMut() -> Vec<u64>,
) -> Run {
    let mut opt = AdamW::single(net.parameters(), AdamConfig::adamw(1e-2)).unwrap();
    let (x, target) = (data(ctx, 1), data(ctx, 2));
    let target = target.narrow(1, 0, 3).unwrap();
    let mut run = Run {
        losses: Vec::new(),
        grads: Vec::new(),
        evals: Vec::new(),
    };
    for k in 0..STEPS {
        eval_start(k);
        {
            let _scope = ctx.scope();
            let loss = net
                .forward(&x)
                .unwrap()
                .sub(&target)
                .unwrap()
                .square()
                .unwrap()
                .mean_all()
                .unwrap();
            loss.backward().unwrap();
            run.losses.push(loss.item().unwrap().to_bits());
        }
        run.grads.push(
            net.parameters()
                .iter()
                .map(|p| bits(&p.grad().unwrap()))
                .collect(),
        );
        // The evaluation of step k is in before the update changes the weights.
        run.evals.push(eval_wait());
        opt.step().unwrap();
        opt.zero_grad();
    }
    run
}

#[test]
fn a_model_evaluated_on_a_second_thread_while_training_gives_the_same_results() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let eval_x = data(&ctx, 3);

    // Single-threaded: evaluate, then train, one after the other.
    let alone = {
        let net = Net::new(&mut Init::new(&ctx, DType::F64, 7));
        let pending = std::cell::RefCell::new(None);
        train(
            &ctx,
            &net,
            |_| *pending.borrow_mut() = Some(evaluate(&net, &eval_x)),
            || pending.borrow_mut().take().unwrap(),
        )
    };

    // Shared: the same model, by reference, evaluated on a second thread
    // while this one runs the step's forward and backward.
    let net = Net::new(&mut Init::new(&ctx, DType::F64, 7));
    let shared = std::thread::scope(|s| {
        let (go_tx, go_rx) = mpsc::channel::<usize>();
        let (out_tx, out_rx) = mpsc::channel::<Vec<u64>>();
        let (net_ref, x_ref) = (&net, &eval_x);
        s.spawn(move || {
            for _k in go_rx {
                out_tx.send(evaluate(net_ref, x_ref)).unwrap();
            }
        });
        let run = train(
            &ctx,
            &net,
            |k| go_tx.send(k).unwrap(),
            || out_rx.recv().unwrap(),
        );
        drop(go_tx);
        run
    });

    assert_eq!(shared.losses.len(), STEPS);
    assert_ne!(
        shared.evals[0],
        shared.evals[STEPS - 1],
        "training moved the model"
    );
    assert_eq!(shared, alone);
    drop(net);
    drop(eval_x);
}
