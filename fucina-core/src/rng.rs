//! Counter-based random numbers: splitmix64 with O(1) random access.
//!
//! `at(seed, i)` is a pure function of `(seed, i)`, so a dropout mask or an
//! initialisation can be regenerated anywhere (backward, checkpoint recompute,
//! resume) without being stored, and is the same for any thread count.

/// The splitmix64 increment (the golden ratio in 64 bits).
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The splitmix64 output mix.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `i`-th output of the splitmix64 stream seeded with `seed`.
#[inline]
pub fn at(seed: u64, i: u64) -> u64 {
    mix(seed.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// A uniform double in [0, 1) from the top 53 bits of `at(seed, i)`.
#[inline]
pub fn uniform(seed: u64, i: u64) -> f64 {
    (at(seed, i) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A standard normal from Box–Muller over the uniform pair `(2i, 2i+1)`.
#[inline]
pub fn normal(seed: u64, i: u64) -> f64 {
    let u1 = uniform(seed, 2 * i);
    let u2 = uniform(seed, 2 * i + 1);
    let r = (-2.0 * (1.0 - u1).ln()).sqrt();
    r * (std::f64::consts::TAU * u2).cos()
}

/// A sequential splitmix64 generator (for host-side shuffles and test data).
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    seed: u64,
    i: u64,
}

impl SplitMix64 {
    /// A generator at the start of `seed`'s stream.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { seed, i: 0 }
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let v = at(self.seed, self.i);
        self.i += 1;
        v
    }
    /// A uniform double in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// A uniform integer in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
    /// A standard normal.
    pub fn next_normal(&mut self) -> f64 {
        let u1 = self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
    /// `n` uniform values in `[lo, hi)`.
    pub fn vec_uniform(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| lo + (hi - lo) * self.next_f64()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // The first outputs of splitmix64 seeded with 0 (the reference C implementation).
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(at(0, 1), 0x6E78_9E6A_A1B9_65F4);
    }
}
