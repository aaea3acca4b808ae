//! The tape: backward nodes and the edges between them.
//!
//! A node is recorded for an op result when grad mode is on and an input
//! requires a gradient. It owns a [`Backward`] impl holding `clone_view`s of
//! exactly what its formula needs (the refcount pins those activations until
//! the node runs or is dropped) and one edge per input: `None` for an input
//! that needs no gradient (pruned), else the producer node or the leaf to
//! accumulate into, with the input's shape (the engine reduces broadcast
//! gradients to it). Nodes carry a creation sequence number: sorting by it is
//! a topological order, so the tape is the recording order itself.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use fucina_core::{ExecContext, RawTensor};
use smallvec::SmallVec;

use crate::error::Result;
use crate::grad_mode::is_grad_enabled;
use crate::tensor::{Tensor, TensorInner};

/// Input gradients returned by a backward, one slot per input.
pub type Grads = SmallVec<[Option<RawTensor>; 3]>;

/// The one backward trait: given the upstream gradient and a `needs` mask
/// (one flag per input), return the input gradients. A gradient may have the
/// broadcast output shape; the engine reduces it to the input's shape.
/// Return `None` for inputs whose flag is false.
pub trait Backward {
    /// The op's name, for errors and debugging.
    fn name(&self) -> &'static str;
    /// Computes the input gradients.
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads>;
}

pub(crate) enum EdgeTarget {
    Leaf(Rc<TensorInner>),
    Node(Rc<Node>),
}

pub(crate) struct Edge {
    pub(crate) target: EdgeTarget,
    pub(crate) shape: fucina_core::shape::Dims,
}

/// A recorded backward node.
pub struct Node {
    pub(crate) seq: u64,
    pub(crate) name: &'static str,
    pub(crate) backward: RefCell<Option<Box<dyn Backward>>>,
    pub(crate) edges: SmallVec<[Option<Edge>; 3]>,
}

thread_local! {
    static NEXT_SEQ: Cell<u64> = const { Cell::new(0) };
    static LIVE_NODES: Cell<usize> = const { Cell::new(0) };
}

/// Number of backward nodes alive on this thread (recorded and not yet dropped).
pub fn live_nodes() -> usize {
    LIVE_NODES.with(|c| c.get())
}

impl Node {
    fn new(
        name: &'static str,
        backward: Box<dyn Backward>,
        edges: SmallVec<[Option<Edge>; 3]>,
    ) -> Node {
        let seq = NEXT_SEQ.with(|c| {
            let s = c.get();
            c.set(s + 1);
            s
        });
        LIVE_NODES.with(|c| c.set(c.get() + 1));
        Node {
            seq,
            name,
            backward: RefCell::new(Some(backward)),
            edges,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        LIVE_NODES.with(|c| c.set(c.get().saturating_sub(1)));
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
    let target = match t.0.grad_fn.borrow().as_ref() {
        Some(n) => EdgeTarget::Node(n.clone()),
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
        let node = Rc::new(Node::new(name, backward, edges));
        Tensor::new_internal(ctx, value, true, Some(node))
    } else {
        Tensor::new_internal(ctx, value, false, None)
    };
    crate::scope::adopt(&t);
    t
}
