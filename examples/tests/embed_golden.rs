//! `embed`'s sentence vectors against sentence-transformers' pipeline
//! replicated in PyTorch (`tools/gen_embed_goldens.py`, golden committed):
//! the same token ids, and normalised embeddings within 1e-4.
//!
//! Needs the real all-MiniLM-L6-v2 (`bash scripts/fetch-minilm.sh`); fails
//! when it is absent, unless `FUCINA_ALLOW_NO_MINILM=1` (then it skips with
//! a line saying so), as fucina-nn's MiniLM tests.

use fucina_core::ExecContext;
use fucina_examples::minilm::{check_model_dir, model_dir, tokenize, SentenceEncoder};

#[test]
fn embeddings_match_sentence_transformers() {
    let dir = model_dir();
    if let Err(e) = check_model_dir(&dir) {
        assert_eq!(
            std::env::var("FUCINA_ALLOW_NO_MINILM").as_deref(),
            Ok("1"),
            "embeddings_match_sentence_transformers did not run: {e} \
             (or set FUCINA_ALLOW_NO_MINILM=1 to skip it)"
        );
        eprintln!("SKIPPED embeddings_match_sentence_transformers: {e}");
        return;
    }
    let golden: serde_json::Value =
        serde_json::from_str(include_str!("goldens/embed.json")).unwrap();
    let texts: Vec<&str> = golden["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let ctx = ExecContext::with_threads(2).unwrap();
    let enc = SentenceEncoder::load(&ctx, &dir).unwrap();

    let batch = tokenize(&enc.tokenizer, &texts).unwrap();
    let ids: Vec<Vec<i64>> = serde_json::from_value(golden["ids"].clone()).unwrap();
    assert_eq!(
        batch.ids,
        ids.concat(),
        "token ids differ from the tokenizers library's"
    );

    let emb = enc.embed(&texts, 8).unwrap();
    let want = golden["embeddings"].as_array().unwrap();
    let mut worst = 0.0f64;
    for (got, want) in emb.iter().zip(want) {
        let want = want.as_array().unwrap();
        assert_eq!(got.len(), 384);
        assert_eq!(want.len(), 384);
        for (g, w) in got.iter().zip(want) {
            worst = worst.max((*g as f64 - w.as_f64().unwrap()).abs());
        }
    }
    eprintln!("max |fucina - torch| = {worst:.3e}");
    assert!(worst < 1e-4, "embeddings differ by {worst:e}");
    drop((enc, batch, emb));
    assert_eq!(ctx.stats().outstanding, 0);
}
