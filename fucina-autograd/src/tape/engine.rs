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
//! 4. Leaf gradients are all-or-nothing: contributions are staged per leaf
//!    during the walk and committed only once every node has run. The commit
//!    locks the leaves' gradient slots in address order (so two threads
//!    running backward over shared leaves cannot deadlock), computes every
//!    new gradient `staged + old`, and only then stores them all; if anything
//!    fails, before or during the commit, every leaf gradient is bit-identical
//!    to what it was before the call. Summing a leaf's contributions first
//!    and then adding the old gradient is also PyTorch's order.
//!
//! A released root (its scope closed) is [`Error::TensorReleased`]. In
//! anomaly mode ([`crate::anomaly`]) each backward's outputs are checked, and
//! the first non-finite one is [`Error::Anomaly`], naming the op.
//!
//! Every walk here is iterative (explicit stacks, a sorted node list), so no
//! recursion depth grows with the graph, and each step is O(1) amortised
//! (hash maps keyed by node address) apart from the one O(n log n) sort.

use std::collections::HashMap;
use std::sync::Arc;

use fucina_core::{ExecContext, RawTensor};

use crate::error::{Error, Result};
use crate::tape::graph::{EdgeTarget, Node};
use crate::tape::tensor::{lock, Tensor, TensorInner};

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

/// Adds gy, the gradient of the window `start..` along `axis` of a tensor of `shape`, into
/// that tensor's pending gradient `slot` without building the zero-padded gradient: in place
/// when the slot is contiguous and unique, into fresh zeros when it is empty (so every
/// element is `acc + g` or `acc`, exactly as [`accumulate`] of the padded gy gives once a
/// second gradient arrives; a lone narrow's −0 entries come out +0). Returns false, having
/// done nothing, when the slot is shared or strided (the caller takes the general path).
fn accumulate_narrow(
    ctx: &ExecContext,
    slot: &mut Option<RawTensor>,
    gy: &RawTensor,
    axis: usize,
    start: usize,
    shape: &[usize],
) -> Result<bool> {
    match slot {
        Some(acc) if acc.buffer().is_unique() && acc.is_contiguous() => {
            ctx.add_assign_narrow(acc, axis, start, gy)?;
        }
        Some(_) => return Ok(false),
        None => {
            let mut acc = ctx.zeros(gy.dtype(), shape)?;
            ctx.add_assign_narrow(&mut acc, axis, start, gy)?;
            *slot = Some(acc);
        }
    }
    Ok(true)
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

/// Leaf gradients computed by one backward call, not yet visible to anyone.
#[derive(Default)]
struct Staged {
    leaves: Vec<(Arc<TensorInner>, Option<RawTensor>)>,
    index: HashMap<*const TensorInner, usize>,
}

impl Staged {
    /// Adds `g` to the staged gradient of `leaf`.
    fn add(&mut self, ctx: &ExecContext, leaf: &Arc<TensorInner>, g: RawTensor) -> Result<()> {
        let n = self.leaves.len();
        let i = *self.index.entry(Arc::as_ptr(leaf)).or_insert(n);
        if i == n {
            self.leaves.push((leaf.clone(), None));
        }
        accumulate(ctx, &mut self.leaves[i].1, g)
    }

    /// Stores every staged gradient into its leaf, or none of them.
    fn commit(mut self, ctx: &ExecContext) -> Result<()> {
        if self.leaves.iter().any(|(l, _)| l.is_released()) {
            return Err(Error::TensorReleased);
        }
        // One global lock order (by address): no deadlock between threads.
        self.leaves
            .sort_unstable_by_key(|(l, _)| Arc::as_ptr(l) as usize);
        let (leaves, staged): (Vec<_>, Vec<_>) = self.leaves.into_iter().unzip();
        let mut slots: Vec<_> = leaves.iter().map(|l| lock(&l.grad)).collect();
        let mut totals = Vec::with_capacity(slots.len());
        for (slot, staged) in slots.iter().zip(staged) {
            let Some(g) = staged else {
                totals.push(None);
                continue;
            };
            let total = match slot.as_ref() {
                None => ctx.contiguous(&g)?,
                // staged + old, never written into `old`: it stays intact until
                // every total is computed. IEEE addition commutes, so this is
                // bitwise `old + staged`.
                Some(old) => {
                    let mut g = g;
                    if g.buffer().is_unique() && g.is_contiguous() && g.shape() == old.shape() {
                        ctx.add_assign(&mut g, old)?;
                        g
                    } else {
                        ctx.binary(old, &g, fucina_core::kernels::elementwise::BinaryOp::Add)?
                    }
                }
            };
            totals.push(Some(total));
        }
        // Infallible from here on.
        let mut old = Vec::with_capacity(totals.len());
        for (slot, total) in slots.iter_mut().zip(totals) {
            if let Some(total) = total {
                old.push((**slot).replace(total));
            }
        }
        drop(slots);
        drop(old);
        Ok(())
    }
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
    if root.is_released() {
        return Err(Error::TensorReleased);
    }
    if !root.requires_grad() {
        return Err(Error::NoGradient);
    }
    let ctx = root.ctx().clone();
    let seed = seed_for(root, seed)?;
    let anomaly = crate::anomaly::is_anomaly_enabled();
    let mut captured: Vec<Option<RawTensor>> = vec![None; capture.map(|c| c.len()).unwrap_or(0)];
    let capture_index: HashMap<*const TensorInner, usize> = capture
        .unwrap_or(&[])
        .iter()
        .enumerate()
        .map(|(i, t)| (Arc::as_ptr(&t.0), i))
        .collect();
    let mut staged = Staged::default();

    let Some(root_node) = root.0.grad_fn() else {
        // The root is a leaf: its gradient is the seed.
        match capture {
            Some(_) => {
                if let Some(&i) = capture_index.get(&Arc::as_ptr(&root.0)) {
                    captured[i] = Some(seed);
                }
            }
            None => {
                staged.add(&ctx, &root.0, seed)?;
                staged.commit(&ctx)?;
            }
        }
        return Ok(captured);
    };

    // 1. Reachable nodes; refuse before touching state if any was consumed.
    let mut nodes: Vec<Arc<Node>> = Vec::new();
    let mut seen: std::collections::HashSet<*const Node> = std::collections::HashSet::new();
    let mut stack = vec![root_node.clone()];
    seen.insert(Arc::as_ptr(&root_node));
    while let Some(n) = stack.pop() {
        if n.is_consumed() {
            return Err(Error::BackwardAlreadyRun { op: n.name });
        }
        for e in n.edges.iter().flatten() {
            if let EdgeTarget::Node(p) = &e.target {
                if seen.insert(Arc::as_ptr(p)) {
                    stack.push(p.clone());
                }
            }
        }
        nodes.push(n);
    }
    drop(seen);
    nodes.sort_unstable_by_key(|n| std::cmp::Reverse(n.seq));

    // 2. Newest first.
    let mut pending: HashMap<*const Node, Option<RawTensor>> = HashMap::with_capacity(nodes.len());
    pending.insert(Arc::as_ptr(&root_node), Some(seed));
    for node in &nodes {
        let Some(gy) = pending.remove(&Arc::as_ptr(node)).flatten() else {
            // No gradient reached this node (every path to it was pruned); drop its saved views.
            drop(node.take_backward());
            continue;
        };
        let needs: smallvec::SmallVec<[bool; 3]> = node.edges.iter().map(|e| e.is_some()).collect();
        let Some(bw) = node.take_backward() else {
            return Err(Error::BackwardAlreadyRun { op: node.name });
        };
        // A narrow view of an interior tensor: add gy into the producer's pending gradient
        // in place (anomaly mode keeps the general path, which checks each gradient; so
        // does a shared or strided pending gradient).
        if let (Some((axis, start)), false, [Some(edge)]) =
            (bw.narrow_window(), anomaly, node.edges.as_slice())
        {
            if let EdgeTarget::Node(p) = &edge.target {
                let slot = pending.entry(Arc::as_ptr(p)).or_insert(None);
                if accumulate_narrow(&ctx, slot, &gy, axis, start, &edge.shape)? {
                    continue;
                }
            }
        }
        let mut grads = bw.backward(&ctx, &gy, &needs)?;
        drop(bw); // saved activations go back to the pool now
        drop(gy); // the interior gradient is consumed
        if anomaly {
            crate::anomaly::check_grads(&ctx, node.name, node.seq, &grads)?;
        }
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
                    let slot = pending.entry(Arc::as_ptr(p)).or_insert(None);
                    accumulate(&ctx, slot, g)?;
                }
                EdgeTarget::Leaf(leaf) => match capture {
                    Some(_) => {
                        if let Some(&j) = capture_index.get(&Arc::as_ptr(leaf)) {
                            accumulate(&ctx, &mut captured[j], g)?;
                        }
                    }
                    None => staged.add(&ctx, leaf, g)?,
                },
            }
        }
    }
    drop(pending);
    drop(nodes);
    // 3. All or nothing.
    staged.commit(&ctx)?;
    Ok(captured)
}
