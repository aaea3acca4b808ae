//! The create_graph engine: gradients that can be differentiated again, the
//! ops that refuse it by name, leaf gradients with history, and what stays
//! exactly as it was without it.

mod common;

use std::sync::Arc;

use common::fn_op;
use fucina_autograd::ops::attention::AttentionOpts;
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{
    checkpoint, custom_function, custom_op, grad, grad_with, gradgradcheck, higher_order,
    CustomFunction, Error, GradOpts, GradcheckOpts, Result, Tensor,
};

fn first(v: Vec<Option<Tensor>>) -> Tensor {
    v.into_iter().next().flatten().expect("a gradient")
}

#[test]
fn the_gradient_of_a_gradient_is_the_second_derivative() {
    let tc = TestCtx::new().unwrap();
    let x = Tensor::variable(tc.ctx(), &[0.4f64, -1.3], &[2]).unwrap();
    // y = Σ x³ sin x: y'' = 6x sin x + 6x² cos x − x³ sin x.
    let y = x
        .pow_scalar(3.0)
        .unwrap()
        .mul(&x.sin().unwrap())
        .unwrap()
        .sum_all()
        .unwrap();
    let g = first(grad_with(&y, &[&x], &GradOpts::create_graph()).unwrap());
    assert!(g.requires_grad());
    let h = first(grad_with(&g.sum_all().unwrap(), &[&x], &GradOpts::default()).unwrap());
    for (xv, hv) in [0.4f64, -1.3].iter().zip(h.to_vec::<f64>().unwrap()) {
        let want = 6.0 * xv * xv.sin() + 6.0 * xv * xv * xv.cos() - xv.powi(3) * xv.sin();
        assert!((hv - want).abs() < 1e-12, "{hv} vs {want}");
    }
    drop((g, h, y, x));
    tc.check().unwrap();
}

#[test]
fn without_create_graph_grad_with_is_grad_bit_for_bit() {
    let tc = TestCtx::new().unwrap();
    let x = Tensor::randn(tc.ctx(), fucina_core::DType::F32, &[4, 5], 3)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let w = Tensor::randn(tc.ctx(), fucina_core::DType::F32, &[5, 3], 4)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let make = || {
        x.matmul(&w)
            .unwrap()
            .gelu_erf()
            .unwrap()
            .softmax(-1)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    let a = grad(&make(), &[&x, &w], None).unwrap();
    let b = grad_with(&make(), &[&x, &w], &GradOpts::default()).unwrap();
    for (a, b) in a.iter().zip(&b) {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        assert!(!b.requires_grad());
    }
    drop((a, b, x, w));
    tc.check().unwrap();
}

#[test]
fn a_create_graph_walk_consumes_nothing() {
    let tc = TestCtx::new().unwrap();
    let x = Tensor::variable(tc.ctx(), &[0.5f64, 2.0], &[2]).unwrap();
    let loss = x.tanh().unwrap().mul(&x).unwrap().sum_all().unwrap();
    let g = first(grad_with(&loss, &[&x], &GradOpts::create_graph()).unwrap());
    // A gradient penalty on top of the loss: one backward through both.
    let total = loss.add(&g.square().unwrap().sum_all().unwrap()).unwrap();
    total.backward().unwrap();
    assert_eq!(x.grad().unwrap().shape(), &[2]);
    drop((g, total, loss));
    x.zero_grad();
    drop(x);
    tc.check().unwrap();
}

#[test]
fn backward_with_create_graph_leaves_a_gradient_with_history() {
    let tc = TestCtx::new().unwrap();
    let x = Tensor::variable(tc.ctx(), &[1.5f64], &[1]).unwrap();
    let y = x.pow_scalar(4.0).unwrap().sum_all().unwrap(); // y' = 4x³, y'' = 12x²
    y.backward_opts(&GradOpts::create_graph()).unwrap();
    let g = x.grad().unwrap();
    assert!(g.requires_grad());
    assert_eq!(g.to_vec::<f64>().unwrap(), vec![4.0 * 1.5f64.powi(3)]);
    let h = first(grad_with(&g.sum_all().unwrap(), &[&x], &GradOpts::default()).unwrap());
    assert!((h.item().unwrap() - 12.0 * 1.5 * 1.5).abs() < 1e-12);
    // A plain backward after it replaces the recorded gradient (its value changed).
    drop((g, h));
    let y2 = x.mul_scalar(2.0).unwrap().sum_all().unwrap();
    y2.backward().unwrap();
    assert!(!x.grad().unwrap().requires_grad());
    assert!((x.grad().unwrap().item().unwrap() - (4.0 * 1.5f64.powi(3) + 2.0)).abs() < 1e-12);
    // As in PyTorch, the recorded gradient referred back to x: zero_grad frees it.
    x.zero_grad();
    drop((y, y2, x));
    tc.check().unwrap();
}

#[test]
fn gradients_with_respect_to_non_leaves() {
    let tc = TestCtx::new().unwrap();
    let x = Tensor::variable(tc.ctx(), &[0.3f64, 0.9], &[2]).unwrap();
    let h = x.exp().unwrap();
    let y = h.square().unwrap().sum_all().unwrap(); // dy/dh = 2h
    let gh = first(grad_with(&y, &[&h], &GradOpts::default()).unwrap());
    let want: Vec<f64> = [0.3f64, 0.9].iter().map(|v| 2.0 * v.exp()).collect();
    assert_eq!(gh.to_vec::<f64>().unwrap(), want);
    drop((gh, y, h, x));
    tc.check().unwrap();
}

#[test]
fn ops_without_a_differentiable_backward_refuse_by_name() {
    let tc = TestCtx::new().unwrap();
    let ctx = tc.ctx();
    let x = Tensor::variable(ctx, &[0.3f64, -0.2], &[2]).unwrap();
    let cg = GradOpts::create_graph();
    use fucina_core::kernels::elementwise::UnaryOp::Square;
    let raw_square = fn_op(
        "raw_square",
        |ctx, x| Ok(ctx.unary(x[0], Square)?),
        |ctx, x, _y, gy, _needs| Ok(vec![Some(ctx.unary_backward(x[0], gy, Square)?)]),
    );
    let y1 = custom_op(raw_square, &[&x]).unwrap().sum_all().unwrap();
    assert!(matches!(
        grad_with(&y1, &[&x], &cg),
        Err(Error::NoDoubleBackward { op: "raw_square" })
    ));
    // The plain backward through it still works.
    assert!(grad_with(&y1, &[&x], &GradOpts::default()).unwrap()[0].is_some());

    let q = Tensor::randn(ctx, fucina_core::DType::F64, &[1, 1, 3, 4], 1)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let o =
        Tensor::scaled_dot_product_attention(&q, &q, &q, None, AttentionOpts::default()).unwrap();
    let e = grad_with(&o.sum_all().unwrap(), &[&q], &cg).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NoDoubleBackward {
                op: "scaled_dot_product_attention"
            }
        ),
        "{e}"
    );

    let y2 = x.gelu_erf().unwrap().sum_all().unwrap();
    let e = grad_with(&y2, &[&x], &cg).unwrap_err();
    assert!(
        matches!(e, Error::ForwardNotHigherOrder { op: "gelu_erf" }),
        "{e}"
    );
    assert!(e.to_string().contains("higher_order()"));
    let y3 = {
        let _h = higher_order();
        x.gelu_erf().unwrap().sum_all().unwrap()
    };
    assert!(grad_with(&y3, &[&x], &cg).is_ok());

    let block: fucina_autograd::Block = Arc::new(|xs: &[Tensor]| xs[0].tanh());
    let y = checkpoint(block, &[&x]).unwrap().sum_all().unwrap();
    assert!(matches!(
        grad_with(&y, &[&x], &cg),
        Err(Error::NoDoubleBackward { op: "checkpoint" })
    ));
    drop((y1, y2, y3, y, o, q, x));
    tc.check().unwrap();
}

/// y = x·tanh(x) with a backward whose derivative is computed from a detached
/// x: right to first order, wrong to second.
struct DetachedDerivative;
impl CustomFunction for DetachedDerivative {
    fn name(&self) -> &'static str {
        "detached_derivative"
    }
    fn forward(&self, x: &[Tensor]) -> Result<Tensor> {
        x[0].mul(&x[0].tanh()?)
    }
    fn backward(
        &self,
        x: &[Tensor],
        _y: &Tensor,
        gy: &Tensor,
        _n: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let x = x[0].detach()?;
        let t = x.tanh()?;
        let d = t.add(&x.mul(&t.square()?.rsub_scalar(1.0)?)?)?;
        Ok(vec![Some(gy.mul(&d)?)])
    }
}

#[test]
fn gradgradcheck_catches_a_backward_that_is_only_first_order() {
    let tc = TestCtx::new().unwrap();
    let x = Tensor::variable(tc.ctx(), &[0.3f64, -1.2, 0.8], &[3]).unwrap();
    let op: Arc<dyn CustomFunction> = Arc::new(DetachedDerivative);
    let f = |xs: &[Tensor]| custom_function(op.clone(), &[&xs[0]]);
    fucina_autograd::gradcheck(f, std::slice::from_ref(&x), &GradcheckOpts::f64()).unwrap();
    assert!(matches!(
        gradgradcheck(f, std::slice::from_ref(&x), &GradcheckOpts::f64()),
        Err(Error::GradcheckFailed { .. })
    ));
    drop(x);
    tc.check().unwrap();
}
