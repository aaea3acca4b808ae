#!/usr/bin/env python3
"""Goldens for the second-order examples (examples/wgan_gp.rs, examples/maml.rs).

Writes examples/tests/goldens/second_order_examples.safetensors (f64):

  wgan/real [8,2], wgan/fake [8,2], wgan/eps [5,8,1]    the data of each step
  wgan/p{0..3}                                          the critic's initial parameters
  wgan/final{0..3}                                      its parameters after 5 critic steps
      critic D(x) = linear(tanh(linear(x, W1, b1)), W2, b2), 2 -> 16 -> 1;
      per step t: x̂ = eps_t·real + (1 − eps_t)·fake,
      gp = mean((‖∇ₓ̂ D(x̂)‖₂ − 1)²) over rows,
      loss = mean D(fake) − mean D(real) + 10·gp, plain SGD lr 0.05.
  maml/xs, ys [10,1], xq, yq [10,1], maml/p{0..3}       support and query sets, a 1 -> 32 -> 1 tanh MLP
  maml/meta{0..3}                                       the meta-gradient ∇θ L_query(θ − α ∇θ L_support(θ)), α = 0.1
  maml/adapted{0..3}                                    θ' after the inner step
Run: python3 tools/gen_second_order_examples.py   (needs torch, safetensors)
"""
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

torch.set_default_dtype(torch.float64)
torch.manual_seed(7)
OUT = os.path.join(os.path.dirname(__file__), "..", "examples", "tests", "goldens",
                   "second_order_examples.safetensors")


def mlp(x, p):
    return F.linear(torch.tanh(F.linear(x, p[0], p[1])), p[2], p[3])


def init(i, h, o):
    return [torch.randn(h, i) * 0.5, torch.randn(h) * 0.1, torch.randn(o, h) * 0.5, torch.randn(o) * 0.1]


out = {}
# ---- WGAN-GP critic steps
real = torch.randn(8, 2) * 0.5 + torch.tensor([1.0, -0.5])
fake = torch.randn(8, 2)
eps = torch.rand(5, 8, 1)
p = [t.clone().requires_grad_(True) for t in init(2, 16, 1)]
out["wgan/real"], out["wgan/fake"], out["wgan/eps"] = real, fake, eps
for i, t in enumerate(p):
    out[f"wgan/p{i}"] = t.detach().clone()
for step in range(5):
    xh = (eps[step] * real + (1 - eps[step]) * fake).requires_grad_(True)
    (g,) = torch.autograd.grad(mlp(xh, p).sum(), xh, create_graph=True)
    gp = ((g.norm(dim=1) - 1) ** 2).mean()
    loss = mlp(fake, p).mean() - mlp(real, p).mean() + 10.0 * gp
    grads = torch.autograd.grad(loss, p)
    with torch.no_grad():
        for t, gt in zip(p, grads):
            t -= 0.05 * gt
for i, t in enumerate(p):
    out[f"wgan/final{i}"] = t.detach().clone()

# ---- MAML: one inner step on the support set, the meta-gradient on the query set
xs = torch.rand(10, 1) * 4 - 2
xq = torch.rand(10, 1) * 4 - 2
amp, phase = 1.3, 0.4
ys, yq = amp * torch.sin(xs + phase), amp * torch.sin(xq + phase)
theta = [t.requires_grad_(True) for t in init(1, 32, 1)]
for k, v in dict(xs=xs, ys=ys, xq=xq, yq=yq).items():
    out[f"maml/{k}"] = v
for i, t in enumerate(theta):
    out[f"maml/p{i}"] = t.detach().clone()
inner = ((mlp(xs, theta) - ys) ** 2).mean()
g = torch.autograd.grad(inner, theta, create_graph=True)
adapted = [t - 0.1 * gt for t, gt in zip(theta, g)]
outer = ((mlp(xq, adapted) - yq) ** 2).mean()
meta = torch.autograd.grad(outer, theta)
for i, (a, m) in enumerate(zip(adapted, meta)):
    out[f"maml/adapted{i}"] = a.detach().clone()
    out[f"maml/meta{i}"] = m
out["maml/outer_loss"] = outer.detach().reshape(())

os.makedirs(os.path.dirname(OUT), exist_ok=True)
save_file({k: v.contiguous() for k, v in out.items()}, OUT)
print(f"wrote {len(out)} tensors to {os.path.normpath(OUT)}")
