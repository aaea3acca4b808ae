#!/usr/bin/env python3
"""Writes fucina-autograd/tests/goldens/display.txt: PyTorch's repr of the
tensors that fucina-autograd/tests/api.rs prints, so the test pins fucina's
Display to PyTorch's layout (4 decimals, `1.` integer mode, scientific mode,
alignment, 80-column wrapping, summarization past 1000 elements).

Only the suffixes are respelled the fucina way: `requires_grad=true`,
`grad_fn=<MulBackward>` (no trailing index), `dtype=f64` / `dtype=i32`.

The file is a list of blocks `=== NAME` followed by the text. Keep the case
names and tensors in step with `display_matches_pytorch` in api.rs.

Regenerate (needs torch; CI never runs this):
    python3 -m venv .venv && .venv/bin/pip install torch
    ${PYTHON:-python3} tools/gen_display_goldens.py
"""
import os
import re

import torch

torch.set_printoptions(profile="default")


def cases():
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    yield "leaf_2x2", torch.tensor([[0.1, -1.2], [2.0, 3.0]], requires_grad=True)
    yield "mul_result", a * a
    yield "scalar", torch.tensor(3.5)
    yield "int_mode", torch.tensor([1.0, 2.0, 3.0])
    yield "sci_small", torch.tensor([1e-5, 1.0])
    yield "sci_large", torch.tensor([1.0, 2e9])
    yield "non_finite", torch.tensor([float("nan"), float("inf"), -1.5])
    yield "i64", torch.tensor([1, 2, 300])
    yield "i32", torch.tensor([1, 2, 3], dtype=torch.int32)
    yield "f64", torch.tensor([0.5, 1.5], dtype=torch.float64)
    yield "empty_0x3", torch.zeros(0, 3)
    yield "empty_0", torch.zeros(0)
    yield "rank3_int", torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    yield "wrap_30", torch.arange(30, dtype=torch.float32) / 8
    yield "summarized_2000", torch.arange(2000, dtype=torch.float32)
    yield "summarized_30x40", torch.arange(1200, dtype=torch.float32).reshape(30, 40) / 8
    yield "summarized_10x20x20_f64", torch.arange(4000, dtype=torch.float64).reshape(10, 20, 20) / 4


def fucina_spelling(s):
    s = s.replace("requires_grad=True", "requires_grad=true")
    s = re.sub(r"grad_fn=<(\w+?)Backward\d+>", r"grad_fn=<\1Backward>", s)
    for torch_name, name in [("float64", "f64"), ("int32", "i32")]:
        s = s.replace(f"dtype=torch.{torch_name}", f"dtype={name}")
    return s


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "..", "fucina-autograd", "tests", "goldens", "display.txt")
    with open(out, "w") as f:
        for name, t in cases():
            f.write(f"=== {name}\n{fucina_spelling(repr(t))}\n")
    print("wrote", os.path.normpath(out))


if __name__ == "__main__":
    main()
