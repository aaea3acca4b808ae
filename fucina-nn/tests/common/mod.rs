//! Shared helpers of the fucina-nn tests: reading safetensors goldens as
//! f64 or i64 and counting them by prefix, a comparison relative to the
//! reference's largest magnitude, the largest absolute difference, f32 bits,
//! the process's peak memory, and (`fixtures`) the decoder fixtures.
#![allow(dead_code)]

#[path = "../../../tests/common/diff.rs"]
mod diff;
#[allow(unused_imports)] // each test binary uses its own part
pub use diff::max_abs_diff;

pub mod fixtures;

use safetensors::{Dtype, SafeTensors};

pub fn f64s(st: &SafeTensors, name: &str) -> (Vec<f64>, Vec<usize>) {
    let t = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("golden `{name}`: {e}"));
    let d = t.data();
    let v = match t.dtype() {
        Dtype::F32 => d
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        Dtype::F64 => d
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        other => panic!("golden `{name}`: unexpected dtype {other:?}"),
    };
    (v, t.shape().to_vec())
}

pub fn i64s(st: &SafeTensors, name: &str) -> (Vec<i64>, Vec<usize>) {
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), Dtype::I64);
    let v = t
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (v, t.shape().to_vec())
}

/// How many golden tensors are named `prefix…`.
pub fn count_with_prefix(st: &SafeTensors, prefix: &str) -> usize {
    st.names()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .count()
}

/// A tensor's f32 values as bits (for bitwise comparisons).
pub fn f32_bits(t: &fucina_autograd::Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// This process's peak resident memory (`VmHWM`), in kB.
pub fn peak_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

pub fn assert_close(name: &str, got: &[f64], want: &[f64], rtol: f64) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
    let worst = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .enumerate()
        .fold((0, 0.0f64), |w, (i, e)| if e > w.1 { (i, e) } else { w });
    assert!(
        worst.1 <= rtol * scale,
        "{name}: element {} differs by {:e} (tolerance {:e}): got {} want {}",
        worst.0,
        worst.1,
        rtol * scale,
        got[worst.0],
        want[worst.0]
    );
}
