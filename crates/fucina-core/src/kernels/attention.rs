//! Scaled dot-product attention (causal and padding masks) and its backward.
