//! `train_gpt --save-hf DIR`: a trained character model as a Hugging Face
//! model directory that `CausalLm::from_pretrained`, `examples/generate.rs`
//! and transformers' `AutoModelForCausalLM` / `AutoTokenizer` load.
//!
//! The weights, `config.json` and `generation_config.json` come from
//! `CausalLm::save_pretrained` (a `--arch gpt` model is first carried over,
//! tensor for tensor, into the GPT-2 layout it already has). The tokenizer
//! is built with the `tokenizers` crate: a BPE model whose vocabulary is the
//! characters with their training ids and no merges (so every character is
//! one token and a character outside the vocabulary is skipped, as
//! `CharData::encode` does), no normaliser or pre-tokeniser, and a `Fuse`
//! decoder (tokens joined with nothing between them).

use std::path::Path;

use fucina_autograd::io::write_atomic;
use fucina_nn::hf::config::{MlpKind, NormKind, Positions};
use fucina_nn::hf::{DecoderConfig, ModelType};
use fucina_nn::{Activation, CausalLm, Gpt, Module, Tensor};
use tokenizers::decoders::fuse::Fuse;
use tokenizers::models::bpe::{Vocab, BPE};

use crate::char_lm::CharLm;
use crate::chardata::CharData;
use crate::error::{Error, Result};

/// The char-level `tokenizers::Tokenizer` of `data`'s vocabulary: id `i`
/// is `data.chars[i]`.
pub fn char_tokenizer(data: &CharData) -> Result<tokenizers::Tokenizer> {
    let vocab: Vocab = data
        .chars
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, Vec::new())
        .build()
        .map_err(|e| Error::Tokenizer(format!("building the character BPE: {e}")))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_decoder(Some(Fuse::new()));
    Ok(tok)
}

/// Writes the model directory: weights, `config.json`,
/// `generation_config.json`, `tokenizer.json` and `tokenizer_config.json`.
pub fn save_hf(model: &CharLm, data: &CharData, dir: &Path) -> Result<()> {
    match model {
        CharLm::Llama(lm) => lm.save_pretrained(dir)?,
        CharLm::Gpt(g) => gpt_as_gpt2(g)?.save_pretrained(dir)?,
    }
    let tok = char_tokenizer(data)?;
    let json = tok
        .to_string(true)
        .map_err(|e| Error::Tokenizer(format!("serialising tokenizer.json: {e}")))?;
    write_atomic(&dir.join("tokenizer.json"), json.as_bytes())?;
    let cfg = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model.context(),
        // The tokens are characters: no spaces to clean up around punctuation.
        "clean_up_tokenization_spaces": false,
    });
    let text = serde_json::to_string_pretty(&cfg).unwrap_or_default() + "\n";
    write_atomic(&dir.join("tokenizer_config.json"), text.as_bytes())?;
    Ok(())
}

/// The GPT-2 `CausalLm` with `g`'s tensors (nanoGPT's GPT is GPT-2's
/// architecture: `blocks.N.{ln1, qkv, proj, ln2, fc, fc_proj}` are
/// `transformer.h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
/// mlp.c_proj}`, each weight `[out, in]` in both). The tensors are shared,
/// not copied.
pub fn gpt_as_gpt2(g: &Gpt) -> Result<CausalLm> {
    let c = &g.config;
    if !c.bias {
        return Err(Error::arg(
            "--save-hf",
            "GPT-2's layout has biases: a GPT built without them cannot be saved as GPT-2",
        ));
    }
    let cfg = DecoderConfig {
        model_type: ModelType::Gpt2,
        vocab_size: c.vocab_size,
        hidden_size: c.n_embd,
        num_layers: c.n_layer,
        num_heads: c.n_head,
        num_kv_heads: c.n_head,
        head_dim: c.n_embd / c.n_head,
        intermediate_size: c.block().d_ff,
        max_positions: c.block_size,
        norm: NormKind::LayerNorm,
        norm_eps: c.ln_eps,
        positions: Positions::Learned,
        mlp: MlpKind::Plain(Activation::GeluTanh),
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        qk_norm: false,
        tie_word_embeddings: c.tied_head,
        initializer_range: c.init_std,
        dropout: c.dropout,
        bos_token_id: None,
        eos_token_ids: Vec::new(),
        pad_token_id: None,
    };
    let mut lm = CausalLm::new(g.wte.weight.ctx(), &cfg, g.wte.weight.dtype(), 0)?;
    let src: Vec<(String, Tensor)> = g.named_parameters();
    let mut missing: Vec<String> = Vec::new();
    lm.visit_params_mut("", &mut |name, t| {
        let from = gpt_name(name);
        match src.iter().find(|(n, _)| *n == from) {
            Some((_, s)) if s.shape() == t.shape() => *t = s.clone(),
            Some((_, s)) => {
                missing.push(format!("{name} {:?} <- {from} {:?}", t.shape(), s.shape()))
            }
            None => missing.push(format!("{name} <- {from} (not in the GPT)")),
        }
    });
    if !missing.is_empty() || src.len() != lm.named_parameters().len() {
        return Err(Error::arg(
            "--save-hf",
            format!(
                "the GPT's {} tensors do not map onto GPT-2's {}: {}",
                src.len(),
                lm.named_parameters().len(),
                missing.join(", ")
            ),
        ));
    }
    lm.eval();
    Ok(lm)
}

/// The GPT parameter a GPT-2 checkpoint name holds.
fn gpt_name(hf: &str) -> String {
    let rest = hf.strip_prefix("transformer.").unwrap_or(hf);
    let Some(layer) = rest.strip_prefix("h.") else {
        return rest.to_string(); // wte, wpe, ln_f, lm_head
    };
    let (n, tail) = layer.split_once('.').unwrap_or((layer, ""));
    let tail = [
        ("ln_1.", "ln1."),
        ("attn.c_attn.", "qkv."),
        ("attn.c_proj.", "proj."),
        ("ln_2.", "ln2."),
        ("mlp.c_fc.", "fc."),
        ("mlp.c_proj.", "fc_proj."),
    ]
    .iter()
    .find_map(|(hf, ours)| tail.strip_prefix(hf).map(|p| format!("{ours}{p}")))
    .unwrap_or_else(|| tail.to_string());
    format!("blocks.{n}.{tail}")
}
