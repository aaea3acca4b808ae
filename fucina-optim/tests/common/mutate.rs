//! Byte-level mutations of a file for the fuzzing harnesses (issue 11):
//! bit flips, edits of a safetensors JSON header (or of a JSON file), lying
//! header lengths, truncations, appended bytes and spliced runs, as a
//! proptest strategy and a function that applies them; and the seeded runner
//! and case counts the fuzzers share.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// One edit of a file.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// Flip bit `bit` of the byte at `pos` (modulo the length).
    BitFlip(usize, u8),
    /// Replace a byte of the JSON header with a character that changes its meaning.
    HeaderEdit(usize, u8),
    /// Rewrite the 8-byte header length.
    HeaderLen(u64),
    /// Shift the header length by a small amount (a near-miss lie).
    HeaderLenDelta(i8),
    /// Cut the file at `pos` (modulo the length + 1).
    Truncate(usize),
    /// Append bytes.
    Extend(Vec<u8>),
    /// Copy a run of bytes from one place to another.
    Splice(usize, usize, usize),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 0u8..8).prop_map(|(p, b)| Mutation::BitFlip(p, b)),
        4 => (any::<usize>(), prop::sample::select(b"0123456789-+.eE[]{},:\"  \\ux9".to_vec()))
            .prop_map(|(p, c)| Mutation::HeaderEdit(p, c)),
        1 => prop_oneof![
            Just(0u64),
            Just(u64::MAX),
            Just(i64::MAX as u64),
            Just(1u64 << 32),
            any::<u64>(),
            0u64..2048,
        ]
        .prop_map(Mutation::HeaderLen),
        1 => any::<i8>().prop_map(Mutation::HeaderLenDelta),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Extend),
        1 => (any::<usize>(), any::<usize>(), 1usize..32).prop_map(|(a, b, n)| Mutation::Splice(a, b, n)),
    ]
}

pub fn header_len(f: &[u8]) -> usize {
    let mut b = [0u8; 8];
    b.copy_from_slice(&f[..8.min(f.len())]);
    u64::from_le_bytes(b) as usize
}

pub fn apply(file: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut f = file.to_vec();
    let hl = header_len(file);
    for m in muts {
        let n = f.len();
        match m {
            Mutation::BitFlip(p, b) if n > 0 => f[p % n] ^= 1 << b,
            Mutation::HeaderEdit(p, c) if n > 8 => {
                let end = (8 + hl).min(n);
                if end > 8 {
                    f[8 + p % (end - 8)] = *c;
                }
            }
            Mutation::HeaderLen(v) if n >= 8 => f[..8].copy_from_slice(&v.to_le_bytes()),
            Mutation::HeaderLenDelta(d) if n >= 8 => {
                let v = (hl as i64 + *d as i64).max(0) as u64;
                f[..8].copy_from_slice(&v.to_le_bytes());
            }
            Mutation::Truncate(p) => f.truncate(p % (n + 1)),
            Mutation::Extend(bytes) => f.extend_from_slice(bytes),
            Mutation::Splice(a, b, len) if n > 0 => {
                let (a, b) = (a % n, b % n);
                let len = (*len).min(n - a).min(n - b);
                let run = f[a..a + len].to_vec();
                f[b..b + len].copy_from_slice(&run);
            }
            _ => {}
        }
    }
    f
}

/// A proptest runner of `cases` cases from a fixed ChaCha seed (the same
/// cases on every run), without failure persistence files.
pub fn seeded_runner(cases: u32, seed: u8) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
    )
}

/// The case count from environment variable `name`, else `default`.
pub fn env_cases(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
