//! Gradchecks every differentiable op of fucina's suite in f64 (PyTorch's
//! tolerances) and prints a table: op, elements checked, worst absolute and
//! relative error. Ends with `N passed, 0 failed`.
//!
//! Run: `cargo run --release --example gradcheck_all`

use fucina_autograd::suite::{cases, make_inputs};
use fucina_autograd::{gradcheck, GradcheckOpts};
use fucina_core::{DType, ExecContext};

fn main() {
    let ctx = match ExecContext::with_threads(1) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot create a context: {e}");
            std::process::exit(1);
        }
    };
    let opts = GradcheckOpts::f64();
    println!(
        "{:<32} {:>8} {:>14} {:>14}",
        "op", "checked", "max abs err", "max rel err"
    );
    let (mut passed, mut failed) = (0, 0);
    for case in cases() {
        let result = make_inputs(&ctx, &case, DType::F64, 42)
            .and_then(|inputs| gradcheck(case.f, &inputs, &opts));
        match result {
            Ok(r) => {
                passed += 1;
                println!(
                    "{:<32} {:>8} {:>14.3e} {:>14.3e}",
                    case.name, r.checked, r.max_abs_err, r.max_rel_err
                );
            }
            Err(e) => {
                failed += 1;
                println!("{:<32} FAILED: {e}", case.name);
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
