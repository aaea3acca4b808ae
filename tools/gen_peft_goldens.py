#!/usr/bin/env python3
"""Goldens for fucina-nn's LoRA against Hugging Face PEFT.

Builds a tiny random `transformers.BertModel` (its weights and config.json
saved beside the goldens, so the test needs no download), wraps it with
`peft.get_peft_model` (LoRA on `query`, `value` and `intermediate.dense`,
r=4, alpha=8, dropout 0.1), sets every `lora_B` to random non-zero values
(PEFT initialises B to zero, which would make the adapter invisible), saves
the adapter with `save_pretrained` (PEFT's `adapter_model.safetensors` and
`adapter_config.json`), and records the adapted model's last hidden state
(eval mode) for a padded batch. `fucina-nn/tests/lora.rs` loads the adapter
into fucina's BERT and compares.

Setup (any venv):  python3 -m venv .venv && .venv/bin/pip install torch transformers peft safetensors
Run:  ${PYTHON:-python3} tools/gen_peft_goldens.py
Writes fucina-nn/tests/goldens/peft/{base/,adapter/,expected.json}.
"""
import json
import pathlib
import shutil

import torch
from peft import LoraConfig, get_peft_model
from transformers import BertConfig, BertModel

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fucina-nn" / "tests" / "goldens" / "peft"


def main():
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=16,
        type_vocab_size=2,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
    )
    base = BertModel(cfg, add_pooling_layer=False).eval()
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "base").mkdir(parents=True)
    base.save_pretrained(OUT / "base", safe_serialization=True)

    lcfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=["query", "value", "intermediate.dense"])
    model = get_peft_model(base, lcfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    model.eval()
    model.save_pretrained(OUT / "adapter")
    (OUT / "adapter" / "README.md").unlink(missing_ok=True)  # PEFT's model card: not a golden

    ids = [[2, 17, 33, 5, 61, 9, 3], [2, 40, 12, 3, 0, 0, 0]]
    mask = [[1] * 7, [1, 1, 1, 1, 0, 0, 0]]
    with torch.no_grad():
        h = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state
    (OUT / "expected.json").write_text(
        json.dumps({"ids": ids, "mask": mask, "shape": list(h.shape), "last_hidden_state": h.flatten().tolist()})
    )
    # The base model's output too: the adapter must change it.
    print(f"wrote {OUT}: hidden {list(h.shape)}")


if __name__ == "__main__":
    main()
