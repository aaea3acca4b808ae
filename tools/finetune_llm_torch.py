#!/usr/bin/env python3
"""The PyTorch + peft twin of `cargo run --example finetune_llm`: the same
LoRA training run in transformers and peft, from the same model, the same
initial adapter and the same batches (exchanged as files), with the same
AdamW, warmup + cosine schedule and gradient clipping.

A *run directory* is what both sides read:
  adapter_init/          the adapter at step 0 (PEFT format)
  batches.safetensors    input_ids, labels, attention_mask: [steps, B, T] int64
  run.json               {"lr", "warmup", "total", "min_lr_frac",
                          "weight_decay", "grad_clip", "betas", "eps",
                          "losses": fucina's losses (replay only)}

Two commands:

  golden   writes a run directory from a tiny random-init fixture (random
           batches with prompt-masked and padded rows, a fresh peft adapter),
           trains 20 steps in torch and adds the losses as torch.json. The
           result is committed (examples/tests/goldens/finetune_llm/) and
           `examples/tests/finetune_llm_twin.rs` replays it in fucina:
           losses within 1e-3 relative.
  replay   trains on a run directory that `finetune_llm --export-twin DIR`
           wrote, prints torch's losses beside fucina's and the largest
           relative difference.

Set up:   pip install torch transformers peft safetensors
Run:      python3 tools/finetune_llm_torch.py golden
          python3 tools/finetune_llm_torch.py replay --model DIR --run DIR
"""

import argparse
import json
import math
import pathlib

import torch
from safetensors.torch import load_file, save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fucina-nn/tests/fixtures/hf/llama"
GOLDEN = ROOT / "examples/tests/goldens/finetune_llm"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def factor(step: int, warmup: int, total: int, min_factor: float) -> float:
    """fucina_optim::Schedule::WarmupCosine at the 0-based step index."""
    if step < warmup:
        return (step + 1) / warmup
    t = min((step - warmup) / max(total - warmup, 1), 1.0)
    return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * t))


def train(model_dir: pathlib.Path, run: pathlib.Path) -> tuple[list[float], list[float]]:
    """torch's losses and pre-clip gradient norms over the run's batches."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = json.loads((run / "run.json").read_text())
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, run / "adapter_init", is_trainable=True)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    # fucina's decay groups: decay on matrices, none on vectors.
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg["weight_decay"]},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(
        [g for g in groups if g["params"]],
        lr=cfg["lr"],
        betas=tuple(cfg["betas"]),
        eps=cfg["eps"],
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: factor(s, cfg["warmup"], cfg["total"], cfg["min_lr_frac"])
    )
    b = load_file(run / "batches.safetensors")
    losses, norms = [], []
    for s in range(b["input_ids"].shape[0]):
        out = model(
            input_ids=b["input_ids"][s],
            attention_mask=b["attention_mask"][s],
            labels=b["labels"][s],
        )
        out.loss.backward()
        clip = cfg["grad_clip"]
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(out.loss.item())
        norms.append(norm.item())
    return losses, norms


def golden(args) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(FIXTURE, dtype=torch.float32)
    vocab = base.config.vocab_size
    steps, batch, t = 20, 4, 24
    # Learnable rows (arithmetic runs of token ids from a random start and
    # stride); per row a masked prompt prefix and right padding.
    g = torch.Generator().manual_seed(1)
    start = torch.randint(0, vocab, (steps, batch, 1), generator=g)
    stride = torch.randint(1, 4, (steps, batch, 1), generator=g)
    ids = (start + stride * torch.arange(t)) % (vocab - 1) + 1
    mask = torch.ones(steps, batch, t, dtype=torch.int64)
    labels = ids.clone()
    for s in range(steps):
        for r in range(batch):
            prompt = int(torch.randint(0, 8, (1,), generator=g))
            length = int(torch.randint(t - 8, t + 1, (1,), generator=g))
            labels[s, r, :prompt] = -100
            labels[s, r, length:] = -100
            mask[s, r, length:] = 0
            ids[s, r, length:] = 0
    save_file(
        {"input_ids": ids, "labels": labels, "attention_mask": mask},
        str(out / "batches.safetensors"),
    )
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0)
    model = get_peft_model(base, lora)
    # A non-zero B, so the first step already depends on the adapters.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.02)
    model.save_pretrained(out / "adapter_init")
    (out / "adapter_init" / "README.md").unlink(missing_ok=True)
    # Reproducible bytes: peft writes the targets in set order and the
    # fixture's absolute path.
    ac = out / "adapter_init" / "adapter_config.json"
    c = json.loads(ac.read_text())
    c["target_modules"] = sorted(c["target_modules"])
    c["base_model_name_or_path"] = str(FIXTURE.relative_to(ROOT))
    ac.write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
    cfg = {
        "lr": 3e-3, "warmup": 3, "total": steps, "min_lr_frac": 0.1,
        "weight_decay": 0.01, "grad_clip": 0.5, "betas": [0.9, 0.999], "eps": 1e-8,
    }
    (out / "run.json").write_text(json.dumps(cfg, indent=1) + "\n")
    losses, norms = train(FIXTURE, out)
    clipped = sum(n > cfg["grad_clip"] for n in norms)
    (out / "torch.json").write_text(
        json.dumps({"losses": losses, "grad_norms": norms}, indent=1) + "\n"
    )
    print(f"{out}: {steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
          f"{clipped} of {steps} steps clipped")


def replay(args) -> None:
    cfg = json.loads((args.run / "run.json").read_text())
    losses, _ = train(args.model, args.run)
    ours = cfg.get("losses", [])
    worst = 0.0
    for i, l in enumerate(losses):
        f = ours[i] if i < len(ours) else float("nan")
        rel = abs(f - l) / abs(l)
        worst = max(worst, rel)
        print(f"step {i + 1:>4}: torch {l:.6f}  fucina {f:.6f}  rel {rel:.2e}")
    print(f"largest relative difference: {worst:.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("golden", help="write the committed golden run")
    g.add_argument("--out", type=pathlib.Path, default=GOLDEN)
    r = sub.add_parser("replay", help="train on a run directory finetune_llm exported")
    r.add_argument("--model", type=pathlib.Path, required=True)
    r.add_argument("--run", type=pathlib.Path, required=True)
    args = ap.parse_args()
    {"golden": golden, "replay": replay}[args.cmd](args)


if __name__ == "__main__":
    main()
