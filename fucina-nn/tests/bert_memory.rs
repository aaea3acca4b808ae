//! The founding memory model at work: BERT inference under no-grad with no
//! exec scope open frees each activation when its last handle drops, so the
//! working set does not grow with depth. The peak of live pool bytes above
//! the model's own bytes (parameters, buffer, inputs), for 6 layers, is at
//! most 1.25x that of the same model cut to 1 layer (`stats()` after
//! `reset_peak`).

use fucina_autograd::{no_grad, scope_depth, Tensor};
use fucina_core::{DType, ExecContext};
use fucina_nn::{mean_pool, Activation, BertConfig, BertModel, Init};

fn config(layers: usize) -> BertConfig {
    // all-MiniLM-L6-v2's shape, with a small vocabulary (the embedding table
    // is part of the baseline, not of the working set).
    BertConfig {
        vocab_size: 1000,
        hidden_size: 384,
        num_hidden_layers: layers,
        num_attention_heads: 12,
        intermediate_size: 1536,
        hidden_act: Activation::Gelu,
        hidden_dropout_prob: 0.1,
        attention_probs_dropout_prob: 0.1,
        max_position_embeddings: 512,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        position_embedding_type: "absolute".into(),
        initializer_range: 0.02,
    }
}

/// Peak live bytes above the baseline during one padded forward + pooling.
fn working_set(layers: usize) -> usize {
    let ctx = ExecContext::with_threads(1).unwrap();
    let (b, t) = (4usize, 64usize);
    let peak = {
        let mut init = Init::new(&ctx, DType::F32, 7);
        let model = BertModel::new(&mut init, &config(layers), true).unwrap();
        fucina_nn::Module::eval(&model);
        let ids: Vec<i64> = (0..b * t).map(|i| (i * 37 % 1000) as i64).collect();
        let lens = [64usize, 40, 17, 5];
        let mask: Vec<u8> = lens
            .iter()
            .flat_map(|&l| (0..t).map(move |j| u8::from(j < l)))
            .collect();
        let ids = Tensor::constant(&ctx, &ids, &[b, t]).unwrap();
        let mask = Tensor::constant(&ctx, &mask, &[b, t]).unwrap();
        assert_eq!(scope_depth(), 0, "no scope open");
        let _ng = no_grad();
        // Warm-up run, so both measurements see the same pool state.
        drop(mean_pool(&model.forward(&ids, Some(&mask), None).unwrap(), &mask).unwrap());
        let base = ctx.stats().live_bytes;
        ctx.pool().reset_peak();
        let pooled = mean_pool(&model.forward(&ids, Some(&mask), None).unwrap(), &mask).unwrap();
        assert_eq!(pooled.shape(), &[b, 384]);
        let peak = ctx.stats().peak_live_bytes - base;
        drop(pooled);
        assert_eq!(
            ctx.stats().live_bytes,
            base,
            "inference left buffers behind"
        );
        peak
    };
    assert_eq!(ctx.stats().outstanding, 0);
    peak
}

#[test]
fn working_set_does_not_grow_with_depth() {
    let one = working_set(1);
    let six = working_set(6);
    println!(
        "peak working set: 1 layer {one} B, 6 layers {six} B ({:.3}x)",
        six as f64 / one as f64
    );
    assert!(one > 0);
    assert!(
        six as f64 <= 1.25 * one as f64,
        "6 layers peak {six} B > 1.25 x 1 layer peak {one} B"
    );
}
