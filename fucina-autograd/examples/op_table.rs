//! Prints the op suite (`fucina_autograd::suite::cases`) as JSON on stdout:
//! for each row its name, its inputs (shape and how they are drawn) and,
//! where the project writes it, its torch side: the PyTorch function of a
//! unary- or binary-table row, or the `lambda x: ...` of a fused op's row
//! (`fucina-autograd/src/ops/fused/<op>.rs`). `tools/gen_op_goldens.py` reads
//! this instead of repeating the shapes and domains, and evaluates the fused
//! rows' lambdas; it keeps only the other rows' torch lambdas.
//!
//! Run: `cargo run --release -q -p fucina-autograd --example op_table`

use fucina_autograd::suite::{cases, InputKind};
use serde_json::{json, Value};

fn main() {
    let rows: Vec<Value> = cases()
        .iter()
        .map(|c| {
            let inputs: Vec<Value> = c
                .inputs
                .iter()
                .map(|i| {
                    let kind = match i.kind {
                        InputKind::Float(lo, hi) => json!(["float", lo, hi]),
                        InputKind::NonZero(lo, hi) => json!(["nonzero", lo, hi]),
                        InputKind::Index(n) => json!(["index", n]),
                        InputKind::Mask => json!(["mask"]),
                    };
                    json!({ "shape": i.shape, "kind": kind })
                })
                .collect();
            json!({ "name": c.name, "inputs": inputs, "torch": c.torch })
        })
        .collect();
    match serde_json::to_string_pretty(&json!({ "cases": rows })) {
        Ok(s) => println!("{s}"),
        Err(e) => {
            eprintln!("op_table: cannot serialise the suite: {e}");
            std::process::exit(1);
        }
    }
}
