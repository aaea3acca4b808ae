#!/usr/bin/env python3
"""Generate the PyTorch goldens for fucina-optim's parity test.

Every case runs one optimizer configuration (SGD variants, Adam, AdamW,
RMSprop, Lion, Muon, each LR schedule, both clipping functions, param groups)
for 10 steps in f32 from the same initial parameters and the same per-step
gradients, and records the parameters after every step. The Rust test
`fucina-optim/tests/parity.rs` replays the same cases and checks every
step within 1e-6 relative.

- SGD / Adam / AdamW / RMSprop are torch.optim's own (foreach=False: the
  single-tensor path, the CPU default), schedules are LambdaLR with the same
  closed-form factors as fucina's `Schedule::factor`, clipping is
  torch.nn.utils.clip_grad_norm_ / clip_grad_value_.
- Lion has no torch.optim class: it is written here with torch ops
  (lucidrains/lion-pytorch's update).
- Muon: torch.optim.Muon runs Newton-Schulz in bf16, so it cannot be a 1e-6
  golden; the same algorithm (torch.optim.Muon's order, coefficients
  (3.4445, -4.7750, 2.0315), 5 steps, lr adjust "original") is written here
  with f32 torch ops, plus the AdamW fallback (torch.optim.AdamW) for 1-D params.

Every case also runs in f64 (same f32-representable inputs, results under
`f64.{case}.{step}.{param}`): that checks the formulas to ~1e-12, free of f32
rounding. In f32 torch's sqrt (MKL VML) is not correctly rounded, so the f32
comparison is normwise per tensor: max|ours - torch| <= 1e-6 * max|torch|.

Gradients: g[step][name][i] = sin(0.37*i + 1.3*step + k) * (1 + 0.5*cos(0.11*i*step)) * s
computed in float64 and rounded to f32; they are stored in the golden file too,
so the Rust side reads them instead of recomputing.

Regenerate (needs torch and safetensors; CI never runs this):
    python3 -m venv .venv && .venv/bin/pip install torch safetensors numpy
    PYTHON=.venv/bin/python; ${PYTHON:-python3} tools/gen_optim_goldens.py
which rewrites fucina-optim/tests/goldens/optim.safetensors.
"""
import json
import math
import os

import torch
from safetensors.torch import save_file

torch.set_num_threads(1)
STEPS = 10
SHAPES = {"w1": (6, 8), "b": (7,), "w2": (8, 5)}
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fucina-optim", "tests",
                   "goldens", "optim.safetensors")


def init_params():
    out = {}
    for k, (name, shape) in enumerate(SHAPES.items()):
        n = math.prod(shape)
        vals = [math.cos(0.7 * i + k) * 0.5 + 0.1 * (k + 1) for i in range(n)]
        out[name] = torch.tensor(vals, dtype=torch.float64).reshape(shape).float()
    return out


def grad(step, k, name):
    shape = SHAPES[name]
    n = math.prod(shape)
    scale = 2.0 if name == "w2" else 1.0
    vals = [math.sin(0.37 * i + 1.3 * step + k) * (1 + 0.5 * math.cos(0.11 * i * step)) * scale for i in range(n)]
    return torch.tensor(vals, dtype=torch.float64).reshape(shape).float()


GRADS = {(s, name): grad(s, k, name) for s in range(STEPS) for k, name in enumerate(SHAPES)}


# ------------------------------------------------------------ schedules (== Schedule::factor)

def linear_warmup(warmup):
    return lambda s: (s + 1) / warmup if s < warmup else 1.0


def warmup_cosine(warmup, total, min_factor):
    def f(s):
        if s < warmup:
            return (s + 1) / warmup
        t = min((s - warmup) / max(total - warmup, 1), 1.0)
        return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * t))
    return f


def step_decay(step_size, gamma):
    return lambda s: gamma ** (s // step_size)


def linear_decay(start, end, total):
    return lambda s: start + (end - start) * (min(s, total) / total)


# ------------------------------------------------------------ custom optimizers

def zero_init_state(opt, p, name):
    """`opt.state[p][name]`, created as zeros like `p` on first use."""
    st = opt.state[p]
    if name not in st:
        st[name] = torch.zeros_like(p)
    return st[name]


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            b1, b2 = g["betas"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                m = zero_init_state(self, p, "exp_avg")
                update = m.mul(b1).add(p.grad, alpha=1 - b1)
                p.mul_(1 - g["lr"] * g["weight_decay"])
                p.add_(torch.sign(update), alpha=-g["lr"])
                m.mul_(b2).add_(p.grad, alpha=1 - b2)


def newton_schulz(G, steps, coeffs, eps):
    a, b, c = coeffs
    tall = G.size(0) > G.size(1)
    X = G.T.contiguous() if tall else G.clone()
    X = X / X.norm().clamp(min=eps)
    for _ in range(steps):
        A = X @ X.T
        B = torch.addmm(A, A, A, beta=b, alpha=c)
        X = torch.addmm(X, B, X, beta=a)
    return X.T.contiguous() if tall else X


class Muon(torch.optim.Optimizer):
    """torch.optim.Muon's algorithm with Newton-Schulz in f32 (2-D params only)."""

    def __init__(self, params, lr=0.02, momentum=0.95, nesterov=True, weight_decay=0.0,
                 ns_coefficients=(3.4445, -4.7750, 2.0315), eps=1e-7, ns_steps=5):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                                      ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            mu = g["momentum"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                buf = zero_init_state(self, p, "momentum_buffer")
                buf.lerp_(p.grad, 1 - mu)
                update = p.grad.lerp(buf, mu) if g["nesterov"] else buf
                update = newton_schulz(update, g["ns_steps"], g["ns_coefficients"], g["eps"])
                rows, cols = p.shape[0], p.numel() // p.shape[0]
                adjusted = g["lr"] * math.sqrt(max(1, rows / cols))
                p.mul_(1 - g["lr"] * g["weight_decay"])
                p.add_(update, alpha=-adjusted)


# ------------------------------------------------------------ cases

def adamw(params, **kw):
    return torch.optim.AdamW(params, foreach=False, **kw)


CASES = {
    "sgd": lambda P: torch.optim.SGD(P.values(), lr=0.1, foreach=False),
    "sgd_momentum": lambda P: torch.optim.SGD(P.values(), lr=0.05, momentum=0.9, dampening=0.1,
                                              weight_decay=0.01, foreach=False),
    "sgd_nesterov": lambda P: torch.optim.SGD(P.values(), lr=0.05, momentum=0.9, nesterov=True,
                                              weight_decay=0.01, foreach=False),
    "adam": lambda P: torch.optim.Adam(P.values(), lr=0.01, foreach=False),
    "adam_l2": lambda P: torch.optim.Adam(P.values(), lr=0.01, weight_decay=0.1, foreach=False),
    "adamw": lambda P: adamw(P.values(), lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
    "adamw_small_beta1": lambda P: adamw(P.values(), lr=0.01, betas=(0.3, 0.9), weight_decay=0.1, eps=1e-6),
    "adamw_groups": lambda P: adamw([{"params": [P["w1"], P["w2"]]},
                                     {"params": [P["b"]], "weight_decay": 0.0, "lr": 0.02}],
                                    lr=0.01, weight_decay=0.1),
    "rmsprop": lambda P: torch.optim.RMSprop(P.values(), lr=0.01, foreach=False),
    "rmsprop_centered_momentum": lambda P: torch.optim.RMSprop(P.values(), lr=0.01, centered=True, momentum=0.9,
                                                               weight_decay=0.01, foreach=False),
    "lion": lambda P: Lion(P.values(), lr=0.01, weight_decay=0.1),
    "muon": None,  # two optimizers, see run_case
    "sched_warmup": lambda P: adamw(P.values(), lr=0.01),
    "sched_cosine": lambda P: adamw(P.values(), lr=0.01),
    "sched_step": lambda P: torch.optim.SGD(P.values(), lr=0.05, momentum=0.9, foreach=False),
    "sched_linear": lambda P: torch.optim.SGD(P.values(), lr=0.1, foreach=False),
    "clip_norm": lambda P: adamw(P.values(), lr=0.01),
    "clip_value": lambda P: torch.optim.SGD(P.values(), lr=0.1, foreach=False),
}

SCHEDULES = {
    "sched_warmup": linear_warmup(5),
    "sched_cosine": warmup_cosine(2, 8, 0.1),
    "sched_step": step_decay(3, 0.5),
    "sched_linear": linear_decay(1.0, 0.1, 6),
}


def run_case(name, dtype):
    P = {k: v.to(dtype).requires_grad_(True) for k, v in init_params().items()}
    if name == "muon":
        opts = [Muon([P["w1"], P["w2"]], lr=0.02, weight_decay=0.1),
                adamw([P["b"]], lr=0.01, weight_decay=0.01)]
    else:
        opts = [CASES[name](P)]
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, SCHEDULES[name]) for o in opts] if name in SCHEDULES else []
    out = {}
    for s in range(STEPS):
        for o in opts:
            o.zero_grad(set_to_none=True)
        for k in SHAPES:
            P[k].grad = GRADS[(s, k)].to(dtype).clone()  # clipping works in place
        if name == "clip_norm":
            torch.nn.utils.clip_grad_norm_(list(P.values()), max_norm=1.0, foreach=False)
        if name == "clip_value":
            torch.nn.utils.clip_grad_value_(list(P.values()), clip_value=0.05, foreach=False)
        for o in opts:
            o.step()
        for sc in scheds:
            sc.step()
        for k in SHAPES:
            prefix = "" if dtype == torch.float32 else "f64."
            out[f"{prefix}{name}.{s + 1}.{k}"] = P[k].detach().clone()
    return out


def main():
    tensors = {}
    for k, v in init_params().items():
        tensors[f"init.{k}"] = v
    for (s, k), g in GRADS.items():
        tensors[f"grad.{s}.{k}"] = g
    for name in CASES:
        tensors.update(run_case(name, torch.float32))
        tensors.update(run_case(name, torch.float64))
    meta = {"cases": json.dumps(list(CASES)), "steps": str(STEPS), "torch": torch.__version__}
    save_file({k: v.contiguous() for k, v in tensors.items()}, OUT, metadata=meta)
    print(f"wrote {len(tensors)} tensors to {os.path.normpath(OUT)} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
