//! Model FLOPs utilisation: the FLOPs a transformer training step needs
//! from its shapes (the formula of docs/BENCHMARKS.md, "Model FLOPs
//! utilisation"), and the machine's f32 FMA peak that divides them.
//!
//! Model FLOPs count the matrix products a dense implementation performs,
//! 2·m·n·k each:
//!
//! ```text
//! per token, forward:   2·(Σ weight-matrix elements of the layers + d·vocab for an LM head)
//!                     + 4·L·H·hd·c        (scores and values; c = (T+1)/2 causal, T not)
//! training:             forward + dx (same as forward) + dW (same, trainable weights only)
//!                       attention backward = 2 × its forward
//! LoRA (base frozen):   base: forward + dx; adapters A [r, in], B [out, r]: forward + dx + dW
//! ```
//!
//! Norms, activations, softmax, the loss and the optimizer are not counted
//! (they are memory-bound; PaLM's convention), so MFU = model FLOPs / step
//! time / FMA peak is what fraction of the chip the matrix work gets.

use std::time::Instant;

/// The shapes of one transformer training step.
#[derive(Clone, Debug)]
pub struct TransformerShape {
    /// Sequences per batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Blocks.
    pub layers: usize,
    /// Model width.
    pub d_model: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Per-head width.
    pub head_dim: usize,
    /// MLP hidden width.
    pub ffn: usize,
    /// MLP weight matrices per block (2 for GELU, 3 for SwiGLU).
    pub mlp_matrices: usize,
    /// The LM head's vocabulary (0 for a classifier head, which is not counted).
    pub vocab: usize,
    /// Causal attention (each query sees `(T+1)/2` keys on average).
    pub causal: bool,
    /// LoRA rank on every block projection with the base frozen (`None`: full training).
    pub lora_rank: Option<usize>,
}

impl TransformerShape {
    /// A stack of `layers` blocks of `heads`-head attention (every head its
    /// own K/V, `d_model / heads` wide) and a two-matrix MLP `ffn` wide, as
    /// GPT and BERT have: bidirectional, no LM head, fully trained (a
    /// caller changes those fields with struct update syntax).
    pub fn multi_head(
        batch: usize,
        seq: usize,
        layers: usize,
        d_model: usize,
        heads: usize,
        ffn: usize,
    ) -> TransformerShape {
        TransformerShape {
            batch,
            seq,
            layers,
            d_model,
            heads,
            kv_heads: heads,
            head_dim: d_model / heads,
            ffn,
            mlp_matrices: 2,
            vocab: 0,
            causal: false,
            lora_rank: None,
        }
    }

    /// Tokens per step.
    pub fn tokens(&self) -> usize {
        self.batch * self.seq
    }

    /// The `(in, out)` of every projection of one block.
    fn projections(&self) -> Vec<(usize, usize)> {
        let (d, q, kv) = (
            self.d_model,
            self.heads * self.head_dim,
            self.kv_heads * self.head_dim,
        );
        let mut v = vec![(d, q), (d, kv), (d, kv), (q, d)];
        // SwiGLU: gate and up d → ffn, down ffn → d; GELU: up and down.
        for i in 0..self.mlp_matrices {
            v.push(if i + 1 == self.mlp_matrices {
                (self.ffn, d)
            } else {
                (d, self.ffn)
            });
        }
        v
    }

    /// Model FLOPs of one training step (forward + backward), as the module
    /// documentation says.
    pub fn train_flops(&self) -> f64 {
        let tokens = self.tokens() as f64;
        let base_passes = if self.lora_rank.is_some() { 2.0 } else { 3.0 };
        let per_layer: f64 = self
            .projections()
            .iter()
            .map(|&(i, o)| {
                let base = 2.0 * (i * o) as f64 * base_passes;
                let adapter = self
                    .lora_rank
                    .map_or(0.0, |r| 2.0 * (r * (i + o)) as f64 * 3.0);
                base + adapter
            })
            .sum();
        let ctx = if self.causal {
            (self.seq + 1) as f64 / 2.0
        } else {
            self.seq as f64
        };
        let attention = 4.0 * (self.heads * self.head_dim) as f64 * ctx * 3.0;
        let head = 2.0 * (self.d_model * self.vocab) as f64 * base_passes;
        tokens * (self.layers as f64 * (per_layer + attention) + head)
    }
}

#[cfg(target_arch = "x86_64")]
mod chains {
    use std::arch::x86_64::*;

    /// One FMA-chain kernel per instruction set, from one template: 12
    /// independent chains of `set1`-wide registers, `fmadd` per step, the
    /// chains summed with `add`, then the lanes by `reduce`.
    macro_rules! fma_chains {
        ($(#[$doc:meta])* $name:ident, $feature:literal, $set1:ident, $fmadd:ident, $add:ident,
         $zero:ident, |$s:ident| $reduce:expr) => {
            $(#[$doc])*
            #[target_feature(enable = $feature)]
            // SAFETY: the caller's to keep: each kernel's `# Safety` names the ISA it needs.
            pub unsafe fn $name(steps: usize) -> f32 {
                let mut acc = [$set1(0.0); 12];
                let a = $set1(1.000_001);
                let b = $set1(0.999_999);
                for _ in 0..steps {
                    for r in acc.iter_mut() {
                        *r = $fmadd(*r, a, b);
                    }
                }
                let mut $s = $zero();
                for r in acc {
                    $s = $add($s, r);
                }
                $reduce
            }
        };
    }

    fma_chains!(
        /// 12 independent 8-lane FMA chains for `steps` steps.
        ///
        /// # Safety
        /// AVX2 and FMA are available.
        avx2, "avx2,fma", _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_setzero_ps,
        |s| {
            let mut out = [0f32; 8];
            // SAFETY: `out` holds 8 floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
            out.iter().sum()
        }
    );

    fma_chains!(
        /// 12 independent 16-lane FMA chains for `steps` steps.
        ///
        /// # Safety
        /// AVX-512F is available.
        avx512, "avx512f", _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_setzero_ps,
        |s| _mm512_reduce_add_ps(s)
    );
}

/// FMA steps per trial (each step: 12 chains × lanes × 2 FLOPs).
const STEPS: usize = 20_000;
/// Trials per thread; the fastest counts.
const TRIALS: usize = 300;

/// An FMA chain kernel: runs `steps` steps, returns a value to keep.
pub type Chains = fn(usize) -> f32;

/// GFLOP/s of the fastest of the trials of `f` (`lanes` per chain), on one thread.
pub fn best_gflops(f: Chains, lanes: usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..TRIALS {
        let t = Instant::now();
        std::hint::black_box(f(STEPS));
        best = best.min(t.elapsed().as_secs_f64());
    }
    (STEPS * 12 * lanes * 2) as f64 / best / 1e9
}

/// Each of `threads` threads' GFLOP/s, all running `f` at once.
pub fn per_thread_gflops(f: Chains, lanes: usize, threads: usize) -> Vec<f64> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| best_gflops(f, lanes)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or(0.0)).collect()
    })
}

/// The FMA kernels this CPU runs, widest first: `(name, kernel, lanes)`.
pub fn fma_paths() -> Vec<(&'static str, Chains, usize)> {
    #[allow(unused_mut)]
    let mut v: Vec<(&'static str, Chains, usize)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use fucina_core::kernels::simd;
        // CPU features come from core's one detection (kernels/simd.rs).
        if simd::has_avx512f() {
            // SAFETY: AVX-512F was detected just above.
            v.push(("f32 FMA, 512-bit", |n| unsafe { chains::avx512(n) }, 16));
        }
        if simd::has_avx2_fma() {
            // SAFETY: AVX2 and FMA were detected just above.
            v.push(("f32 FMA, 256-bit", |n| unsafe { chains::avx2(n) }, 8));
        }
    }
    v
}

/// The f32 FMA peak of `threads` threads on the widest path, GFLOP/s:
/// `FUCINA_FMA_PEAK_GFLOPS` when set (to skip the measurement), else
/// measured now (about a second); `None` on a CPU without AVX2 + FMA.
pub fn fma_peak_gflops(threads: usize) -> Option<f64> {
    if let Some(v) = std::env::var("FUCINA_FMA_PEAK_GFLOPS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
    {
        return Some(v);
    }
    let (_, f, lanes) = *fma_paths().first()?;
    Some(per_thread_gflops(f, lanes, threads).iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpt2_small_step_counts_six_n_per_token_plus_attention() {
        // GPT-2 small: the 6·N·tokens rule (N = 85M weights of the blocks
        // and head) plus 12·L·d·c attention per token.
        let s = TransformerShape {
            batch: 1,
            seq: 1024,
            layers: 12,
            d_model: 768,
            heads: 12,
            kv_heads: 12,
            head_dim: 64,
            ffn: 3072,
            mlp_matrices: 2,
            vocab: 50257,
            causal: true,
            lora_rank: None,
        };
        let n = 12.0 * 12.0 * 768.0 * 768.0 + 768.0 * 50257.0;
        let want = 1024.0 * (6.0 * n + 12.0 * 12.0 * 768.0 * 512.5);
        assert!((s.train_flops() - want).abs() / want < 1e-12);
        // LoRA: the base skips dW (2 passes instead of 3), adapters train.
        let lora = TransformerShape {
            lora_rank: Some(8),
            ..s.clone()
        };
        let adapters: f64 = s
            .projections()
            .iter()
            .map(|&(i, o)| 6.0 * 8.0 * (i + o) as f64)
            .sum::<f64>()
            * 12.0;
        let want = 1024.0 * (4.0 * n + 12.0 * 12.0 * 768.0 * 512.5 + adapters);
        assert!((lora.train_flops() - want).abs() / want < 1e-12);
    }
}
