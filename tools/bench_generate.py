#!/usr/bin/env python3
"""Greedy generation speed, fucina against transformers (issue 28), side by side.

Builds a random-init Llama checkpoint with the `llama` training workload's shape (vocab
8192, hidden 384, 6 layers, 6 query / 2 key-value heads, SwiGLU 1024, tied embeddings;
seed 0, no eos so both run the full length) in DIR, then alternates ROUNDS times:
fucina's `generate` example (`--greedy`, batch 1) and transformers' `generate` with its
KV cache (`do_sample=False`, batch 1), the same prompt of PROMPT random ids and NEW new
tokens, THREADS threads on both sides. tokens/s on both sides = new tokens / the
`generate` call's wall time (prefill included; model loading excluded). Prints each
round, the medians and their ratio, and whether the greedy tokens agree.

    python3 tools/bench_generate.py [--rounds 5] [--threads 2] [--prompt 32] [--new 128]
                                    [--dir /tmp/fucina-bench-llama]

Needs torch and transformers; builds the example with cargo first.
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--prompt", type=int, default=32)
ap.add_argument("--new", type=int, default=128)
ap.add_argument("--dir", default="/tmp/fucina-bench-llama")
args = ap.parse_args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
torch.set_num_threads(args.threads)
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=8192, hidden_size=384, num_hidden_layers=6,
                  num_attention_heads=6, num_key_value_heads=2, intermediate_size=1024,
                  rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                  max_position_embeddings=1024, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None)
model = LlamaForCausalLM(cfg).eval()
model.save_pretrained(args.dir, safe_serialization=True)
GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=0).save_pretrained(args.dir)
prompt = torch.randint(0, cfg.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1))
ids = ",".join(str(i) for i in prompt[0].tolist())
subprocess.run(["cargo", "build", "--release", "-q", "-p", "fucina-examples", "--example", "generate"],
               cwd=root, check=True)
exe = os.path.join(root, "target", "release", "examples", "generate")


def fucina():
    out = subprocess.run([exe, "--model", args.dir, "--prompt-ids", ids, "--greedy",
                          "--max-new-tokens", str(args.new), "--threads", str(args.threads)],
                         check=True, capture_output=True, text=True).stdout
    row = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    return row["tokens_per_s"], row["generated_ids"]


def transformers_side():
    with torch.no_grad():
        t = time.perf_counter()
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=args.new, min_new_tokens=args.new, use_cache=True,
                             pad_token_id=0)
        secs = time.perf_counter() - t
    new = out[0, args.prompt:].tolist()
    return len(new) / secs, new


transformers_side()  # warm-up (first-call allocations, lazy init)
f_tps, t_tps, agree = [], [], []
for r in range(args.rounds):
    a, fa = fucina()
    b, tb = transformers_side()
    f_tps.append(a)
    t_tps.append(b)
    agree.append(fa == tb)
    print(f"round {r + 1}: fucina {a:.1f} tok/s, transformers {b:.1f} tok/s, ratio {a / b:.2f}x, "
          f"same tokens: {fa == tb}")
fm, tm = statistics.median(f_tps), statistics.median(t_tps)
print(f"medians: fucina {fm:.1f} tok/s, transformers {tm:.1f} tok/s (torch {torch.__version__}), "
      f"fucina/transformers {fm / tm:.2f}x; greedy tokens equal in {sum(agree)}/{len(agree)} rounds")
