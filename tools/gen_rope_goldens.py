#!/usr/bin/env python3
"""RoPE goldens from transformers: writes fucina-nn/tests/goldens/rope.json.

For head_dim 16, rope_theta 10000 and 64 positions (chosen so that llama3's
smooth band holds some frequencies: wavelengths 6.3, 19.9, 62.8, ... against
original_max_position_embeddings 32 with low/high factors 1 and 4):
  inv_freq            transformers' rope-init functions (default, linear factor 2,
                      llama3 factor 8), as transformers returns them (float32)
  cos, sin (llama3)   LlamaRotaryEmbedding's float32 tables for positions 0..64
  q, k, rotated       apply_rotary_pos_emb (rotate-half) of fixed q, k [1, 2, 5, 16]
                      at positions [3, 0, 7, 63, 12], float32
The Rust test fucina-nn/tests/rope.rs compares fucina's Rope with them.

Run (needs torch, transformers; CI never runs this):  python3 tools/gen_rope_goldens.py
"""
import json
import pathlib

import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fucina-nn" / "tests" / "goldens" / "rope.json"
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}


def config(scaling):
    return LlamaConfig(hidden_size=32, num_attention_heads=2, head_dim=16, max_position_embeddings=64,
                       rope_theta=10000.0, rope_scaling=scaling)


def main():
    out = {"head_dim": 16, "theta": 10000.0, "max_positions": 64, "llama3": LLAMA3}
    for name, scaling in (("default", None), ("linear", {"rope_type": "linear", "factor": 2.0}),
                          ("llama3", LLAMA3)):
        c = config(scaling)
        kind = "default" if scaling is None else scaling["rope_type"]
        if kind == "default":
            # transformers v5 has no "default" entry in ROPE_INIT_FUNCTIONS; this is
            # LlamaRotaryEmbedding.compute_default_rope_parameters' formula.
            inv = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.int64).float() / 16))
        else:
            inv, _ = ROPE_INIT_FUNCTIONS[kind](c, None)
        out[f"inv_freq_{name}"] = [float(x) for x in inv]
    rot = LlamaRotaryEmbedding(config(LLAMA3))
    pos = torch.arange(64)[None]
    x = torch.zeros(1, 64, 16)
    cos, sin = rot(x, pos)
    out["cos_llama3"] = [float(v) for v in cos[0, :, :8].flatten()]
    out["sin_llama3"] = [float(v) for v in sin[0, :, :8].flatten()]
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 5, 16, generator=g)
    k = torch.randn(1, 2, 5, 16, generator=g)
    positions = torch.tensor([[3, 0, 7, 63, 12]])
    c5, s5 = rot(q.transpose(1, 2).reshape(1, 5, 32), positions)
    qr, kr = apply_rotary_pos_emb(q, k, c5, s5)
    out["positions"] = positions[0].tolist()
    for n, t in (("q", q), ("k", k), ("q_rot", qr), ("k_rot", kr)):
        out[n] = [float(v) for v in t.flatten()]
    OUT.write_text(json.dumps(out) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
