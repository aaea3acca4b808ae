//! The backward engine: a reverse walk over the tape from one output.
//!
//! 1. Collect the nodes reachable from the output; any already consumed means
//!    [`Error::BackwardAlreadyRun`], raised before any state changes.
//! 2. Visit them newest first (creation order is a topological order); each
//!    node's pending gradient is taken out (freed once consumed), its backward
//!    runs with the `needs` mask of its edges, and the node's saved views are
//!    dropped right after.
//! 3. Each input gradient is reduced to the input's shape here (broadcast
//!    adjoint — ops never do it) and accumulated: into the producer's pending
//!    gradient, or into the leaf's gradient, which persists across backward
//!    calls until `zero_grad` (or into a capture slot for [`grad`]).

use std::collections::HashMap;
use std::rc::Rc;

use fucina_core::{ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::graph::{EdgeTarget, Node};
use crate::tensor::{Tensor, TensorInner};

/// Adds `g` into `slot` (first contribution is stored as is; later ones in place when possible).
pub(crate) fn accumulate(
    ctx: &ExecContext,
    slot: &mut Option<RawTensor>,
    g: RawTensor,
) -> Result<()> {
    match slot {
        None => *slot = Some(g),
        Some(acc) => {
            if acc.buffer().is_unique() && acc.is_contiguous() {
                ctx.add_assign(acc, &g)?;
            } else {
                *acc = ctx.binary(acc, &g, fucina_core::kernels::elementwise::BinaryOp::Add)?;
            }
        }
    }
    Ok(())
}

fn reduce_to(
    ctx: &ExecContext,
    g: RawTensor,
    shape: &[usize],
    op: &'static str,
    input: usize,
) -> Result<RawTensor> {
    if g.shape() == shape {
        return Ok(g);
    }
    ctx.sum_to_shape(&g, shape)
        .map_err(|_| Error::GradientShapeMismatch {
            op,
            input,
            expected: shape.to_vec(),
            got: g.shape().to_vec(),
        })
}

fn seed_for(root: &Tensor, seed: Option<RawTensor>) -> Result<RawTensor> {
    match seed {
        Some(s) => {
            if s.shape() != root.shape() || s.dtype() != root.dtype() {
                return Err(Error::GradientShapeMismatch {
                    op: "backward seed",
                    input: 0,
                    expected: root.shape().to_vec(),
                    got: s.shape().to_vec(),
                });
            }
            Ok(s)
        }
        None if root.numel() == 1 => Ok(root.ctx().ones(root.dtype(), root.shape())?),
        None => Err(Error::MissingOutputGradient {
            shape: root.shape().to_vec(),
        }),
    }
}

/// Accumulates `g` into a leaf's persistent gradient (contiguous, owned).
fn accumulate_leaf(ctx: &ExecContext, leaf: &TensorInner, g: RawTensor) -> Result<()> {
    let mut slot = leaf.grad.borrow_mut();
    if slot.is_none() {
        *slot = Some(ctx.contiguous(&g)?);
        return Ok(());
    }
    accumulate(ctx, &mut slot, g)
}

/// Runs backward from `root` into the leaves' gradients.
pub(crate) fn backward(root: &Tensor, seed: Option<RawTensor>) -> Result<()> {
    run(root, seed, None).map(|_| ())
}

/// Gradients of `output` with respect to `inputs`, without touching any
/// leaf's accumulated gradient (PyTorch's `torch.autograd.grad`). Inputs that
/// the output does not depend on get `None`.
pub fn grad(
    output: &Tensor,
    inputs: &[&Tensor],
    seed: Option<&RawTensor>,
) -> Result<Vec<Option<RawTensor>>> {
    run(output, seed.cloned(), Some(inputs))
}

fn run(
    root: &Tensor,
    seed: Option<RawTensor>,
    capture: Option<&[&Tensor]>,
) -> Result<Vec<Option<RawTensor>>> {
    if !root.requires_grad() {
        return Err(Error::NoGradient);
    }
    let ctx = root.ctx().clone();
    let seed = seed_for(root, seed)?;
    let mut captured: Vec<Option<RawTensor>> = vec![None; capture.map(|c| c.len()).unwrap_or(0)];
    let capture_index: HashMap<*const TensorInner, usize> = capture
        .unwrap_or(&[])
        .iter()
        .enumerate()
        .map(|(i, t)| (Rc::as_ptr(&t.0), i))
        .collect();

    let root_node = root.0.grad_fn.borrow().clone();
    let Some(root_node) = root_node else {
        // The root is a leaf: its gradient is the seed.
        match capture {
            Some(_) => {
                if let Some(&i) = capture_index.get(&Rc::as_ptr(&root.0)) {
                    captured[i] = Some(seed);
                }
            }
            None => accumulate_leaf(&ctx, &root.0, seed)?,
        }
        return Ok(captured);
    };

    // 1. Reachable nodes; refuse before touching state if any was consumed.
    let mut nodes: Vec<Rc<Node>> = Vec::new();
    let mut seen: std::collections::HashSet<*const Node> = std::collections::HashSet::new();
    let mut stack = vec![root_node.clone()];
    seen.insert(Rc::as_ptr(&root_node));
    while let Some(n) = stack.pop() {
        if n.backward.borrow().is_none() {
            return Err(Error::BackwardAlreadyRun { op: n.name });
        }
        for e in n.edges.iter().flatten() {
            if let EdgeTarget::Node(p) = &e.target {
                if seen.insert(Rc::as_ptr(p)) {
                    stack.push(p.clone());
                }
            }
        }
        nodes.push(n);
    }
    nodes.sort_unstable_by_key(|n| std::cmp::Reverse(n.seq));

    // 2. Newest first.
    let mut pending: HashMap<*const Node, Option<RawTensor>> = HashMap::with_capacity(nodes.len());
    pending.insert(Rc::as_ptr(&root_node), Some(seed));
    for node in &nodes {
        let Some(gy) = pending.remove(&Rc::as_ptr(node)).flatten() else {
            // No gradient reached this node (every path to it was pruned); drop its saved views.
            node.backward.borrow_mut().take();
            continue;
        };
        let needs: smallvec::SmallVec<[bool; 3]> = node.edges.iter().map(|e| e.is_some()).collect();
        let bw = node.backward.borrow_mut().take();
        let Some(bw) = bw else {
            return Err(Error::BackwardAlreadyRun { op: node.name });
        };
        let mut grads = bw.backward(&ctx, &gy, &needs)?;
        drop(bw); // saved activations go back to the pool now
        drop(gy); // the interior gradient is consumed
        for (i, edge) in node.edges.iter().enumerate() {
            let Some(edge) = edge else { continue };
            let g = grads
                .get_mut(i)
                .and_then(|g| g.take())
                .ok_or(Error::MissingGradient {
                    op: node.name,
                    input: i,
                })?;
            let g = reduce_to(&ctx, g, &edge.shape, node.name, i)?;
            match &edge.target {
                EdgeTarget::Node(p) => {
                    let slot = pending.entry(Rc::as_ptr(p)).or_insert(None);
                    accumulate(&ctx, slot, g)?;
                }
                EdgeTarget::Leaf(leaf) => match capture {
                    Some(_) => {
                        if let Some(&j) = capture_index.get(&Rc::as_ptr(leaf)) {
                            accumulate(&ctx, &mut captured[j], g)?;
                        }
                    }
                    None => accumulate_leaf(&ctx, leaf, g)?,
                },
            }
        }
    }
    Ok(captured)
}
