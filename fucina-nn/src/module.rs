//! The [`Module`] trait: named parameters by dotted path, train/eval mode,
//! freezing by name pattern, gradients and parameter groups — all derived
//! from the visits over a module's fields (parameters, sub-modules, modes).
//!
//! Invariants: a visit reaches parameters in field-declaration order (so
//! `named_parameters` is deterministic); a [`Tensor`] is the leaf module (a
//! parameter named by its path); `Vec<T>` names its items `0`, `1`, ...;
//! `Option<T>` visits nothing when `None`; a tensor shared by two fields is
//! reported once, under its first path. Modes live in [`Mode`] fields, which
//! `set_training` reaches through the same visit.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::buffer::Buffer;
use crate::error::Result;
use fucina_autograd::Tensor;

/// Joins a path prefix and a field name with a dot (`""` + `"w"` is `"w"`).
pub fn join(prefix: &str, name: &str) -> String {
    match (prefix.is_empty(), name.is_empty()) {
        (true, _) => name.to_string(),
        (_, true) => prefix.to_string(),
        _ => format!("{prefix}.{name}"),
    }
}

/// True when the dotted `name` matches `pattern`.
///
/// A pattern with `*` is a glob over the whole name, where `*` matches any
/// run of characters, dots included (`blocks.*.qkv.weight`, `*.bias`,
/// `wte.*`); a pattern without `*` matches when it is a substring of the
/// name (`bias` matches `blocks.0.qkv.bias`). The empty pattern matches all.
///
/// ```
/// use fucina_nn::module::matches;
/// assert!(matches("blocks.*.bias", "blocks.0.qkv.bias"));
/// assert!(matches("ln", "blocks.1.ln2.weight"));
/// assert!(!matches("*.bias", "wte.weight"));
/// ```
pub fn matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains('*') {
        return name.contains(pattern);
    }
    // Iterative glob with backtracking to the last star.
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// A module: a struct of parameters and sub-modules, visited by name.
///
/// Implement it with `#[derive(Module)]` (a `'static` struct): every field must be a module (a
/// [`Tensor`] parameter, a layer, a `Vec`/`Option`/`Box` of modules) or be
/// marked `#[module(skip)]`. `#[module(rename = "LayerNorm")]` changes a
/// field's name in the path; `#[module(flatten)]` gives a sub-module's
/// parameters the parent's prefix. Everything else — names, counts, modes,
/// freezing, groups, typed sub-module access — comes from the visits.
///
/// ```
/// use fucina_nn::{Init, Linear, Module, LayerNorm};
/// use fucina_core::{DType, ExecContext};
///
/// #[derive(Module)]
/// struct Head {
///     #[module(rename = "LayerNorm")]
///     norm: LayerNorm,
///     layers: Vec<Linear>,
///     #[module(skip)]
///     width: usize,
/// }
///
/// let ctx = ExecContext::with_threads(1).unwrap();
/// let mut init = Init::new(&ctx, DType::F32, 0);
/// let head = Head {
///     norm: LayerNorm::new(&mut init, 4, 1e-5).unwrap(),
///     layers: vec![Linear::new(&mut init, 4, 4, true).unwrap(), Linear::new(&mut init, 4, 2, false).unwrap()],
///     width: 4,
/// };
/// let names: Vec<String> = head.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["LayerNorm.weight", "LayerNorm.bias", "layers.0.weight", "layers.0.bias", "layers.1.weight"]);
/// assert_eq!(head.num_parameters(), 4 + 4 + 16 + 4 + 8);
/// head.freeze("LayerNorm");
/// assert_eq!(head.trainable_parameters().len(), 3);
/// ```
///
/// Every module is `Send + Sync` (a supertrait, so a field in a `Cell` or
/// `RefCell` is a compile error): a model can be shared by reference with
/// another thread, e.g. one that evaluates it under no-grad while this one
/// trains. Interior state uses atomics or locks (`Mode`, LoRA's merge slot).
pub trait Module: Send + Sync {
    /// Calls `f(path, param)` for every parameter, in declaration order,
    /// with `prefix` joined in front of each name.
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor));

    /// Calls `f(path, param)` with mutable access, in the same order as
    /// [`Module::visit_params`] (replacing a parameter's handle: state-dict
    /// loading, LoRA wrapping).
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor));

    /// Calls `f(path, buffer)` for every [`Buffer`] (non-parameter state),
    /// in declaration order. Required, as the other visits are: a composite
    /// that forgot to forward it would silently drop its children's buffers
    /// from the state dict.
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer));

    /// Calls `f(path, module)` for this module and every sub-module, parents
    /// first (a derived struct reports itself, then its fields; `Vec`,
    /// `Option`, `Box` are transparent; tensors and modes are not reported; a
    /// flattened field shares its parent's path). Downcast with
    /// `downcast_ref` on `dyn Any`, or use [`for_each`].
    fn visit_modules(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn Any));

    /// [`Module::visit_modules`] with mutable access (swap a sub-module,
    /// attach an adapter to every `Linear` whose path matches a pattern);
    /// see [`for_each_mut`].
    fn visit_modules_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn Any));

    /// Sets every [`Mode`] in the module (and its sub-modules) to training
    /// (`true`) or evaluation (`false`).
    fn set_training(&self, training: bool);

    /// The module that maps hidden states to the vocabulary (transformers'
    /// `get_output_embeddings`), when this module is a model with one:
    /// LoRA's `"all-linear"` leaves it out and `modules_to_save` refuses to
    /// split a tied pair silently. `None` by default (a plain module has no
    /// output head).
    fn output_head(&self) -> Option<OutputHead> {
        None
    }

    /// Every parameter with its dotted path, in declaration order; a tensor
    /// reached twice (a tied weight) is listed once, under its first path.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out: Vec<(String, Tensor)> = Vec::new();
        self.visit_params("", &mut |name, t| {
            if !out.iter().any(|(_, u)| u.same_as(t)) {
                out.push((name.to_string(), t.clone()));
            }
        });
        out
    }

    /// Every buffer with its dotted path, persistent or not, in declaration
    /// order (a buffer reached twice is listed once). Buffers are never
    /// parameters: no gradient, no optimizer.
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        let mut out: Vec<(String, Tensor)> = Vec::new();
        self.visit_buffers("", &mut |name, b| {
            if !out.iter().any(|(_, u)| u.same_as(b.tensor())) {
                out.push((name.to_string(), b.tensor().clone()));
            }
        });
        out
    }

    /// What is saved and loaded: every parameter
    /// ([`Module::named_parameters`]), then every persistent buffer, by
    /// dotted path (PyTorch's `state_dict`).
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        let mut out = self.named_parameters();
        self.visit_buffers("", &mut |name, b| {
            if b.is_persistent() && !out.iter().any(|(_, u)| u.same_as(b.tensor())) {
                out.push((name.to_string(), b.tensor().clone()));
            }
        });
        out
    }

    /// Every parameter, in the order of [`Module::named_parameters`].
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// The parameters that require a gradient (not frozen).
    fn trainable_parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .map(|(_, t)| t)
            .collect()
    }

    /// The parameter at `name`, if any.
    fn parameter(&self, name: &str) -> Option<Tensor> {
        let mut out = None;
        self.visit_params("", &mut |n, t| {
            if out.is_none() && n == name {
                out = Some(t.clone());
            }
        });
        out
    }

    /// The total number of parameter elements (tied tensors counted once).
    fn num_parameters(&self) -> usize {
        self.named_parameters().iter().map(|(_, t)| t.numel()).sum()
    }

    /// Training mode: dropout drops (the default of a new module).
    fn train(&self) {
        self.set_training(true);
    }

    /// Evaluation mode: dropout is the identity.
    fn eval(&self) {
        self.set_training(false);
    }

    /// Stops gradients to every parameter whose name [`matches()`] `pattern`;
    /// returns how many parameters it froze.
    fn freeze(&self, pattern: &str) -> usize {
        set_requires_grad_matching(self, pattern, false)
    }

    /// Lets gradients flow again to every parameter whose name [`matches()`]
    /// `pattern`; returns how many parameters it touched.
    fn unfreeze(&self, pattern: &str) -> usize {
        set_requires_grad_matching(self, pattern, true)
    }

    /// Drops every parameter's accumulated gradient (PyTorch's
    /// `zero_grad(set_to_none=True)`).
    fn zero_grad(&self) {
        self.visit_params("", &mut |_, t| t.zero_grad());
    }

    /// Splits the trainable parameters into groups: `group(name, tensor)`
    /// returns each one's group index. The result has `max index + 1`
    /// groups (some may be empty), each in declaration order; frozen
    /// parameters are left out. Feed each group to an optimizer's
    /// `ParamGroup::new(tensors, config)`.
    ///
    /// ```
    /// use fucina_nn::{Init, Linear, Module};
    /// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
    /// let mut init = Init::new(&ctx, fucina_core::DType::F32, 0);
    /// let lin = Linear::new(&mut init, 3, 2, true).unwrap();
    /// // No weight decay on biases and norms (rank-1 tensors), as nanoGPT.
    /// let groups = lin.param_groups(&mut |_, t| usize::from(t.rank() < 2));
    /// assert_eq!((groups[0].len(), groups[1].len()), (1, 1));
    /// ```
    fn param_groups(&self, group: &mut dyn FnMut(&str, &Tensor) -> usize) -> Vec<Vec<Tensor>> {
        let mut out: Vec<Vec<Tensor>> = Vec::new();
        for (name, t) in self.named_parameters() {
            if !t.requires_grad() {
                continue;
            }
            let g = group(&name, &t);
            if out.len() <= g {
                out.resize_with(g + 1, Vec::new);
            }
            out[g].push(t);
        }
        out
    }

    /// The nanoGPT split: `[decayed, not decayed]`, where every tensor of
    /// rank ≥ 2 (matmul weights, embeddings) decays and every rank-1 tensor
    /// (biases, norm scales) does not. Always two groups.
    fn decay_groups(&self) -> [Vec<Tensor>; 2] {
        let mut g = self.param_groups(&mut |_, t| usize::from(t.rank() < 2));
        g.resize_with(2, Vec::new);
        let no_decay = g.pop().unwrap_or_default();
        let decay = g.pop().unwrap_or_default();
        [decay, no_decay]
    }
}

fn set_requires_grad_matching<M: Module + ?Sized>(m: &M, pattern: &str, on: bool) -> usize {
    let mut n = 0;
    m.visit_params("", &mut |name, t| {
        // Parameters are leaves, so this cannot fail; a non-leaf is skipped.
        if matches(pattern, name) && t.set_requires_grad(on).is_ok() {
            n += 1;
        }
    });
    n
}

/// A tensor is the leaf module: one parameter named by its path.
impl Module for Tensor {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        f(prefix, self);
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor)) {
        f(prefix, self);
    }
    fn visit_buffers(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Buffer)) {}
    fn visit_modules(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &dyn Any)) {}
    fn visit_modules_mut(&mut self, _prefix: &str, _f: &mut dyn FnMut(&str, &mut dyn Any)) {}
    fn set_training(&self, _training: bool) {}
}

/// A buffer is a leaf module with no parameters that reports itself to
/// [`Module::visit_buffers`].
impl Module for Buffer {
    fn visit_params(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Tensor)) {}
    fn visit_params_mut(&mut self, _prefix: &str, _f: &mut dyn FnMut(&str, &mut Tensor)) {}
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        f(prefix, self);
    }
    fn visit_modules(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &dyn Any)) {}
    fn visit_modules_mut(&mut self, _prefix: &str, _f: &mut dyn FnMut(&str, &mut dyn Any)) {}
    fn set_training(&self, _training: bool) {}
}

/// Items are named by index: `name.0`, `name.1`, ...
impl<M: Module> Module for Vec<M> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        for (i, m) in self.iter().enumerate() {
            m.visit_params(&join(prefix, &i.to_string()), f);
        }
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor)) {
        for (i, m) in self.iter_mut().enumerate() {
            m.visit_params_mut(&join(prefix, &i.to_string()), f);
        }
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        for (i, m) in self.iter().enumerate() {
            m.visit_buffers(&join(prefix, &i.to_string()), f);
        }
    }
    fn visit_modules(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn Any)) {
        for (i, m) in self.iter().enumerate() {
            m.visit_modules(&join(prefix, &i.to_string()), f);
        }
    }
    fn visit_modules_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn Any)) {
        for (i, m) in self.iter_mut().enumerate() {
            m.visit_modules_mut(&join(prefix, &i.to_string()), f);
        }
    }
    fn set_training(&self, training: bool) {
        self.iter().for_each(|m| m.set_training(training));
    }
}

/// `None` has no parameters; `Some(m)` is `m` under the same name.
impl<M: Module> Module for Option<M> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        if let Some(m) = self {
            m.visit_params(prefix, f);
        }
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor)) {
        if let Some(m) = self {
            m.visit_params_mut(prefix, f);
        }
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        if let Some(m) = self {
            m.visit_buffers(prefix, f);
        }
    }
    fn visit_modules(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn Any)) {
        if let Some(m) = self {
            m.visit_modules(prefix, f);
        }
    }
    fn visit_modules_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn Any)) {
        if let Some(m) = self {
            m.visit_modules_mut(prefix, f);
        }
    }
    fn set_training(&self, training: bool) {
        if let Some(m) = self {
            m.set_training(training);
        }
    }
}

/// A boxed module (also `Box<dyn Layer>`) is its content.
impl<M: Module + ?Sized> Module for Box<M> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        (**self).visit_params(prefix, f);
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Tensor)) {
        (**self).visit_params_mut(prefix, f);
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        (**self).visit_buffers(prefix, f);
    }
    fn visit_modules(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn Any)) {
        (**self).visit_modules(prefix, f);
    }
    fn visit_modules_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn Any)) {
        (**self).visit_modules_mut(prefix, f);
    }
    fn set_training(&self, training: bool) {
        (**self).set_training(training);
    }
    fn output_head(&self) -> Option<OutputHead> {
        (**self).output_head()
    }
}

/// The train/eval flag of a module that behaves differently in the two
/// (dropout). A field of this type is reached by [`Module::set_training`];
/// it holds no parameters. New modes start in training, as PyTorch's.
#[derive(Debug)]
pub struct Mode(AtomicBool);

impl Mode {
    /// A flag in training mode.
    pub fn new() -> Mode {
        Mode(AtomicBool::new(true))
    }
    /// True in training mode.
    pub fn is_training(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl Default for Mode {
    fn default() -> Self {
        Mode::new()
    }
}

impl Clone for Mode {
    fn clone(&self) -> Self {
        Mode(AtomicBool::new(self.is_training()))
    }
}

impl Module for Mode {
    fn visit_params(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Tensor)) {}
    fn visit_params_mut(&mut self, _prefix: &str, _f: &mut dyn FnMut(&str, &mut Tensor)) {}
    fn visit_buffers(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Buffer)) {}
    fn visit_modules(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &dyn Any)) {}
    fn visit_modules_mut(&mut self, _prefix: &str, _f: &mut dyn FnMut(&str, &mut dyn Any)) {}
    fn set_training(&self, training: bool) {
        self.0.store(training, Ordering::Relaxed);
    }
}

/// Calls `f(path, m)` for every sub-module of type `T` (parents first).
///
/// ```
/// use fucina_nn::{module::for_each, Activation, Init, Linear, Mlp};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mlp = Mlp::new(&mut Init::new(&ctx, fucina_core::DType::F32, 0), &[2, 4, 3], Activation::Relu).unwrap();
/// let mut paths = Vec::new();
/// for_each::<Linear, _>(&mlp, |path, lin| paths.push((path.to_string(), lin.out_features())));
/// assert_eq!(paths, [("layers.0".to_string(), 4), ("layers.1".to_string(), 3)]);
/// ```
pub fn for_each<T: Any, M: Module + ?Sized>(m: &M, mut f: impl FnMut(&str, &T)) {
    m.visit_modules("", &mut |path, any| {
        if let Some(t) = any.downcast_ref::<T>() {
            f(path, t);
        }
    });
}

/// Calls `f(path, m)` with mutable access for every sub-module of type `T`
/// (parents first; a replaced sub-module's own children are then visited).
pub fn for_each_mut<T: Any, M: Module + ?Sized>(m: &mut M, mut f: impl FnMut(&str, &mut T)) {
    m.visit_modules_mut("", &mut |path, any| {
        if let Some(t) = any.downcast_mut::<T>() {
            f(path, t);
        }
    });
}

/// A model's output head, as [`Module::output_head`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputHead {
    /// The head's dotted path (`lm_head`), whether or not it is a module of
    /// its own.
    pub path: String,
    /// When the head is tied (it has no module and uses another module's
    /// weight, `tie_word_embeddings`): that module's path (`model.embed_tokens`).
    pub tied_to: Option<String>,
}

/// A module with one input and one output, as `Sequential` chains them.
pub trait Forward {
    /// Runs the module on `x`.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;
}

/// A module that is also a one-input [`Forward`]: what [`crate::Sequential`]
/// holds (`Box<dyn Layer>`). Implemented for every such type.
pub trait Layer: Module + Forward {}

impl<T: Module + Forward> Layer for T {}

/// Implements [`Module`] for a struct from a list of `name => field`
/// children whose names are computed at run time (the decoder's names
/// depend on the family): each child is visited under `join(prefix, name)`
/// in list order; the struct reports itself to `visit_modules` first. An
/// optional `output_head = expr` (with the same `|s|` binding) implements
/// [`Module::output_head`].
macro_rules! module_children {
    // One visitor: `Module::$method` (taking `&self`, or `&mut self` with
    // `mut`) calls `f` with items of type `$item`; each child is visited under
    // `join(prefix, name)`, in list order, after the struct itself with `self_first`.
    (@visit $method:ident($($mut:tt)?), $item:ty, |$s:ident| [$($name:expr => $field:ident),*]
        $(, $first:ident)?) => {
        fn $method(&$($mut)? self, prefix: &str, f: &mut dyn FnMut(&str, $item)) {
            $( $crate::module::module_children!(@$first f(prefix, self)); )?
            let $s = self;
            // A method call, so each child is borrowed as the receiver says.
            $( let n = $crate::module::join(prefix, $name);
               $s.$field.$method(&n, f); )*
        }
    };
    (@self_first $f:ident($prefix:ident, $me:ident)) => {
        $f($prefix, $me)
    };
    ($ty:ty, |$s:ident| [$($name:expr => $field:ident),* $(,)?] $(, output_head = $head:expr)?) => {
        impl $crate::module::Module for $ty {
            $crate::module::module_children!(@visit visit_params(), &fucina_autograd::Tensor,
                |$s| [$($name => $field),*]);
            $crate::module::module_children!(@visit visit_params_mut(mut), &mut fucina_autograd::Tensor,
                |$s| [$($name => $field),*]);
            $crate::module::module_children!(@visit visit_buffers(), &$crate::buffer::Buffer,
                |$s| [$($name => $field),*]);
            $crate::module::module_children!(@visit visit_modules(), &dyn std::any::Any,
                |$s| [$($name => $field),*], self_first);
            $crate::module::module_children!(@visit visit_modules_mut(mut), &mut dyn std::any::Any,
                |$s| [$($name => $field),*], self_first);
            fn set_training(&self, training: bool) {
                let $s = self;
                $( $crate::module::Module::set_training(&$s.$field, training); )*
            }
            $(
                fn output_head(&self) -> Option<$crate::module::OutputHead> {
                    let $s = self;
                    $head
                }
            )?
        }
    };
}
pub(crate) use module_children;
