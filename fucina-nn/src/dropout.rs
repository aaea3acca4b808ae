//! `Dropout`: inverted dropout that obeys train/eval.
//!
//! In training mode each forward draws a fresh mask from the counter-based
//! RNG: call `k` uses seed `rng::at(seed, k)`, and autograd's `dropout`
//! regenerates the mask in backward from `(seed, element index)`, so a run
//! is reproducible from the seed and the sequence of calls on any thread
//! count. The call counter is a persistent [`Buffer`] (`calls`, I64 `[1]`),
//! so a state dict saved mid-run resumes the same masks. In eval mode, or with `p = 0`, forward is the identity (the same
//! tensor handle, no op recorded).

use fucina_autograd::Tensor;
use fucina_core::{rng, ExecContext};

use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::init::Init;
use crate::module::{Forward, Mode};

/// Zeroes each element with probability `p` in training and scales the rest
/// by `1/(1−p)`.
///
/// ```
/// use fucina_nn::{Dropout, Init, Module};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mut init = Init::new(&ctx, fucina_core::DType::F32, 0);
/// let drop = Dropout::new(&mut init, 0.5).unwrap();
/// let x = fucina_autograd::Tensor::constant(&ctx, &[1.0f32; 64], &[64]).unwrap();
/// let y = drop.forward(&x).unwrap().to_vec::<f32>().unwrap();
/// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
/// drop.eval();
/// assert_eq!(drop.forward(&x).unwrap().to_vec::<f32>().unwrap(), vec![1.0; 64]);
/// ```
#[derive(Clone, Debug, fucina_nn_derive::Module)]
pub struct Dropout {
    /// The drop probability in `[0, 1)`.
    #[module(skip)]
    pub p: f64,
    #[module(skip)]
    seed: u64,
    /// Masks drawn so far (I64 `[1]`, the u64 count's bits).
    calls: Buffer,
    /// Train/eval flag.
    pub mode: Mode,
}

impl Dropout {
    /// A dropout layer whose seed is the next stream of `init`.
    pub fn new(init: &mut Init, p: f64) -> Result<Dropout> {
        let seed = init.next_seed();
        Self::with_seed(init.ctx(), p, seed)
    }

    /// A dropout layer with an explicit seed.
    pub fn with_seed(ctx: &ExecContext, p: f64, seed: u64) -> Result<Dropout> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::config(
                "Dropout",
                format!("p must be in [0, 1), got {p}"),
            ));
        }
        Ok(Dropout {
            p,
            seed,
            calls: Buffer::persistent(Tensor::constant(ctx, &[0i64], &[1])?)?,
            mode: Mode::new(),
        })
    }

    /// How many masks were drawn so far.
    pub fn calls(&self) -> Result<u64> {
        Ok(self.calls.to_vec::<i64>()?[0] as u64)
    }

    /// Sets the call counter (to replay the masks of a resumed run).
    pub fn set_calls(&self, calls: u64) -> Result<()> {
        self.calls.update_value(|v| {
            v.as_mut_slice::<i64>()?[0] = calls as i64;
            Ok::<(), Error>(())
        })
    }

    /// Drops in training mode, identity in eval mode.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.mode.is_training() || self.p == 0.0 {
            return Ok(x.clone());
        }
        // Through `random_draw`: a checkpoint's recompute gets the
        // forward's call number back, so it applies the same mask and the
        // counter advances once, as in the plain run.
        let k = fucina_autograd::checkpoint::random_draw(|| {
            self.calls.update_value(|v| {
                let c = &mut v.as_mut_slice::<i64>()?[0];
                let k = *c as u64;
                *c = k.wrapping_add(1) as i64;
                Ok::<u64, Error>(k)
            })
        })?;
        Ok(x.dropout(self.p, rng::at(self.seed, k))?)
    }
}

impl Forward for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Dropout::forward(self, x)
    }
}
