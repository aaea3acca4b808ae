#!/usr/bin/env python3
"""Second-order goldens from PyTorch for fucina's create_graph.

Writes fucina-autograd/tests/goldens/second_order.safetensors (f64):

    hvp/NAME/in{i}, hvp/NAME/v{i}, hvp/NAME/c, hvp/NAME/hvp{i}
        per op family: torch.autograd.functional.hvp of f = sum(c * op(inputs))
        (c fixed, so every second derivative of op is seen), v random.
        Integer constants (class targets, embedding ids) are NAME/ids (i64).
    mlp/...    hvp of a 2-layer tanh MLP's MSE loss w.r.t. all its parameters
    jac/x, jac/out        jacobian of g(x) = tanh(x) * sum(x)
    hess/x, hess/out      hessian of h(x) = sum(sin(x) * x^2) + sum(x)^2

The WGAN-GP and MAML goldens are written by tools/gen_second_order_examples.py.
Run: python3 tools/gen_second_order_goldens.py   (needs torch, safetensors)
"""
import os

import torch
import torch.nn.functional as F
from torch.autograd.functional import hessian, hvp, jacobian
from safetensors.torch import save_file

torch.manual_seed(20261202)
torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(__file__), "..", "fucina-autograd", "tests", "goldens",
                   "second_order.safetensors")


def u(*shape, lo=-1.5, hi=1.5):
    return torch.rand(*shape) * (hi - lo) + lo


def rope_ref(x, cos, sin, pos):
    # x [B,T,H,D]; cos/sin [P, D/2]; HF rotate-half.
    c = cos[pos]  # [B,T,D/2]
    s = sin[pos]
    c = torch.cat([c, c], -1)[:, :, None, :]
    s = torch.cat([s, s], -1)[:, :, None, :]
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * c + rot * s


# name -> (inputs, op); positive domains where the op needs them.
pos = dict(lo=0.5, hi=2.0)
IDS = torch.tensor([2, 0, 3, 2, 1], dtype=torch.int64)
TARGETS = torch.tensor([1, 0, 3], dtype=torch.int64)
ROPE_POS = torch.tensor([[0, 2, 1]], dtype=torch.int64)
ROPE_COS = torch.cos(torch.arange(4.0)[:, None] * torch.tensor([1.0, 0.3]))
ROPE_SIN = torch.sin(torch.arange(4.0)[:, None] * torch.tensor([1.0, 0.3]))
FAMILIES = {
    "tanh": ([u(3, 4)], lambda x: torch.tanh(x[0])),
    "sigmoid": ([u(3, 4)], lambda x: torch.sigmoid(x[0])),
    "exp": ([u(3, 4)], lambda x: torch.exp(x[0])),
    "log": ([u(3, 4, **pos)], lambda x: torch.log(x[0])),
    "log1p": ([u(3, 4, **pos)], lambda x: torch.log1p(x[0])),
    "sqrt": ([u(3, 4, **pos)], lambda x: torch.sqrt(x[0])),
    "rsqrt": ([u(3, 4, **pos)], lambda x: torch.rsqrt(x[0])),
    "recip": ([u(3, 4, **pos)], lambda x: torch.reciprocal(x[0])),
    "sin": ([u(3, 4)], lambda x: torch.sin(x[0])),
    "cos": ([u(3, 4)], lambda x: torch.cos(x[0])),
    "gelu_tanh": ([u(3, 4)], lambda x: F.gelu(x[0], approximate="tanh")),
    "gelu_erf": ([u(3, 4)], lambda x: F.gelu(x[0])),
    "silu": ([u(3, 4)], lambda x: F.silu(x[0])),
    "softplus": ([u(3, 4)], lambda x: F.softplus(x[0])),
    "mish": ([u(3, 4)], lambda x: F.mish(x[0])),
    "elu": ([u(3, 4)], lambda x: F.elu(x[0])),
    "logsigmoid": ([u(3, 4)], lambda x: F.logsigmoid(x[0])),
    "square": ([u(3, 4)], lambda x: torch.square(x[0])),
    "pow_scalar": ([u(3, 4, **pos)], lambda x: torch.pow(x[0], 2.5)),
    "rdiv_scalar": ([u(3, 4, **pos)], lambda x: 2.0 / x[0]),
    "mul": ([u(3, 4), u(3, 4)], lambda x: x[0] * x[1]),
    "div": ([u(3, 4), u(3, 4, **pos)], lambda x: x[0] / x[1]),
    "pow": ([u(3, 4, **pos), u(3, 4)], lambda x: torch.pow(x[0], x[1])),
    "mul_broadcast": ([u(3, 4), u(4)], lambda x: torch.tanh(x[0] * x[1])),
    "logsumexp": ([u(3, 4)], lambda x: torch.logsumexp(x[0], -1)),
    "norm": ([u(3, 4)], lambda x: torch.linalg.vector_norm(x[0], dim=-1)),
    "var": ([u(3, 4)], lambda x: torch.var(x[0], dim=-1)),
    "max": ([u(3, 4)], lambda x: torch.tanh(x[0]).amax(-1) ** 2),
    "cumsum": ([u(3, 4)], lambda x: torch.tanh(torch.cumsum(x[0], -1))),
    "matmul": ([u(3, 4), u(4, 2)], lambda x: torch.tanh(x[0] @ x[1])),
    "linear": ([u(3, 4), u(2, 4), u(2)], lambda x: torch.tanh(F.linear(x[0], x[1], x[2]))),
    "softmax": ([u(3, 4)], lambda x: torch.softmax(x[0], -1)),
    "log_softmax": ([u(3, 4)], lambda x: torch.log_softmax(x[0], -1)),
    "layer_norm": ([u(3, 4), u(4), u(4)], lambda x: F.layer_norm(x[0], (4,), x[1], x[2], 1e-5)),
    "rms_norm": ([u(3, 4), u(4)],
                 lambda x: x[0] * torch.rsqrt(x[0].square().mean(-1, keepdim=True) + 1e-6) * x[1]),
    "cross_entropy": ([u(3, 4)], lambda x: F.cross_entropy(x[0], TARGETS, label_smoothing=0.1)),
    "embedding": ([u(4, 3)], lambda x: torch.tanh(F.embedding(IDS, x[0]))),
    "transpose_concat": ([u(3, 4), u(3, 2)],
                         lambda x: torch.tanh(torch.cat([x[0], x[1]], 1).t() * 0.7)),
    "rope": ([u(1, 3, 2, 4)], lambda x: torch.tanh(rope_ref(x[0], ROPE_COS, ROPE_SIN, ROPE_POS))),
}

out = {}
for name, (inputs, op) in FAMILIES.items():
    y = op(inputs)
    c = u(*y.shape) if y.dim() > 0 else torch.tensor(1.0)
    vs = [u(*t.shape) for t in inputs]

    def f(*xs, op=op, c=c):
        return (op(list(xs)) * c).sum()

    _, h = hvp(f, tuple(inputs), tuple(vs))
    for i, t in enumerate(inputs):
        out[f"hvp/{name}/in{i}"] = t
        out[f"hvp/{name}/v{i}"] = vs[i]
        out[f"hvp/{name}/hvp{i}"] = h[i]
    out[f"hvp/{name}/c"] = c.reshape(y.shape) if y.dim() > 0 else c.reshape(())
out["const/ids"] = IDS
out["const/targets"] = TARGETS
out["const/rope_pos"] = ROPE_POS
out["const/rope_cos"] = ROPE_COS
out["const/rope_sin"] = ROPE_SIN

# A 2-layer tanh MLP's MSE loss, hvp w.r.t. every parameter.
x, y = u(5, 3), u(5, 2)
params = [u(4, 3) * 0.5, u(4) * 0.1, u(2, 4) * 0.5, u(2) * 0.1]
vs = [u(*p.shape) for p in params]


def mlp_loss(w1, b1, w2, b2):
    h = torch.tanh(F.linear(x, w1, b1))
    return ((F.linear(h, w2, b2) - y) ** 2).mean()


_, h = hvp(mlp_loss, tuple(params), tuple(vs))
out["mlp/x"], out["mlp/y"] = x, y
for i, (p, v, hv) in enumerate(zip(params, vs, h)):
    out[f"mlp/p{i}"], out[f"mlp/v{i}"], out[f"mlp/hvp{i}"] = p, v, hv

xj = u(3)
out["jac/x"] = xj
out["jac/out"] = jacobian(lambda x: torch.tanh(x) * x.sum(), xj)
xh = u(3)
out["hess/x"] = xh
out["hess/out"] = hessian(lambda x: (torch.sin(x) * x ** 2).sum() + x.sum() ** 2, xh)

save_file({k: v.contiguous() for k, v in out.items()}, OUT)
print(f"wrote {len(out)} tensors ({len(FAMILIES)} op families) to {os.path.normpath(OUT)}")
