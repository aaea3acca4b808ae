//! A BERT encoder with Hugging Face's layout and parameter names, so a
//! `BertModel` checkpoint (e.g. sentence-transformers' all-MiniLM-L6-v2)
//! loads by name with no mapping table:
//!
//! ```text
//! embeddings.{word_embeddings,position_embeddings,token_type_embeddings}.weight
//! embeddings.LayerNorm.{weight,bias}
//! encoder.layer.N.attention.self.{query,key,value}.{weight,bias}
//! encoder.layer.N.attention.output.{dense,LayerNorm}.{weight,bias}
//! encoder.layer.N.intermediate.dense.{weight,bias}
//! encoder.layer.N.output.{dense,LayerNorm}.{weight,bias}
//! pooler.dense.{weight,bias}                      (when the model has a pooler)
//! embeddings.position_ids                         (a buffer, when the file has it)
//! ```
//!
//! Post-LN blocks as `transformers.BertModel` (eager attention): each layer
//! is `a = LN(x + dense(attn(x)))`, `y = LN(a + dense(act(dense(a))))` with
//! the exact (erf) GELU of `hidden_act = "gelu"`. The attention mask is a U8
//! `[B, S]` keep-mask over keys (1 = token, 0 = padding); HF adds the
//! dtype's minimum to masked scores, which gives them weight exactly 0 after
//! the softmax, as the keep-mask does. [`mean_pool`] is sentence-transformers'
//! pooling. Dropout (hidden and embedding) obeys train/eval; HF's dropout on
//! attention probabilities is not applied (the fused attention kernel has
//! none), which matters only in training mode.
//!
//! Loading ([`BertModel::load_safetensors`]) is strict: every tensor of the
//! file is used and every parameter is found. The file may carry a `bert.`
//! prefix (a `BertFor*` checkpoint's encoder; stripped automatically), a
//! pooler (modelled: [`BertModel::from_pretrained`] builds one exactly when
//! the file has `pooler.dense.*`) and the `embeddings.position_ids` buffer
//! older transformers versions saved (loaded into the buffer the forward
//! reads positions from; newer files omit it and it stays `0..max_pos`).

use std::path::Path;

use fucina_autograd::io::{self as sdio, LoadOptions, LoadReport, SafetensorsFile};
use fucina_autograd::Tensor;
use fucina_core::{DType, ExecContext};
use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::attention::multi_head_attention;
use crate::buffer::Buffer;
use crate::dropout::Dropout;
use crate::embedding::Embedding;
use crate::error::{Error, Result};
use crate::init::{Dist, Init};
use crate::linear::Linear;
use crate::module::Module;
use crate::norm::LayerNorm;

/// A BERT configuration: the fields of Hugging Face's `config.json` that
/// shape the encoder (others in the file are ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BertConfig {
    /// Vocabulary size (rows of `word_embeddings`).
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads (divides `hidden_size`).
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// The feed-forward activation (`"gelu"` = exact erf GELU).
    #[serde(default = "default_act")]
    pub hidden_act: Activation,
    /// Dropout on embeddings and sublayer outputs (training mode only).
    #[serde(default)]
    pub hidden_dropout_prob: f64,
    /// HF's dropout on attention probabilities: read for completeness, not
    /// applied (see the module docs).
    #[serde(default)]
    pub attention_probs_dropout_prob: f64,
    /// Rows of `position_embeddings`: the longest sequence.
    pub max_position_embeddings: usize,
    /// Rows of `token_type_embeddings`.
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Only `"absolute"` is supported.
    #[serde(default = "default_pos_type")]
    pub position_embedding_type: String,
    /// Std of the normal init of a fresh model (HF's `initializer_range`).
    #[serde(default = "default_init_range")]
    pub initializer_range: f64,
}

fn default_act() -> Activation {
    Activation::Gelu
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_pos_type() -> String {
    "absolute".into()
}
fn default_init_range() -> f64 {
    0.02
}

impl BertConfig {
    /// Reads a Hugging Face `config.json`.
    pub fn from_file(path: &Path) -> Result<BertConfig> {
        let text = crate::hf::read_small_file(path, crate::hf::MAX_JSON_BYTES)?;
        let c: BertConfig = serde_json::from_str(&text).map_err(|e| Error::File {
            file: path.to_path_buf(),
            msg: format!("not a BERT config.json: {e}"),
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Checks every dimension is positive, heads divide the width and the
    /// position embedding type is supported.
    pub fn validate(&self) -> Result<()> {
        let dims = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ];
        if let Some((name, _)) = dims.iter().find(|(_, v)| *v == 0) {
            return Err(Error::config(
                "BertConfig",
                format!("{name} must be positive"),
            ));
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(Error::config(
                "BertConfig",
                format!(
                    "hidden_size {} is not divisible by num_attention_heads {}",
                    self.hidden_size, self.num_attention_heads
                ),
            ));
        }
        if self.position_embedding_type != "absolute" {
            return Err(Error::config(
                "BertConfig",
                format!(
                    "position_embedding_type `{}` is not supported (only `absolute`)",
                    self.position_embedding_type
                ),
            ));
        }
        if !(0.0..1.0).contains(&self.hidden_dropout_prob) {
            return Err(Error::config(
                "BertConfig",
                format!(
                    "hidden_dropout_prob {} not in [0, 1)",
                    self.hidden_dropout_prob
                ),
            ));
        }
        Ok(())
    }
}

/// Word + position + token-type embeddings, then LayerNorm and dropout.
#[derive(Debug, crate::Module)]
pub struct BertEmbeddings {
    /// `[vocab, hidden]`.
    pub word_embeddings: Embedding,
    /// `[max_pos, hidden]`.
    pub position_embeddings: Embedding,
    /// `[type_vocab, hidden]`.
    pub token_type_embeddings: Embedding,
    /// Named `LayerNorm`, as HF.
    #[module(rename = "LayerNorm")]
    pub layer_norm: LayerNorm,
    /// Embedding dropout.
    pub dropout: Dropout,
    /// The position ids, I64 `[1, max_pos]` = `0..max_pos`: a persistent
    /// buffer, in the checkpoint as `embeddings.position_ids`.
    pub position_ids: Buffer,
}

/// Query, key and value projections (`attention.self`).
#[derive(Debug, crate::Module)]
pub struct BertSelfAttention {
    /// `[hidden, hidden]`.
    pub query: Linear,
    /// `[hidden, hidden]`.
    pub key: Linear,
    /// `[hidden, hidden]`.
    pub value: Linear,
    /// Heads.
    #[module(skip)]
    pub num_heads: usize,
}

/// A sublayer's output projection, dropout, residual and LayerNorm
/// (`attention.output` and `output`).
#[derive(Debug, crate::Module)]
pub struct BertResidual {
    /// The projection back to `hidden`.
    pub dense: Linear,
    /// Named `LayerNorm`, as HF.
    #[module(rename = "LayerNorm")]
    pub layer_norm: LayerNorm,
    /// Hidden dropout.
    pub dropout: Dropout,
}

impl BertResidual {
    /// `LN(residual + dropout(dense(x)))`.
    pub fn forward(&self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let h = self.dropout.forward(&self.dense.forward(x)?)?;
        self.layer_norm.forward(&h.add(residual)?)
    }
}

/// Self-attention and its output sublayer (`attention`).
#[derive(Debug, crate::Module)]
pub struct BertAttention {
    /// Named `self`, as HF.
    #[module(rename = "self")]
    pub self_attention: BertSelfAttention,
    /// `attention.output.{dense,LayerNorm}`.
    pub output: BertResidual,
}

/// The first feed-forward projection and its activation (`intermediate`).
#[derive(Debug, crate::Module)]
pub struct BertIntermediate {
    /// `[intermediate, hidden]`.
    pub dense: Linear,
    /// The activation.
    #[module(skip)]
    pub act: Activation,
}

/// One encoder layer (`encoder.layer.N`).
#[derive(Debug, crate::Module)]
pub struct BertLayer {
    /// Attention sublayer.
    pub attention: BertAttention,
    /// Feed-forward up-projection.
    pub intermediate: BertIntermediate,
    /// Feed-forward down-projection, residual and LayerNorm.
    pub output: BertResidual,
}

impl BertLayer {
    /// `x [B, T, H]`, `mask` U8 `[B, T]` (1 = token) -> `[B, T, H]`.
    pub fn forward(&self, x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let sa = &self.attention.self_attention;
        let q = sa.query.forward(x)?;
        let k = sa.key.forward(x)?;
        let v = sa.value.forward(x)?;
        let ctxt = multi_head_attention(&q, &k, &v, sa.num_heads, mask, false)?;
        let a = self.attention.output.forward(&ctxt, x)?;
        let i = self
            .intermediate
            .act
            .forward(&self.intermediate.dense.forward(&a)?)?;
        self.output.forward(&i, &a)
    }
}

/// The stack of layers (`encoder`).
#[derive(Debug, crate::Module)]
pub struct BertEncoder {
    /// `encoder.layer.N`.
    pub layer: Vec<BertLayer>,
}

/// The pooler: `tanh(dense(h[:, 0]))` (`pooler.dense`).
#[derive(Debug, crate::Module)]
pub struct BertPooler {
    /// `[hidden, hidden]`.
    pub dense: Linear,
}

/// A BERT encoder (Hugging Face's `BertModel`).
#[derive(Debug, crate::Module)]
pub struct BertModel {
    /// The embeddings.
    pub embeddings: BertEmbeddings,
    /// The layers.
    pub encoder: BertEncoder,
    /// The pooler, if the model has one.
    pub pooler: Option<BertPooler>,
    /// The configuration.
    #[module(skip)]
    pub config: BertConfig,
}

/// The state-dict key of the position-id buffer.
pub const POSITION_IDS: &str = "embeddings.position_ids";

impl BertModel {
    /// A fresh model with HF's init (normal(0, `initializer_range`) for
    /// weights and embeddings, zero biases, unit norms) from `init`.
    pub fn new(init: &mut Init, config: &BertConfig, with_pooler: bool) -> Result<BertModel> {
        config.validate()?;
        let (h, std) = (config.hidden_size, config.initializer_range);
        let w = Dist::normal(std);
        let lin = |init: &mut Init, i: usize, o: usize| {
            Linear::with_dist(init, i, o, true, w, Dist::Zeros)
        };
        let emb = |init: &mut Init, n: usize| Embedding::with_dist(init, n, h, w);
        let ln = |init: &mut Init| LayerNorm::new(init, h, config.layer_norm_eps);
        let p = config.hidden_dropout_prob;
        let ctx = init.ctx().clone();
        // In the pool (a clean error when a config's size cannot be
        // allocated), filled in place.
        let mut pos = ctx.zeros(DType::I64, &[1, config.max_position_embeddings])?;
        for (i, x) in pos.as_mut_slice::<i64>()?.iter_mut().enumerate() {
            *x = i as i64;
        }
        let embeddings = BertEmbeddings {
            word_embeddings: emb(init, config.vocab_size)?,
            position_embeddings: emb(init, config.max_position_embeddings)?,
            token_type_embeddings: emb(init, config.type_vocab_size)?,
            layer_norm: ln(init)?,
            dropout: Dropout::new(init, p)?,
            position_ids: Buffer::persistent(Tensor::from_raw(&ctx, pos, false)?)?,
        };
        // Grown as the layers are made: a config's count never sizes an
        // allocation up front.
        let mut layer = Vec::new();
        for _ in 0..config.num_hidden_layers {
            layer.push(BertLayer {
                attention: BertAttention {
                    self_attention: BertSelfAttention {
                        query: lin(init, h, h)?,
                        key: lin(init, h, h)?,
                        value: lin(init, h, h)?,
                        num_heads: config.num_attention_heads,
                    },
                    output: BertResidual {
                        dense: lin(init, h, h)?,
                        layer_norm: ln(init)?,
                        dropout: Dropout::new(init, p)?,
                    },
                },
                intermediate: BertIntermediate {
                    dense: lin(init, h, config.intermediate_size)?,
                    act: config.hidden_act,
                },
                output: BertResidual {
                    dense: lin(init, config.intermediate_size, h)?,
                    layer_norm: ln(init)?,
                    dropout: Dropout::new(init, p)?,
                },
            });
        }
        let pooler = if with_pooler {
            Some(BertPooler {
                dense: lin(init, h, h)?,
            })
        } else {
            None
        };
        Ok(BertModel {
            embeddings,
            encoder: BertEncoder { layer },
            pooler,
            config: config.clone(),
        })
    }

    /// Builds the model a Hugging Face directory describes (`config.json`)
    /// and loads its `model.safetensors` strictly, in `dtype` (f32 or f64;
    /// stored f16/bf16/f32 widen). The model has a pooler exactly when the
    /// file does. The model starts in eval mode, as `from_pretrained`.
    pub fn from_pretrained(ctx: &ExecContext, dir: &Path, dtype: DType) -> Result<BertModel> {
        let config = BertConfig::from_file(&dir.join("config.json"))?;
        let path = dir.join("model.safetensors");
        let file = SafetensorsFile::open(&path)?;
        let prefix = Self::file_prefix(&file);
        let with_pooler = file.info(&format!("{prefix}pooler.dense.weight")).is_some();
        Self::check_header(&config, &file, prefix, &path)?;
        let mut init = Init::new(ctx, dtype, 0);
        let model = BertModel::new(&mut init, &config, with_pooler)?;
        model.load_from(&file, &LoadOptions::new())?;
        model.eval();
        Ok(model)
    }

    /// Checks every size of `config` against the shapes in the file's
    /// header before a byte of the model is allocated (the strict load
    /// afterwards checks every tensor): the embeddings give the vocabulary,
    /// position, token-type and hidden sizes, the first layer's
    /// intermediate dense the intermediate size, and the last layer must be
    /// there with none after it.
    fn check_header(
        config: &BertConfig,
        file: &SafetensorsFile<'_>,
        prefix: &str,
        path: &Path,
    ) -> Result<()> {
        let h = config.hidden_size;
        let last = config.num_hidden_layers - 1;
        let want = [
            (
                "embeddings.word_embeddings.weight".to_string(),
                vec![config.vocab_size, h],
            ),
            (
                "embeddings.position_embeddings.weight".to_string(),
                vec![config.max_position_embeddings, h],
            ),
            (
                "embeddings.token_type_embeddings.weight".to_string(),
                vec![config.type_vocab_size, h],
            ),
            (
                "encoder.layer.0.intermediate.dense.weight".to_string(),
                vec![config.intermediate_size, h],
            ),
            (
                format!("encoder.layer.{last}.output.dense.weight"),
                vec![h, config.intermediate_size],
            ),
        ];
        let err = |msg: String| Error::File {
            file: path.to_path_buf(),
            msg,
        };
        for (name, shape) in want {
            let key = format!("{prefix}{name}");
            match file.info(&key) {
                None => {
                    return Err(err(format!(
                        "tensor `{key}` is missing (config.json needs it)"
                    )))
                }
                Some(info) if info.shape != shape => {
                    return Err(err(format!(
                        "tensor `{key}` has shape {:?}, config.json needs {shape:?}",
                        info.shape
                    )))
                }
                Some(_) => {}
            }
        }
        let extra = format!("{prefix}encoder.layer.{}.output.dense.weight", last + 1);
        if file.info(&extra).is_some() {
            return Err(err(format!(
                "the file has tensor `{extra}` past config.json's num_hidden_layers {}",
                config.num_hidden_layers
            )));
        }
        Ok(())
    }

    /// `"bert."` when the file's keys carry that prefix (a `BertFor*`
    /// checkpoint), else `""`.
    fn file_prefix(file: &SafetensorsFile<'_>) -> &'static str {
        if file
            .info("bert.embeddings.word_embeddings.weight")
            .is_some()
        {
            "bert."
        } else {
            ""
        }
    }

    /// What a Hugging Face checkpoint holds: every parameter by its HF
    /// name, plus the `embeddings.position_ids` buffer (the dropout
    /// counters of [`Module::state_dict`] are fucina's own state).
    pub fn checkpoint_tensors(&self) -> Vec<(String, Tensor)> {
        let mut sd = self.named_parameters();
        sd.push((
            POSITION_IDS.to_string(),
            self.embeddings.position_ids.tensor().clone(),
        ));
        sd
    }

    /// Loads a safetensors state dict (see the module docs: a `bert.`
    /// prefix is stripped, `embeddings.position_ids` is optional). Strict
    /// unless `opts` says otherwise; a failed load changes nothing.
    pub fn load_safetensors(&self, path: &Path, opts: &LoadOptions) -> Result<LoadReport> {
        self.load_from(&SafetensorsFile::open(path)?, opts)
    }

    fn load_from(&self, file: &SafetensorsFile<'_>, opts: &LoadOptions) -> Result<LoadReport> {
        let mut opts = opts.clone();
        let prefix = Self::file_prefix(file);
        if !prefix.is_empty() {
            opts = opts.map_prefix(prefix, "");
        }
        let mut sd = self.named_parameters();
        if file.info(&format!("{prefix}{POSITION_IDS}")).is_some() {
            sd.push((
                POSITION_IDS.to_string(),
                self.embeddings.position_ids.tensor().clone(),
            ));
        }
        Ok(sdio::load_state_dict_from(file, &sd, &opts)?)
    }

    /// The last hidden state `[B, T, H]` for integer `input_ids [B, T]`;
    /// `attention_mask`: U8 `[B, T]` (1 = token, 0 = padding), `None` for
    /// all ones; `token_type_ids`: integer `[B, T]`, `None` for zeros.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        token_type_ids: Option<&Tensor>,
    ) -> Result<Tensor> {
        let s = input_ids.shape();
        if input_ids.rank() != 2 || s[1] == 0 || s[1] > self.config.max_position_embeddings {
            return Err(Error::input(
                "BertModel",
                format!(
                    "input_ids must be [B, T] with 1 <= T <= {}",
                    self.config.max_position_embeddings
                ),
                s,
            ));
        }
        let (b, t) = (s[0], s[1]);
        let e = &self.embeddings;
        let mut x = e.word_embeddings.forward(input_ids)?;
        let pos = e.position_ids.narrow(1, 0, t)?;
        x = x.add(&e.position_embeddings.forward(&pos)?)?;
        let types = match token_type_ids {
            Some(tt) => {
                if tt.shape() != s {
                    return Err(Error::input(
                        "BertModel",
                        format!("token_type_ids must be [{b}, {t}] like input_ids"),
                        tt.shape(),
                    ));
                }
                e.token_type_embeddings.forward(tt)?
            }
            None => {
                let zero = Tensor::zeros(input_ids.ctx(), DType::I64, &[1, 1])?;
                e.token_type_embeddings.forward(&zero)?
            }
        };
        x = x.add(&types)?;
        x = e.dropout.forward(&e.layer_norm.forward(&x)?)?;
        for layer in &self.encoder.layer {
            x = layer.forward(&x, attention_mask)?;
        }
        Ok(x)
    }

    /// The pooler's output `tanh(dense(h[:, 0]))` `[B, H]` for a last hidden
    /// state `h [B, T, H]`; an error when the model has no pooler.
    pub fn pool(&self, hidden: &Tensor) -> Result<Tensor> {
        let Some(p) = &self.pooler else {
            return Err(Error::config("BertModel", "this model has no pooler"));
        };
        Ok(p.dense.forward(&hidden.select(1, 0)?)?.tanh()?)
    }
}

/// sentence-transformers' mean pooling: the mean of `hidden [B, T, H]` over
/// the positions where `attention_mask` (U8 `[B, T]`) is 1 -> `[B, H]`
/// (a sequence with no token divides by 1e-9 and gives zeros).
pub fn mean_pool(hidden: &Tensor, attention_mask: &Tensor) -> Result<Tensor> {
    let s = hidden.shape();
    if hidden.rank() != 3 || attention_mask.shape() != &s[..2] {
        return Err(Error::input(
            "mean_pool",
            format!(
                "hidden must be [B, T, H] and attention_mask [B, T] (got mask {:?})",
                attention_mask.shape()
            ),
            s,
        ));
    }
    let ctx = hidden.ctx();
    let m = ctx.to_dtype(&attention_mask.raw()?, hidden.dtype())?;
    let m = Tensor::from_raw(ctx, m, false)?.unsqueeze(-1)?;
    let num = hidden.mul(&m)?.sum(&[1], false)?;
    let den = m.sum(&[1], false)?.clamp(1e-9, f64::INFINITY)?;
    Ok(num.div(&den)?)
}
