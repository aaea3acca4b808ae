#!/usr/bin/env python3
"""The PyTorch twin of `cargo run --release --example train_gpt`: the same
character-level GPT, data split, init, optimizer, schedule and evaluation,
so the two validation losses can be compared (the README quotes both).

What matches fucina's run exactly: the vocabulary (sorted distinct
characters), the split (the last round(val_frac * len) characters are
validation), the model (nanoGPT layout: token + learned position embeddings,
pre-LN blocks with fused qkv, GELU(tanh) MLP of width 4d, final LayerNorm,
head tied to the token embedding — `CharGPT` of tools/torch_chargpt.py),
the init (N(0, 0.02) for every linear weight and embedding, zero biases,
LayerNorm ones/zeros), AdamW (betas (0.9, beta2), eps 1e-8, decoupled decay
on every tensor of rank >= 2 and none on biases and norms), the schedule
(linear warmup (k+1)/warmup, then a cosine to min_lr_frac at `steps`), the
global-norm clipping, and the final metric: the mean loss over the whole
validation text in consecutive non-overlapping windows of block_size.
What does not match: the random numbers (init draws and batch offsets come
from torch's generator), so the two runs agree in distribution, not bit
for bit.

Set up:  python3 -m venv .venv && .venv/bin/pip install torch numpy
Run:     PYTHON=.venv/bin/python; ${PYTHON:-python3} tools/train_gpt_torch.py [--threads 2] [same knobs as train_gpt]
"""
import argparse
import math
import pathlib
import time

import torch
import torch.nn.functional as F

from torch_chargpt import Block, CharGPT  # tools/ is on sys.path when run as a script


class SdpaBlock(Block):
    """torch_chargpt's block with the causal attention fused by SDPA."""

    def attend(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def lr_factor(step, warmup, total, min_factor):
    """fucina_optim::Schedule::WarmupCosine::factor(step), step = steps taken."""
    if step < warmup:
        return (step + 1) / warmup
    t = min((step - warmup) / max(total - warmup, 1), 1.0)
    return min_factor + (1 - min_factor) * 0.5 * (1 + math.cos(math.pi * t))


@torch.no_grad()
def evaluate_full(model, val, block, batch):
    model.eval()
    windows = (len(val) - 1) // block
    total, count = 0.0, 0
    for first in range(0, windows, batch):
        rows = min(batch, windows - first)
        starts = torch.arange(first, first + rows) * block
        x = torch.stack([val[s : s + block] for s in starts.tolist()])
        y = torch.stack([val[s + 1 : s + block + 1] for s in starts.tolist()])
        loss = F.cross_entropy(model(x).view(-1, model.wte.weight.shape[0]), y.view(-1))
        total += loss.item() * rows
        count += rows
    model.train()
    return total / max(count, 1)


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description="PyTorch twin of the train_gpt example")
    ap.add_argument("--data", type=pathlib.Path, default=root / "data" / "shakespeare.txt")
    # train_gpt's numeric flags with its defaults (the type is the default's).
    defaults = {
        "--val-frac": 0.1, "--n-layer": 4, "--n-head": 4, "--n-embd": 128,
        "--block-size": 64, "--steps": 800, "--batch-size": 32, "--lr": 3e-3,
        "--min-lr-frac": 0.1, "--warmup": 50, "--weight-decay": 0.1,
        "--beta2": 0.99, "--grad-clip": 1.0, "--seed": 1337,
    }
    for flag, default in defaults.items():
        ap.add_argument(flag, type=type(default), default=default)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--eval-every", type=int, default=100)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    text = args.data.read_text(encoding="utf-8")
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n_val = math.floor(len(ids) * args.val_frac + 0.5)
    train, val = ids[: len(ids) - n_val], ids[len(ids) - n_val :]
    counts = torch.bincount(train, minlength=len(chars)).double()
    p = counts[counts > 0] / len(train)
    unigram = float(-(p * p.log()).sum())
    print(f"{args.data}: {len(ids)} chars, vocab {len(chars)}; train {len(train)}, validation {len(val)}")
    print(f"unigram baseline (entropy of the training characters): {unigram:.4f} nats")

    model = CharGPT(
        len(chars), args.block_size, args.n_layer, args.n_head, args.n_embd, block_cls=SdpaBlock
    )
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=args.lr,
        betas=(0.9, args.beta2),
        eps=1e-8,
    )
    print(f"model: {sum(p.numel() for p in model.parameters())} parameters, {torch.get_num_threads()} threads")

    g = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = args.lr * lr_factor(step, args.warmup, args.steps, args.min_lr_frac)
        starts = torch.randint(0, len(train) - args.block_size, (args.batch_size,), generator=g)
        x = torch.stack([train[s : s + args.block_size] for s in starts.tolist()])
        y = torch.stack([train[s + 1 : s + args.block_size + 1] for s in starts.tolist()])
        loss = F.cross_entropy(model(x).view(-1, len(chars)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        if (step + 1) % args.eval_every == 0:
            print(f"step {step + 1:>5}: train loss {loss.item():.4f} ({time.time() - t0:.0f} s)", flush=True)
    v = evaluate_full(model, val, args.block_size, args.batch_size)
    print(f"{time.time() - t0:.1f} s")
    print(f"final validation loss (all of the held-out text): {v:.4f} nats")


if __name__ == "__main__":
    main()
