//! Reductions along any set of axes (sum, mean, max, min, argmax, argmin, variance, cumsum) and sum-to-shape.
