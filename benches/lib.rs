//! Shared helpers for fucina benchmarks.
