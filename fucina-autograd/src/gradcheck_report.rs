//! What a gradcheck says: the passing [`GradcheckReport`] and the failing
//! [`GradcheckFailure`] (carried by [`crate::Error::GradcheckFailed`]), with
//! elements named by multi-index, the tolerance each was held to, the layout
//! of the input that failed, and the op / parameter names callers attach;
//! and the options, [`GradcheckOpts`]. A leaf: it names neither the error
//! type nor the tape, so `error.rs` can hold a [`GradcheckFailure`] without a
//! module cycle.

use std::fmt;

use fucina_core::DType;

/// The row-major multi-index of flat element `flat` of `shape` (`[]` for
/// rank 0).
///
/// ```
/// use fucina_autograd::gradcheck::unravel;
/// assert_eq!(unravel(5, &[2, 3]), vec![1, 2]);
/// assert_eq!(unravel(0, &[]), Vec::<usize>::new());
/// ```
pub fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (d, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            idx[d] = flat % n;
            flat /= n;
        }
    }
    idx
}

/// Formats a multi-index as `[1, 2]`.
pub(crate) fn fmt_index(idx: &[usize]) -> String {
    let parts: Vec<String> = idx.iter().map(|i| i.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// How an input's value sits in its buffer, described from its shape,
/// strides and offset: `contiguous`, `contiguous at offset 7`,
/// `strided [1, 3]` (a transpose or permute), `broadcast (stride 0 on axes
/// [0])`.
pub fn describe_layout(shape: &[usize], strides: &[usize], offset: usize) -> String {
    let contiguous = fucina_core::shape::is_contiguous(shape, strides);
    let zero: Vec<usize> = (0..shape.len())
        .filter(|&d| strides[d] == 0 && shape[d] > 1)
        .collect();
    let mut s = if !zero.is_empty() {
        format!(
            "broadcast (stride 0 on axes {}, strides {})",
            fmt_index(&zero),
            fmt_index(strides)
        )
    } else if contiguous {
        "contiguous".to_string()
    } else {
        format!("strided {}", fmt_index(strides))
    };
    if offset != 0 {
        s.push_str(&format!(" at offset {offset}"));
    }
    s
}

/// What a passing gradcheck measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GradcheckReport {
    /// Input elements checked (in fast mode: the elements the projections
    /// covered).
    pub checked: usize,
    /// Worst |analytical − numerical| (in fast mode: of the projected values).
    pub max_abs_err: f64,
    /// Worst relative error (abs err / max(|numerical|, |analytical|)).
    pub max_rel_err: f64,
    /// The input holding the worst absolute error.
    pub worst_input: usize,
    /// The row-major (flat) element index of the worst absolute error; 0 in
    /// fast mode, which compares one projection per input, not elements.
    pub worst_index: usize,
    /// The same element as a multi-index into the input's shape (`[1, 2]`);
    /// `None` in fast mode.
    pub worst_element: Option<Vec<usize>>,
    /// The step and tolerances the check ran with.
    pub opts: GradcheckOpts,
}

/// One paragraph saying what was compared and what each number means.
impl fmt::Display for GradcheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.opts;
        if o.fast_mode {
            return write!(
                f,
                "gradcheck (fast mode) passed: {} input elements, one random unit direction u per \
                 input; for each input, a = <J^T v, u> (one backward of the output projected on a \
                 fixed random vector v) was compared with n = <v, f(x+eps u) - f(x-eps u)> / 2eps, \
                 eps = {:e}. Worst absolute error |a - n| = {:e} (input {}); worst relative error \
                 |a - n| / max(|a|, |n|) = {:e}. An input passes when |a - n| <= atol + rtol*|n| \
                 (atol {:e}, rtol {:e}).",
                self.checked,
                o.eps,
                self.max_abs_err,
                self.worst_input,
                self.max_rel_err,
                o.atol,
                o.rtol
            );
        }
        let elem = match &self.worst_element {
            Some(idx) => fmt_index(idx),
            None => self.worst_index.to_string(),
        };
        write!(
            f,
            "gradcheck passed: {} input elements; for each, the analytical gradient a (one backward \
             of the output projected on a fixed random vector) was compared with the central \
             difference n = (f(x+eps) - f(x-eps)) / 2eps, eps = {:e}. \
             Worst absolute error |a - n| = {:e} (input {}, element {}); \
             worst relative error |a - n| / max(|a|, |n|) = {:e}. \
             An element passes when |a - n| <= atol + rtol*|n| (atol {:e}, rtol {:e}).",
            self.checked,
            o.eps,
            self.max_abs_err,
            self.worst_input,
            elem,
            self.max_rel_err,
            o.atol,
            o.rtol
        )
    }
}

/// One element whose analytical and numerical gradients disagree.
#[derive(Clone, Debug, PartialEq)]
pub struct ElementMismatch {
    /// The input position.
    pub input: usize,
    /// The element, as a multi-index into the input's shape.
    pub index: Vec<usize>,
    /// The same element, row-major flat.
    pub flat: usize,
    /// The backward's value.
    pub analytical: f64,
    /// The central-difference value.
    pub numerical: f64,
    /// |analytical − numerical|.
    pub abs_err: f64,
    /// abs_err / max(|numerical|, |analytical|).
    pub rel_err: f64,
    /// The bound it was held to: atol + rtol·|numerical|.
    pub tol: f64,
    /// Logical elements sharing this element's memory (1 unless the input
    /// is a broadcast view; then `analytical` is the sum over them, the
    /// derivative with respect to the stored value).
    pub aliases: usize,
}

/// The fast-mode comparison of one input: ⟨Jᵀv, u⟩ against the directional
/// central difference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProjectedMismatch {
    /// ⟨Jᵀv, u⟩.
    pub analytical: f64,
    /// ⟨v, f(x+εu) − f(x−εu)⟩ / 2ε.
    pub numerical: f64,
    /// |analytical − numerical|.
    pub abs_err: f64,
    /// atol + rtol·|numerical|.
    pub tol: f64,
}

/// Everything a failing gradcheck found, worst first. Carried boxed by
/// [`crate::Error::GradcheckFailed`]; its `Display` is the error message.
#[derive(Clone, Debug, PartialEq)]
pub struct GradcheckFailure {
    /// The op, case or module checked, when the caller named it
    /// ([`GradcheckFailure::in_op`]).
    pub op: Option<String>,
    /// The sample's layout label, when the check ran over a generated
    /// sample ([`crate::samples`]).
    pub sample: Option<String>,
    /// Names of the inputs by position (a module's parameter paths), when
    /// the caller gave them; empty otherwise.
    pub input_names: Vec<String>,
    /// The input holding the worst mismatch.
    pub input: usize,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its strides, in elements.
    pub strides: Vec<usize>,
    /// Its offset into its buffer, in elements.
    pub offset: usize,
    /// Its dtype.
    pub dtype: DType,
    /// Fast mode: the projected comparison that failed.
    pub projected: Option<ProjectedMismatch>,
    /// Failing elements, worst absolute error first, at most
    /// `opts.max_reported` of them (in fast mode: those an element-wise
    /// re-check of the failing input found; it may find none).
    pub mismatches: Vec<ElementMismatch>,
    /// How many elements failed in all (≥ `mismatches.len()`).
    pub failing: usize,
    /// Elements compared.
    pub checked: usize,
    /// The step and tolerances used.
    pub opts: GradcheckOpts,
}

impl GradcheckFailure {
    /// Names the op, case or module that was checked.
    pub fn in_op(mut self, op: impl Into<String>) -> Self {
        self.op = Some(op.into());
        self
    }
    /// Labels the sample (layout) the check ran on.
    pub fn on_sample(mut self, sample: impl Into<String>) -> Self {
        self.sample = Some(sample.into());
        self
    }
    /// Names the inputs by position (e.g. `["input.0", "weight", "bias"]`).
    pub fn with_input_names(mut self, names: Vec<String>) -> Self {
        self.input_names = names;
        self
    }
    /// The worst mismatch, if any element failed.
    pub fn worst(&self) -> Option<&ElementMismatch> {
        self.mismatches.first()
    }
    /// `input 2 (`weight`)`, or `input 2` without names.
    pub fn input_label(&self, input: usize) -> String {
        match self.input_names.get(input) {
            Some(n) if !n.is_empty() => format!("input {input} (`{n}`)"),
            _ => format!("input {input}"),
        }
    }
    /// The failing input's layout, described from its strides.
    pub fn layout(&self) -> String {
        describe_layout(&self.shape, &self.strides, self.offset)
    }
}

impl fmt::Display for GradcheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.opts;
        write!(
            f,
            "gradcheck{} failed",
            if o.fast_mode { " (fast mode)" } else { "" }
        )?;
        if let Some(op) = &self.op {
            write!(f, " for `{op}`")?;
        }
        write!(
            f,
            ": {} of shape {} ({}, {}",
            self.input_label(self.input),
            fmt_index(&self.shape),
            self.dtype,
            self.layout()
        )?;
        if let Some(s) = &self.sample {
            write!(f, ", sample `{s}`")?;
        }
        write!(f, ")")?;
        if let Some(p) = &self.projected {
            write!(
                f,
                "; projected on a random unit direction u: analytical <J^T v, u> {:e} vs \
                 numerical {:e} (abs err {:e} > tol {:e} = atol {:e} + rtol {:e} * |numerical|)",
                p.analytical, p.numerical, p.abs_err, p.tol, o.atol, o.rtol
            )?;
        }
        match self.mismatches.first() {
            Some(w) => {
                write!(
                    f,
                    "; worst element {}: analytical {:e} vs numerical {:e} (abs err {:e}, rel err \
                     {:e}, tol {:e} = atol {:e} + rtol {:e} * |numerical|); {} of {} elements fail \
                     (eps {:e}):",
                    fmt_index(&w.index),
                    w.analytical,
                    w.numerical,
                    w.abs_err,
                    w.rel_err,
                    w.tol,
                    o.atol,
                    o.rtol,
                    self.failing,
                    self.checked,
                    o.eps
                )?;
                for m in &self.mismatches {
                    write!(
                        f,
                        "\n  {} element {}: analytical {:e}, numerical {:e}, abs err {:e} > tol {:e}",
                        self.input_label(m.input),
                        fmt_index(&m.index),
                        m.analytical,
                        m.numerical,
                        m.abs_err,
                        m.tol
                    )?;
                    if m.aliases > 1 {
                        write!(f, " (summed over {} broadcast aliases)", m.aliases)?;
                    }
                }
                let more = self.failing.saturating_sub(self.mismatches.len());
                if more > 0 {
                    write!(f, "\n  ... and {more} more")?;
                }
                Ok(())
            }
            None if self.projected.is_some() => write!(
                f,
                "; an element-wise re-check of this input found no single element over the \
                 tolerance: the errors are small per element but add up along u (eps {:e})",
                o.eps
            ),
            None => Ok(()),
        }
    }
}

/// Tolerances, step and mode of a gradcheck.
///
/// ```
/// use fucina_autograd::GradcheckOpts;
/// let o = GradcheckOpts::f64().fast();
/// assert!(o.fast_mode);
/// assert_eq!(o.eps, 1e-6);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradcheckOpts {
    /// Finite-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
    /// Seed of the projection vectors.
    pub seed: u64,
    /// One random projection per input instead of one check per element.
    pub fast_mode: bool,
    /// How many failing elements a failure lists (the rest are counted).
    pub max_reported: usize,
}

impl GradcheckOpts {
    /// PyTorch's f64 contract: eps 1e-6, atol 1e-5, rtol 1e-3.
    pub const fn f64() -> GradcheckOpts {
        GradcheckOpts {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-3,
            seed: 0x5EED,
            fast_mode: false,
            max_reported: 10,
        }
    }
    /// The f32 profile: eps 1e-3, atol 1e-3, rtol 1e-2.
    pub const fn f32() -> GradcheckOpts {
        GradcheckOpts {
            eps: 1e-3,
            atol: 1e-3,
            rtol: 1e-2,
            seed: 0x5EED,
            fast_mode: false,
            max_reported: 10,
        }
    }
    /// The same tolerances in fast mode (PyTorch's `fast_mode=True`).
    pub const fn fast(self) -> GradcheckOpts {
        GradcheckOpts {
            fast_mode: true,
            ..self
        }
    }
    /// The same, listing at most `n` failing elements.
    pub const fn with_max_reported(self, n: usize) -> GradcheckOpts {
        GradcheckOpts {
            max_reported: n,
            ..self
        }
    }
}

impl Default for GradcheckOpts {
    fn default() -> Self {
        Self::f64()
    }
}
