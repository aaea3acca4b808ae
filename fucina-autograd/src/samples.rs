//! OpInfo-style samples: every layout an op should be checked on.
//!
//! Given a suite row ([`OpCase`]: an op, its input shapes and domains),
//! [`samples`] makes its inputs in each [`Layout`]: contiguous; transposed
//! (every float input of rank ≥ 2 stored with its axes reversed and viewed
//! back, so the logical values are the same but the strides are not);
//! narrowed (every float input a view at an offset into a larger buffer whose
//! other elements are NaN, so a kernel reading outside its view shows);
//! broadcast (every float input with an axis longer than 1 is a stride-0
//! expand of a tensor one element long on that axis); zero-size (one axis of
//! some inputs is 0, the first of a few candidate choices the op accepts);
//! rank 0 (inputs of shape `[]`, where the op accepts them). Float inputs are
//! leaves that require a gradient, whose *values* are those views; index and
//! mask inputs stay contiguous constants.
//!
//! A layout the row cannot have is returned by [`samples_and_skips`] as a
//! [`Skipped`] with the reason; [`SAMPLE_EXEMPTIONS`] lists the built-in
//! suite's skips with a written reason, and the suite's test fails on a skip
//! that is not listed there. [`check_samples`] runs what the suite runs on
//! each row: gradcheck over the f64 samples, and the forward of every
//! non-contiguous sample against the forward of its contiguous copy
//! ([`Sample::reference`]), bitwise, in f32 and f64. A second checker (a
//! gradgradcheck) iterates the same [`samples`].
//!
//! A user's own op, in a `#[test]`:
//!
//! ```
//! use fucina_autograd::samples::{check_samples, samples, Layout};
//! use fucina_autograd::suite::{InputSpec, OpCase};
//! use fucina_autograd::{DType, GradcheckOpts};
//! let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
//! // softplus(a) · b, written with tensor ops (any non-capturing closure).
//! let case = OpCase::new(
//!     "my_op",
//!     vec![InputSpec::float(&[3, 4]), InputSpec::float(&[4])],
//!     |x| x[0].exp()?.add_scalar(1.0)?.log()?.mul(&x[1]),
//! );
//! let layouts: Vec<Layout> = samples(&ctx, &case, DType::F64)
//!     .unwrap()
//!     .iter()
//!     .map(|s| s.layout)
//!     .collect();
//! assert!(layouts.contains(&Layout::Transposed) && layouts.contains(&Layout::Broadcast));
//! let report = check_samples(&ctx, &case, &GradcheckOpts::f64()).unwrap();
//! assert!(report.skipped.iter().all(|s| s.layout != Layout::Narrowed));
//! assert!(report.gradchecked >= 5);
//! ```

use fucina_core::{DType, ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::gradcheck::{gradcheck, GradcheckOpts};
use crate::suite::{make_inputs, InputKind, InputSpec, OpCase};
use crate::tape::scope::ExecScope;
use crate::tape::tensor::Tensor;

mod build;
mod exemptions;

pub use exemptions::SAMPLE_EXEMPTIONS;

/// A sample's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layout {
    /// Row-major, offset 0: the inputs as [`make_inputs`] makes them.
    Contiguous,
    /// Float inputs of rank ≥ 2 stored with their axes reversed (a
    /// transpose / permute view with the same logical values).
    Transposed,
    /// Float inputs are views at an offset into a larger, NaN-padded buffer.
    Narrowed,
    /// Float inputs are stride-0 expands of a smaller tensor along one axis.
    Broadcast,
    /// One axis of some inputs has size 0.
    ZeroSize,
    /// Inputs of rank 0 (shape `[]`).
    Rank0,
}

impl Layout {
    /// Every layout, in the order [`samples`] makes them.
    pub const ALL: [Layout; 6] = [
        Layout::Contiguous,
        Layout::Transposed,
        Layout::Narrowed,
        Layout::Broadcast,
        Layout::ZeroSize,
        Layout::Rank0,
    ];
    /// The label used in reports: `contiguous`, `transposed`, `narrowed`,
    /// `broadcast`, `zero_size`, `rank0`.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::Contiguous => "contiguous",
            Layout::Transposed => "transposed",
            Layout::Narrowed => "narrowed",
            Layout::Broadcast => "broadcast",
            Layout::ZeroSize => "zero_size",
            Layout::Rank0 => "rank0",
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One sample: the inputs of a row in one layout and dtype.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The inputs, ready for the row's `f` (and for gradcheck): float
    /// inputs require a gradient and hold views in `layout`.
    pub inputs: Vec<Tensor>,
    /// Their layout.
    pub layout: Layout,
    /// Their float dtype.
    pub dtype: DType,
}

impl Sample {
    /// Contiguous copies of the inputs, with the same logical values and
    /// `requires_grad`: what the forward of this sample must equal.
    pub fn reference(&self) -> Result<Vec<Tensor>> {
        self.inputs
            .iter()
            .map(|t| {
                let ctx = t.ctx();
                let raw = ctx.copy(&t.raw()?)?;
                if t.requires_grad() {
                    Tensor::from_raw(ctx, raw, true)
                } else {
                    Ok(Tensor::leaf(ctx, raw))
                }
            })
            .collect()
    }
}

/// A layout a row does not get, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    /// The layout.
    pub layout: Layout,
    /// Why (no input it applies to, or the errors of the candidates tried).
    pub reason: String,
}

/// The seed [`samples`] draws values from (the suite's gradcheck seed).
pub const SAMPLE_SEED: u64 = 42;

/// The samples of `case` in `dtype` (f32 or f64), one per layout it can
/// have, contiguous first.
pub fn samples(ctx: &ExecContext, case: &OpCase, dtype: DType) -> Result<Vec<Sample>> {
    Ok(samples_and_skips(ctx, case, dtype)?.0)
}

/// [`samples`], and the layouts it could not make with the reason.
pub fn samples_and_skips(
    ctx: &ExecContext,
    case: &OpCase,
    dtype: DType,
) -> Result<(Vec<Sample>, Vec<Skipped>)> {
    let base = make_inputs(ctx, case, dtype, SAMPLE_SEED)?;
    let mut out = vec![Sample {
        inputs: base.clone(),
        layout: Layout::Contiguous,
        dtype,
    }];
    let mut skips = Vec::new();
    for layout in &Layout::ALL[1..] {
        let made = match layout {
            Layout::Transposed => build::transposed(ctx, &base)?,
            Layout::Narrowed => build::narrowed(ctx, &base)?,
            Layout::Broadcast => build::broadcast(ctx, &base)?,
            Layout::ZeroSize => build::zero_size(ctx, case, dtype)?,
            Layout::Rank0 => build::rank0(ctx, case, dtype)?,
            Layout::Contiguous => unreachable!("made above"),
        };
        match made {
            Ok(inputs) => out.push(Sample {
                inputs,
                layout: *layout,
                dtype,
            }),
            Err(reason) => skips.push(Skipped {
                layout: *layout,
                reason,
            }),
        }
    }
    Ok((out, skips))
}

/// What [`check_samples`] ran.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleReport {
    /// f64 samples gradchecked.
    pub gradchecked: usize,
    /// Non-contiguous samples whose forward matched their contiguous copy
    /// bitwise (f32 and f64).
    pub forwards_matched: usize,
    /// Layouts not made (from the f64 pass), with reasons.
    pub skipped: Vec<Skipped>,
}

/// Runs gradcheck (with `opts`) over `case`'s f64 samples, and checks the
/// forward of each non-contiguous f32 and f64 sample against the forward of
/// its contiguous copy, bitwise. Errors name the case and the layout.
pub fn check_samples(
    ctx: &ExecContext,
    case: &OpCase,
    opts: &GradcheckOpts,
) -> Result<SampleReport> {
    let mut report = SampleReport::default();
    for dtype in [DType::F32, DType::F64] {
        let (samples, skips) = samples_and_skips(ctx, case, dtype)?;
        for s in &samples {
            if s.layout != Layout::Contiguous {
                forward_matches_reference(case, s)?;
                report.forwards_matched += 1;
            }
            if dtype == DType::F64 {
                gradcheck(case.f, &s.inputs, opts).map_err(|e| {
                    e.in_gradcheck_op(case.name)
                        .on_gradcheck_sample(s.layout.name())
                })?;
                report.gradchecked += 1;
            }
        }
        if dtype == DType::F64 {
            report.skipped = skips;
        }
    }
    Ok(report)
}

/// The forward of `s` equals the forward of [`Sample::reference`] bitwise
/// (shape and every element's bits; NaN matches NaN).
pub fn forward_matches_reference(case: &OpCase, s: &Sample) -> Result<()> {
    let _scope = ExecScope::open();
    let y = (case.f)(&s.inputs)?;
    let r = (case.f)(&s.reference()?)?;
    let mismatch = |msg: String| {
        Err(Error::Core(fucina_core::Error::InvalidArgument {
            op: "forward_matches_reference",
            msg: format!(
                "`{}` on the {} {} sample: {msg}",
                case.name, s.layout, s.dtype
            ),
        }))
    };
    if y.shape() != r.shape() || y.dtype() != r.dtype() {
        return mismatch(format!(
            "output {:?} {} vs the contiguous copy's {:?} {}",
            y.shape(),
            y.dtype(),
            r.shape(),
            r.dtype()
        ));
    }
    let (a, b) = (y.to_vec_f64()?, r.to_vec_f64()?);
    for (j, (a, b)) in a.iter().zip(&b).enumerate() {
        if a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()) {
            return mismatch(format!(
                "output element {} is {a:e}, the contiguous copy's is {b:e}",
                crate::gradcheck::fmt_index(&crate::gradcheck::unravel(j, y.shape()))
            ));
        }
    }
    Ok(())
}

impl InputSpec {
    /// A float input of `shape`, uniform in [−1.5, 1.5).
    pub fn float(shape: &[usize]) -> InputSpec {
        InputSpec {
            shape: shape.to_vec(),
            kind: InputKind::Float(-1.5, 1.5),
        }
    }
    /// A float input of `shape`, uniform in [lo, hi).
    pub fn float_in(shape: &[usize], lo: f64, hi: f64) -> InputSpec {
        InputSpec {
            shape: shape.to_vec(),
            kind: InputKind::Float(lo, hi),
        }
    }
    /// An i64 index input of `shape`, uniform in 0..n.
    pub fn index(shape: &[usize], n: i64) -> InputSpec {
        InputSpec {
            shape: shape.to_vec(),
            kind: InputKind::Index(n),
        }
    }
}

impl OpCase {
    /// A row with no torch side: `name`, its inputs, and the op.
    pub fn new(name: &'static str, inputs: Vec<InputSpec>, f: crate::suite::CaseFn) -> OpCase {
        OpCase {
            name,
            inputs,
            f,
            torch: None,
        }
    }
}

/// A raw tensor's elements as f64 (any dtype).
pub(crate) fn raw_values(r: &RawTensor) -> Result<Vec<f64>> {
    Ok(
        fucina_core::dispatch_any!(r.dtype(), T => r.to_vec::<T>()?.into_iter().map(fucina_core::Element::to_f64).collect()),
    )
}
