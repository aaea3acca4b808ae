//! Collate helpers: token sequences of different lengths to a padded batch
//! tensor with its attention mask, and labels padded with the ignore index.

use fucina_autograd::Tensor;
use fucina_core::ExecContext;

use crate::error::{Error, Result};

/// transformers' ignore index: a label the loss skips (prompt and padding).
pub const IGNORE_INDEX: i64 = -100;

/// A padded batch: `ids` I64 `[B, T]` (right-padded with the pad id),
/// `mask` U8 `[B, T]` (1 = token, 0 = padding), `T` the longest sequence.
#[derive(Debug)]
pub struct Padded {
    /// The token ids.
    pub ids: Tensor,
    /// The attention mask.
    pub mask: Tensor,
}

/// Right-pads `seqs` to the longest with `pad_id`. An empty batch or an
/// all-empty one is an error.
///
/// ```
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let b = fucina_train::collate::pad_sequences(&ctx, &[vec![5, 6, 7], vec![8]], 0)?;
/// assert_eq!(b.ids.to_vec::<i64>()?, [5, 6, 7, 8, 0, 0]);
/// assert_eq!(b.mask.to_vec::<u8>()?, [1, 1, 1, 1, 0, 0]);
/// # Ok::<(), fucina_train::Error>(())
/// ```
pub fn pad_sequences(ctx: &ExecContext, seqs: &[Vec<i64>], pad_id: i64) -> Result<Padded> {
    let t = seqs.iter().map(Vec::len).max().unwrap_or(0);
    if t == 0 {
        return Err(Error::config(
            "pad_sequences",
            format!("a batch of {} sequences with no tokens", seqs.len()),
        ));
    }
    let (ids, mask) = pad_with(seqs, t, pad_id)?;
    Ok(Padded {
        ids: Tensor::constant(ctx, &ids, &[seqs.len(), t])?,
        mask: Tensor::constant(ctx, &mask, &[seqs.len(), t])?,
    })
}

/// Labels `[B, T]`: each sequence right-padded with [`IGNORE_INDEX`] to the
/// longest (the model's loss shifts them itself).
pub fn pad_labels(ctx: &ExecContext, seqs: &[Vec<i64>]) -> Result<Tensor> {
    let t = seqs.iter().map(Vec::len).max().unwrap_or(0);
    if t == 0 {
        return Err(Error::config("pad_labels", "a batch with no labels"));
    }
    let (labels, _) = pad_with(seqs, t, IGNORE_INDEX)?;
    Ok(Tensor::constant(ctx, &labels, &[seqs.len(), t])?)
}

/// The padded ids and mask; a batch too large to allocate is an error.
fn pad_with(seqs: &[Vec<i64>], t: usize, pad: i64) -> Result<(Vec<i64>, Vec<u8>)> {
    let too_big = || {
        Error::config(
            "pad_sequences",
            format!(
                "{} sequences padded to {t} tokens cannot be allocated",
                seqs.len()
            ),
        )
    };
    let n = seqs.len().checked_mul(t).ok_or_else(too_big)?;
    let (mut ids, mut mask) = (Vec::new(), Vec::new());
    ids.try_reserve_exact(n).map_err(|_| too_big())?;
    mask.try_reserve_exact(n).map_err(|_| too_big())?;
    for s in seqs {
        ids.extend_from_slice(s);
        ids.extend(std::iter::repeat_n(pad, t - s.len()));
        mask.extend(std::iter::repeat_n(1u8, s.len()));
        mask.extend(std::iter::repeat_n(0u8, t - s.len()));
    }
    Ok((ids, mask))
}
