//! Text generation with a [`CausalLm`]: a batch of prompts of different
//! lengths, left-padded with an attention mask (transformers' convention
//! for decoder-only models), one prefill through the streaming attention
//! into a [`KvCache`] allocated once for the session, then one token per
//! step read against the cached prefix. Positions follow the mask (a row's
//! first real token is position 0), as transformers' `generate` computes
//! them. A row stops after an eos token; finished rows are fed the pad
//! token (and masked in) until every row stops or the budget is spent.

pub mod sampling;

use fucina_autograd::{no_grad, Tensor};

pub use sampling::Sampling;

use crate::error::{Error, Result};
use crate::kv_cache::KvCache;
use crate::models::decoder::CausalLm;

/// What [`CausalLm::generate`] does.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    /// The most tokens generated per prompt.
    pub max_new_tokens: usize,
    /// Greedy or sampled.
    pub sampling: Sampling,
    /// A row stops after generating any of these.
    pub eos_token_ids: Vec<i64>,
    /// The left padding of shorter prompts, and what finished rows are fed.
    pub pad_token_id: i64,
}

impl GenerateOptions {
    /// Greedy decoding of up to `max_new_tokens` with no eos.
    pub fn greedy(max_new_tokens: usize) -> GenerateOptions {
        GenerateOptions {
            max_new_tokens,
            sampling: Sampling::Greedy,
            eos_token_ids: Vec::new(),
            pad_token_id: 0,
        }
    }
}

/// The generated tokens of each prompt (up to and including its eos).
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// New tokens per prompt, in prompt order.
    pub tokens: Vec<Vec<i64>>,
    /// Model forwards run (one prefill and one per further step).
    pub forwards: usize,
}

impl CausalLm {
    /// Generates continuations of `prompts` (token ids; lengths may differ).
    ///
    /// ```
    /// use fucina_nn::{hf::DecoderConfig, CausalLm, GenerateOptions};
    /// use serde_json::json;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let cfg = json!({"model_type": "llama", "vocab_size": 50, "hidden_size": 16,
    ///     "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
    ///     "num_key_value_heads": 1, "max_position_embeddings": 32});
    /// let cfg = DecoderConfig::from_json(std::path::Path::new("config.json"), &cfg)?;
    /// let lm = CausalLm::new(&ctx, &cfg, fucina_core::DType::F32, 0)?;
    /// let out = lm.generate(&[vec![1, 2, 3], vec![4]], &GenerateOptions::greedy(5))?;
    /// assert_eq!(out.tokens[0].len(), 5);
    /// # Ok::<(), fucina_nn::Error>(())
    /// ```
    pub fn generate(&self, prompts: &[Vec<i64>], opts: &GenerateOptions) -> Result<Generated> {
        const M: &str = "generate";
        opts.sampling.validate()?;
        let vocab = self.config.vocab_size as i64;
        if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
            return Err(Error::config(M, "every prompt needs at least one token"));
        }
        let bad = |id: i64| !(0..vocab).contains(&id);
        if let Some(&id) = prompts.iter().flatten().find(|&&id| bad(id)) {
            return Err(Error::config(
                M,
                format!("token id {id} is not in 0..{vocab}"),
            ));
        }
        if bad(opts.pad_token_id) {
            return Err(Error::config(
                M,
                format!("pad_token_id {} is not in 0..{vocab}", opts.pad_token_id),
            ));
        }
        let b = prompts.len();
        let p = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let capacity = p
            .checked_add(opts.max_new_tokens)
            .filter(|&c| c <= self.config.max_positions)
            .ok_or_else(|| {
                Error::config(
                    M,
                    format!(
                        "the longest prompt ({p}) + max_new_tokens ({}) exceed max_position_embeddings {}",
                        opts.max_new_tokens, self.config.max_positions
                    ),
                )
            })?;
        let mut out = Generated {
            tokens: vec![Vec::new(); b],
            forwards: 0,
        };
        if opts.max_new_tokens == 0 {
            return Ok(out);
        }
        let _guard = no_grad();
        let ctx = self.ctx();
        let mut cache: KvCache = self.new_cache(b, capacity)?;
        // Left padding: row r is [pad × (p − len), prompt].
        let mut ids = Vec::with_capacity(b * p);
        let mut mask: Vec<Vec<u8>> = Vec::with_capacity(b);
        let mut pos = Vec::with_capacity(b * p);
        let mut next_pos = Vec::with_capacity(b);
        for prompt in prompts {
            let pad = p - prompt.len();
            ids.extend(std::iter::repeat_n(opts.pad_token_id, pad).chain(prompt.iter().copied()));
            mask.push(
                std::iter::repeat_n(0u8, pad)
                    .chain(std::iter::repeat_n(1u8, prompt.len()))
                    .collect(),
            );
            // transformers: cumsum(mask) − 1, with padding at position 1.
            pos.extend(std::iter::repeat_n(1i64, pad).chain(0..prompt.len() as i64));
            next_pos.push(prompt.len() as i64);
        }
        let mut input = Tensor::constant(ctx, &ids, &[b, p])?;
        let mut positions = Tensor::constant(ctx, &pos, &[b, p])?;
        let mut done = vec![false; b];
        for step in 0..opts.max_new_tokens {
            let flat: Vec<u8> = mask.iter().flatten().copied().collect();
            let m = Tensor::constant(ctx, &flat, &[b, mask[0].len()])?;
            let h = self.hidden_states(&input, Some(&m), Some(&positions), Some(&mut cache))?;
            out.forwards += 1;
            let t = h.shape()[1];
            let logits = self.logits(&h.narrow(1, t - 1, 1)?)?.to_vec_f64()?;
            let v = self.config.vocab_size;
            let mut next = Vec::with_capacity(b);
            for r in 0..b {
                if done[r] {
                    next.push(opts.pad_token_id);
                    continue;
                }
                let draw = (step * b + r) as u64;
                let tok = opts.sampling.pick(&logits[r * v..(r + 1) * v], draw) as i64;
                out.tokens[r].push(tok);
                done[r] = opts.eos_token_ids.contains(&tok);
                next.push(tok);
            }
            if done.iter().all(|&d| d) || step + 1 == opts.max_new_tokens {
                break;
            }
            for r in 0..b {
                mask[r].push(1);
            }
            input = Tensor::constant(ctx, &next, &[b, 1])?;
            positions = Tensor::constant(ctx, &next_pos, &[b, 1])?;
            next_pos.iter_mut().for_each(|x| *x += 1);
        }
        Ok(out)
    }
}
