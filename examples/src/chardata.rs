//! Character-level text data for the GPT example: the vocabulary (every
//! distinct `char` of the file, sorted), the encoded text and the train /
//! validation split (the file's tail is validation). Batches of it come
//! from fucina-train's `TextWindows` and `DataLoader` (`gpt_train.rs`).

use std::collections::BTreeSet;
use std::path::Path;

use crate::error::{Error, Result};

/// A text file encoded as character ids, split into train and validation.
#[derive(Debug, Clone)]
pub struct CharData {
    /// The vocabulary: id → char (sorted, so the same text gives the same ids).
    pub chars: Vec<char>,
    /// The training ids (the head of the file).
    pub train: Vec<u32>,
    /// The validation ids (the tail of the file).
    pub val: Vec<u32>,
}

impl CharData {
    /// Reads `path` (UTF-8) and holds out its last `val_frac` for validation.
    /// Each part must be longer than `block_size` characters.
    pub fn load(path: &Path, val_frac: f64, block_size: usize) -> Result<CharData> {
        let bytes = std::fs::read(path).map_err(|e| Error::Data {
            path: path.to_path_buf(),
            msg: format!("cannot read the data file: {e}"),
        })?;
        let text = String::from_utf8(bytes).map_err(|e| Error::Data {
            path: path.to_path_buf(),
            msg: format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        })?;
        Self::from_text(&text, val_frac, block_size).map_err(|msg| Error::Data {
            path: path.to_path_buf(),
            msg,
        })
    }

    /// Encodes `text`; the error says why it cannot train a model.
    pub fn from_text(
        text: &str,
        val_frac: f64,
        block_size: usize,
    ) -> std::result::Result<CharData, String> {
        let chars: Vec<char> = text
            .chars()
            .collect::<BTreeSet<char>>()
            .into_iter()
            .collect();
        let ids: Vec<u32> = text
            .chars()
            .map(|c| chars.binary_search(&c).map_or(0, |i| i as u32))
            .collect();
        let n_val = (ids.len() as f64 * val_frac).round() as usize;
        let n_train = ids.len() - n_val.min(ids.len());
        if n_train <= block_size + 1 || n_val <= block_size + 1 {
            return Err(format!(
                "{} characters is too short: train ({n_train}) and validation ({n_val}) parts each need more than block_size + 1 = {} characters",
                ids.len(),
                block_size + 1
            ));
        }
        Ok(CharData {
            chars,
            val: ids[n_train..].to_vec(),
            train: ids[..n_train].to_vec(),
        })
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    /// Decodes ids back to text (an unknown id decodes to `?`).
    pub fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .map(|&i| self.chars.get(i as usize).copied().unwrap_or('?'))
            .collect()
    }

    /// Encodes text with this vocabulary; characters outside it are skipped.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.chars()
            .filter_map(|c| self.chars.binary_search(&c).ok().map(|i| i as u32))
            .collect()
    }

    /// Entropy of the training text's character distribution in nats: the
    /// loss of the best model that ignores context (the unigram baseline).
    pub fn unigram_entropy(&self) -> f64 {
        let mut counts = vec![0u64; self.chars.len()];
        for &i in &self.train {
            counts[i as usize] += 1;
        }
        let n = self.train.len() as f64;
        counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| {
                let p = c as f64 / n;
                -p * p.ln()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_vocab_and_round_trip() {
        let text = "abcabcabcabcabcabcabcabcabcabcxyz".repeat(3);
        let d = CharData::from_text(&text, 0.25, 4).unwrap();
        assert_eq!(d.chars, vec!['a', 'b', 'c', 'x', 'y', 'z']);
        assert_eq!(d.train.len() + d.val.len(), text.chars().count());
        assert_eq!(d.decode(&d.val), text[text.len() - d.val.len()..]);
        assert_eq!(d.decode(&d.encode("cab?")), "cab"); // `?` is not in it
        assert!(CharData::from_text("abc", 0.1, 4).is_err());
        // uniform over two symbols: ln 2
        let d = CharData::from_text(&"ab".repeat(50), 0.2, 4).unwrap();
        assert!((d.unigram_entropy() - 2f64.ln()).abs() < 1e-12);
    }
}
