#!/usr/bin/env python3
"""Writes fucina-autograd/tests/goldens/ops.safetensors: PyTorch's forward and input gradients
for every row of fucina's op suite (fucina-autograd/src/suite.rs).

For each case NAME and dtype D in {f64, f32} the file holds
    D/NAME/in{i}    the inputs (float, int64 indices or uint8 masks)
    D/NAME/out      torch's output
    D/NAME/gy       the upstream gradient used for backward (0 at non-finite outputs)
    D/NAME/grad{i}  torch's gradient for each float input
The Rust test `fucina-autograd/tests/torch_parity.rs` replays every case
and compares (f64 within 1e-10, f32 within 1e-5, relative to the largest
reference magnitude).

Regenerate (needs torch and safetensors; CI never runs this):
    python3 -m venv .venv && .venv/bin/pip install torch safetensors numpy
    .venv/bin/python tools/gen_op_goldens.py
Keep the case list in step with suite.rs: same names, shapes and domains.
"""
import math
import os

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


def softmax_causal(x):
    m = causal_mask(x.shape[-2], x.shape[-1])
    return x.masked_fill(m, float("-inf")).softmax(-1)


def log_softmax_causal(x):
    m = causal_mask(x.shape[-2], x.shape[-1])
    return x.masked_fill(m, float("-inf")).log_softmax(-1)


def sdpa(q, k, v, bias=None, causal=False, scale=None):
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = q @ k.transpose(-2, -1) * scale
    if bias is not None:
        s = s + bias
    if causal:
        s = s.masked_fill(causal_mask(s.shape[-2], s.shape[-1]), float("-inf"))
    return s.softmax(-1) @ v


def pad_bias(dtype):
    vals = [0.0 if (i % 5 < 3 or i < 5) else -1e4 for i in range(10)]
    return torch.tensor(vals, dtype=dtype).reshape(2, 1, 1, 5)


F_ = ("float", -1.5, 1.5)


def fr(lo, hi):
    return ("float", lo, hi)


NZ = ("nonzero", 0.1, 1.5)


def IDX(n):
    return ("index", n)


MASK = ("mask",)

# name: ([(shape, kind), ...], fn)
CASES = {
    "add": ([([3, 4], F_), ([4], F_)], lambda x: x[0] + x[1]),
    "sub": ([([3, 4], F_), ([3, 1], F_)], lambda x: x[0] - x[1]),
    "mul": ([([2, 3, 4], F_), ([3, 1], F_)], lambda x: x[0] * x[1]),
    "div": ([([3, 4], F_), ([4], fr(0.5, 2.0))], lambda x: x[0] / x[1]),
    "pow": ([([3, 4], fr(0.5, 2.0)), ([3, 4], fr(-1.0, 2.0))], lambda x: x[0] ** x[1]),
    "maximum": ([([3, 4], F_), ([4], F_)], lambda x: torch.maximum(x[0], x[1])),
    "minimum": ([([3, 4], F_), ([3, 1], F_)], lambda x: torch.minimum(x[0], x[1])),
    "mul_noncontig": ([([4, 3], F_), ([3, 4], F_)], lambda x: x[0].t() * x[1]),
    "neg": ([([3, 4], F_)], lambda x: -x[0]),
    "abs": ([([3, 4], NZ)], lambda x: x[0].abs()),
    "sqrt": ([([3, 4], fr(0.5, 2.0))], lambda x: x[0].sqrt()),
    "rsqrt": ([([3, 4], fr(0.5, 2.0))], lambda x: x[0].rsqrt()),
    "exp": ([([3, 4], F_)], lambda x: x[0].exp()),
    "exp_noncontig": ([([4, 3], F_)], lambda x: x[0].t().exp()),
    "log": ([([3, 4], fr(0.5, 2.0))], lambda x: x[0].log()),
    "log1p": ([([3, 4], fr(0.0, 2.0))], lambda x: x[0].log1p()),
    "sin": ([([3, 4], F_)], lambda x: x[0].sin()),
    "cos": ([([3, 4], F_)], lambda x: x[0].cos()),
    "tanh": ([([3, 4], F_)], lambda x: x[0].tanh()),
    "sigmoid": ([([3, 4], F_)], lambda x: x[0].sigmoid()),
    "relu": ([([3, 4], NZ)], lambda x: x[0].relu()),
    "leaky_relu": ([([3, 4], NZ)], lambda x: F.leaky_relu(x[0], 0.1)),
    "elu": ([([3, 4], NZ)], lambda x: F.elu(x[0], 1.0)),
    "gelu": ([([3, 4], F_)], lambda x: F.gelu(x[0], approximate="tanh")),
    "gelu_erf": ([([3, 4], F_)], lambda x: F.gelu(x[0])),
    "silu": ([([3, 4], F_)], lambda x: F.silu(x[0])),
    "softplus": ([([3, 4], F_)], lambda x: F.softplus(x[0])),
    "square": ([([3, 4], F_)], lambda x: x[0].square()),
    "recip": ([([3, 4], fr(0.5, 2.0))], lambda x: x[0].reciprocal()),
    "add_scalar": ([([3, 4], F_)], lambda x: x[0] + 0.5),
    "sub_scalar": ([([3, 4], F_)], lambda x: x[0] - 0.5),
    "rsub_scalar": ([([3, 4], F_)], lambda x: 0.5 - x[0]),
    "mul_scalar": ([([3, 4], F_)], lambda x: x[0] * -1.5),
    "div_scalar": ([([3, 4], F_)], lambda x: x[0] / 4.0),
    "rdiv_scalar": ([([3, 4], fr(0.5, 2.0))], lambda x: 2.0 / x[0]),
    "pow_scalar": ([([3, 4], fr(0.5, 2.0))], lambda x: x[0] ** 2.5),
    "clamp": ([([3, 4], F_)], lambda x: x[0].clamp(-1.0, 1.0)),
    "where_cond": ([([3, 4], MASK), ([3, 4], F_), ([4], F_)], lambda x: torch.where(x[0].bool(), x[1], x[2])),
    "masked_fill": ([([3, 4], F_), ([4], MASK)], lambda x: x[0].masked_fill(x[1].bool(), 2.0)),
    "dropout": ([([4, 8], F_)], lambda x: dropout_ref(x[0], 0.3, 17)),
    "sum": ([([3, 4, 2], F_)], lambda x: x[0].sum(1, keepdim=True)),
    "sum_all": ([([3, 4], F_)], lambda x: x[0].sum()),
    "mean": ([([3, 4, 2], F_)], lambda x: x[0].mean((0, 2))),
    "mean_all": ([([3, 4], F_)], lambda x: x[0].mean()),
    "max": ([([3, 5], F_)], lambda x: x[0].max(1).values),
    "min": ([([3, 5], F_)], lambda x: x[0].min(0, keepdim=True).values),
    "max_all": ([([3, 5], F_)], lambda x: x[0].max()),
    "min_all": ([([3, 5], F_)], lambda x: x[0].min()),
    "var": ([([3, 5], F_)], lambda x: x[0].var(1, correction=1)),
    "logsumexp": ([([3, 5], F_)], lambda x: x[0].logsumexp(1)),
    "norm": ([([3, 5], F_)], lambda x: torch.linalg.vector_norm(x[0], dim=1, keepdim=True)),
    "cumsum": ([([3, 5], F_)], lambda x: x[0].cumsum(1)),
    "matmul": ([([3, 4], F_), ([4, 5], F_)], lambda x: x[0] @ x[1]),
    "matmul_batched": ([([2, 3, 4], F_), ([4, 5], F_)], lambda x: x[0] @ x[1]),
    "matmul_transposed": ([([4, 3], F_), ([5, 4], F_)], lambda x: x[0].t() @ x[1].t()),
    "linear": ([([2, 3, 4], F_), ([5, 4], F_), ([5], F_)], lambda x: F.linear(x[0], x[1], x[2])),
    "linear_nobias": ([([3, 4], F_), ([5, 4], F_)], lambda x: F.linear(x[0], x[1])),
    "reshape": ([([3, 4], F_)], lambda x: x[0].t().reshape(2, -1).exp()),
    "view": ([([3, 4], F_)], lambda x: x[0].view(4, 3).tanh()),
    "flatten": ([([2, 3, 2], F_)], lambda x: x[0].flatten(1, 2).exp()),
    "transpose": ([([2, 3, 4], F_)], lambda x: x[0].transpose(0, 2) * x[0].transpose(0, 2).exp()),
    "t": ([([3, 4], F_)], lambda x: x[0].t().tanh()),
    "permute": ([([2, 3, 4], F_)], lambda x: x[0].permute(2, 0, 1).sin()),
    "squeeze": ([([3, 1, 4], F_)], lambda x: x[0].squeeze(1).exp()),
    "unsqueeze": ([([3, 4], F_)], lambda x: x[0].unsqueeze(1).exp()),
    "broadcast_to": ([([3, 1], F_)], lambda x: x[0].broadcast_to(2, 3, 4).sin()),
    "narrow": ([([4, 5], F_)], lambda x: x[0].narrow(1, 1, 3).exp()),
    "select": ([([4, 5], F_)], lambda x: x[0].select(0, 2).exp()),
    "contiguous": ([([4, 5], F_)], lambda x: x[0].t().contiguous().tanh()),
    "concat": ([([2, 3], F_), ([2, 2], F_)], lambda x: torch.cat([x[0], x[1].exp()], 1)),
    "stack": ([([2, 3], F_), ([2, 3], F_)], lambda x: torch.stack([x[0], x[1].exp()], 0)),
    "split": ([([2, 5], F_)], lambda x: (lambda p: torch.cat([p[1].exp(), p[0]], 1))(x[0].split([2, 3], 1))),
    "chunk": ([([2, 5], F_)], lambda x: (lambda p: torch.cat([p[1].tanh(), p[0].exp()], 1))(x[0].chunk(2, 1))),
    "pad": ([([2, 3], F_)], lambda x: F.pad(x[0], (0, 2, 1, 0), value=0.5).exp()),
    "embedding": ([([6, 4], F_), ([2, 5], IDX(6))], lambda x: F.embedding(x[1], x[0])),
    "index_select": ([([5, 3], F_), ([7], IDX(5))], lambda x: x[0].index_select(0, x[1])),
    "gather": ([([3, 5], F_), ([3, 4], IDX(5))], lambda x: x[0].gather(1, x[1])),
    "take_along_axis": ([([4, 3], F_), ([2, 3], IDX(4))], lambda x: x[0].gather(0, x[1])),
    "scatter_add": ([([3, 5], F_), ([3, 4], IDX(5)), ([3, 4], F_)], lambda x: x[0].scatter_add(1, x[1], x[2])),
    "softmax": ([([3, 5], F_)], lambda x: x[0].softmax(1)),
    "softmax_axis0": ([([3, 5], F_)], lambda x: x[0].softmax(0)),
    "log_softmax": ([([3, 5], F_)], lambda x: x[0].log_softmax(-1)),
    "softmax_causal": ([([2, 4, 4], F_)], lambda x: softmax_causal(x[0])),
    "log_softmax_causal": ([([2, 3, 4], F_)], lambda x: log_softmax_causal(x[0])),
    "layer_norm": ([([3, 6], F_), ([6], F_), ([6], F_)], lambda x: F.layer_norm(x[0], (6,), x[1], x[2], 1e-5)),
    "layer_norm_plain": ([([2, 3, 6], F_)], lambda x: F.layer_norm(x[0], (6,), None, None, 1e-5)),
    "rms_norm": ([([3, 6], F_), ([6], F_)], lambda x: x[0] * torch.rsqrt(x[0].square().mean(-1, keepdim=True) + 1e-6) * x[1]),
    "cross_entropy": ([([5, 4], F_), ([5], IDX(4))], lambda x: F.cross_entropy(x[0], x[1])),
    "cross_entropy_smooth_sum": ([([5, 4], F_), ([5], IDX(4))], lambda x: F.cross_entropy(x[0], x[1], label_smoothing=0.1, reduction="sum")),
    "cross_entropy_ignore_none": ([([5, 4], F_), ([5], IDX(4))], lambda x: F.cross_entropy(x[0], x[1], ignore_index=2, reduction="none")),
    "nll_loss": ([([5, 4], F_), ([5], IDX(4))], lambda x: F.nll_loss(x[0].log_softmax(1), x[1], ignore_index=1)),
    "mse_loss": ([([3, 4], F_), ([3, 4], F_)], lambda x: F.mse_loss(x[0], x[1])),
    "bce_with_logits": ([([3, 4], F_), ([3, 4], fr(0.0, 1.0))], lambda x: F.binary_cross_entropy_with_logits(x[0], x[1])),
    "huber_loss": ([([3, 4], F_), ([3, 4], F_)], lambda x: F.huber_loss(x[0], x[1], delta=0.5, reduction="sum")),
    "scaled_dot_product_attention": ([([1, 2, 3, 4], F_), ([1, 2, 5, 4], F_), ([1, 2, 5, 3], F_)], lambda x: sdpa(x[0], x[1], x[2])),
    "sdpa_causal": ([([2, 2, 4, 3], F_), ([2, 2, 4, 3], F_), ([2, 2, 4, 3], F_)], lambda x: sdpa(x[0], x[1], x[2], causal=True, scale=0.7)),
    "sdpa_padding_mask": ([([2, 2, 3, 4], F_), ([2, 2, 5, 4], F_), ([2, 2, 5, 4], F_)], lambda x: sdpa(x[0], x[1], x[2], bias=pad_bias(x[0].dtype))),
}


def make_input(shape, kind, dtype, g):
    if kind[0] == "float":
        return (kind[1] + (kind[2] - kind[1]) * torch.rand(shape, generator=g, dtype=torch.float64)).to(dtype)
    if kind[0] == "nonzero":
        mag = kind[1] + (kind[2] - kind[1]) * torch.rand(shape, generator=g, dtype=torch.float64)
        sign = torch.where(torch.rand(shape, generator=g) < 0.5, 1.0, -1.0).to(torch.float64)
        return (mag * sign).to(dtype)
    if kind[0] == "index":
        return torch.randint(0, kind[1], shape, generator=g, dtype=torch.int64)
    return (torch.rand(shape, generator=g) < 0.5).to(torch.uint8)


def main():
    out = {}
    for dname, dtype in (("f64", torch.float64), ("f32", torch.float32)):
        g = torch.Generator().manual_seed(1234)
        for name, (specs, fn) in CASES.items():
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
    print(f"wrote {len(out)} tensors for {len(CASES)} cases to {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
