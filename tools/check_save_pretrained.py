#!/usr/bin/env python3
"""save_pretrained → transformers: writes fucina-nn/tests/goldens/save_pretrained.json.

Runs the ignored Rust test `write_saved_models` (fucina-nn/tests/decoder.rs), which
saves a fresh tiny llama, qwen3 and gpt2 (seed 11) with `CausalLm::save_pretrained`,
then loads each directory with `transformers.AutoModelForCausalLM.from_pretrained`
and records its logits on fixed ids. The Rust test `saved_models_load_in_transformers`
checks fucina's own logits against them (1e-6), so CI needs no Python.

Run (needs cargo, torch, transformers; CI never runs it):
    python3 tools/check_save_pretrained.py
"""
import json
import os
import pathlib
import subprocess
import tempfile

import torch
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fucina-nn" / "tests" / "goldens" / "save_pretrained.json"
IDS = [[1, 4, 2], [9, 0, 3]]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FUCINA_SAVE_DIR=tmp)
        subprocess.run(
            ["cargo", "test", "--release", "-q", "-p", "fucina-nn", "--test", "decoder",
             "write_saved_models", "--", "--ignored", "--exact"],
            cwd=ROOT, env=env, check=True)
        out = {}
        for family in ("llama", "qwen3", "gpt2"):
            model = AutoModelForCausalLM.from_pretrained(os.path.join(tmp, family)).eval()
            with torch.no_grad():
                logits = model(torch.tensor(IDS)).logits
            out[family] = {"class": type(model).__name__,
                           "logits": [float(x) for x in logits.flatten()]}
            print(family, type(model).__name__, tuple(logits.shape))
    OUT.write_text(json.dumps(out) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
