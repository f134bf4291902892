"""gelu_sum: out[b][d] = sum over r of gelu_erf(x[r][b][d]), in float64 (F.gelu(x).sum(0)).

GELU is the exact form PyTorch's F.gelu computes by default, x * 0.5 * (1 + erf(x / sqrt(2))),
with the float-rounded 1/sqrt(2) a kernel writes, promoted to double. The inputs are drawn by
inputs.py.
"""

from __future__ import annotations

import torch

from grader.exercises.refmath import gelu_erf, gelu_tanh


def expected(t: dict, dims: dict) -> dict[str, torch.Tensor]:
    return {"out": gelu_erf(t["x"].double()).sum(0)}


MISTAKES = {
    "tanh_gelu": lambda t, d: (gelu_tanh(t["x"].double()).sum(0), None),
    # x read as [B][R][D]: element (b, r, d) of that view is the flat index (b * R + r) * D + d
    "layout_b_r_d": lambda t, d: (gelu_erf(t["x"].double().reshape(d["B"], d["R"], d["D"])).sum(1), None),
    "missing_last_slice": lambda t, d: (gelu_erf(t["x"].double()[:-1]).sum(0), None),
}
