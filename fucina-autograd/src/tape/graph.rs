//! The tape: backward nodes and the edges between them.
//!
//! A node is recorded for an op result when grad mode is on and an input
//! requires a gradient. It owns a [`Backward`] impl holding `clone_view`s of
//! exactly what its formula needs (the refcount pins those activations until
//! the node runs or is dropped) and one edge per input: `None` for an input
//! that needs no gradient (pruned), else the producer node or the leaf to
//! accumulate into, with the input's shape (the engine reduces broadcast
//! gradients to it). Nodes carry a creation sequence number: sorting by it is
//! a topological order, so the tape is the recording order itself. The
//! numbers come from one process-wide counter, so a graph whose tensors
//! crossed threads still sorts topologically.
//!
//! Nodes are `Send + Sync` (a [`Backward`] must be), so tensors can cross
//! threads. Dropping the last reference to a long chain never recurses:
//! `Node::drop` moves each input node it held the last reference to onto an
//! explicit stack and unlinks it there.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use fucina_core::{ExecContext, RawTensor};
use smallvec::SmallVec;

use crate::error::Result;
use crate::grad_mode::is_grad_enabled;
use crate::tape::tensor::{lock, Tensor, TensorInner};

/// Input gradients returned by a backward, one slot per input.
pub type Grads = SmallVec<[Option<RawTensor>; 3]>;

/// The one backward trait: given the upstream gradient and a `needs` mask
/// (one flag per input), return the input gradients. A gradient may have the
/// broadcast output shape; the engine reduces it to the input's shape.
/// Return `None` for inputs whose flag is false. `Send + Sync` because the
/// node travels with its tensors between threads.
pub trait Backward: Send + Sync {
    /// The op's name, for errors and debugging.
    fn name(&self) -> &'static str;
    /// Computes the input gradients.
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads>;
    /// For a narrow view of its one input: `(axis, start)` of the window, whose gradient is
    /// gy placed there in zeros. The engine then adds gy into the input's pending gradient
    /// in place (`ExecContext::add_assign_narrow`) instead of calling [`Self::backward`]
    /// for the zero-padded tensor: a `split` into n pieces costs one pass over the input
    /// instead of n pads and n − 1 full adds. `None` (the default) for every other op.
    fn narrow_window(&self) -> Option<(usize, usize)> {
        None
    }
}

pub(crate) enum EdgeTarget {
    Leaf(Arc<TensorInner>),
    Node(Arc<Node>),
}

pub(crate) struct Edge {
    pub(crate) target: EdgeTarget,
    pub(crate) shape: fucina_core::shape::Dims,
}

/// A recorded backward node.
pub struct Node {
    pub(crate) seq: u64,
    pub(crate) name: &'static str,
    pub(crate) backward: Mutex<Option<Box<dyn Backward>>>,
    pub(crate) edges: SmallVec<[Option<Edge>; 3]>,
    /// The live-node counter of the thread that recorded this node.
    live: Arc<AtomicUsize>,
}

/// The creation counter shared by every thread (a single atomic total order
/// that respects happens-before, hence topological across threads).
static NEXT_SEQ: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static LIVE_NODES: Arc<AtomicUsize> = Arc::new(AtomicUsize::new(0));
}

/// Number of backward nodes recorded on this thread that are still alive
/// (wherever they were dropped or sent since).
pub fn live_nodes() -> usize {
    LIVE_NODES.with(|c| c.load(Ordering::Relaxed))
}

impl Node {
    fn new(
        name: &'static str,
        backward: Box<dyn Backward>,
        edges: SmallVec<[Option<Edge>; 3]>,
    ) -> Node {
        let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
        let live = LIVE_NODES.with(|c| {
            c.fetch_add(1, Ordering::Relaxed);
            c.clone()
        });
        Node {
            seq,
            name,
            backward: Mutex::new(Some(backward)),
            edges,
            live,
        }
    }

    /// True once backward consumed this node (or pruned it).
    pub(crate) fn is_consumed(&self) -> bool {
        lock(&self.backward).is_none()
    }

    /// Takes the backward out (consuming the node).
    pub(crate) fn take_backward(&self) -> Option<Box<dyn Backward>> {
        lock(&self.backward).take()
    }
}

/// Moves each node edge of `edges` whose last reference this was onto `stack`.
fn unlink(edges: &mut SmallVec<[Option<Edge>; 3]>, stack: &mut Vec<Node>) {
    for e in edges.drain(..).flatten() {
        if let EdgeTarget::Node(n) = e.target {
            if let Some(node) = Arc::into_inner(n) {
                stack.push(node);
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
        // Iterative teardown: each input node this one held the last reference
        // to is moved onto the stack with its edges drained first, so its own
        // drop finds no edges and the depth stays 1 however long the chain.
        let mut stack: Vec<Node> = Vec::new();
        unlink(&mut self.edges, &mut stack);
        while let Some(mut node) = stack.pop() {
            unlink(&mut node.edges, &mut stack);
            drop(node);
        }
    }
}

/// True when an op over `inputs` must record a node.
#[inline]
pub(crate) fn should_record(inputs: &[&Tensor]) -> bool {
    is_grad_enabled() && inputs.iter().any(|t| t.requires_grad())
}

fn edge_for(t: &Tensor) -> Option<Edge> {
    if !t.requires_grad() {
        return None;
    }
    let target = match t.0.grad_fn() {
        Some(n) => EdgeTarget::Node(n),
        None => EdgeTarget::Leaf(t.0.clone()),
    };
    Some(Edge {
        target,
        shape: smallvec::SmallVec::from_slice(t.shape()),
    })
}

/// Wraps an op result: records a node built by `make` (called only when
/// recording, so inference pays nothing) and lets the innermost exec scope
/// adopt the result.
pub(crate) fn record<F>(
    ctx: &ExecContext,
    name: &'static str,
    value: RawTensor,
    inputs: &[&Tensor],
    make: F,
) -> Tensor
where
    F: FnOnce(&RawTensor) -> Box<dyn Backward>,
{
    let t = if should_record(inputs) {
        let backward = make(&value);
        let edges = inputs.iter().map(|t| edge_for(t)).collect();
        let node = Arc::new(Node::new(name, backward, edges));
        Tensor::new_internal(ctx, value, true, Some(node))
    } else {
        Tensor::new_internal(ctx, value, false, None)
    };
    crate::tape::scope::adopt(&t);
    t
}
