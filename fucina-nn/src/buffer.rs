//! `Buffer`: a module's non-parameter state — RoPE's cos/sin tables,
//! BERT's `position_ids`, a dropout layer's call counter. A buffer is a
//! field of a module like a parameter is, named by its path, listed by
//! [`Module::named_buffers`](crate::Module::named_buffers), and never handed to an optimizer
//! ([`Module::parameters`](crate::Module::parameters) does not see it). A *persistent* buffer is part
//! of [`Module::state_dict`](crate::Module::state_dict) (saved and loaded with the parameters, as
//! PyTorch's `register_buffer(persistent=True)`); a non-persistent one is
//! recomputed from the configuration and never saved. Its `Module` impl
//! (a leaf reporting itself to `visit_buffers`) lives with the trait in
//! `module.rs`.

use std::ops::Deref;

use fucina_autograd::Tensor;

use crate::error::Result;

/// A named tensor of a module that is not a parameter: it takes no
/// gradient and is never optimised.
///
/// ```
/// use fucina_nn::{Buffer, Module, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// #[derive(fucina_nn::Module)]
/// struct Table {
///     weight: Tensor,
///     ids: Buffer,
///     cache: Buffer,
/// }
/// let t = Table {
///     weight: Tensor::variable(&ctx, &[1.0f32, 2.0], &[2])?,
///     ids: Buffer::persistent(Tensor::constant(&ctx, &[0i64, 1], &[2])?)?,
///     cache: Buffer::non_persistent(Tensor::constant(&ctx, &[0.5f32], &[1])?)?,
/// };
/// assert_eq!(t.parameters().len(), 1);
/// let names: Vec<String> = t.named_buffers().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["ids", "cache"]);
/// let state: Vec<String> = t.state_dict().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(state, ["weight", "ids"]);
/// # Ok::<(), fucina_nn::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Buffer {
    tensor: Tensor,
    persistent: bool,
}

impl Buffer {
    /// A buffer saved and loaded with the state dict. A tensor that
    /// requires a gradient is detached first (a buffer never takes one).
    pub fn persistent(tensor: Tensor) -> Result<Buffer> {
        Buffer::new(tensor, true)
    }

    /// A buffer recomputed from the configuration, never saved.
    pub fn non_persistent(tensor: Tensor) -> Result<Buffer> {
        Buffer::new(tensor, false)
    }

    fn new(tensor: Tensor, persistent: bool) -> Result<Buffer> {
        let tensor = if tensor.requires_grad() {
            tensor.detach()?
        } else {
            tensor
        };
        Ok(Buffer { tensor, persistent })
    }

    /// The tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// True if [`Module::state_dict`](crate::Module::state_dict) holds it.
    pub fn is_persistent(&self) -> bool {
        self.persistent
    }
}

impl Deref for Buffer {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.tensor
    }
}
