//! The end-to-end benchmark: same CLI and JSON keys as `reference/torch_workloads.py`.
fn main() {
    eprintln!("fucina-bench: no workloads yet");
    std::process::exit(2);
}
