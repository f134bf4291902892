"""gelu_sum: out[b][d] = sum over r of gelu_erf(x[r][b][d]), in float64 (F.gelu(x).sum(0)).

GELU is the exact form PyTorch's F.gelu computes by default, x * 0.5 * (1 + erf(x / sqrt(2))),
with the float-rounded 1/sqrt(2) a kernel writes, promoted to double.
"""

from __future__ import annotations

import torch

from grader.exercises.inputs import uniform
from grader.exercises.refmath import gelu_erf, gelu_tanh


def random(dims: dict, seed: int) -> dict[str, torch.Tensor]:
    """x uniform over [-3, 3]: both sides of GELU's knee, so the sums do not all grow alike."""
    r, b, d = dims["R"], dims["B"], dims["D"]
    s = seed * 7919 + r * 1009 + b * 101 + d
    return {"x": uniform(r * b * d, s, 0, -3.0, 3.0).view(r, b, d)}


GENERATORS = {"random": random}


def expected(t: dict, dims: dict) -> dict[str, torch.Tensor]:
    return {"out": gelu_erf(t["x"].double()).sum(0)}


MISTAKES = {
    "tanh_gelu": lambda t, d: (gelu_tanh(t["x"].double()).sum(0), None),
    # x read as [B][R][D]: element (b, r, d) of that view is the flat index (b * R + r) * D + d
    "layout_b_r_d": lambda t, d: (gelu_erf(t["x"].double().reshape(d["B"], d["R"], d["D"])).sum(1), None),
    "missing_last_slice": lambda t, d: (gelu_erf(t["x"].double()[:-1]).sum(0), None),
}
