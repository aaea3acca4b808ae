//! The gradient-ready hook of `Tensor::backward_with_ready_hook`: it fires
//! once per leaf, after the leaf's last contribution, in a deterministic
//! order, with the gradient the leaf ends up holding, and backward's
//! gradients are bitwise those of a plain `backward`.

use std::sync::Arc;

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{checkpoint, Tensor};
use fucina_core::ExecContext;

/// `w1, b1, w2`, an input `x` (no gradient) and `v`, a leaf used twice: by the
/// first op and by the last.
struct Net {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    v: Tensor,
    x: Tensor,
}

impl Net {
    fn new(ctx: &ExecContext) -> Net {
        let var = |d: &[f64], s: &[usize]| Tensor::variable(ctx, d, s).unwrap();
        Net {
            w1: var(&[0.3, -0.2, 0.5, 0.1, -0.4, 0.25], &[2, 3]),
            b1: var(&[0.01, -0.02, 0.03], &[3]),
            w2: var(&[0.7, -0.6, 0.2], &[3, 1]),
            v: var(&[1.5, -0.5], &[2]),
            x: Tensor::constant(ctx, &[1.0f64, 2.0, -1.0, 0.5], &[2, 2]).unwrap(),
        }
    }

    fn leaves(&self) -> [(&'static str, &Tensor); 4] {
        [
            ("w1", &self.w1),
            ("b1", &self.b1),
            ("w2", &self.w2),
            ("v", &self.v),
        ]
    }

    fn name(&self, t: &Tensor) -> &'static str {
        self.leaves()
            .iter()
            .find(|(_, l)| l.same_as(t))
            .map(|(n, _)| *n)
            .expect("the hook fired for a leaf of the net")
    }

    /// `sum(tanh((x·v) @ w1 + b1) @ w2) + sum(v·v)`: `v` is read by the first op
    /// and by the last one.
    fn loss(&self) -> Tensor {
        let h = self.x.mul(&self.v).unwrap();
        let h = h.matmul(&self.w1).unwrap().add(&self.b1).unwrap().tanh();
        let y = h.unwrap().matmul(&self.w2).unwrap().sum_all().unwrap();
        y.add(&self.v.mul(&self.v).unwrap().sum_all().unwrap())
            .unwrap()
    }

    fn grads(&self) -> Vec<Vec<f64>> {
        self.leaves()
            .iter()
            .map(|(_, l)| l.grad().unwrap().to_vec::<f64>().unwrap())
            .collect()
    }
}

/// Runs backward with the hook: (leaf name, the gradient it was given, the
/// leaf's gradient as seen from inside the hook) in firing order.
type Fired = Vec<(&'static str, Vec<f64>, Option<Vec<f64>>)>;

fn backward_recording(net: &Net, loss: &Tensor) -> Fired {
    let mut fired = Vec::new();
    loss.backward_with_ready_hook(&mut |leaf, g| {
        fired.push((
            net.name(leaf),
            g.to_vec::<f64>().unwrap(),
            leaf.grad().map(|t| t.to_vec::<f64>().unwrap()),
        ));
    })
    .unwrap();
    fired
}

#[test]
fn fires_once_per_leaf_after_its_last_contribution_in_graph_order() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let net = Net::new(&ctx);
    let fired = backward_recording(&net, &net.loss());
    let order: Vec<&str> = fired.iter().map(|f| f.0).collect();
    // Newest node first: w2's matmul, then the bias add, then w1's matmul;
    // `v` is also read by the newest ops but its last (oldest) use is the
    // first op, so it fires last, with both contributions summed.
    assert_eq!(order, ["w2", "b1", "w1", "v"]);
    // Each gradient is the one the leaf holds afterwards, bit for bit; during
    // the hook the leaf still shows its old (here: no) gradient.
    let after = net.grads();
    for (name, g, seen) in &fired {
        let k = net.leaves().iter().position(|(n, _)| n == name).unwrap();
        assert_eq!(g, &after[k], "{name}");
        assert_eq!(seen, &None, "{name}: committed before the walk ended");
    }
    // The same graph gives the same order every time.
    let again = Net::new(&ctx);
    let order2: Vec<&str> = backward_recording(&again, &again.loss())
        .iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(order, order2);
}

#[test]
fn gradients_are_bitwise_those_of_a_plain_backward() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let hooked = Net::new(&ctx);
    let plain = Net::new(&ctx);
    // Two steps: the second accumulates onto the first's gradients.
    for step in 0..2 {
        let fired = backward_recording(&hooked, &hooked.loss());
        plain.loss().backward().unwrap();
        assert_eq!(hooked.grads(), plain.grads(), "step {step}");
        if step == 1 {
            // The hook gets this call's contribution; the leaf holds old + it.
            for (name, g, seen) in &fired {
                let k = hooked.leaves().iter().position(|(n, _)| n == name).unwrap();
                let old = seen.as_ref().expect("the first step's gradient");
                let total: Vec<f64> = old.iter().zip(g).map(|(a, b)| a + b).collect();
                assert_eq!(total, hooked.grads()[k], "{name}");
            }
        }
    }
}

#[test]
fn a_leaf_root_and_a_checkpointed_block_fire_once() {
    let ctx = TestCtx::with_threads(1).unwrap();
    // The root itself is a leaf: its gradient is the seed.
    let w = Tensor::variable(&ctx, &[2.0f64], &[1]).unwrap();
    let mut seen = Vec::new();
    w.backward_with_ready_hook(&mut |l, g| {
        assert!(l.same_as(&w));
        seen.push(g.to_vec::<f64>().unwrap());
    })
    .unwrap();
    assert_eq!(seen, vec![vec![1.0]]);

    // A checkpoint node counts as one node: its input and the leaf its block
    // captures fire once each, after its block has been walked, with the plain
    // run's gradients.
    let run = |hooked: bool| {
        let x = Tensor::variable(&ctx, &[0.5f64, 1.0], &[2]).unwrap();
        let c = Tensor::variable(&ctx, &[2.0f64, -1.0], &[2]).unwrap();
        let cc = c.clone();
        let block = Arc::new(move |xs: &[Tensor]| xs[0].mul(&cc)?.tanh()?.mul(&cc));
        let y = checkpoint(block, &[&x]).unwrap();
        let loss = y.mul(&x).unwrap().sum_all().unwrap();
        let mut fired = Vec::new();
        if hooked {
            loss.backward_with_ready_hook(&mut |l, g| {
                let name = if l.same_as(&x) { "x" } else { "c" };
                fired.push((name, g.to_vec::<f64>().unwrap()));
            })
            .unwrap();
        } else {
            loss.backward().unwrap();
        }
        let grads = [&x, &c].map(|t| t.grad().unwrap().to_vec::<f64>().unwrap());
        (fired, grads)
    };
    let (fired, grads) = run(true);
    let (_, plain) = run(false);
    assert_eq!(grads, plain);
    let mut names: Vec<&str> = fired.iter().map(|f| f.0).collect();
    names.sort_unstable();
    assert_eq!(names, ["c", "x"]);
    for (name, g) in &fired {
        assert_eq!(g, &grads[usize::from(*name == "c")], "{name}");
    }
}

#[test]
fn a_constant_input_never_fires_and_the_pool_is_clean() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let net = Net::new(&ctx);
        let fired = backward_recording(&net, &net.loss());
        assert_eq!(fired.len(), 4, "x is a constant: no gradient, no call");
    }
    assert_eq!(ctx.stats().outstanding, 0);
}
