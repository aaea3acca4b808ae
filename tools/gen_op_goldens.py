#!/usr/bin/env python3
"""Writes fucina-autograd/tests/goldens/ops.safetensors: PyTorch's forward and input gradients
for every row of fucina's op suite (fucina-autograd/src/suite.rs).

The rows (names, input shapes, domains) come from the project itself:
`cargo run --release -q -p fucina-autograd --example op_table` prints them as
JSON, and for the fused ops also their torch side ("torch": "lambda x: ...",
written next to each op in fucina-autograd/src/ops/fused/<op>.rs). This
script holds the rest of the torch side: the TORCH lambdas and the helpers
the project's lambdas call (causal_mask, sdpa, rotate_half, rope_hf).

For each case NAME and dtype D in {f64, f32} the file holds
    D/NAME/in{i}    the inputs (float, int64 indices or uint8 masks)
    D/NAME/out      torch's output
    D/NAME/gy       the upstream gradient used for backward (0 at non-finite outputs)
    D/NAME/grad{i}  torch's gradient for each float input
The Rust test `fucina-autograd/tests/torch_parity.rs` replays every case
and compares (f64 within 1e-10, f32 within 1e-5, relative to the largest
reference magnitude).

Regenerate (needs cargo, torch and safetensors; CI never runs this):
    python3 -m venv .venv && .venv/bin/pip install torch safetensors numpy
    ${PYTHON:-python3} tools/gen_op_goldens.py    # PYTHON=.venv/bin/python
The script fails if a suite row has no lambda or a lambda no row.
"""
import json
import math
import os
import subprocess

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def splitmix_at(seed, i):
    z = (seed + ((i + 1) * GAMMA)) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def dropout_ref(x, p, seed):
    """fucina's counter-based dropout: keep i iff (at(seed,i)>>11) < ceil((1-p)*2^53)."""
    thr = math.ceil((1.0 - p) * 2.0 ** 53)
    flat = [1.0 if (splitmix_at(seed, i) >> 11) < thr else 0.0 for i in range(x.numel())]
    mask = torch.tensor(flat, dtype=x.dtype).reshape(x.shape)
    return x * mask / (1.0 - p)


def causal_mask(t, s):
    i = torch.arange(t)[:, None]
    j = torch.arange(s)[None, :]
    return j > i + (s - t)


def sdpa(q, k, v, bias=None, causal=False, scale=None):
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = q @ k.transpose(-2, -1) * scale
    if bias is not None:
        s = s + bias
    if causal:
        s = s.masked_fill(causal_mask(s.shape[-2], s.shape[-1]), float("-inf"))
    return s.softmax(-1) @ v


def rotate_half(x):
    """Hugging Face's rotate_half: cat(-x2, x1) over the last axis."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_hf(x, positions, theta):
    """HF's rotary embedding x * cos + rotate_half(x) * sin on x [B, T, H, D] at
    positions [B, T], with the default inv_freq = theta^(-2i/D); the angles
    are computed in float64 and the tables rounded to x's dtype (fucina's row
    builds its tables the same way)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    freqs = positions.to(torch.float64)[..., None] * inv
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos().to(x.dtype)[:, :, None, :]
    sin = emb.sin().to(x.dtype)[:, :, None, :]
    return x * cos + rotate_half(x) * sin


# The rows whose torch side the project writes next to the op: the fused
# ops (fucina-autograd/src/ops/fused/<op>.rs), whose op_table rows carry
# "torch": "lambda x: ..." (evaluated here with torch, F, math and the helpers
# above in scope). They are drawn where this key sits in TORCH, in the
# project's registration order.
FUSED_ROWS = "<fused rows: lambdas from the project>"

# The torch side of every other row of the suite, by case name. The order is
# the order inputs are drawn in (one generator per dtype): append new rows at
# the end so that existing goldens keep their values.
TORCH = {
    "add": lambda x: x[0] + x[1],
    "sub": lambda x: x[0] - x[1],
    "mul": lambda x: x[0] * x[1],
    "div": lambda x: x[0] / x[1],
    "pow": lambda x: x[0] ** x[1],
    "maximum": lambda x: torch.maximum(x[0], x[1]),
    "minimum": lambda x: torch.minimum(x[0], x[1]),
    "mul_noncontig": lambda x: x[0].t() * x[1],
    "neg": lambda x: -x[0],
    "abs": lambda x: x[0].abs(),
    "sqrt": lambda x: x[0].sqrt(),
    "rsqrt": lambda x: x[0].rsqrt(),
    "exp": lambda x: x[0].exp(),
    "exp_noncontig": lambda x: x[0].t().exp(),
    "log": lambda x: x[0].log(),
    "log1p": lambda x: x[0].log1p(),
    "sin": lambda x: x[0].sin(),
    "cos": lambda x: x[0].cos(),
    "tanh": lambda x: x[0].tanh(),
    "sigmoid": lambda x: x[0].sigmoid(),
    "relu": lambda x: x[0].relu(),
    "leaky_relu": lambda x: F.leaky_relu(x[0], 0.1),
    "elu": lambda x: F.elu(x[0], 1.0),
    "gelu": lambda x: F.gelu(x[0], approximate="tanh"),
    "gelu_erf": lambda x: F.gelu(x[0]),
    "silu": lambda x: F.silu(x[0]),
    "softplus": lambda x: F.softplus(x[0]),
    "square": lambda x: x[0].square(),
    "recip": lambda x: x[0].reciprocal(),
    "add_scalar": lambda x: x[0] + 0.5,
    "sub_scalar": lambda x: x[0] - 0.5,
    "rsub_scalar": lambda x: 0.5 - x[0],
    "mul_scalar": lambda x: x[0] * -1.5,
    "div_scalar": lambda x: x[0] / 4.0,
    "rdiv_scalar": lambda x: 2.0 / x[0],
    "pow_scalar": lambda x: x[0] ** 2.5,
    "clamp": lambda x: x[0].clamp(-1.0, 1.0),
    "where_cond": lambda x: torch.where(x[0].bool(), x[1], x[2]),
    "masked_fill": lambda x: x[0].masked_fill(x[1].bool(), 2.0),
    "dropout": lambda x: dropout_ref(x[0], 0.3, 17),
    "sum": lambda x: x[0].sum(1, keepdim=True),
    "sum_all": lambda x: x[0].sum(),
    "mean": lambda x: x[0].mean((0, 2)),
    "sum_to_shape": lambda x: x[0].sum(0).sum(-1, keepdim=True).sin(),
    "mean_all": lambda x: x[0].mean(),
    "max": lambda x: x[0].max(1).values,
    "min": lambda x: x[0].min(0, keepdim=True).values,
    "max_all": lambda x: x[0].max(),
    "min_all": lambda x: x[0].min(),
    "var": lambda x: x[0].var(1, correction=1),
    "logsumexp": lambda x: x[0].logsumexp(1),
    "norm": lambda x: torch.linalg.vector_norm(x[0], dim=1, keepdim=True),
    "cumsum": lambda x: x[0].cumsum(1),
    "matmul": lambda x: x[0] @ x[1],
    "matmul_batched": lambda x: x[0] @ x[1],
    "matmul_transposed": lambda x: x[0].t() @ x[1].t(),
    "linear": lambda x: F.linear(x[0], x[1], x[2]),
    "linear_nobias": lambda x: F.linear(x[0], x[1]),
    "reshape": lambda x: x[0].t().reshape(2, -1).exp(),
    "view": lambda x: x[0].view(4, 3).tanh(),
    "flatten": lambda x: x[0].flatten(1, 2).exp(),
    "transpose": lambda x: x[0].transpose(0, 2) * x[0].transpose(0, 2).exp(),
    "t": lambda x: x[0].t().tanh(),
    "permute": lambda x: x[0].permute(2, 0, 1).sin(),
    "squeeze": lambda x: x[0].squeeze(1).exp(),
    "unsqueeze": lambda x: x[0].unsqueeze(1).exp(),
    "broadcast_to": lambda x: x[0].broadcast_to(2, 3, 4).sin(),
    "narrow": lambda x: x[0].narrow(1, 1, 3).exp(),
    "select": lambda x: x[0].select(0, 2).exp(),
    "contiguous": lambda x: x[0].t().contiguous().tanh(),
    "concat": lambda x: torch.cat([x[0], x[1].exp()], 1),
    "stack": lambda x: torch.stack([x[0], x[1].exp()], 0),
    "split": lambda x: (lambda p: torch.cat([p[1].exp(), p[0]], 1))(x[0].split([2, 3], 1)),
    "chunk": lambda x: (lambda p: torch.cat([p[1].tanh(), p[0].exp()], 1))(x[0].chunk(2, 1)),
    "pad": lambda x: F.pad(x[0], (0, 2, 1, 0), value=0.5).exp(),
    "embedding": lambda x: F.embedding(x[1], x[0]),
    "index_select": lambda x: x[0].index_select(0, x[1]),
    "gather": lambda x: x[0].gather(1, x[1]),
    "take_along_axis": lambda x: x[0].gather(0, x[1]),
    "scatter_add": lambda x: x[0].scatter_add(1, x[1], x[2]),
    FUSED_ROWS: None,
    "sign": lambda x: x[0].sign(),
    "mish": lambda x: F.mish(x[0]),
    "hardswish": lambda x: F.hardswish(x[0]),
    "logsigmoid": lambda x: F.logsigmoid(x[0]),
}


def op_table():
    """The suite's rows (name, input shapes and domains, torch name) as the
    project prints them: `cargo run --example op_table`, or the JSON file
    named by $FUCINA_OP_TABLE."""
    path = os.environ.get("FUCINA_OP_TABLE")
    if path:
        with open(path) as f:
            text = f.read()
    else:
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        text = subprocess.run(
            ["cargo", "run", "--release", "-q", "-p", "fucina-autograd", "--example", "op_table"],
            cwd=root, check=True, capture_output=True, text=True,
        ).stdout
    return {c["name"]: c for c in json.loads(text)["cases"]}


def resolve(dotted):
    """The torch callable a table row names (fails loudly on a typo)."""
    obj = {"torch": torch}[dotted.split(".")[0]]
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    assert callable(obj), dotted
    return obj


def make_input(shape, kind, dtype, g):
    """One input as fucina's suite describes it: ["float", lo, hi],
    ["nonzero", lo, hi], ["index", n] or ["mask"]."""
    if kind[0] == "float":
        return (kind[1] + (kind[2] - kind[1]) * torch.rand(shape, generator=g, dtype=torch.float64)).to(dtype)
    if kind[0] == "nonzero":
        mag = kind[1] + (kind[2] - kind[1]) * torch.rand(shape, generator=g, dtype=torch.float64)
        sign = torch.where(torch.rand(shape, generator=g) < 0.5, 1.0, -1.0).to(torch.float64)
        return (mag * sign).to(dtype)
    if kind[0] == "index":
        return torch.randint(0, kind[1], shape, generator=g, dtype=torch.int64)
    return (torch.rand(shape, generator=g) < 0.5).to(torch.uint8)


def project_lambda(row):
    """The row's torch side when the project writes it as `lambda x: ...`."""
    src = row["torch"] or ""
    if not src.startswith("lambda x: "):
        return None
    return eval(src, {
        "torch": torch, "F": F, "math": math, "causal_mask": causal_mask, "sdpa": sdpa,
        "rotate_half": rotate_half, "rope_hf": rope_hf,
    })


def lambdas(table):
    """(name, torch lambda) for every row, in the order inputs are drawn."""
    fused = [(name, fn) for name, fn in ((n, project_lambda(r)) for n, r in table.items()) if fn]
    both = sorted(name for name, _ in fused if name in TORCH)
    assert not both, f"rows with a lambda both in the project and in TORCH: {both}"
    order = []
    for name, fn in TORCH.items():
        order.extend(fused if name == FUSED_ROWS else [(name, fn)])
    return order


def main():
    table = op_table()
    order = lambdas(table)
    names = {name for name, _ in order}
    missing = sorted(set(table) - names)
    stale = sorted(names - set(table))
    assert not missing, f"suite rows without a torch lambda (TORCH or the project): {missing}"
    assert not stale, f"TORCH lambdas for rows the suite no longer has: {stale}"
    for row in table.values():
        if row["torch"] and not project_lambda(row):
            resolve(row["torch"])
    out = {}
    for dname, dtype in (("f64", torch.float64), ("f32", torch.float32)):
        g = torch.Generator().manual_seed(1234)
        for name, fn in order:
            specs = [(i["shape"], i["kind"]) for i in table[name]["inputs"]]
            xs = [make_input(s, k, dtype, g) for s, k in specs]
            leaves = [x.clone().requires_grad_(x.is_floating_point()) for x in xs]
            y = fn(leaves)
            gy = (torch.rand(y.shape, generator=g, dtype=torch.float64) + 0.5).to(dtype)
            # Non-finite outputs (a causal mask's -inf) are constants of the
            # input: they get no upstream gradient (fucina's convention, and
            # what gradcheck assumes).
            gy = torch.where(torch.isfinite(y.detach()), gy, torch.zeros_like(gy))
            y.backward(gy)
            key = f"{dname}/{name}"
            for i, x in enumerate(xs):
                out[f"{key}/in{i}"] = x.clone().contiguous()
                if leaves[i].grad is not None:
                    out[f"{key}/grad{i}"] = leaves[i].grad.clone().contiguous()
            out[f"{key}/out"] = y.detach().contiguous()
            out[f"{key}/gy"] = gy.clone().contiguous()
    path = os.path.join(os.path.dirname(__file__), "..", "fucina-autograd", "tests", "goldens", "ops.safetensors")
    save_file(out, path, metadata={"generator": "tools/gen_op_goldens.py", "torch": torch.__version__})
    print(f"wrote {len(out)} tensors for {len(order)} cases to {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
