//! The pieces of `finetune_llm`'s loop a test can drive on its own: the
//! data as packed causal-LM blocks, the validation loss over a split, one
//! training step and the optimizer (the PyTorch twin's test replays them).

use std::path::Path;

use fucina_autograd::{no_grad, ScopeExt, Tensor};
use fucina_nn::hf::Tokenizer;
use fucina_nn::{CausalLm, Module};
use fucina_optim::{clip_grad_norm, AdamConfig, AdamW, Optimizer, ParamGroup, Schedule};
use fucina_train::causal::{
    collate_causal, pack, read_records, CausalBatch, CausalExample, Record,
};

use crate::error::{Error, Result};

/// The training and validation blocks of `path`: a JSONL file's records
/// (its last `val_frac` held out), or a text's tail from the first
/// paragraph break after `1 − val_frac` of it, tokenized and packed into
/// blocks of `block` tokens (the separator: the model's first EOS token).
pub fn load_blocks(
    path: &Path,
    tok: &Tokenizer,
    block: usize,
    val_frac: f64,
    eos: Option<i64>,
) -> Result<(Vec<CausalExample>, Vec<CausalExample>)> {
    let encode = |s: &str| -> Result<Vec<i64>> {
        Ok(tok.encode(s, false)?.into_iter().map(i64::from).collect())
    };
    let is_jsonl = path.extension().is_some_and(|e| e == "jsonl");
    let (train, val): (Vec<CausalExample>, Vec<CausalExample>) = if is_jsonl {
        let records = read_records(path)?;
        let n_val = ((records.len() as f64 * val_frac).round() as usize).max(1);
        if n_val >= records.len() {
            return Err(Error::Data {
                path: path.to_path_buf(),
                msg: format!(
                    "{} records leave none for training after holding out {n_val}",
                    records.len()
                ),
            });
        }
        let mut exs = Vec::with_capacity(records.len());
        for r in &records {
            exs.push(match r {
                Record::Text(t) => CausalExample::text(encode(t)?),
                Record::PromptCompletion { prompt, completion } => {
                    CausalExample::prompt_completion(&encode(prompt)?, &encode(completion)?)
                }
            });
        }
        let val = exs.split_off(records.len() - n_val);
        (exs, val)
    } else {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let mut cut = ((text.len() as f64) * (1.0 - val_frac)) as usize;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        let cut = text[cut..].find("\n\n").map_or(cut, |i| cut + i + 2);
        (
            vec![CausalExample::text(encode(&text[..cut])?)],
            vec![CausalExample::text(encode(&text[cut..])?)],
        )
    };
    let blocks = |exs: Vec<CausalExample>, which: &str| {
        pack(exs, block, eos).map_err(|e| Error::Data {
            path: path.to_path_buf(),
            msg: format!("{which} split: {e}"),
        })
    };
    Ok((blocks(train, "training")?, blocks(val, "validation")?))
}

/// The mean loss over every learnt label of `blocks` (eval mode, no grad):
/// each batch's mean weighted by its learnt labels, so the result is the
/// mean over the whole split whatever the batch size.
pub fn evaluate(lm: &CausalLm, blocks: &[CausalExample], batch: usize, pad: i64) -> Result<f64> {
    lm.eval();
    let _ng = no_grad();
    let ctx = lm.ctx();
    let (mut total, mut count) = (0.0, 0usize);
    for chunk in blocks.chunks(batch) {
        let _scope = ctx.scope();
        // The labels the shifted loss uses: every position but the first.
        let n: usize = chunk
            .iter()
            .map(|e| e.labels[1..].iter().filter(|&&l| l != -100).count())
            .sum();
        if n == 0 {
            continue;
        }
        let b = collate_causal(ctx, chunk, pad)?;
        let logits = lm.forward(&b.input_ids, Some(&b.attention_mask))?;
        total += lm.loss(&logits, &b.labels)?.item()? * n as f64;
        count += n;
    }
    lm.train();
    Ok(total / count.max(1) as f64)
}

/// One training step on a padded batch: forward, loss, backward, clip,
/// AdamW step; returns the loss. The gradients are cleared for the next
/// step. The batch's tensors are the caller's (make them inside a scope).
pub fn train_step(
    lm: &CausalLm,
    opt: &mut AdamW,
    batch: &CausalBatch,
    grad_clip: f64,
) -> Result<f32> {
    let loss = {
        let _scope = lm.ctx().scope();
        let logits = lm.forward(&batch.input_ids, Some(&batch.attention_mask))?;
        let loss = lm.loss(&logits, &batch.labels)?;
        loss.backward()?;
        loss.item()? as f32
    };
    if grad_clip > 0.0 {
        clip_grad_norm(&opt.params(), grad_clip)?;
    }
    opt.step()?;
    opt.zero_grad();
    Ok(loss)
}

/// AdamW over the trainable parameters of `lm`: decay on matrices only,
/// warmup then cosine to `min_lr_frac`.
pub fn optimizer(
    lm: &CausalLm,
    lr: f64,
    weight_decay: f64,
    warmup: u64,
    total: u64,
    min_lr_frac: f64,
) -> Result<AdamW> {
    let [decay, no_decay] = lm.decay_groups();
    let schedule = Schedule::WarmupCosine {
        warmup,
        total,
        min_factor: min_lr_frac,
    };
    let adam = AdamConfig {
        weight_decay,
        ..AdamConfig::adamw(lr)
    };
    adamw_decay_split(decay, no_decay, adam, schedule)
}

/// AdamW with `adam` over `decay` and, when there are any, the same without
/// weight decay over `no_decay`, both on `schedule`.
pub fn adamw_decay_split(
    decay: Vec<Tensor>,
    no_decay: Vec<Tensor>,
    adam: AdamConfig,
    schedule: Schedule,
) -> Result<AdamW> {
    let mut groups = vec![ParamGroup::new(decay, adam.clone()).with_schedule(schedule)];
    if !no_decay.is_empty() {
        let plain = AdamConfig {
            weight_decay: 0.0,
            ..adam
        };
        groups.push(ParamGroup::new(no_decay, plain).with_schedule(schedule));
    }
    Ok(AdamW::new(groups)?)
}
