//! Cross-entropy from logits (ignore_index, label smoothing, reductions) and its backward.
