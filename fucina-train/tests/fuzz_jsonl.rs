//! The JSONL loader against mutated files: 3,000 mutations (byte flips,
//! insertions, deletions, truncations) of a valid prompt/completion file,
//! each a row set or a clean error naming the file — never a panic; and
//! files that are not regular files are refused.

use fucina_core::rng::SplitMix64;
use fucina_train::{Dataset, JsonlDataset};

const VALID: &str = "{\"prompt\": \"To be\", \"completion\": \" or not\"}\n\n{\"prompt\": \"é\", \"completion\": \"\\u00e9\", \"n\": 3}\n{\"prompt\": \"x\", \"completion\": [1, {\"a\": null}]}\n";

#[test]
fn mutated_jsonl_files_load_or_fail_cleanly() {
    let dir = std::env::temp_dir().join(format!("fucina-fuzz-jsonl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data.jsonl");
    let mut g = SplitMix64::new(17);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..3000 {
        let mut b = VALID.as_bytes().to_vec();
        for _ in 0..1 + g.below(4) {
            let i = g.below(b.len() as u64 + 1) as usize;
            match g.below(4) {
                0 if i < b.len() => b[i] = g.next_u64() as u8,
                1 => {
                    let pick: &[u8] = b"{}[]\",:\n\\\x00\xff";
                    b.insert(i, pick[g.below(pick.len() as u64) as usize]);
                }
                2 if i < b.len() => {
                    b.remove(i);
                }
                _ => b.truncate(i),
            }
        }
        std::fs::write(&path, &b).unwrap();
        let r = std::panic::catch_unwind(|| JsonlDataset::open(&path).map(|d| d.len()));
        match r.expect("the JSONL loader panicked") {
            Ok(n) => {
                assert!(n > 0);
                ok += 1;
            }
            Err(e) => {
                assert!(e.to_string().contains("data.jsonl"), "{e}");
                err += 1;
            }
        }
    }
    assert!(ok > 0 && err > 0, "ok {ok}, err {err}");
    let e = JsonlDataset::open(&dir).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
