#!/usr/bin/env python3
"""Writes fucina-nn/tests/goldens/rope.json: transformers' own rotary tables and
rotation for fucina-nn's `Rope` (fucina-nn/src/rope.rs) to be compared with
(fucina-nn/tests/rope.rs).

For head_dim 16, rope_theta 10000 and each rope_scaling type fucina supports
(default; linear, factor 2; llama3, factor 8, low/high freq factors 1/4,
original_max_position_embeddings 64, so that two of the eight frequencies
fall in llama3's smooth band), the file holds, under "cases"[type]:
    rope_scaling   the config field as given to LlamaConfig (null for default)
    inv_freq       transformers' inv_freq (float32: LlamaRotaryEmbedding's
                   compute_default_rope_parameters, or ROPE_INIT_FUNCTIONS[type])
    cos, sin       [64, 8]: the float32 tables LlamaRotaryEmbedding produces for
                   positions 0..64, first half only (the script checks that HF's
                   full-width table is cat(half, half))
    q_embed, k_embed  apply_rotary_pos_emb(q, k, cos, sin) for the fixed q, k
                   ([B, H, T, D] = [2, 2, 5, 16], HF's layout) at `positions`
and at the top level q, k and positions ([2, 5], not an arange). Everything
is float32, written as exact decimal doubles.

Regenerate (needs torch and transformers; CI never runs this):
    ${PYTHON:-python3} tools/gen_rope_goldens.py
"""
import json
import os

import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

HEAD_DIM = 16
THETA = 10000.0
MAX_POS = 64
SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 2.0},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
}
POSITIONS = [[0, 0, 1, 2, 3], [10, 11, 12, 13, 63]]


def config(scaling):
    kw = {} if scaling is None else {"rope_scaling": dict(scaling)}
    return LlamaConfig(
        head_dim=HEAD_DIM,
        hidden_size=64,
        num_attention_heads=4,
        rope_theta=THETA,
        max_position_embeddings=128,
        **kw,
    )


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def main():
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 2, 5, HEAD_DIM, generator=g, dtype=torch.float32)
    k = torch.randn(2, 2, 5, HEAD_DIM, generator=g, dtype=torch.float32)
    positions = torch.tensor(POSITIONS, dtype=torch.int64)
    cases = {}
    for name, scaling in SCALINGS.items():
        cfg = config(scaling)
        if name == "default":
            inv_freq, scale = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
        else:
            inv_freq, scale = ROPE_INIT_FUNCTIONS[name](cfg, None)
        assert scale == 1.0 and inv_freq.dtype == torch.float32
        emb = LlamaRotaryEmbedding(cfg)
        assert emb.rope_type == name, (emb.rope_type, name)
        assert torch.equal(emb.inv_freq, inv_freq)
        x = torch.zeros(1, dtype=torch.float32)
        cos, sin = emb(x, torch.arange(MAX_POS)[None, :])
        cos, sin = cos[0], sin[0]
        half = HEAD_DIM // 2
        assert torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:])
        pc, ps = emb(x, positions)
        q_embed, k_embed = apply_rotary_pos_emb(q, k, pc, ps)
        cases[name] = {
            "rope_scaling": scaling,
            "inv_freq": flat(inv_freq),
            "cos": flat(cos[:, :half]),
            "sin": flat(sin[:, :half]),
            "q_embed": flat(q_embed),
            "k_embed": flat(k_embed),
        }
    out = {
        "generator": "tools/gen_rope_goldens.py",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "head_dim": HEAD_DIM,
        "theta": THETA,
        "max_positions": MAX_POS,
        "qk_shape": list(q.shape),
        "q": flat(q),
        "k": flat(k),
        "positions": POSITIONS,
        "cases": cases,
    }
    path = os.path.join(os.path.dirname(__file__), "..", "fucina-nn", "tests", "goldens", "rope.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
