//! The backward walk with `create_graph`: gradients as recorded tensors.
//!
//! The same reverse walk as `engine.rs` (reachable nodes, newest first, the
//! engine reducing broadcast gradients and accumulating), but every gradient
//! is a [`Tensor`] built by [`crate::Backward::backward_graph`] from differentiable
//! ops, with grad mode on, so the gradients are themselves on the tape and can
//! be differentiated again (PyTorch's `create_graph=True`). The walk consumes
//! nothing (PyTorch's `retain_graph` defaults to `create_graph`): a node's
//! backward is taken out only while it runs and put back after, so the
//! gradient graph, which reaches the forward's nodes through the saved values
//! ([`crate::tape::graph::SavedTensors`]), can be walked later.
//!
//! Targets may be leaves or non-leaves: a non-leaf's gradient is the total
//! gradient of its producer node's output, read when that node is visited.
//! Only the nodes on a path from the root to a target run (PyTorch's
//! `exec_info`), and a walk may be bounded to nodes recorded since `from`
//! (a fused op re-deriving its gradient from its decomposed forward walks only
//! what that forward recorded). The plain first-order walk is untouched: this
//! file runs only when `create_graph` is asked for.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::error::{check_grad_fits, Error, Result};
use crate::grad_mode::enable_grad;
use crate::tape::engine::collect;
use crate::tape::graph::{take_grad, EdgeTarget, Node, Op, SavedTensors};
use crate::tape::tensor::{lock, Tensor, TensorInner};

/// What the walk computes gradients for.
pub(crate) enum Targets<'a> {
    /// Functional `grad`: these tensors' gradients are returned; no leaf is touched.
    Capture(&'a [&'a Tensor]),
    /// `backward(create_graph)`: every reachable leaf accumulates its gradient.
    Leaves,
}

/// Adds `g` to `slot` with a recorded add.
fn add_into(slot: &mut Option<Tensor>, g: Tensor) -> Result<()> {
    *slot = Some(match slot.take() {
        None => g,
        Some(acc) => acc.add(&g)?,
    });
    Ok(())
}

/// `g` summed down to `shape` (the broadcast adjoint), recorded.
fn reduce_to(g: Tensor, shape: &[usize], op: &'static str, input: usize) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g);
    }
    g.sum_to_shape(shape)
        .map_err(|_| Error::GradientShapeMismatch {
            op,
            input,
            expected: shape.to_vec(),
            got: g.shape().to_vec(),
        })
}

/// Puts a node's backward back when its `backward_graph` returns or unwinds.
struct PutBack<'a> {
    node: &'a Node,
    op: Option<Op>,
}

impl Drop for PutBack<'_> {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            *lock(&self.node.op) = Some(op);
        }
    }
}

/// Runs the recorded walk from `root` with seed `seed` over the nodes numbered
/// at least `from`; returns one gradient per capture target (none for
/// [`Targets::Leaves`], whose gradients are committed to the leaves).
pub(crate) fn walk(
    root: &Tensor,
    seed: Tensor,
    targets: Targets<'_>,
    from: u64,
) -> Result<Vec<Option<Tensor>>> {
    if root.is_released() {
        return Err(Error::TensorReleased);
    }
    check_grad_fits(
        "backward seed",
        0,
        (root.shape(), root.dtype()),
        (seed.shape(), seed.dtype()),
    )?;
    let _grad_on = enable_grad();
    let capture: &[&Tensor] = match &targets {
        Targets::Capture(c) => c,
        Targets::Leaves => &[],
    };
    let all_leaves = matches!(targets, Targets::Leaves);
    // Target keys: leaves by tensor, non-leaves by their producer node.
    let mut leaf_index: HashMap<*const TensorInner, usize> = HashMap::new();
    let mut node_index: HashMap<*const Node, Vec<usize>> = HashMap::new();
    for (j, t) in capture.iter().enumerate() {
        match t.0.grad_fn() {
            Some(n) => node_index.entry(Arc::as_ptr(&n)).or_default().push(j),
            None => {
                leaf_index.insert(Arc::as_ptr(&t.0), j);
            }
        }
    }
    let mut captured: Vec<Option<Tensor>> = vec![None; capture.len()];
    let mut staged: Vec<(Arc<TensorInner>, Option<Tensor>)> = Vec::new();
    let mut staged_index: HashMap<*const TensorInner, usize> = HashMap::new();

    let Some(root_node) = root.0.grad_fn() else {
        // A leaf root: its gradient is the seed.
        if all_leaves {
            staged.push((root.0.clone(), Some(seed)));
            commit(staged)?;
        } else if let Some(&j) = leaf_index.get(&Arc::as_ptr(&root.0)) {
            captured[j] = Some(seed);
        }
        return Ok(captured);
    };

    let mut nodes = collect(&root_node, &mut HashSet::new(), from)?;
    nodes.sort_unstable_by_key(|n| n.seq);
    // Oldest first: a node is needed when one of its edges reaches a target.
    let mut needed: HashSet<*const Node> = HashSet::new();
    for n in &nodes {
        let leads = n.edges.iter().flatten().any(|e| match &e.target {
            EdgeTarget::Leaf(l) => all_leaves || leaf_index.contains_key(&Arc::as_ptr(l)),
            EdgeTarget::Node(p) => {
                let p = Arc::as_ptr(p);
                node_index.contains_key(&p) || needed.contains(&p)
            }
        });
        if leads {
            needed.insert(Arc::as_ptr(n));
        }
    }
    let mut pending: HashMap<*const Node, Tensor> = HashMap::new();
    pending.insert(Arc::as_ptr(&root_node), seed);
    let ctx = root.ctx().clone();
    for node in nodes.iter().rev() {
        let key = Arc::as_ptr(node);
        let Some(gy) = pending.remove(&key) else {
            continue;
        };
        if let Some(js) = node_index.get(&key) {
            for &j in js {
                captured[j] = Some(gy.clone());
            }
        }
        if !needed.contains(&key) {
            continue;
        }
        let needs: smallvec::SmallVec<[bool; 3]> = node.edges.iter().map(|e| e.is_some()).collect();
        let put_back = PutBack {
            node,
            op: node.take_op(),
        };
        let grads = match &put_back.op {
            None => return Err(Error::BackwardAlreadyRun { op: node.name }),
            Some(Op::Recompute(_)) => return Err(Error::NoDoubleBackward { op: "checkpoint" }),
            Some(Op::Formula(bw)) => {
                let saved = SavedTensors {
                    node,
                    ctx: &ctx,
                    needs: &needs,
                };
                bw.backward_graph(&saved, &gy)?
            }
        };
        drop(put_back); // the node keeps its backward: the walk consumes nothing
        drop(gy);
        let mut grads = grads;
        for (i, edge) in node.edges.iter().enumerate() {
            let Some(edge) = edge else { continue };
            let g = take_grad(&mut grads, node.name, i)?;
            let g = reduce_to(g, &edge.shape, node.name, i)?;
            match &edge.target {
                EdgeTarget::Node(p) => {
                    let pk = Arc::as_ptr(p);
                    if p.seq < from {
                        // Outside the bounded walk: only a target is delivered to.
                        if let Some(js) = node_index.get(&pk) {
                            for &j in js {
                                add_into(&mut captured[j], g.clone())?;
                            }
                        }
                    } else if needed.contains(&pk) || node_index.contains_key(&pk) {
                        let mut slot = pending.remove(&pk);
                        add_into(&mut slot, g)?;
                        if let Some(s) = slot {
                            pending.insert(pk, s);
                        }
                    }
                }
                EdgeTarget::Leaf(l) => {
                    let lk = Arc::as_ptr(l);
                    if all_leaves {
                        let n = staged.len();
                        let k = *staged_index.entry(lk).or_insert(n);
                        if k == n {
                            staged.push((l.clone(), None));
                        }
                        add_into(&mut staged[k].1, g)?;
                    } else if let Some(&j) = leaf_index.get(&lk) {
                        add_into(&mut captured[j], g)?;
                    }
                }
            }
        }
    }
    if all_leaves {
        commit(staged)?;
    }
    Ok(captured)
}

/// Stores each leaf's recorded gradient, `old + staged` (all or nothing).
fn commit(staged: Vec<(Arc<TensorInner>, Option<Tensor>)>) -> Result<()> {
    if staged.iter().any(|(l, _)| l.is_released()) {
        return Err(Error::TensorReleased);
    }
    let mut totals = Vec::with_capacity(staged.len());
    for (leaf, g) in staged {
        let Some(g) = g else { continue };
        let old = Tensor(leaf.clone()).grad();
        let total = match old {
            None => g.contiguous()?,
            Some(old) => old.add(&g)?,
        };
        let raw = total.raw()?;
        totals.push((leaf, total, raw));
    }
    for (leaf, total, raw) in totals {
        let old_raw = lock(&leaf.grad).replace(raw);
        let old_graph = lock(&leaf.grad_graph).replace(total);
        drop((old_raw, old_graph));
    }
    Ok(())
}

/// Options of [`grad_with`] and [`Tensor::backward_opts`] (PyTorch's keyword
/// arguments of `torch.autograd.grad` and `Tensor.backward`).
#[derive(Clone, Default)]
pub struct GradOpts {
    /// The gradient of the output (`grad_outputs`); `None` is 1 for a
    /// one-element output. With `create_graph` it may carry history (the
    /// result is then differentiable with respect to it too).
    pub grad_output: Option<Tensor>,
    /// Record the gradient computation, so the gradients can be
    /// differentiated again (Hessian-vector products, gradient penalties,
    /// MAML). Without it the plain walk runs, exactly as [`crate::grad`].
    pub create_graph: bool,
}

impl GradOpts {
    /// `create_graph` on, seed 1.
    pub fn create_graph() -> GradOpts {
        GradOpts {
            grad_output: None,
            create_graph: true,
        }
    }
    /// The same options with `grad_output` set.
    pub fn grad_output(mut self, g: &Tensor) -> GradOpts {
        self.grad_output = Some(g.clone());
        self
    }
}

/// The seed of a walk: the given gradient, or 1 for a one-element root.
fn seed_tensor(root: &Tensor, given: Option<&Tensor>) -> Result<Tensor> {
    match given {
        Some(g) => Ok(g.clone()),
        None if root.numel() == 1 => {
            let one = root.ctx().ones(root.dtype(), root.shape())?;
            Ok(Tensor::new_internal(root.ctx(), one, false, None))
        }
        None => Err(Error::MissingOutputGradient {
            shape: root.shape().to_vec(),
        }),
    }
}

/// Gradients of `output` with respect to `inputs` (leaves or not), without
/// touching any leaf's gradient: PyTorch's `torch.autograd.grad`. With
/// `opts.create_graph` the gradients are recorded tensors that can be
/// differentiated again; inputs the output does not depend on get `None`.
///
/// ```
/// use fucina_autograd::{grad_with, GradOpts, Tensor};
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let x = Tensor::variable(&ctx, &[2.0f64], &[1])?;
/// let y = x.mul(&x)?.mul(&x)?.sum_all()?; // x³
/// let dy = grad_with(&y, &[&x], &GradOpts::create_graph())?.remove(0).unwrap(); // 3x²
/// let d2y = grad_with(&dy.sum_all()?, &[&x], &GradOpts::default())?.remove(0).unwrap(); // 6x
/// assert_eq!(dy.to_vec::<f64>()?, vec![12.0]);
/// assert_eq!(d2y.to_vec::<f64>()?, vec![12.0]);
/// # Ok::<(), fucina_autograd::Error>(())
/// ```
pub fn grad_with(
    output: &Tensor,
    inputs: &[&Tensor],
    opts: &GradOpts,
) -> Result<Vec<Option<Tensor>>> {
    if !output.requires_grad() {
        return Err(Error::NoGradient);
    }
    if opts.create_graph || inputs.iter().any(|t| t.0.grad_fn().is_some()) {
        // The recorded walk also serves non-leaf targets without create_graph:
        // its results are then cut from the graph.
        let seed = seed_tensor(output, opts.grad_output.as_ref())?;
        let grads = if opts.create_graph {
            walk(output, seed, Targets::Capture(inputs), 0)?
        } else {
            let g = walk(output, seed.detach()?, Targets::Capture(inputs), 0)?;
            g.into_iter()
                .map(|g| g.map(|g| g.detach()).transpose())
                .collect::<Result<_>>()?
        };
        return Ok(grads);
    }
    let seed = opts.grad_output.as_ref().map(|g| g.raw()).transpose()?;
    let raw = crate::tape::engine::grad(output, inputs, seed.as_ref())?;
    Ok(raw
        .into_iter()
        .map(|g| g.map(|g| Tensor::new_internal(output.ctx(), g, false, None)))
        .collect())
}

impl Tensor {
    /// Backward from this tensor into the leaves' gradients, with PyTorch's
    /// options: with `create_graph`, each leaf's [`Tensor::grad`] is a
    /// recorded tensor (see there for the reference it keeps).
    pub fn backward_opts(&self, opts: &GradOpts) -> Result<()> {
        if !opts.create_graph {
            let seed = opts.grad_output.as_ref().map(|g| g.raw()).transpose()?;
            return crate::tape::engine::backward(self, seed);
        }
        if !self.requires_grad() {
            return Err(Error::NoGradient);
        }
        let seed = seed_tensor(self, opts.grad_output.as_ref())?;
        walk(self, seed, Targets::Leaves, 0).map(|_| ())
    }
}

/// A fused op's recorded gradient, re-derived from its decomposed forward:
/// `forward` runs over the lifted `inputs` (recording, grad mode on), and the
/// walk from its output with seed `gy`, bounded to what it recorded, returns
/// the gradient of each input flagged in `needs` as a recorded tensor (zeros
/// where the output does not depend on it). The fused kernel stays the
/// first-order path; this runs only under `create_graph`.
pub(crate) fn rederive(
    inputs: &[Tensor],
    gy: &Tensor,
    needs: &[bool],
    forward: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Result<crate::tape::graph::TensorGrads> {
    let _grad_on = enable_grad();
    let start = crate::tape::graph::next_seq();
    let out = forward(inputs)?;
    let wanted: Vec<&Tensor> = inputs
        .iter()
        .zip(needs)
        .filter(|(t, &n)| n && t.requires_grad())
        .map(|(t, _)| t)
        .collect();
    let mut got = if out.requires_grad() && !wanted.is_empty() {
        walk(&out, gy.clone(), Targets::Capture(&wanted), start)?.into_iter()
    } else {
        Vec::new().into_iter()
    };
    let mut grads = crate::tape::graph::TensorGrads::new();
    for (t, &n) in inputs.iter().zip(needs) {
        if !n {
            grads.push(None);
            continue;
        }
        let g = if t.requires_grad() {
            got.next().flatten()
        } else {
            None
        };
        grads.push(Some(match g {
            Some(g) => g,
            None => t.zeros_like()?,
        }));
    }
    Ok(grads)
}
