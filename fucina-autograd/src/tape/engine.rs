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
//! A checkpoint node (`Op::Recompute`) is not a formula: its block is re-run
//! and the subgraph it records is walked right there, newest first, as part of
//! this walk; gradients reaching its fresh input leaves go to the checkpoint
//! node's edges, gradients reaching tensors from outside the block (the
//! captures, also its edges) go to them directly, so each target accumulates
//! exactly the plain run's contributions in the plain run's order.
//!
//! A gradient-ready hook ([`backward_with_ready_hook`], PyTorch's
//! `register_post_accumulate_grad_hook` as one callback per call) is told
//! each leaf's gradient as soon as it is final: every leaf edge of the walk's
//! nodes is counted first, and once the last node with an edge to a leaf has
//! run (its contributions delivered, or pruned), the leaf's staged sum is
//! handed to the hook. Without a hook nothing is counted.
//!
//! A released root (its scope closed) is [`Error::TensorReleased`]. In
//! anomaly mode ([`crate::anomaly`]) each backward's outputs are checked, and
//! the first non-finite one is [`Error::Anomaly`], naming the op.
//!
//! Every walk here is iterative (explicit stacks, a sorted node list), so no
//! recursion depth grows with the graph, and each step is O(1) amortised
//! (hash maps keyed by node address) apart from the one O(n log n) sort.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use fucina_core::{ExecContext, RawTensor};

use crate::error::{check_grad_fits, Error, Result};
use crate::tape::graph::{next_seq, take_grad, EdgeTarget, Node, Op, Recompute};
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
            check_grad_fits(
                "backward seed",
                0,
                (root.shape(), root.dtype()),
                (s.shape(), s.dtype()),
            )?;
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

    /// The staged gradient of `leaf`, if any.
    fn get(&self, leaf: &Arc<TensorInner>) -> Option<&RawTensor> {
        let &i = self.index.get(&Arc::as_ptr(leaf))?;
        self.leaves[i].1.as_ref()
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
        let mut old_graphs = Vec::new();
        for ((slot, leaf), total) in slots.iter_mut().zip(&leaves).zip(totals) {
            if let Some(total) = total {
                old.push((**slot).replace(total));
                // A recorded gradient (create_graph) no longer matches the value.
                old_graphs.push(lock(&leaf.grad_graph).take());
            }
        }
        drop(slots);
        drop(old);
        drop(old_graphs);
        Ok(())
    }
}

/// Runs backward from `root` into the leaves' gradients.
pub(crate) fn backward(root: &Tensor, seed: Option<RawTensor>) -> Result<()> {
    run(root, seed, None, None).map(|_| ())
}

/// The callback of [`backward_with_ready_hook`]: a leaf and the gradient
/// this backward call adds to it.
pub type ReadyHook<'h> = &'h mut dyn FnMut(&Tensor, &RawTensor);

/// Runs backward from `root` (seed: `seed`, or 1 for a scalar) into the
/// leaves' gradients, exactly as [`Tensor::backward`] does, and calls
/// `ready(leaf, g)` during the walk as soon as a leaf's gradient is final.
///
/// **When it fires**: once per leaf that receives a gradient in this call,
/// right after the last node of the walk with an edge to that leaf has run
/// (nodes run newest first; a checkpoint node counts as one node, finished
/// once its recomputed block has been walked). Leaves finishing at the same
/// node fire in the order of its inputs, so the order is a pure function of
/// the graph: the same on every run and every process. A leaf that no
/// gradient reached (every path to it pruned) does not fire.
///
/// **What it sees**: `g` is the sum of this call's contributions to the
/// leaf, bitwise what the leaf's gradient becomes when it had none (the leaf
/// then holds `g` made contiguous); with an earlier gradient `old` the leaf
/// holds `old + g`. Leaf gradients are still committed all or nothing after
/// the walk, so during the hook `leaf.grad()` shows the old value, and if
/// backward fails after the hook has fired the leaf's gradient is left as it
/// was. The hook cannot change any gradient (`g` is shared, read-only).
/// Without a hook ([`Tensor::backward`]) none of this bookkeeping runs.
pub fn backward_with_ready_hook(
    root: &Tensor,
    seed: Option<&RawTensor>,
    ready: ReadyHook<'_>,
) -> Result<()> {
    run(root, seed.cloned(), None, Some(ready)).map(|_| ())
}

/// The countdown of [`backward_with_ready_hook`]: leaf edges not yet run.
struct Ready<'h> {
    hook: ReadyHook<'h>,
    remaining: HashMap<*const TensorInner, usize>,
}

impl<'h> Ready<'h> {
    /// Counts the leaf edges of `nodes`.
    fn new(hook: ReadyHook<'h>, nodes: &[Arc<Node>]) -> Self {
        let mut remaining = HashMap::new();
        for n in nodes {
            for e in n.edges.iter().flatten() {
                if let EdgeTarget::Leaf(l) = &e.target {
                    *remaining.entry(Arc::as_ptr(l)).or_insert(0usize) += 1;
                }
            }
        }
        Ready { hook, remaining }
    }

    /// `node` has run: fires for each leaf it held the last edge to.
    fn node_done(&mut self, node: &Node, staged: &Staged) {
        for e in node.edges.iter().flatten() {
            let EdgeTarget::Leaf(l) = &e.target else {
                continue;
            };
            let Some(left) = self.remaining.get_mut(&Arc::as_ptr(l)) else {
                continue;
            };
            *left -= 1;
            if *left == 0 {
                self.fire(l, staged);
            }
        }
    }

    /// Hands `leaf`'s staged gradient, if any, to the hook.
    fn fire(&mut self, leaf: &Arc<TensorInner>, staged: &Staged) {
        if let Some(g) = staged.get(leaf) {
            (self.hook)(&Tensor(leaf.clone()), g);
        }
    }
}

/// Gradients of `output` with respect to `inputs`, without touching any
/// leaf's accumulated gradient (PyTorch's `torch.autograd.grad`). Inputs that
/// the output does not depend on get `None`.
pub fn grad(
    output: &Tensor,
    inputs: &[&Tensor],
    seed: Option<&RawTensor>,
) -> Result<Vec<Option<RawTensor>>> {
    run(output, seed.cloned(), Some(inputs), None)
}

fn run(
    root: &Tensor,
    seed: Option<RawTensor>,
    capture: Option<&[&Tensor]>,
    ready: Option<ReadyHook<'_>>,
) -> Result<Vec<Option<RawTensor>>> {
    if root.is_released() {
        return Err(Error::TensorReleased);
    }
    if !root.requires_grad() {
        return Err(Error::NoGradient);
    }
    let ctx = root.ctx().clone();
    let seed = seed_for(root, seed)?;
    let mut walk = Walk {
        anomaly: crate::anomaly::is_anomaly_enabled(),
        captured: vec![None; capture.map(|c| c.len()).unwrap_or(0)],
        capture_index: capture
            .unwrap_or(&[])
            .iter()
            .enumerate()
            .map(|(i, t)| (Arc::as_ptr(&t.0), i))
            .collect(),
        capturing: capture.is_some(),
        staged: Staged::default(),
        pending: HashMap::new(),
        reachable: HashSet::new(),
        ctx,
    };

    let Some(root_node) = root.0.grad_fn() else {
        // The root is a leaf: its gradient is the seed.
        walk.deliver(&EdgeTarget::Leaf(root.0.clone()), seed)?;
        if let Some(hook) = ready {
            Ready::new(hook, &[]).fire(&root.0, &walk.staged);
        }
        let Walk {
            ctx,
            staged,
            captured,
            ..
        } = walk;
        if capture.is_none() {
            staged.commit(&ctx)?;
        }
        return Ok(captured);
    };

    // 1. Reachable nodes; refuse before touching state if any was consumed.
    let mut nodes = collect(&root_node, &mut walk.reachable, 0)?;
    nodes.sort_unstable_by_key(|n| std::cmp::Reverse(n.seq));

    // 2. Newest first.
    walk.pending.reserve(nodes.len());
    walk.pending.insert(Arc::as_ptr(&root_node), Some(seed));
    let mut ready = ready.map(|hook| Ready::new(hook, &nodes));
    for node in &nodes {
        walk.visit(node, None)?;
        if let Some(r) = ready.as_mut() {
            r.node_done(node, &walk.staged);
        }
    }
    drop(ready);
    let Walk {
        ctx,
        staged,
        captured,
        pending,
        ..
    } = walk;
    drop(pending);
    drop(nodes);
    // 3. All or nothing.
    staged.commit(&ctx)?;
    Ok(captured)
}

/// The nodes reachable from `root` through nodes numbered at least `from`
/// (0: all of them), each added to `seen`; a consumed one is
/// [`Error::BackwardAlreadyRun`].
pub(crate) fn collect(
    root: &Arc<Node>,
    seen: &mut HashSet<*const Node>,
    from: u64,
) -> Result<Vec<Arc<Node>>> {
    let mut nodes: Vec<Arc<Node>> = Vec::new();
    let mut stack = vec![root.clone()];
    seen.insert(Arc::as_ptr(root));
    while let Some(n) = stack.pop() {
        if n.is_consumed() {
            return Err(Error::BackwardAlreadyRun { op: n.name });
        }
        for e in n.edges.iter().flatten() {
            if let EdgeTarget::Node(p) = &e.target {
                if p.seq >= from && seen.insert(Arc::as_ptr(p)) {
                    stack.push(p.clone());
                }
            }
        }
        nodes.push(n);
    }
    Ok(nodes)
}

/// A checkpoint node's recomputed subgraph while the walk runs through it.
struct Splice<'a> {
    /// The checkpoint node.
    node: &'a Node,
    /// Fresh input leaf (by address) → the checkpoint node's edge it stands for.
    inputs: HashMap<*const TensorInner, usize>,
    /// Nodes numbered at least this were recorded by the recompute; older ones
    /// are outside the block.
    start: u64,
}

/// The state of one backward call.
struct Walk {
    ctx: ExecContext,
    anomaly: bool,
    /// Functional `grad`: leaf gradients go to `captured`, nothing is staged.
    capturing: bool,
    captured: Vec<Option<RawTensor>>,
    capture_index: HashMap<*const TensorInner, usize>,
    staged: Staged,
    /// Each node's gradient so far, until the node runs.
    pending: HashMap<*const Node, Option<RawTensor>>,
    /// Every node of the outer walk (alive until it ends).
    reachable: HashSet<*const Node>,
}

impl Walk {
    /// Where a gradient for `target` goes: inside a recompute, a fresh input
    /// leaf stands for the checkpoint node's edge of that input (`None`: the
    /// input needs no gradient), and a node from outside the block must be one
    /// the outer walk will still visit (an edge of the checkpoint node).
    fn resolve<'a>(
        &self,
        target: &'a EdgeTarget,
        splice: Option<&Splice<'a>>,
    ) -> Result<Option<&'a EdgeTarget>> {
        let Some(sp) = splice else {
            return Ok(Some(target));
        };
        match target {
            EdgeTarget::Leaf(l) => match sp.inputs.get(&Arc::as_ptr(l)) {
                Some(&i) => Ok(sp
                    .node
                    .edges
                    .get(i)
                    .and_then(|e| e.as_ref())
                    .map(|e| &e.target)),
                None => Ok(Some(target)),
            },
            EdgeTarget::Node(p) if p.seq < sp.start => {
                if p.seq < sp.node.seq && self.reachable.contains(&Arc::as_ptr(p)) {
                    Ok(Some(target))
                } else {
                    Err(Error::CheckpointRecomputeMismatch)
                }
            }
            EdgeTarget::Node(_) => Ok(Some(target)),
        }
    }

    /// Adds `g` to what `target` has received so far: a node's pending
    /// gradient, a leaf's staged gradient (or its capture slot for `grad`).
    fn deliver(&mut self, target: &EdgeTarget, g: RawTensor) -> Result<()> {
        match target {
            EdgeTarget::Node(p) => {
                let slot = self.pending.entry(Arc::as_ptr(p)).or_insert(None);
                accumulate(&self.ctx, slot, g)
            }
            EdgeTarget::Leaf(leaf) => {
                if self.capturing {
                    if let Some(&j) = self.capture_index.get(&Arc::as_ptr(leaf)) {
                        accumulate(&self.ctx, &mut self.captured[j], g)?;
                    }
                    Ok(())
                } else {
                    self.staged.add(&self.ctx, leaf, g)
                }
            }
        }
    }

    /// Runs one node's backward with its pending gradient (or drops its saved
    /// views if none reached it) and delivers the input gradients.
    fn visit(&mut self, node: &Arc<Node>, splice: Option<&Splice<'_>>) -> Result<()> {
        let Some(gy) = self.pending.remove(&Arc::as_ptr(node)).flatten() else {
            // No gradient reached this node (every path to it was pruned); drop its saved views.
            drop(node.take_op());
            return Ok(());
        };
        let needs: smallvec::SmallVec<[bool; 3]> = node.edges.iter().map(|e| e.is_some()).collect();
        let bw = match node.take_op() {
            None => return Err(Error::BackwardAlreadyRun { op: node.name }),
            Some(Op::Recompute(r)) => {
                if splice.is_some() {
                    // A recompute records no checkpoint node (it is an error there).
                    return Err(Error::NestedCheckpointRecompute);
                }
                return self.splice(node, &*r, gy, &needs);
            }
            Some(Op::Formula(bw)) => bw,
        };
        // A narrow view of an interior tensor: add gy into the producer's pending gradient
        // in place (anomaly mode keeps the general path, which checks each gradient; so
        // does a shared or strided pending gradient).
        if let (Some((axis, start)), false, [Some(edge)]) =
            (bw.narrow_window(), self.anomaly, node.edges.as_slice())
        {
            if let Some(EdgeTarget::Node(p)) = self.resolve(&edge.target, splice)? {
                let slot = self.pending.entry(Arc::as_ptr(p)).or_insert(None);
                if accumulate_narrow(&self.ctx, slot, &gy, axis, start, &edge.shape)? {
                    return Ok(());
                }
            }
        }
        let mut grads = bw.backward(&self.ctx, &gy, &needs)?;
        drop(bw); // saved activations go back to the pool now
        drop(gy); // the interior gradient is consumed
        if self.anomaly {
            crate::anomaly::check_grads(&self.ctx, node.name, node.seq, &grads)?;
        }
        for (i, edge) in node.edges.iter().enumerate() {
            let Some(edge) = edge else { continue };
            let g = take_grad(&mut grads, node.name, i)?;
            let g = reduce_to(&self.ctx, g, &edge.shape, node.name, i)?;
            if let Some(target) = self.resolve(&edge.target, splice)? {
                self.deliver(target, g)?;
            }
        }
        Ok(())
    }

    /// A checkpoint node: re-runs its block, then walks the recorded subgraph
    /// newest first as part of this walk. A gradient reaching a fresh input
    /// leaf goes to the node's edge for that input, one reaching a tensor from
    /// outside the block goes to it directly ([`Walk::resolve`]): each tensor
    /// receives the same contributions in the same order as in the plain
    /// run, so every gradient is bitwise the plain run's.
    fn splice(
        &mut self,
        node: &Arc<Node>,
        r: &dyn Recompute,
        gy: RawTensor,
        needs: &[bool],
    ) -> Result<()> {
        let start = next_seq();
        let rec = r.recompute(&self.ctx, needs)?;
        let sp = Splice {
            node,
            inputs: rec
                .inputs
                .iter()
                .enumerate()
                .filter(|(_, t)| t.requires_grad())
                .map(|(i, t)| (Arc::as_ptr(&t.0), i))
                .collect(),
            start,
        };
        let out = &rec.output;
        if !out.requires_grad() {
            // The output depends on nothing that requires a gradient.
            return Ok(());
        }
        match out.0.grad_fn() {
            // The block returned a leaf (an input, or a captured leaf)...
            None => {
                let target = EdgeTarget::Leaf(out.0.clone());
                if let Some(t) = self.resolve(&target, Some(&sp))? {
                    self.deliver(t, gy)?;
                }
            }
            // ... or a captured non-leaf as it is...
            Some(root) if root.seq < start => {
                let target = EdgeTarget::Node(root);
                if let Some(t) = self.resolve(&target, Some(&sp))? {
                    self.deliver(t, gy)?;
                }
            }
            // ... or, as usual, the result of ops it ran.
            Some(root) => {
                // Its own seen set: the recompute's nodes die with `rec`, and a
                // later recompute may reuse their addresses.
                let mut inner = collect(&root, &mut HashSet::new(), start)?;
                inner.sort_unstable_by_key(|n| std::cmp::Reverse(n.seq));
                self.pending.insert(Arc::as_ptr(&root), Some(gy));
                for n in &inner {
                    self.visit(n, Some(&sp))?;
                }
            }
        }
        Ok(())
    }
}
