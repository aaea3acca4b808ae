//! The `gemm` workload: one f32 `A·B` per step (default 1024³, as torch's `a @ b`).
//!
//! Inputs are standard normal and built once; each step allocates its output from the
//! context's pool (as torch allocates `a @ b`'s). `tn`/`nt` pass transposed views.

use fucina_core::rng::SplitMix64;
use fucina_core::{ExecContext, RawTensor, Result};

use crate::Workload;

/// Which operands are transposed views.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// `A [M, K] · B [K, N]`, both row-major.
    #[default]
    NN,
    /// `Aᵀ · B`: A stored `[K, M]` and passed as its transposed view.
    TN,
    /// `A · Bᵀ`: B stored `[N, K]` and passed as its transposed view.
    NT,
}

impl Layout {
    /// Parses `nn`, `tn` or `nt`.
    pub fn parse(s: &str) -> Option<Layout> {
        match s {
            "nn" => Some(Layout::NN),
            "tn" => Some(Layout::TN),
            "nt" => Some(Layout::NT),
            _ => None,
        }
    }
}

/// State of the gemm workload.
pub struct Gemm {
    ctx: ExecContext,
    a: RawTensor,
    b: RawTensor,
    flops: f64,
}

impl Gemm {
    /// Builds `A [M, K]`, `B [K, N]` (as views of the stored layout) with fixed seeds.
    pub fn new(
        ctx: &ExecContext,
        shape: Option<(usize, usize, usize)>,
        layout: Layout,
    ) -> Result<Gemm> {
        let (m, k, n) = shape.unwrap_or((1024, 1024, 1024));
        let mut rng = SplitMix64::new(0);
        let mut randn = |len: usize| {
            (0..len)
                .map(|_| rng.next_normal() as f32)
                .collect::<Vec<f32>>()
        };
        let (a, b) = match layout {
            Layout::NN => (
                ctx.from_slice(&randn(m * k), &[m, k])?,
                ctx.from_slice(&randn(k * n), &[k, n])?,
            ),
            Layout::TN => (
                ctx.from_slice(&randn(k * m), &[k, m])?.transpose(0, 1)?,
                ctx.from_slice(&randn(k * n), &[k, n])?,
            ),
            Layout::NT => (
                ctx.from_slice(&randn(m * k), &[m, k])?,
                ctx.from_slice(&randn(n * k), &[n, k])?.transpose(0, 1)?,
            ),
        };
        Ok(Gemm {
            ctx: ctx.clone(),
            a,
            b,
            flops: 2.0 * m as f64 * k as f64 * n as f64,
        })
    }
}

impl Workload for Gemm {
    fn step(&mut self) -> fucina::Result<()> {
        let c = self.ctx.matmul(&self.a, &self.b)?;
        std::hint::black_box(&c);
        Ok(())
    }

    fn flops(&self) -> Option<f64> {
        Some(self.flops)
    }
}
