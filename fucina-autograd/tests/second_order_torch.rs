//! Second derivatives against PyTorch: `functional::hvp` per op family, an
//! MLP's loss Hessian-vector product, a Jacobian and a Hessian, each within
//! 1e-10 (f64, relative to the largest reference magnitude) of
//! `torch.autograd.functional` in `tests/goldens/second_order.safetensors`
//! (written by `tools/gen_second_order_goldens.py`).

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{functional, CrossEntropyOpts, Result, Tensor};
use fucina_core::ExecContext;
use safetensors::{Dtype, SafeTensors};

const GOLDENS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/goldens/second_order.safetensors"
);

fn load(ctx: &ExecContext, st: &SafeTensors, key: &str) -> Option<Tensor> {
    let v = st.tensor(key).ok()?;
    let shape = v.shape().to_vec();
    let b = v.data();
    Some(match v.dtype() {
        Dtype::F64 => {
            Tensor::constant(ctx, &bytemuck::pod_collect_to_vec::<u8, f64>(b), &shape).unwrap()
        }
        Dtype::I64 => {
            Tensor::constant(ctx, &bytemuck::pod_collect_to_vec::<u8, i64>(b), &shape).unwrap()
        }
        d => panic!("{key}: unexpected dtype {d:?}"),
    })
}

/// max |a − b| / max(1e-300, max |b|).
fn rel_err(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
    g.iter()
        .zip(&w)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs() / scale))
}

struct Consts {
    ids: Tensor,
    targets: Tensor,
    rope: [Tensor; 3],
}

/// The fucina side of each family of the generator (same names).
fn family(name: &str, x: &[Tensor], k: &Consts) -> Result<Tensor> {
    Ok(match name {
        "tanh" => x[0].tanh()?,
        "sigmoid" => x[0].sigmoid()?,
        "exp" => x[0].exp()?,
        "log" => x[0].log()?,
        "log1p" => x[0].log1p()?,
        "sqrt" => x[0].sqrt()?,
        "rsqrt" => x[0].rsqrt()?,
        "recip" => x[0].recip()?,
        "sin" => x[0].sin()?,
        "cos" => x[0].cos()?,
        "gelu_tanh" => x[0].gelu()?,
        "gelu_erf" => x[0].gelu_erf()?,
        "silu" => x[0].silu()?,
        "softplus" => x[0].softplus()?,
        "mish" => x[0].mish()?,
        "elu" => x[0].elu(1.0)?,
        "logsigmoid" => x[0].logsigmoid()?,
        "square" => x[0].square()?,
        "pow_scalar" => x[0].pow_scalar(2.5)?,
        "rdiv_scalar" => x[0].rdiv_scalar(2.0)?,
        "mul" => x[0].mul(&x[1])?,
        "div" => x[0].div(&x[1])?,
        "pow" => x[0].pow(&x[1])?,
        "mul_broadcast" => x[0].mul(&x[1])?.tanh()?,
        "logsumexp" => x[0].logsumexp(-1, false)?,
        "norm" => x[0].norm(&[-1], false)?,
        "var" => x[0].var(&[-1], 1, false)?,
        "max" => x[0].tanh()?.max(-1, false)?.square()?,
        "cumsum" => x[0].cumsum(-1)?.tanh()?,
        "matmul" => x[0].matmul(&x[1])?.tanh()?,
        "linear" => x[0].linear(&x[1], Some(&x[2]))?.tanh()?,
        "softmax" => x[0].softmax(-1)?,
        "log_softmax" => x[0].log_softmax(-1)?,
        "layer_norm" => x[0].layer_norm(Some(&x[1]), Some(&x[2]), 1e-5)?,
        "rms_norm" => x[0].rms_norm(Some(&x[1]), 1e-6)?,
        "cross_entropy" => x[0].cross_entropy(
            &k.targets,
            CrossEntropyOpts {
                label_smoothing: 0.1,
                ..Default::default()
            },
        )?,
        "embedding" => x[0].embedding(&k.ids)?.tanh()?,
        "transpose_concat" => Tensor::concat(&[&x[0], &x[1]], 1)?
            .t()?
            .mul_scalar(0.7)?
            .tanh()?,
        "rope" => x[0].rope(&k.rope[0], &k.rope[1], &k.rope[2])?.tanh()?,
        other => panic!("no fucina side for family {other}"),
    })
}

const FAMILIES: &[&str] = &[
    "tanh",
    "sigmoid",
    "exp",
    "log",
    "log1p",
    "sqrt",
    "rsqrt",
    "recip",
    "sin",
    "cos",
    "gelu_tanh",
    "gelu_erf",
    "silu",
    "softplus",
    "mish",
    "elu",
    "logsigmoid",
    "square",
    "pow_scalar",
    "rdiv_scalar",
    "mul",
    "div",
    "pow",
    "mul_broadcast",
    "logsumexp",
    "norm",
    "var",
    "max",
    "cumsum",
    "matmul",
    "linear",
    "softmax",
    "log_softmax",
    "layer_norm",
    "rms_norm",
    "cross_entropy",
    "embedding",
    "transpose_concat",
    "rope",
];

fn goldens() -> Vec<u8> {
    std::fs::read(GOLDENS)
        .expect("tests/goldens/second_order.safetensors (run tools/gen_second_order_goldens.py)")
}

/// Runs `f` on the goldens with a fresh context, then checks the context (no
/// buffer outstanding, no graph node alive) once `f`'s tensors are dropped.
fn with_goldens(f: impl FnOnce(&ExecContext, &SafeTensors)) {
    let bytes = goldens();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let tc = TestCtx::new().unwrap();
    f(tc.ctx(), &st);
    tc.check().unwrap();
}

#[test]
fn hvp_of_every_op_family_matches_torch() {
    with_goldens(|ctx, st| {
        let k = Consts {
            ids: load(ctx, st, "const/ids").unwrap(),
            targets: load(ctx, st, "const/targets").unwrap(),
            rope: [
                load(ctx, st, "const/rope_cos").unwrap(),
                load(ctx, st, "const/rope_sin").unwrap(),
                load(ctx, st, "const/rope_pos").unwrap(),
            ],
        };
        let mut failures = Vec::new();
        for name in FAMILIES {
            let key = |s: &str| format!("hvp/{name}/{s}");
            let n = (0..)
                .take_while(|i| st.tensor(&key(&format!("in{i}"))).is_ok())
                .count();
            assert!(n > 0, "{name}: no golden");
            let ins: Vec<Tensor> = (0..n)
                .map(|i| load(ctx, st, &key(&format!("in{i}"))).unwrap())
                .collect();
            let vs: Vec<Tensor> = (0..n)
                .map(|i| load(ctx, st, &key(&format!("v{i}"))).unwrap())
                .collect();
            let c = load(ctx, st, &key("c")).unwrap();
            let (_, hv) =
                functional::hvp(|x| family(name, x, &k)?.mul(&c)?.sum_all(), &ins, &vs).unwrap();
            for (i, h) in hv.iter().enumerate() {
                let want = load(ctx, st, &key(&format!("hvp{i}"))).unwrap();
                let e = rel_err(h, &want);
                if e > 1e-10 {
                    failures.push(format!("{name} input {i}: rel err {e:e}"));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}

#[test]
fn mlp_hvp_matches_torch() {
    with_goldens(|ctx, st| {
        let x = load(ctx, st, "mlp/x").unwrap();
        let y = load(ctx, st, "mlp/y").unwrap();
        let ps: Vec<Tensor> = (0..4)
            .map(|i| load(ctx, st, &format!("mlp/p{i}")).unwrap())
            .collect();
        let vs: Vec<Tensor> = (0..4)
            .map(|i| load(ctx, st, &format!("mlp/v{i}")).unwrap())
            .collect();
        let loss = |p: &[Tensor]| {
            let h = x.linear(&p[0], Some(&p[1]))?.tanh()?;
            h.linear(&p[2], Some(&p[3]))?.sub(&y)?.square()?.mean_all()
        };
        let (_, hv) = functional::hvp(loss, &ps, &vs).unwrap();
        let (_, vh) = functional::vhp(loss, &ps, &vs).unwrap();
        for i in 0..4 {
            let want = load(ctx, st, &format!("mlp/hvp{i}")).unwrap();
            assert!(
                rel_err(&hv[i], &want) <= 1e-10,
                "hvp param {i}: {:e}",
                rel_err(&hv[i], &want)
            );
            // The Hessian is symmetric: vᵀH = (Hv)ᵀ.
            assert!(
                rel_err(&vh[i], &want) <= 1e-10,
                "vhp param {i}: {:e}",
                rel_err(&vh[i], &want)
            );
        }
    });
}

#[test]
fn jacobian_and_hessian_match_torch() {
    with_goldens(|ctx, st| {
        let x = load(ctx, st, "jac/x").unwrap();
        let j = functional::jacobian(|x| x[0].tanh()?.mul(&x[0].sum_all()?), &[x]).unwrap();
        let want_j = load(ctx, st, "jac/out").unwrap();
        assert!(
            rel_err(&j[0], &want_j) <= 1e-10,
            "jacobian: {:e}",
            rel_err(&j[0], &want_j)
        );
        let x = load(ctx, st, "hess/x").unwrap();
        let h = functional::hessian(
            |x| {
                x[0].sin()?
                    .mul(&x[0].square()?)?
                    .sum_all()?
                    .add(&x[0].sum_all()?.square()?)
            },
            &[x],
        )
        .unwrap();
        let want = load(ctx, st, "hess/out").unwrap();
        assert!(
            rel_err(&h[0], &want) <= 1e-10,
            "hessian: {:e}",
            rel_err(&h[0], &want)
        );
    });
}
