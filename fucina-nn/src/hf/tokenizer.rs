//! A Hugging Face `tokenizer.json` through the `tokenizers` crate (the
//! library transformers' fast tokenizers are): text to token ids and back.

use std::path::{Path, PathBuf};

use super::{file_err, read_small_file};
use crate::error::Result;

/// The largest `tokenizer.json` read (real ones are a few MB).
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// A loaded tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

/// The file's name in a model directory.
pub const FILE: &str = "tokenizer.json";

impl Tokenizer {
    /// Reads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Tokenizer> {
        let text = read_small_file(path, MAX_TOKENIZER_BYTES)?;
        let inner: tokenizers::Tokenizer = text
            .parse()
            .map_err(|e| file_err(path, format!("not a tokenizer.json: {e}")))?;
        Ok(Tokenizer {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// Token ids of `text` (with the tokenizer's special tokens when
    /// `add_special_tokens`, as transformers' default).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| file_err(&self.path, format!("encoding: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids` (special tokens left out when `skip_special_tokens`).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| file_err(&self.path, format!("decoding: {e}")))
    }

    /// The id of a token string (e.g. `<|endoftext|>`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
