"""bias_gelu_fused: out[row][col] = gelu_erf(x[row][col] + bias[col]), in float64.

GELU comes from grader.exercises.refmath: the float-rounded constants a kernel writes, promoted
to double, and erf from the library, as the lesson does. The inputs are drawn by inputs.py.
"""

from __future__ import annotations

import torch

from grader.exercises.refmath import INV_SQRT2, gelu_erf, gelu_tanh  # noqa: F401 - the exercise's own names

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
