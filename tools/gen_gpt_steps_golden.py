#!/usr/bin/env python3
"""Writes the golden of the gpt workload's training run: 20 AdamW steps of
PyTorch's `CharGPT` from committed weights, compared by
`benches/tests/gpt_steps.rs` against fucina's `gpt` workload (fucina-nn's
`Gpt` + fucina-optim's AdamW) from the same weights.

The model, the optimizer and the step are those of the `gpt` workload of
reference/torch_workloads.py (the project's shared reference; `Block` and
`CharGPT` are copied verbatim in tools/torch_chargpt.py): nanoGPT layout, pre-LN, GELU(tanh),
explicit causal softmax attention, tied head, N(0, 0.02) init with zero
biases; AdamW(lr 3e-4, weight decay 0.1, PyTorch's other defaults) over
every parameter; one step = zero_grad(set_to_none) + forward + cross-entropy
+ backward + step. Only the size is reduced, to keep the golden small:
vocab 65, block 32, 2 layers, 2 heads, width 32, batch 4, sequence 32.

Files (under benches/tests/goldens/):
    gpt_steps_weights.safetensors  the initial weights (f32), under the
                                   state-dict names both sides use (wte,
                                   wpe, blocks.N.{ln1,qkv,proj,ln2,fc,
                                   fc_proj}, ln_f): the Rust test loads it
                                   strictly with fucina-nn's load_state_dict
    gpt_steps.safetensors          idx, tgt (int64 [B, T]);
                                   losses (f64 [20]): the loss of each step,
                                   computed before that step's update;
                                   final_loss (f64 [1]): the loss after the
                                   20th update (no grad);
                                   config (int64: vocab, block, n_layer,
                                   n_head, d, batch, seq, steps);
                                   hyper (f64: lr, weight_decay)

Torch runs on one thread, so the golden does not depend on the machine's
core count.

Regenerate (needs torch, safetensors, numpy; CI never runs this):
    python3 -m venv .venv && .venv/bin/pip install torch safetensors numpy
    PYTHON=.venv/bin/python; ${PYTHON:-python3} tools/gen_gpt_steps_golden.py
"""
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

VOCAB, BLOCK, N_LAYER, N_HEAD, D = 65, 32, 2, 2, 32
B, T = 4, 32
STEPS = 20
LR, WD = 3e-4, 0.1


from torch_chargpt import CharGPT  # tools/ is on sys.path when run as a script


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = CharGPT(VOCAB, BLOCK, N_LAYER, N_HEAD, D)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, VOCAB, (B, T), generator=g)
    tgt = torch.randint(0, VOCAB, (B, T), generator=g)
    weights = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)

    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, VOCAB), tgt.view(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        final = F.cross_entropy(model(idx).view(-1, VOCAB), tgt.view(-1)).item()

    here = os.path.join(os.path.dirname(__file__), "..", "benches", "tests", "goldens")
    os.makedirs(here, exist_ok=True)
    wpath = os.path.join(here, "gpt_steps_weights.safetensors")
    save_file(weights, wpath)
    data = {
        "idx": idx.contiguous(),
        "tgt": tgt.contiguous(),
        "losses": torch.tensor(losses, dtype=torch.float64),
        "final_loss": torch.tensor([final], dtype=torch.float64),
        "config": torch.tensor([VOCAB, BLOCK, N_LAYER, N_HEAD, D, B, T, STEPS], dtype=torch.int64),
        "hyper": torch.tensor([LR, WD], dtype=torch.float64),
    }
    dpath = os.path.join(here, "gpt_steps.safetensors")
    save_file(data, dpath)
    print(f"wrote {os.path.normpath(wpath)} ({len(weights)} tensors) and {os.path.normpath(dpath)}")
    print("losses:", " ".join(f"{x:.6f}" for x in losses), f"final {final:.6f}")


if __name__ == "__main__":
    main()
