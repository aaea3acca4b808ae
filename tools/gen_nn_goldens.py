#!/usr/bin/env python3
"""Writes fucina-nn/tests/goldens/gpt.safetensors: a 2-layer CharGPT's weights,
inputs, logits, loss and every parameter's gradient, computed by PyTorch.

The model is `CharGPT` of the reference workloads (reference/torch_workloads.py
of the project's shared reference), copied verbatim in tools/torch_chargpt.py, here at a tiny size:
nanoGPT layout (wte, wpe, blocks.N.{ln1, qkv, proj, ln2, fc, fc_proj}, ln_f),
pre-LN, GELU(tanh), explicit causal softmax attention, tied head, N(0, 0.02)
init with zero biases. After init every bias and LayerNorm parameter gets
small noise, so that each parameter changes the output and a mix-up of two
of them cannot pass.

For each dtype D in {f32, f64} the file holds
    D/param/NAME   the weights, under the state-dict names fucina-nn uses
    D/grad/NAME    d loss / d NAME
    D/logits       [B, T, vocab]
    D/loss         [] mean cross-entropy of logits against tgt
and, shared, `idx` and `tgt` (int64 [B, T]) and `config` ([vocab, block,
n_layer, n_head, d] as int64). The Rust test `fucina-nn/tests/gpt_golden.rs`
loads the weights by name into `fucina_nn::Gpt` and compares (f32 within
1e-5, f64 within 1e-10, relative to each tensor's largest magnitude).

It also writes fucina-nn/tests/goldens/block.safetensors: PyTorch's
`nn.TransformerEncoderLayer` (batch_first, dropout 0, training mode so the
fused fast path is off) with exact GELU, post-LN (`post/`) and pre-LN
(`pre/`), bidirectional attention with a key-padding mask, as
    K/param/NAME  weights under fucina's `TransformerBlock` names (qkv =
                  self_attn.in_proj, proj = out_proj, fc = linear1,
                  fc_proj = linear2, ln1 = norm1, ln2 = norm2)
    K/x, K/gy     input [B, T, D] and upstream gradient
    K/y           output; K/grad/x and K/grad/NAME the gradients of <y, gy>
and `lengths` (int64 [B]: real tokens per row; the rest is padding), for
f64 only (compared within 1e-10 by `fucina-nn/tests/block_golden.rs`).

Regenerate (needs torch, safetensors, numpy; CI never runs this):
    python3 -m venv .venv && .venv/bin/pip install torch safetensors numpy
    PYTHON=.venv/bin/python; ${PYTHON:-python3} tools/gen_nn_goldens.py
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

VOCAB, BLOCK, N_LAYER, N_HEAD, D = 65, 8, 2, 2, 16
B, T = 2, 8


from torch_chargpt import CharGPT  # tools/ is on sys.path when run as a script


def main():
    torch.manual_seed(0)
    model = CharGPT(VOCAB, BLOCK, N_LAYER, N_HEAD, D).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.add_(0.02 * torch.randn_like(p))
            elif ".ln" in name or name.startswith("ln_f"):
                p.add_(0.1 * torch.randn_like(p))
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (B, T), generator=g)
    tgt = torch.randint(0, VOCAB, (B, T), generator=g)
    out = {
        "idx": idx.contiguous(),
        "tgt": tgt.contiguous(),
        "config": torch.tensor([VOCAB, BLOCK, N_LAYER, N_HEAD, D], dtype=torch.int64),
    }
    for tag, dtype in (("f64", torch.float64), ("f32", torch.float32)):
        m = CharGPT(VOCAB, BLOCK, N_LAYER, N_HEAD, D).to(dtype)
        m.load_state_dict({k: v.to(dtype) for k, v in model.state_dict().items()})
        logits = m(idx)
        loss = F.cross_entropy(logits.view(-1, VOCAB), tgt.view(-1))
        loss.backward()
        for name, p in m.named_parameters():
            out[f"{tag}/param/{name}"] = p.detach().contiguous()
            out[f"{tag}/grad/{name}"] = p.grad.contiguous()
        out[f"{tag}/logits"] = logits.detach().contiguous()
        out[f"{tag}/loss"] = loss.detach().reshape(())
    path = os.path.join(os.path.dirname(__file__), "..", "fucina-nn", "tests", "goldens", "gpt.safetensors")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_file(out, path)
    print(f"wrote {os.path.normpath(path)}: {len(out)} tensors")


BLOCK_NAMES = {
    "self_attn.in_proj_weight": "qkv.weight",
    "self_attn.in_proj_bias": "qkv.bias",
    "self_attn.out_proj.weight": "proj.weight",
    "self_attn.out_proj.bias": "proj.bias",
    "linear1.weight": "fc.weight",
    "linear1.bias": "fc.bias",
    "linear2.weight": "fc_proj.weight",
    "linear2.bias": "fc_proj.bias",
    "norm1.weight": "ln1.weight",
    "norm1.bias": "ln1.bias",
    "norm2.weight": "ln2.weight",
    "norm2.bias": "ln2.bias",
}


def blocks():
    torch.manual_seed(2)
    d, h, ff, b, t = 8, 2, 16, 2, 5
    lengths = torch.tensor([5, 3], dtype=torch.int64)
    pad = torch.arange(t)[None, :] >= lengths[:, None]  # True = padding (ignored key)
    out = {"lengths": lengths}
    for key, norm_first in (("post", False), ("pre", True)):
        layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=norm_first).double()
        layer.train()
        with torch.no_grad():
            for p in layer.parameters():
                p.add_(0.1 * torch.randn_like(p))
        x = torch.randn(b, t, d, dtype=torch.float64, requires_grad=True)
        gy = torch.randn(b, t, d, dtype=torch.float64)
        y = layer(x, src_key_padding_mask=pad)
        (y * gy).sum().backward()
        for name, p in layer.named_parameters():
            out[f"{key}/param/{BLOCK_NAMES[name]}"] = p.detach().contiguous()
            out[f"{key}/grad/{BLOCK_NAMES[name]}"] = p.grad.contiguous()
        out[f"{key}/x"] = x.detach().contiguous()
        out[f"{key}/gy"] = gy
        out[f"{key}/y"] = y.detach().contiguous()
        out[f"{key}/grad/x"] = x.grad.contiguous()
    path = os.path.join(os.path.dirname(__file__), "..", "fucina-nn", "tests", "goldens", "block.safetensors")
    save_file(out, path)
    print(f"wrote {os.path.normpath(path)}: {len(out)} tensors")


if __name__ == "__main__":
    blocks()
    main()
