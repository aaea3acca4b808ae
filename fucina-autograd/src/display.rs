//! `Display` and `Debug` for [`Tensor`], laid out as PyTorch prints tensors.
//!
//! `Display`: `tensor([[ 0.1000, -1.2000], [...]], requires_grad=true)`.
//! The rules are PyTorch's (`torch/_tensor_str.py`, default print options):
//! floats get 4 decimals, or `1.` when every value is an integer, or
//! scientific notation (`1.0000e+08`) when the nonzero magnitudes span more
//! than 1000× or pass 1e8 (or, for non-integers, fall below 1e-4); every
//! element is right-aligned to the widest one shown; rows break at 80
//! columns; a tensor of more than 1000 elements is summarized with the first
//! and last 3 entries of each axis around `...`. Suffixes follow the values:
//! `size=(0, 3)` for an empty tensor of rank ≠ 1, `dtype=f64` unless the dtype
//! is f32 or i64 (PyTorch's defaults), then `grad_fn=<MulBackward>` for an op
//! result that records a backward, or `requires_grad=true` for a leaf that
//! requires a gradient. A tensor whose scope closed prints `<released>`.
//! `Debug` shows shape, dtype, gradient state and the same values.
//!
//! Only the tensor's public accessors are used here.

use std::fmt;

use fucina_core::{DType, RawTensor};

use crate::tape::tensor::Tensor;

/// PyTorch's `threshold`: tensors with more elements are summarized.
pub const PRINT_THRESHOLD: usize = 1000;
/// PyTorch's `edgeitems`: entries kept at each end of a summarized axis.
pub const PRINT_EDGE_ITEMS: usize = 3;
/// PyTorch's `linewidth`: rows wrap past this column.
pub const PRINT_LINE_WIDTH: usize = 80;
/// PyTorch's `precision`: decimals of a float.
const PRECISION: usize = 4;

/// The elements, read once as f64 (floats) or i64 (integers).
enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

/// How every shown element is formatted (PyTorch's `_Formatter`).
struct Formatter {
    /// Integer dtype: plain decimal.
    int_dtype: bool,
    /// Float whose finite values are all integral: `1.`.
    int_mode: bool,
    /// Scientific notation: `1.0000e+08`.
    sci_mode: bool,
    /// Width every element is right-aligned to.
    width: usize,
}

/// `x` in PyTorch's scientific style: `-1.2346e-05`, `1.0000e+08`.
fn sci(x: f64) -> String {
    let s = format!("{:.*e}", PRECISION, x);
    match s.split_once('e') {
        Some((mant, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mant}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

fn non_finite(x: f64) -> Option<String> {
    if x.is_nan() {
        Some("nan".into())
    } else if x.is_infinite() {
        Some(if x > 0.0 { "inf" } else { "-inf" }.into())
    } else {
        None
    }
}

impl Formatter {
    fn new(values: &Values, shown: &[usize]) -> Formatter {
        let mut f = Formatter {
            int_dtype: false,
            int_mode: true,
            sci_mode: false,
            width: 1,
        };
        match values {
            Values::Int(v) => {
                f.int_dtype = true;
                f.width = shown
                    .iter()
                    .map(|&i| v[i].to_string().len())
                    .max()
                    .unwrap_or(1);
            }
            Values::Float(v) => {
                let finite: Vec<f64> = shown
                    .iter()
                    .map(|&i| v[i])
                    .filter(|x| x.is_finite())
                    .collect();
                let nz: Vec<f64> = finite
                    .iter()
                    .map(|x| x.abs())
                    .filter(|&x| x != 0.0)
                    .collect();
                if !nz.is_empty() {
                    let max = nz.iter().cloned().fold(f64::MIN, f64::max);
                    let min = nz.iter().cloned().fold(f64::MAX, f64::min);
                    f.int_mode = finite.iter().all(|x| x.fract() == 0.0);
                    f.sci_mode = if f.int_mode {
                        max / min > 1000.0 || max > 1.0e8
                    } else {
                        max / min > 1000.0 || max > 1.0e8 || min < 1.0e-4
                    };
                }
                f.width = shown
                    .iter()
                    .map(|&i| f.format_f64(v[i]).len())
                    .max()
                    .unwrap_or(1);
            }
        }
        f
    }

    fn format_f64(&self, x: f64) -> String {
        if let Some(s) = non_finite(x) {
            return s;
        }
        if self.sci_mode {
            sci(x)
        } else if self.int_mode {
            format!("{x:.0}.")
        } else {
            format!("{:.*}", PRECISION, x)
        }
    }

    fn format(&self, values: &Values, i: usize) -> String {
        let s = match values {
            Values::Int(v) => v[i].to_string(),
            Values::Float(v) => self.format_f64(v[i]),
        };
        debug_assert!(self.int_dtype == matches!(values, Values::Int(_)));
        format!("{s:>w$}", w = self.width)
    }
}

/// The indices along an axis of `n` that are printed (all, or the edges).
fn shown_along(n: usize, summarize: bool) -> (Vec<usize>, bool) {
    if summarize && n > 2 * PRINT_EDGE_ITEMS {
        let idx = (0..PRINT_EDGE_ITEMS)
            .chain(n - PRINT_EDGE_ITEMS..n)
            .collect();
        (idx, true)
    } else {
        ((0..n).collect(), false)
    }
}

/// The printed elements of `t` only, row-major: along each axis longer
/// than `2 · PRINT_EDGE_ITEMS` (when summarizing) only the two edges are
/// kept. Every axis is narrowed as a view first and the corner blocks are
/// joined from the innermost axis out, so only printed elements are ever
/// copied: a huge or broadcast tensor is never read whole.
fn shown_values(t: &Tensor, summarize: bool) -> Option<RawTensor> {
    let r = t.value().ok()?;
    if !summarize {
        return Some(r);
    }
    corners(t, &r, 0)
}

/// `r` with axes `axis..` cut to their edges (see [`shown_values`]).
fn corners(t: &Tensor, r: &RawTensor, axis: usize) -> Option<RawTensor> {
    let Some(&n) = r.shape().get(axis) else {
        return t.ctx().contiguous(r).ok();
    };
    if n <= 2 * PRINT_EDGE_ITEMS {
        return corners(t, r, axis + 1);
    }
    let head = corners(t, &r.narrow(axis, 0, PRINT_EDGE_ITEMS).ok()?, axis + 1)?;
    let tail = corners(
        t,
        &r.narrow(axis, n - PRINT_EDGE_ITEMS, PRINT_EDGE_ITEMS)
            .ok()?,
        axis + 1,
    )?;
    t.ctx().concat(&[&head, &tail], axis).ok()
}

/// The printed items of the sub-tensor at flat offset `base` along its first
/// axis (of `n`): `item(i)` for each shown one, `i` its flat offset one axis
/// down, and `ellipsis` between the edges when the axis is cut.
fn shown_items(
    n: usize,
    summarize: bool,
    base: usize,
    ellipsis: &str,
    mut item: impl FnMut(usize) -> String,
) -> Vec<String> {
    let (along, cut) = shown_along(n, summarize);
    let mut items: Vec<String> = Vec::with_capacity(along.len() + 1);
    for k in 0..along.len() {
        if cut && k == PRINT_EDGE_ITEMS {
            items.push(ellipsis.into());
        }
        items.push(item(base * along.len() + k));
    }
    items
}

/// The bracketed values of the sub-tensor at flat offset `base` of the
/// shown values (`values` holds only the printed elements: along a cut
/// axis the `2 · PRINT_EDGE_ITEMS` edges), PyTorch's
/// `_tensor_str_with_formatter`.
fn tensor_str(
    values: &Values,
    fmt: &Formatter,
    shape: &[usize],
    base: usize,
    indent: usize,
    summarize: bool,
) -> String {
    match shape.len() {
        0 => fmt.format(values, base),
        1 => {
            let items = shown_items(shape[0], summarize, base, " ...", |i| fmt.format(values, i));
            let per_line = (PRINT_LINE_WIDTH.saturating_sub(indent) / (fmt.width + 2)).max(1);
            let lines: Vec<String> = items.chunks(per_line).map(|c| c.join(", ")).collect();
            format!(
                "[{}]",
                lines.join(&format!(",\n{}", " ".repeat(indent + 1)))
            )
        }
        rank => {
            let parts = shown_items(shape[0], summarize, base, "...", |i| {
                tensor_str(values, fmt, &shape[1..], i, indent + 1, summarize)
            });
            let sep = format!(",{}{}", "\n".repeat(rank - 1), " ".repeat(indent + 1));
            format!("[{}]", parts.join(&sep))
        }
    }
}

/// The values alone, as `Display` prints them after `tensor(` (`indent` is
/// the column the opening bracket sits at), or `None` when released.
fn values_str(t: &Tensor, indent: usize) -> Option<String> {
    if t.is_released() {
        return None;
    }
    let shape = t.shape();
    if shape.contains(&0) {
        return Some("[]".into());
    }
    let summarize = t.numel() > PRINT_THRESHOLD;
    let shown = Tensor::leaf(t.ctx(), shown_values(t, summarize)?);
    let values = if t.dtype().is_float() {
        Values::Float(shown.to_vec_f64().ok()?)
    } else if t.dtype() == DType::I64 {
        Values::Int(shown.to_vec::<i64>().ok()?)
    } else {
        Values::Int(
            shown
                .to_vec_f64()
                .ok()?
                .into_iter()
                .map(|x| x as i64)
                .collect(),
        )
    };
    let all: Vec<usize> = (0..shown.numel()).collect();
    let fmt = Formatter::new(&values, &all);
    Some(tensor_str(&values, &fmt, shape, 0, indent, summarize))
}

/// `mul` → `MulBackward`, `layer_norm` → `LayerNormBackward`.
pub(crate) fn backward_name(op: &str) -> String {
    let mut s: String = op
        .split(['_', '-', ' '])
        .map(|w| {
            let mut cs = w.chars();
            match cs.next() {
                Some(c) => c.to_uppercase().chain(cs).collect::<String>(),
                None => String::new(),
            }
        })
        .collect();
    s.push_str("Backward");
    s
}

fn shape_tuple(shape: &[usize]) -> String {
    match shape {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const PREFIX: &str = "tensor(";
        let mut out = String::from(PREFIX);
        let mut suffixes: Vec<String> = Vec::new();
        match values_str(self, PREFIX.len()) {
            Some(v) => {
                out.push_str(&v);
                if self.numel() == 0 && self.rank() != 1 {
                    suffixes.push(format!("size={}", shape_tuple(self.shape())));
                }
            }
            None => {
                out.push_str("<released>");
                suffixes.push(format!("size={}", shape_tuple(self.shape())));
            }
        }
        if !matches!(self.dtype(), DType::F32 | DType::I64) {
            suffixes.push(format!("dtype={}", self.dtype().name()));
        }
        if let Some(op) = self.grad_fn_name() {
            suffixes.push(format!("grad_fn=<{}>", backward_name(op)));
        } else if self.requires_grad() {
            suffixes.push("requires_grad=true".into());
        }
        for s in suffixes {
            out.push_str(", ");
            out.push_str(&s);
        }
        out.push(')');
        f.write_str(&out)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Tensor");
        d.field("shape", &self.shape())
            .field("dtype", &self.dtype())
            .field("requires_grad", &self.requires_grad());
        if let Some(op) = self.grad_fn_name() {
            d.field("grad_fn", &format_args!("<{}>", backward_name(op)));
        }
        match values_str(self, 0) {
            Some(v) => d.field("values", &format_args!("{v}")),
            None => d.field("values", &format_args!("<released>")),
        };
        d.finish()
    }
}
