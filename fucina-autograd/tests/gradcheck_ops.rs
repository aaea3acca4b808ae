//! The table-driven gradcheck over every differentiable op (f64, PyTorch's
//! tolerances), the coverage check that every op has a row, the kink
//! conventions at 0, and the no-silent-gradient-cut check.

use std::collections::BTreeSet;

use fucina_autograd::ops::fused::FAMILIES;
use fucina_autograd::suite::{cases, make_inputs, NOT_DIFFERENTIABLE};
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{gradcheck, BinaryOp, GradcheckOpts, Tensor, UnaryOp};
use fucina_core::DType;

#[test]
fn every_differentiable_op_passes_gradcheck_in_f64() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let mut failures = Vec::new();
    for case in cases() {
        let inputs = make_inputs(&ctx, &case, DType::F64, 42).unwrap();
        match gradcheck(case.f, &inputs, &GradcheckOpts::f64()) {
            Ok(r) => assert!(r.checked > 0, "{}: nothing checked", case.name),
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
        drop(inputs);
        assert_eq!(ctx.stats().outstanding, 0, "{} leaked buffers", case.name);
    }
    assert!(
        failures.is_empty(),
        "gradcheck failures:\n{}",
        failures.join("\n")
    );
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `pub fn` in `src/ops/**/*.rs` (the fused ops' files included) must
/// have a row (or be listed as not differentiable).
#[test]
fn every_op_has_a_gradcheck_row() {
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src/ops"));
    let rows: BTreeSet<&str> = cases().iter().map(|c| c.name).collect();
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut missing = Vec::new();
    for path in files {
        let src = std::fs::read_to_string(&path).unwrap();
        for line in src.lines() {
            let line = line.trim_start();
            let Some(rest) = line.strip_prefix("pub fn ") else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // `pub fn $method` is the op tables' generators: every op of
            // a table gets its row from the same table.
            if rest.starts_with('$') {
                continue;
            }
            if !rows.contains(name.as_str()) && !NOT_DIFFERENTIABLE.contains(&name.as_str()) {
                missing.push(format!(
                    "{} ({})",
                    name,
                    path.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    for op in UnaryOp::EXAMPLES {
        if !rows.contains(op.method()) {
            missing.push(format!("{} (unary table)", op.method()));
        }
    }
    for op in BinaryOp::ALL {
        if !rows.contains(op.method()) {
            missing.push(format!("{} (binary table)", op.method()));
        }
    }
    assert!(
        missing.is_empty(),
        "ops without a gradcheck row: {missing:?}"
    );
}

/// Every file of `src/ops/fused/` is a registered family (a file left out of
/// `fused_ops!` would not even be compiled), and every torch side the
/// project writes is a dotted function name or a `lambda x: ...`.
#[test]
fn every_fused_file_is_registered() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/ops/fused");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|s| s != "mod")
        .collect();
    files.sort();
    let mut families: Vec<String> = FAMILIES.iter().map(|s| s.to_string()).collect();
    families.sort();
    assert_eq!(files, families, "ops/fused/*.rs vs the fused_ops! list");
    for case in cases() {
        if let Some(t) = case.torch {
            assert!(
                t.starts_with("lambda x: ") || !t.contains(' '),
                "{}: torch side is neither a dotted name nor `lambda x: ...`: {t}",
                case.name
            );
        }
    }
}

fn grad_at(f: impl Fn(&Tensor) -> fucina_autograd::Result<Tensor>, x: f64) -> f64 {
    let ctx = TestCtx::with_threads(1).unwrap();
    let t = Tensor::variable(&ctx, &[x], &[1]).unwrap();
    f(&t).unwrap().sum_all().unwrap().backward().unwrap();
    // Bound, not a tail expression: its temporary gradient would outlive `ctx`.
    let g = t.grad().unwrap().to_vec::<f64>().unwrap()[0];
    drop(t);
    g
}

#[test]
fn kink_conventions_at_zero() {
    assert_eq!(grad_at(|t| t.relu(), 0.0), 0.0, "relu'(0) = 0");
    assert_eq!(grad_at(|t| t.abs(), 0.0), 0.0, "abs'(0) = 0");
    assert_eq!(
        grad_at(|t| t.leaky_relu(0.1), 0.0),
        0.1,
        "leaky_relu'(0) = slope"
    );
    assert_eq!(
        grad_at(|t| t.clamp(-1.0, 1.0), 1.0),
        1.0,
        "clamp passes at the bound"
    );
    assert_eq!(grad_at(|t| t.clamp(-1.0, 1.0), 1.5), 0.0);
    assert_eq!(grad_at(|t| t.norm(&[], false), 0.0), 0.0, "norm'(0) = 0");
    // maximum/minimum split evenly on ties.
    let ctx = TestCtx::with_threads(1).unwrap();
    let a = Tensor::variable(&ctx, &[2.0f64], &[1]).unwrap();
    let b = Tensor::variable(&ctx, &[2.0f64], &[1]).unwrap();
    a.maximum(&b)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(a.grad().unwrap().to_vec::<f64>().unwrap(), vec![0.5]);
    assert_eq!(b.grad().unwrap().to_vec::<f64>().unwrap(), vec![0.5]);
    // max along an axis sends the gradient to the first maximum only.
    let x = Tensor::variable(&ctx, &[1.0f64, 3.0, 3.0, 0.0], &[4]).unwrap();
    x.max(0, false).unwrap().backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![0.0, 1.0, 0.0, 0.0]
    );
}

/// No silent gradient cut: every op of the suite, given inputs that require a
/// gradient, returns a result that records a backward (or an error).
#[test]
fn no_silent_gradient_cut() {
    let ctx = TestCtx::with_threads(1).unwrap();
    for case in cases() {
        for dtype in [DType::F32, DType::F64] {
            let inputs = make_inputs(&ctx, &case, dtype, 7).unwrap();
            if let Ok(y) = (case.f)(&inputs) {
                assert!(
                    y.requires_grad(),
                    "{} ({dtype}) cut the gradient",
                    case.name
                );
                assert!(
                    y.grad_fn_name().is_some(),
                    "{} ({dtype}) recorded no node",
                    case.name
                );
            }
        }
    }
}
