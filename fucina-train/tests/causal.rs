//! Causal-LM data: prompt masking, packing with labels travelling with
//! their tokens, the JSONL formats (errors name the line), the collate.

use fucina_train::causal::{collate_causal, pack, read_records, CausalExample, Record};
use fucina_train::collate::IGNORE_INDEX;

fn tmp(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fucina-causal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn prompt_tokens_are_masked_and_completion_tokens_learnt() {
    let ex = CausalExample::prompt_completion(&[7, 8, 9], &[10, 11]);
    assert_eq!(ex.input_ids, [7, 8, 9, 10, 11]);
    assert_eq!(
        ex.labels,
        [IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 10, 11]
    );
    assert_eq!(ex.learnt(), 2);
    let t = CausalExample::text(vec![1, 2, 3]);
    assert_eq!(t.labels, t.input_ids);
    let mut long = CausalExample::prompt_completion(&[1, 2], &[3, 4, 5]);
    long.truncate(3);
    assert_eq!(
        (long.input_ids.as_slice(), long.labels.as_slice()),
        (&[1, 2, 3][..], &[-100, -100, 3][..])
    );
}

#[test]
fn packing_cuts_exact_blocks_and_keeps_each_label_with_its_token() {
    let exs = vec![
        CausalExample::prompt_completion(&[1, 2], &[3]),
        CausalExample::prompt_completion(&[4], &[5, 6]),
        CausalExample::text(vec![7, 8, 9, 10]),
    ];
    // Stream: 1 2 3 | 0 4 5 6 | 0 7 8 9 10 (13 tokens) -> 3 blocks of 4, tail 1 dropped.
    let blocks = pack(exs.clone(), 4, Some(0)).unwrap();
    assert_eq!(blocks.len(), 3);
    let ids: Vec<i64> = blocks.iter().flat_map(|b| b.input_ids.clone()).collect();
    let labels: Vec<i64> = blocks.iter().flat_map(|b| b.labels.clone()).collect();
    assert_eq!(ids, [1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 10]);
    assert_eq!(labels, [-100, -100, 3, 0, -100, 5, 6, 0, 7, 8, 9, 10]);
    assert!(blocks.iter().all(|b| b.len() == 4));
    // No separator: plain concatenation.
    let blocks = pack(exs.clone(), 5, None).unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].input_ids, [1, 2, 3, 4, 5]);
    // Bad input: each a clear error.
    let e = pack(exs.clone(), 0, None).unwrap_err().to_string();
    assert!(e.contains("block must be positive"), "{e}");
    let e = pack(exs, 100, None).unwrap_err().to_string();
    assert!(e.contains("fewer than one block of 100"), "{e}");
    let bad = CausalExample {
        input_ids: vec![1, 2],
        labels: vec![1],
    };
    let e = pack(vec![bad], 1, None).unwrap_err().to_string();
    assert!(e.contains("example 0 has 2 tokens but 1 labels"), "{e}");
}

#[test]
fn jsonl_records_in_both_forms_and_errors_naming_the_line() {
    let p = tmp(
        "pc.jsonl",
        "{\"prompt\": \"Q: a\", \"completion\": \" b\"}\n\n{\"prompt\": \"Q: c\", \"completion\": \" d\"}\n",
    );
    assert_eq!(
        read_records(&p).unwrap(),
        [
            Record::PromptCompletion {
                prompt: "Q: a".into(),
                completion: " b".into()
            },
            Record::PromptCompletion {
                prompt: "Q: c".into(),
                completion: " d".into()
            },
        ]
    );
    let p = tmp("text.jsonl", "{\"text\": \"one\"}\n{\"text\": \"two\"}\n");
    assert_eq!(
        read_records(&p).unwrap(),
        [Record::Text("one".into()), Record::Text("two".into())]
    );
    // A line without the expected field names the file and the line.
    let p = tmp(
        "missing.jsonl",
        "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"c\"}\n",
    );
    let e = read_records(&p).unwrap_err().to_string();
    assert!(
        e.contains("missing.jsonl") && e.contains("line 2: field `completion` is missing"),
        "{e}"
    );
    let p = tmp(
        "mixed.jsonl",
        "{\"text\": \"a\"}\n{\"prompt\": \"c\", \"completion\": \"d\"}\n",
    );
    let e = read_records(&p).unwrap_err().to_string();
    assert!(e.contains("line 2: field `text` is missing"), "{e}");
    let p = tmp("notstr.jsonl", "{\"text\": 5}\n");
    let e = read_records(&p).unwrap_err().to_string();
    assert!(e.contains("line 1: field `text` is not a string"), "{e}");
    let p = tmp("empty.jsonl", "\n\n");
    let e = read_records(&p).unwrap_err().to_string();
    assert!(e.contains("no rows"), "{e}");
    std::fs::remove_dir_all(p.parent().unwrap()).ok();
}

#[test]
fn collate_pads_ids_labels_and_mask() {
    let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
    {
        let b = collate_causal(
            &ctx,
            &[
                CausalExample::prompt_completion(&[1], &[2, 3]),
                CausalExample::text(vec![4]),
            ],
            9,
        )
        .unwrap();
        assert_eq!(b.input_ids.shape(), &[2, 3]);
        assert_eq!(b.input_ids.to_vec::<i64>().unwrap(), [1, 2, 3, 4, 9, 9]);
        assert_eq!(
            b.labels.to_vec::<i64>().unwrap(),
            [-100, 2, 3, 4, -100, -100]
        );
        assert_eq!(b.attention_mask.to_vec::<u8>().unwrap(), [1, 1, 1, 1, 0, 0]);
        let bad = CausalExample {
            input_ids: vec![1],
            labels: vec![],
        };
        assert!(collate_causal(&ctx, &[bad], 0).is_err());
        assert!(collate_causal(&ctx, &[], 0).is_err());
    }
    assert_eq!(ctx.stats().outstanding, 0);
}
