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
//! A node's payload is an `Op`: a formula ([`Backward`]) or, for
//! activation checkpointing, a `Recompute` that the engine re-runs and whose
//! recorded subgraph it walks in place (`tape/engine.rs`). While a checkpoint
//! runs its block under no-grad, `discover_captured` notes every tensor
//! requiring a gradient that an op reads, so the checkpoint node gets an edge
//! to each tensor the block captures as well as to its inputs.
//!
//! Nodes are `Send + Sync` (a [`Backward`] must be), so tensors can cross
//! threads. Dropping the last reference to any graph never recurses, whatever
//! a node's payload holds: a node dropped while another node drop is running
//! on the thread leaves its edges and payload on a thread-local queue, which
//! the outermost drop drains.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use fucina_core::{ExecContext, RawTensor};
use smallvec::SmallVec;

use crate::error::Result;
use crate::grad_mode::{is_grad_enabled, no_grad_depth};
use crate::tape::scope::ExecScope;
use crate::tape::tensor::{lock, Tensor, TensorInner};

/// Input gradients returned by a backward, one slot per input.
pub type Grads = SmallVec<[Option<RawTensor>; 3]>;

/// Input gradients as differentiable tensors (a backward run with
/// `create_graph`), one slot per input.
pub type TensorGrads = SmallVec<[Option<Tensor>; 3]>;

/// Takes input `i`'s gradient out of the `grads` node `op`'s backward
/// returned (either form); none for an input with an edge is
/// [`crate::Error::MissingGradient`].
pub(crate) fn take_grad<G>(grads: &mut [Option<G>], op: &'static str, i: usize) -> Result<G> {
    grads
        .get_mut(i)
        .and_then(|g| g.take())
        .ok_or(crate::Error::MissingGradient { op, input: i })
}

/// The one backward trait: given the upstream gradient and a `needs` mask
/// (one flag per input: [`Backward::backward`]'s parameter,
/// [`SavedTensors::needs`] in [`Backward::backward_graph`]), return the input gradients. A gradient may have the
/// broadcast output shape; the engine reduces it to the input's shape.
/// Return `None` for inputs whose flag is false. `Send + Sync` because the
/// node travels with its tensors between threads.
///
/// A node has no name of its own: the op names it once, when it is recorded
/// (`record`'s `name`, kept on the node for errors and debugging).
pub trait Backward: Send + Sync {
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
    /// The same input gradients built from differentiable [`Tensor`] ops, so
    /// that they are recorded and can be differentiated again (a backward with
    /// `create_graph`). `saved` turns the values this node saved back into
    /// tensors carrying their history ([`SavedTensors::input`], [`SavedTensors::output`])
    /// and says which inputs want a gradient ([`SavedTensors::needs`], PyTorch's
    /// `ctx.needs_input_grad`); `gy` carries its own history. The default is
    /// [`crate::Error::NoDoubleBackward`] naming the op: never a silently first-order result.
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let _ = gy;
        Err(crate::error::Error::NoDoubleBackward {
            op: saved.op_name(),
        })
    }
}

/// What a node saved, turned back into tensors for [`Backward::backward_graph`]
/// (PyTorch's `SavedVariable` unpacking): a saved input value becomes a tensor
/// whose history is that input's (its producer node, or the leaf itself), so a
/// gradient built from it flows on to the input's own inputs; the saved output
/// becomes a tensor whose history is this node. It also carries the node's
/// `needs` mask (PyTorch's `ctx.needs_input_grad`): one flag per input, true
/// where the input wants a gradient; return `None` for the others.
pub struct SavedTensors<'a> {
    pub(crate) node: &'a Arc<Node>,
    pub(crate) ctx: &'a ExecContext,
    pub(crate) needs: &'a [bool],
}

impl SavedTensors<'_> {
    /// The context the backward runs in.
    pub fn ctx(&self) -> &ExecContext {
        self.ctx
    }

    /// The name the node's op was recorded under (`record`'s `name`: the one
    /// place a node is named).
    pub fn op_name(&self) -> &'static str {
        self.node.name
    }

    /// Whether input `i` wants a gradient. Panics when `i` is not an input index.
    pub fn needs(&self, i: usize) -> bool {
        self.needs[i]
    }

    /// The whole mask: one flag per input, true where the input wants a gradient.
    pub fn needs_input_grad(&self) -> &[bool] {
        self.needs
    }

    /// Input `i`'s saved `value` as a tensor with the input's history: the
    /// leaf itself for a leaf, a tensor over `value` whose node is the
    /// input's producer otherwise, a constant when the input needs no gradient.
    pub fn input(&self, i: usize, value: &RawTensor) -> Tensor {
        match self.node.edges.get(i).and_then(|e| e.as_ref()) {
            Some(Edge {
                target: EdgeTarget::Leaf(l),
                ..
            }) => Tensor(l.clone()),
            Some(Edge {
                target: EdgeTarget::Node(p),
                ..
            }) => Tensor::new_internal(self.ctx, value.clone(), true, Some(p.clone())),
            None => Tensor::new_internal(self.ctx, value.clone(), false, None),
        }
    }

    /// The op's saved output `value` (of the output's shape) as a tensor whose
    /// node is this one.
    pub fn output(&self, value: &RawTensor) -> Tensor {
        Tensor::new_internal(self.ctx, value.clone(), true, Some(self.node.clone()))
    }

    /// A constant (no history) over `value`: a mask, an index, a saved
    /// derivative of a piecewise-linear op.
    pub fn constant(&self, value: &RawTensor) -> Tensor {
        Tensor::new_internal(self.ctx, value.clone(), false, None)
    }
}

/// A node that re-runs a block in backward instead of applying a formula
/// (activation checkpointing). The engine calls [`Recompute::recompute`], then
/// walks the subgraph it recorded as part of the same backward: gradients that
/// reach a fresh input leaf go to the node's matching edge, gradients that
/// reach a tensor from outside the block (one the block captured: an edge of
/// the node too) go straight to it. Every tensor thus receives its
/// contributions one by one in the order the plain run's walk would add
/// them, so the gradients are bitwise the plain run's.
pub(crate) trait Recompute: Send + Sync {
    /// Re-runs the block with recording on, over fresh leaves holding the saved
    /// input values (leaf `i` requires a gradient iff `needs[i]`). `needs` has
    /// one flag per block input: the node's first edges, in order.
    fn recompute(&self, ctx: &ExecContext, needs: &[bool]) -> Result<Recomputed>;
}

/// What a [`Recompute`] ran: the fresh input leaves and the block's output,
/// with the scope that owns the recomputed intermediates (closed, releasing
/// them, when this drops).
pub(crate) struct Recomputed {
    /// The fresh leaves, one per block input.
    pub(crate) inputs: Vec<Tensor>,
    /// The block's output.
    pub(crate) output: Tensor,
    /// Declared last, so it closes after the handles above drop.
    pub(crate) _scope: ExecScope,
}

/// What a node runs in backward.
pub(crate) enum Op {
    /// A formula: input gradients from the output gradient.
    Formula(Box<dyn Backward>),
    /// A checkpoint: the block is recomputed and its subgraph walked in place.
    Recompute(Box<dyn Recompute>),
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
    pub(crate) op: Mutex<Option<Op>>,
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
    fn new(name: &'static str, op: Op, edges: SmallVec<[Option<Edge>; 3]>) -> Node {
        let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
        let live = LIVE_NODES.with(|c| {
            c.fetch_add(1, Ordering::Relaxed);
            c.clone()
        });
        Node {
            seq,
            name,
            op: Mutex::new(Some(op)),
            edges,
            live,
        }
    }

    /// True once backward consumed this node (or pruned it).
    pub(crate) fn is_consumed(&self) -> bool {
        lock(&self.op).is_none()
    }

    /// Takes the backward out (consuming the node).
    pub(crate) fn take_op(&self) -> Option<Op> {
        lock(&self.op).take()
    }
}

/// The sequence number the next node recorded will get at the earliest: every
/// node recorded on this thread after this call has a number at least this.
pub(crate) fn next_seq() -> u64 {
    NEXT_SEQ.load(Ordering::Relaxed)
}

/// What a dropped node still owns: its edges and its payload (whose saved
/// tensors may own further nodes: a custom op or a checkpoint block holding a
/// tensor of the graph).
type Remains = (SmallVec<[Option<Edge>; 3]>, Option<Op>);

thread_local! {
    /// True while a node drop on this thread is draining [`DEFERRED`].
    static DROPPING: Cell<bool> = const { Cell::new(false) };
    /// What nested node drops left to the outermost one.
    static DEFERRED: RefCell<Vec<Remains>> = const { RefCell::new(Vec::new()) };
}

/// Clears [`DROPPING`] when the outermost drop ends, even by a panic.
struct Draining;
impl Drop for Draining {
    fn drop(&mut self) {
        let _ = DROPPING.try_with(|d| d.set(false));
    }
}

impl Drop for Node {
    /// Iterative teardown whatever a node holds: the outermost node drop on a
    /// thread frees its edges and payload; a node dropped meanwhile (the last
    /// reference went with an edge, or with a tensor a payload held) moves its
    /// own edges and payload onto a thread-local queue and returns, and the
    /// outermost drop frees those next. The depth stays constant however long
    /// or however linked the graph. (If the thread-locals are already gone,
    /// at thread exit, the node frees what it holds in place.)
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
        let op = self
            .op
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let remains: Remains = (std::mem::take(&mut self.edges), op);
        let Ok(outermost) = DROPPING.try_with(|d| !d.replace(true)) else {
            drop(remains);
            return;
        };
        if !outermost {
            // Were the queue gone, the unrun closure would free `remains` here.
            let _ = DEFERRED.try_with(|q| q.borrow_mut().push(remains));
            return;
        }
        let _draining = Draining;
        let mut next = Some(remains);
        while let Some(r) = next
            .take()
            .or_else(|| DEFERRED.try_with(|q| q.borrow_mut().pop()).ok().flatten())
        {
            drop(r); // nested node drops push onto DEFERRED
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

/// A formula node, boxed as its op builds it, is an [`Op::Formula`].
impl<B: Backward + 'static> From<Box<B>> for Op {
    fn from(b: Box<B>) -> Op {
        Op::Formula(b)
    }
}

/// A formula node already behind `dyn Backward` is an [`Op::Formula`].
impl From<Box<dyn Backward>> for Op {
    fn from(b: Box<dyn Backward>) -> Op {
        Op::Formula(b)
    }
}

/// Wraps an op result: records a node built by `make` (called only when
/// recording, so inference pays nothing) and lets the innermost exec scope
/// adopt the result. `make` returns the node's [`Op`] or anything that
/// becomes one: a boxed [`Backward`] formula (every op), an
/// [`Op::Recompute`] (a checkpoint).
pub(crate) fn record<O: Into<Op>>(
    ctx: &ExecContext,
    name: &'static str,
    value: RawTensor,
    inputs: &[&Tensor],
    make: impl FnOnce(&RawTensor) -> O,
) -> Tensor {
    let t = if should_record(inputs) {
        let op = make(&value).into();
        let edges = inputs.iter().map(|t| edge_for(t)).collect();
        let node = Arc::new(Node::new(name, op, edges));
        Tensor::new_internal(ctx, value, true, Some(node))
    } else {
        if !is_grad_enabled() {
            note_captured(inputs);
        }
        Tensor::new_internal(ctx, value, false, None)
    };
    crate::tape::scope::adopt(&t);
    t
}

/// One [`discover_captured`] region: the no-grad depth it runs at and the
/// tensors requiring a gradient found so far (first use first).
struct CaptureFrame {
    depth: usize,
    seen: HashSet<*const TensorInner>,
    found: Vec<Tensor>,
}

thread_local! {
    static CAPTURE: RefCell<Vec<CaptureFrame>> = const { RefCell::new(Vec::new()) };
}

/// Notes the inputs of an unrecorded op that require a gradient in the
/// innermost discovery region, if the op runs at that region's no-grad depth
/// (a `no_grad` the block opens itself hides its ops, as in the plain run).
fn note_captured(inputs: &[&Tensor]) {
    let _ = CAPTURE.try_with(|c| {
        let mut c = c.borrow_mut();
        let Some(top) = c.last_mut() else { return };
        if top.depth != no_grad_depth() {
            return;
        }
        for t in inputs {
            if t.requires_grad() && top.seen.insert(Arc::as_ptr(&t.0)) {
                top.found.push((*t).clone());
            }
        }
    });
}

/// Runs `f` (which must run under no-grad, as a checkpoint's forward does) and
/// returns, with its result, every tensor requiring a gradient that an op
/// inside `f` read at this no-grad depth, in order of first use. Inside `f`
/// nothing requires a gradient except tensors made outside it, so these are
/// the tensors `f` captured. Regions nest: an inner checkpoint's own record
/// (its inputs and captures) is an op of the outer region.
pub(crate) fn discover_captured<R>(f: impl FnOnce() -> R) -> (R, Vec<Tensor>) {
    CAPTURE.with(|c| {
        c.borrow_mut().push(CaptureFrame {
            depth: no_grad_depth(),
            seen: HashSet::new(),
            found: Vec::new(),
        })
    });
    /// Pops the frame if `f` unwinds (the normal path pops it below).
    struct PopOnUnwind;
    impl Drop for PopOnUnwind {
        fn drop(&mut self) {
            let _ = CAPTURE.try_with(|c| c.borrow_mut().pop());
        }
    }
    let guard = PopOnUnwind;
    let r = f();
    std::mem::forget(guard);
    let found = CAPTURE
        .with(|c| c.borrow_mut().pop())
        .map(|frame| frame.found)
        .unwrap_or_default();
    (r, found)
}
