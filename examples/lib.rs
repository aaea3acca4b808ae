//! Shared helpers for the fucina examples (data loading, printing).
