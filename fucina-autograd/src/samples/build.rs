//! How each non-contiguous layout of [`super::Layout`] is built from the
//! contiguous inputs, and how the zero-size and rank-0 shapes are found.
//!
//! Each builder returns `Ok(Err(reason))` when the row cannot have the layout
//! (no input it applies to, or no candidate shape the op accepts).

use fucina_core::{DType, ExecContext, RawTensor};

use super::raw_values;
use crate::error::Result;
use crate::grad_mode::no_grad;
use crate::suite::{make_inputs, InputKind, OpCase};
use crate::tape::scope::ExecScope;
use crate::tape::tensor::Tensor;

/// What a builder returns: the inputs, or why the layout does not apply.
pub(super) type Made = std::result::Result<Vec<Tensor>, String>;

fn is_float_var(t: &Tensor) -> bool {
    t.requires_grad() && matches!(t.dtype(), DType::F32 | DType::F64)
}

/// Rebuilds every float input with `view(ctx, raw)`, which returns `None`
/// where it does not apply to that input; `Err(why)` when it applied to none.
fn rebuild(
    ctx: &ExecContext,
    base: &[Tensor],
    why: &str,
    view: impl Fn(&RawTensor) -> Result<Option<RawTensor>>,
) -> Result<Made> {
    let mut any = false;
    let mut out = Vec::with_capacity(base.len());
    for t in base {
        if !is_float_var(t) {
            out.push(t.clone());
            continue;
        }
        match view(&t.raw()?)? {
            Some(v) => {
                any = true;
                out.push(Tensor::from_raw(ctx, v, true)?);
            }
            None => out.push(t.clone()),
        }
    }
    Ok(if any { Ok(out) } else { Err(why.to_string()) })
}

/// Float inputs of rank ≥ 2 stored with their axes reversed and viewed back.
pub(super) fn transposed(ctx: &ExecContext, base: &[Tensor]) -> Result<Made> {
    rebuild(
        ctx,
        base,
        "no float input has two axes longer than 1: any transpose of the inputs is contiguous",
        |raw| {
            if raw.rank() < 2 {
                return Ok(None);
            }
            let perm: Vec<usize> = (0..raw.rank()).rev().collect();
            // Reversal is its own inverse: store permuted, view back.
            let stored = ctx.copy(&raw.permute(&perm)?)?;
            let v = stored.permute(&perm)?;
            Ok((!v.is_contiguous()).then_some(v))
        },
    )
}

/// Float inputs as views at an offset into a buffer one longer on every
/// axis, its other elements NaN.
pub(super) fn narrowed(ctx: &ExecContext, base: &[Tensor]) -> Result<Made> {
    rebuild(ctx, base, "no float input", |raw| {
        let vals = raw_values(raw)?;
        let shape = raw.shape();
        let big: Vec<usize> = shape.iter().map(|n| n + 1).collect();
        let strides = fucina_core::shape::contiguous_strides(&big).to_vec();
        let offset: usize = strides.iter().sum::<usize>().max(1);
        let len = (big.iter().product::<usize>()).max(offset + 1);
        let mut buf = vec![f64::NAN; len];
        for (j, v) in vals.iter().enumerate() {
            let idx = crate::gradcheck::unravel(j, shape);
            let pos: usize = offset + idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>();
            buf[pos] = *v;
        }
        let flat = ctx.from_slice(&buf, &[len])?;
        let flat = ctx.to_dtype(&flat, raw.dtype())?;
        Ok(Some(flat.view_with_strides(shape, &strides, offset)?))
    })
}

/// Float inputs with an axis longer than 1 as a stride-0 expand along the
/// first such axis.
pub(super) fn broadcast(ctx: &ExecContext, base: &[Tensor]) -> Result<Made> {
    rebuild(
        ctx,
        base,
        "no float input has an axis longer than 1 to expand",
        |raw| {
            let Some(axis) = raw.shape().iter().position(|&n| n > 1) else {
                return Ok(None);
            };
            let small = ctx.copy(&raw.narrow(axis, 0, 1)?)?;
            Ok(Some(small.broadcast_to(raw.shape())?))
        },
    )
}

/// The inputs of `case` with `shapes`, if its forward accepts them.
fn try_shapes(
    ctx: &ExecContext,
    case: &OpCase,
    dtype: DType,
    shapes: &[Vec<usize>],
) -> Result<std::result::Result<Vec<Tensor>, String>> {
    let mut c = case.clone();
    for (spec, s) in c.inputs.iter_mut().zip(shapes) {
        spec.shape = s.clone();
    }
    let inputs = make_inputs(ctx, &c, dtype, super::SAMPLE_SEED)?;
    let ok = {
        let _ng = no_grad();
        let _scope = ExecScope::open();
        (case.f)(&inputs).map(|_| ())
    };
    Ok(match ok {
        Ok(()) => Ok(inputs),
        Err(e) => Err(format!("{shapes:?}: {e}")),
    })
}

/// Tries candidate shapes in order; the first the op accepts wins.
fn first_accepted(
    ctx: &ExecContext,
    case: &OpCase,
    dtype: DType,
    candidates: Vec<Vec<Vec<usize>>>,
    what: &str,
) -> Result<Made> {
    let mut tried: Vec<Vec<Vec<usize>>> = Vec::new();
    let mut errors = Vec::new();
    for c in candidates {
        if tried.contains(&c) {
            continue;
        }
        match try_shapes(ctx, case, dtype, &c)? {
            Ok(inputs) => return Ok(Ok(inputs)),
            Err(e) => errors.push(e),
        }
        tried.push(c);
    }
    if errors.is_empty() {
        return Ok(Err(format!("no {what} candidate applies")));
    }
    errors.truncate(2);
    Ok(Err(format!(
        "the op accepts none of the {} {what} candidates tried (first: {})",
        tried.len(),
        errors.join("; ")
    )))
}

/// One axis of some inputs set to 0: axis 0 of every input of the largest
/// rank, then of every input, then each (input, axis) alone, then each pair
/// of axes of two inputs.
pub(super) fn zero_size(ctx: &ExecContext, case: &OpCase, dtype: DType) -> Result<Made> {
    let shapes: Vec<Vec<usize>> = case.inputs.iter().map(|s| s.shape.clone()).collect();
    let max_rank = shapes.iter().map(Vec::len).max().unwrap_or(0);
    let zero0 = |pick: &dyn Fn(usize, &Vec<usize>) -> bool| -> Vec<Vec<usize>> {
        shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut s = s.clone();
                if !s.is_empty() && pick(i, &s) {
                    s[0] = 0;
                }
                s
            })
            .collect()
    };
    let mut cands = vec![zero0(&|_, s| s.len() == max_rank), zero0(&|_, _| true)];
    let axes: Vec<(usize, usize)> = shapes
        .iter()
        .enumerate()
        .flat_map(|(i, s)| (0..s.len()).map(move |d| (i, d)))
        .collect();
    for &(i, d) in &axes {
        let mut c = shapes.clone();
        c[i][d] = 0;
        cands.push(c);
    }
    // Pairs of axes of two inputs (an op whose inputs meet on an axis that
    // is not axis 0 of each, e.g. xᵀ · y).
    for (n, &(i, d)) in axes.iter().enumerate() {
        for &(j, e) in &axes[n + 1..] {
            if i != j {
                let mut c = shapes.clone();
                c[i][d] = 0;
                c[j][e] = 0;
                cands.push(c);
            }
        }
    }
    // A candidate that changes nothing is not zero-size.
    cands.retain(|c| c != &shapes);
    first_accepted(ctx, case, dtype, cands, "zero-size")
}

/// Inputs of shape `[]`: all of them, then each float input alone.
pub(super) fn rank0(ctx: &ExecContext, case: &OpCase, dtype: DType) -> Result<Made> {
    let shapes: Vec<Vec<usize>> = case.inputs.iter().map(|s| s.shape.clone()).collect();
    let mut cands = vec![vec![Vec::new(); shapes.len()]];
    for (i, spec) in case.inputs.iter().enumerate() {
        if matches!(spec.kind, InputKind::Float(..) | InputKind::NonZero(..)) {
            let mut c = shapes.clone();
            c[i] = Vec::new();
            cands.push(c);
        }
    }
    cands.retain(|c| c != &shapes);
    first_accepted(ctx, case, dtype, cands, "rank-0")
}
