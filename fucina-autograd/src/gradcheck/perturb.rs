//! Perturbing an input without changing its layout.
//!
//! gradcheck moves the *stored* values of an input: it copies the input's
//! whole buffer extent, changes the stored elements the view reaches, and
//! puts back a view with the original shape, strides and offset over the new
//! buffer. A transposed or narrowed input therefore stays transposed or
//! narrowed while it is perturbed (the op under test keeps seeing the layout
//! being checked), and a broadcast input (stride 0) is perturbed per stored
//! element: its numerical derivative is then with respect to the stored value,
//! and the analytical one is summed over the logical elements aliasing it.

use fucina_core::{DType, RawTensor};

use crate::error::Result;
use crate::tape::tensor::Tensor;

/// The stored elements ("slots") one input's view reaches.
pub(crate) struct Slots {
    /// The original value (restored at the end).
    pub orig: RawTensor,
    /// The whole buffer extent, as f64.
    pub storage: Vec<f64>,
    /// Buffer offset of each slot, in order of first appearance.
    pub offsets: Vec<usize>,
    /// For each logical element (row-major), its slot.
    pub slot_of: Vec<usize>,
    /// For each slot, its first logical element and how many alias it.
    pub first: Vec<usize>,
    pub aliases: Vec<usize>,
}

pub(crate) fn raw_to_f64(r: &RawTensor) -> Result<Vec<f64>> {
    Ok(
        fucina_core::dispatch_any!(r.dtype(), T => r.to_vec::<T>()?.into_iter().map(fucina_core::Element::to_f64).collect()),
    )
}

impl Slots {
    pub fn of(x: &Tensor) -> Result<Slots> {
        let orig = x.raw()?;
        let extent = orig.extent();
        let storage = raw_to_f64(&orig.view_with_strides(&[extent], &[1], 0)?)?;
        let mut offsets = Vec::new();
        let mut first = Vec::new();
        let mut aliases = Vec::new();
        let mut slot_of = Vec::with_capacity(orig.numel());
        // Offset -> slot; a dense table over the extent (gradcheck inputs are small).
        let mut table = vec![usize::MAX; extent];
        for (j, off) in orig.offsets().enumerate() {
            if table[off] == usize::MAX {
                table[off] = offsets.len();
                offsets.push(off);
                first.push(j);
                aliases.push(0);
            }
            let s = table[off];
            aliases[s] += 1;
            slot_of.push(s);
        }
        Ok(Slots {
            orig,
            storage,
            offsets,
            slot_of,
            first,
            aliases,
        })
    }

    /// Number of distinct stored elements.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Sums a per-logical-element gradient into per-slot values.
    pub fn gather(&self, per_element: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.len()];
        for (j, &s) in self.slot_of.iter().enumerate() {
            out[s] += per_element[j];
        }
        out
    }

    /// Sets `x` to the original layout over `storage` (the whole extent).
    pub fn set(&self, x: &Tensor, storage: &[f64]) -> Result<()> {
        let ctx = x.ctx();
        let o = &self.orig;
        let flat = ctx.from_slice(storage, &[storage.len()])?;
        let flat = if o.dtype() == DType::F64 {
            flat
        } else {
            ctx.to_dtype(&flat, o.dtype())?
        };
        x.set_value(flat.view_with_strides(o.shape(), o.strides(), o.offset())?)
    }

    /// Sets `x` with slot `k` moved by `delta`.
    pub fn set_one(&self, x: &Tensor, k: usize, delta: f64) -> Result<()> {
        let mut s = self.storage.clone();
        s[self.offsets[k]] += delta;
        self.set(x, &s)
    }

    /// Sets `x` with every slot moved by `delta[k]`; returns the moves as
    /// they were actually stored (an f32 input rounds them).
    pub fn set_all(&self, x: &Tensor, delta: &[f64]) -> Result<Vec<f64>> {
        let mut s = self.storage.clone();
        for (k, &off) in self.offsets.iter().enumerate() {
            s[off] += delta[k];
        }
        self.set(x, &s)?;
        let stored = raw_to_f64(&x.raw()?.view_with_strides(&[s.len()], &[1], 0)?)?;
        Ok(self
            .offsets
            .iter()
            .map(|&off| stored[off] - self.storage[off])
            .collect())
    }

    /// Puts the original value back.
    pub fn restore(&self, x: &Tensor) -> Result<()> {
        x.set_value(self.orig.clone())
    }
}
