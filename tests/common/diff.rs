//! The largest absolute difference between two sets of values, shared by
//! the tests of several crates (included by `#[path]`, as
//! `error_route.rs`): fucina-nn's goldens in f64, the examples' logits in f32.

#![allow(dead_code)]

use fucina_core::Float;

/// The largest `|a[i] − b[i]|` (0 for empty slices); the lengths must agree.
pub fn max_abs_diff<T: Float>(a: &[T], b: &[T]) -> T {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x - y).abs())
        .fold(T::ZERO, T::max)
}
