"""bias_gelu_fused: out[row][col] = gelu_erf(x[row][col] + bias[col]), in float64.

GELU comes from grader.exercises.refmath: the float-rounded constants a kernel writes, promoted
to double, and erf from the library, as the lesson does.
"""

from __future__ import annotations

import torch

from grader.exercises.inputs import hashes, uniform, unit
from grader.exercises.refmath import INV_SQRT2, gelu_erf, gelu_tanh  # noqa: F401 - the exercise's own names

# -- inputs ------------------------------------------------------------------


def lesson(dims: dict, seed: int) -> dict[str, torch.Tensor]:
    """The lesson's pattern: x cycles over 53 values, the bias over 11, r over 29."""
    rows, cols = dims["rows"], dims["cols"]
    i = torch.arange(rows * cols, dtype=torch.int64)
    c = torch.arange(cols, dtype=torch.int64)
    return {"x": (((i % 53) - 26).to(torch.float32) * 0.1875).view(rows, cols),
            "bias": ((c % 11) - 5).to(torch.float32) * 0.25,
            "r": (((i % 29) - 14).to(torch.float32) * 0.0625).view(rows, cols)}


def random(dims: dict, seed: int) -> dict[str, torch.Tensor]:
    """Nine in ten x uniform over [-4, 4], GELU's knee and its neighbourhood; one in ten (the
    hash's low byte below 26) over [-12, 12], both tails. The bias over [-1, 1], r over [-2, 2]."""
    rows, cols = dims["rows"], dims["cols"]
    n = rows * cols
    s = seed * 7919 + rows * 31 + cols
    h = hashes(n, s, 0)
    u = unit(h)
    x = torch.where((h & 0xFF) < 26, u * 24.0 - 12.0, u.mul_(8.0).sub_(4.0))
    return {"x": x.view(rows, cols), "bias": uniform(cols, s, 1, -1.0, 1.0),
            "r": uniform(n, s, 2, -2.0, 2.0).view(rows, cols)}


GENERATORS = {"lesson": lesson, "random": random}


# -- the answer ----------------------------------------------------------------


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu_erf(x[row][col] + bias[col]) in float64."""
    return gelu_erf(x.double() + bias.double()[None, :])


def expected(t: dict[str, torch.Tensor], dims: dict) -> dict[str, torch.Tensor]:
    """Every output in float64: out, and the chain's out + r where the case has r."""
    out = bias_gelu(t["x"], t["bias"])
    answer = {"out": out}
    if "r" in t:
        answer["chain"] = out + t["r"].double()
    return answer


# -- the usual mistakes: what each would write to out (and where that is defined) ---


def _by_row(t: dict, dims: dict):
    x, b = t["x"].double(), t["bias"].double()
    rows, cols = x.shape
    row_bias = torch.zeros(rows, dtype=torch.float64)
    k = min(rows, cols)
    row_bias[:k] = b[:k]
    mask = (torch.arange(rows) < cols)[:, None].expand(rows, cols)
    return gelu_erf(x + row_bias[:, None]), mask


MISTAKES = {
    "tanh_gelu": lambda t, d: (gelu_tanh(t["x"].double() + t["bias"].double()[None, :]), None),
    "bias_missing": lambda t, d: (gelu_erf(t["x"].double()), None),
    "bias_after_gelu": lambda t, d: (gelu_erf(t["x"].double()) + t["bias"].double()[None, :], None),
    "bias_by_row": _by_row,
}
