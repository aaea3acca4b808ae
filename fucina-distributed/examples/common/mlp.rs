//! The tanh MLP classifier and its synthetic data set, shared by the
//! `ddp_mlp` example and the tests (`tests/common` includes this file):
//! fucina-nn's [`Mlp`] over layers whose values are PyTorch's `nn.Linear`
//! init drawn from one seeded SplitMix64 stream, in f32 or f64.

use fucina_autograd::{CrossEntropyOpts, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, ExecContext};
use fucina_distributed::{Error, Result};
use fucina_nn::{Activation, Linear, Mlp};

/// fucina-nn's errors, as fucina-distributed's (the one foreign error here).
pub fn nn_err(e: fucina_nn::Error) -> Error {
    Error::InvalidConfig(format!("model: {e}"))
}

/// A tensor of `dtype` (f32 or f64) from f64 values; a leaf requiring a
/// gradient when `variable`.
pub fn tensor(
    ctx: &ExecContext,
    v: &[f64],
    shape: &[usize],
    dtype: DType,
    variable: bool,
) -> Result<Tensor> {
    let t = if dtype == DType::F64 {
        Tensor::constant(ctx, v, shape)?
    } else {
        Tensor::constant(ctx, &v.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape)?
    };
    t.set_requires_grad(variable)?;
    Ok(t)
}

/// A tanh MLP of `widths` (`[in, hidden..., out]`): each layer's weight
/// `[out, in]` then bias `[out]` uniform on `±1/√in`, all from one
/// SplitMix64 stream seeded with `seed`.
pub fn mlp(ctx: &ExecContext, widths: &[usize], seed: u64, dtype: DType) -> Result<Mlp> {
    let mut g = SplitMix64::new(seed);
    let mut layers = Vec::new();
    for w in widths.windows(2) {
        let (i, o) = (w[0], w[1]);
        let bound = 1.0 / (i as f64).sqrt();
        let w = g.vec_uniform(i * o, -bound, bound);
        let b = g.vec_uniform(o, -bound, bound);
        let (w, b) = (
            tensor(ctx, &w, &[o, i], dtype, true)?,
            tensor(ctx, &b, &[o], dtype, true)?,
        );
        layers.push(Linear::from_tensors(w, Some(b)).map_err(nn_err)?);
    }
    Ok(Mlp {
        layers,
        activation: Activation::Tanh,
        dropout: None,
    })
}

/// The parameters: each layer's weight, then its bias.
pub fn params(m: &Mlp) -> Vec<Tensor> {
    named(m).into_iter().map(|(_, t)| t).collect()
}

/// The parameters named `l{k}.weight` and `l{k}.bias` (the checkpoints' names).
pub fn named(m: &Mlp) -> Vec<(String, Tensor)> {
    let mut out = Vec::new();
    for (k, l) in m.layers.iter().enumerate() {
        out.push((format!("l{k}.weight"), l.weight.clone()));
        if let Some(b) = &l.bias {
            out.push((format!("l{k}.bias"), b.clone()));
        }
    }
    out
}

/// `n` samples of `features` N(0, 1) features from `seed`, labelled with the
/// argmax over `classes` of a fixed random linear map (a learnable task).
pub fn dataset(n: usize, features: usize, classes: usize, seed: u64) -> (Vec<f64>, Vec<i64>) {
    let mut g = SplitMix64::new(seed);
    let map: Vec<f64> = (0..features * classes).map(|_| g.next_normal()).collect();
    let mut x = Vec::with_capacity(n * features);
    let mut y = Vec::with_capacity(n);
    for _ in 0..n {
        let row: Vec<f64> = (0..features).map(|_| g.next_normal()).collect();
        let scores: Vec<f64> = (0..classes)
            .map(|c| (0..features).map(|f| row[f] * map[c * features + f]).sum())
            .collect();
        let label = (0..classes)
            .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
            .unwrap_or(0);
        x.extend_from_slice(&row);
        y.push(label as i64);
    }
    (x, y)
}

/// The mean cross-entropy of `model` on the samples `idx` of `data` (call
/// inside a scope; backward is the caller's).
pub fn loss(
    ctx: &ExecContext,
    model: &Mlp,
    data: &(Vec<f64>, Vec<i64>),
    idx: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    let features = data.0.len() / data.1.len();
    let mut bx = Vec::with_capacity(idx.len() * features);
    let mut by = Vec::with_capacity(idx.len());
    for &i in idx {
        bx.extend_from_slice(&data.0[i * features..(i + 1) * features]);
        by.push(data.1[i]);
    }
    let x = tensor(ctx, &bx, &[idx.len(), features], dtype, false)?;
    let y = Tensor::constant(ctx, &by, &[idx.len()])?;
    let logits = model.forward(&x).map_err(nn_err)?;
    Ok(logits.cross_entropy(&y, CrossEntropyOpts::default())?)
}
