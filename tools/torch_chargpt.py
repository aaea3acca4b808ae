"""The CharGPT of ../shared/reference/torch_workloads.py, in one place for
every script that needs it: the golden generators (tools/gen_nn_goldens.py,
tools/gen_gpt_steps_golden.py) and the PyTorch twin of train_gpt
(tools/train_gpt_torch.py). The reference's code, with two hooks that leave
its arithmetic unchanged: `Block.attend` (the causal attention; the twin
overrides it with fused SDPA, the same math, faster) and `CharGPT`'s
`block_cls`."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)
        self.h = h

    def attend(self, q, k, v):
        """Causal softmax attention over [b, h, t, dh], explicit (no fused SDPA)."""
        t, dh = q.shape[-2], q.shape[-1]
        att = (q @ k.transpose(-2, -1)) * (1.0 / dh ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return att @ v

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, self.h, d // self.h).transpose(1, 2)
        k = k.view(b, t, self.h, d // self.h).transpose(1, 2)
        v = v.view(b, t, self.h, d // self.h).transpose(1, 2)
        y = self.attend(q, k, v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.proj(y)
        x = x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x


class CharGPT(nn.Module):
    """nanoGPT-style decoder: learned positions, pre-LN, GELU(tanh) MLP,
    explicit causal softmax attention (no fused SDPA), tied lm_head, nanoGPT init."""

    def __init__(self, vocab=65, block=128, n_layer=4, n_head=4, d=256, block_cls=Block):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.blocks = nn.ModuleList([block_cls(d, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        for m in self.modules():  # nanoGPT init: N(0, 0.02) weights and embeddings, zero biases
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()
