//! fucina-checks: a test-only crate, empty on purpose. Its tests check the
//! whole workspace's sources rather than any one crate's behaviour, so they
//! live here instead of inside a library crate: `checks/tests/architecture.rs`
//! (the crate layers, the module graphs, file conventions and the paths the
//! docs name; see `ARCHITECTURE.md`) and `checks/tests/unsafe_audit.rs` (every
//! `unsafe` carries its `SAFETY:` comment). `cargo test --workspace` runs them.
