//! Picking the next token from a row of logits: greedy (the first maximum,
//! as `argmax`), or sampling with transformers' warpers in their order —
//! temperature, then top-k (keeps every logit ≥ the k-th largest), then
//! top-p (drops the smallest tokens whose cumulative probability is at most
//! 1 − p, always keeping the most likely) — from a counter-based random
//! draw, so a seed gives the same tokens on every run and thread count.

use fucina_core::rng;

use crate::error::{Error, Result};

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// The most likely token (`do_sample=False`).
    Greedy,
    /// A draw from the warped distribution (`do_sample=True`).
    Sample {
        /// Divides the logits (> 0).
        temperature: f64,
        /// Keep the `top_k` most likely tokens (0 keeps all).
        top_k: usize,
        /// Keep the smallest set whose probability exceeds `top_p` (1 keeps all).
        top_p: f64,
        /// The seed of the draws.
        seed: u64,
    },
}

impl Sampling {
    /// Checks the settings: temperature finite and > 0, top_p in (0, 1].
    pub fn validate(&self) -> Result<()> {
        if let Sampling::Sample {
            temperature, top_p, ..
        } = *self
        {
            if !(temperature.is_finite() && temperature > 0.0) {
                return Err(Error::config(
                    "Sampling",
                    format!("temperature {temperature} must be > 0"),
                ));
            }
            if !(top_p > 0.0 && top_p <= 1.0) {
                return Err(Error::config(
                    "Sampling",
                    format!("top_p {top_p} must be in (0, 1]"),
                ));
            }
        }
        Ok(())
    }

    /// The token for `logits` (one row); `draw` numbers the random draw
    /// (e.g. step · batch + row), so each draw is independent of the others.
    pub fn pick(&self, logits: &[f64], draw: u64) -> usize {
        match *self {
            Sampling::Greedy => argmax(logits),
            Sampling::Sample {
                temperature,
                top_k,
                top_p,
                seed,
            } => {
                let mut x: Vec<f64> = logits.iter().map(|&l| l / temperature).collect();
                if top_k > 0 && top_k < x.len() {
                    let mut sorted = x.clone();
                    sorted.sort_by(|a, b| b.total_cmp(a));
                    let kth = sorted[top_k - 1];
                    x.iter_mut()
                        .filter(|v| **v < kth)
                        .for_each(|v| *v = f64::NEG_INFINITY);
                }
                let p = softmax(&x);
                let keep = if top_p < 1.0 {
                    top_p_keep(&p, top_p)
                } else {
                    vec![true; p.len()]
                };
                let total: f64 = p
                    .iter()
                    .zip(&keep)
                    .filter(|(_, k)| **k)
                    .map(|(p, _)| p)
                    .sum();
                let u = rng::uniform(seed, draw) * total;
                let mut acc = 0.0;
                let mut last = argmax(logits);
                for (i, (&pi, &k)) in p.iter().zip(&keep).enumerate() {
                    if !k || pi == 0.0 {
                        continue;
                    }
                    acc += pi;
                    last = i;
                    if u < acc {
                        return i;
                    }
                }
                last
            }
        }
    }
}

/// The index of the first maximum (NaN never wins).
pub fn argmax(x: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] || x[best].is_nan() {
            best = i;
        }
    }
    best
}

fn softmax(x: &[f64]) -> Vec<f64> {
    let m = x.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
    let e: Vec<f64> = x.iter().map(|&v| (v - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

/// transformers' TopPLogitsWarper: sort ascending, drop the tokens whose
/// cumulative probability is ≤ 1 − p, but never the most likely one.
fn top_p_keep(p: &[f64], top_p: f64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..p.len()).collect();
    // Ascending by probability; ties by index so the order is fixed.
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]).then(a.cmp(&b)));
    let mut keep = vec![true; p.len()];
    let mut cum = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        cum += p[i];
        if cum <= 1.0 - top_p && rank + 1 < order.len() {
            keep[i] = false;
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Sampling::Sample` with these temperature, top-k, top-p and seed.
    fn sample(temperature: f64, top_k: usize, top_p: f64, seed: u64) -> Sampling {
        Sampling::Sample {
            temperature,
            top_k,
            top_p,
            seed,
        }
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(Sampling::Greedy.pick(&[0.0, 2.0, 1.0], 0), 1);
    }

    #[test]
    fn top_k_one_is_greedy_and_seeds_repeat() {
        let s = sample(0.7, 1, 1.0, 3);
        for d in 0..20 {
            assert_eq!(s.pick(&[0.1, 0.5, 0.2], d), 1);
        }
        let s = sample(1.0, 0, 1.0, 9);
        let a: Vec<usize> = (0..50).map(|d| s.pick(&[0.0, 0.0, 0.0, 0.0], d)).collect();
        let b: Vec<usize> = (0..50).map(|d| s.pick(&[0.0, 0.0, 0.0, 0.0], d)).collect();
        assert_eq!(a, b);
        assert!(
            a.iter().any(|&i| i != a[0]),
            "uniform draws should vary: {a:?}"
        );
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        // p ≈ [0.64, 0.24, 0.09, 0.03]: top_p 0.7 keeps the first two.
        let p = softmax(&[3.0, 2.0, 1.0, 0.0]);
        assert_eq!(top_p_keep(&p, 0.7), [true, true, false, false]);
        assert_eq!(top_p_keep(&p, 0.01), [true, false, false, false]);
        let s = sample(1.0, 0, 0.7, 1);
        for d in 0..100 {
            assert!(s.pick(&[3.0, 2.0, 1.0, 0.0], d) < 2);
        }
    }

    #[test]
    fn bad_settings_are_errors() {
        let s = sample(0.0, 0, 1.0, 1);
        assert!(s.validate().is_err());
        let s = sample(1.0, 0, 1.5, 1);
        assert!(s.validate().is_err());
    }
}
