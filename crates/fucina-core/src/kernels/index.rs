//! Gather / index-select along an axis, and the adjoint scatter-add (deterministic with duplicates); one-hot.
