"""The float64 references the submission is checked against, and the usual mistakes.

As in the lesson, GELU's constants are the float-rounded ones the kernel
uses, promoted to double, so the check prices the kernel's arithmetic and
not the choice of literal; erf comes from the library, not from the kernel.
"""

from __future__ import annotations

import torch

# 1/sqrt(2), sqrt(2/pi) and the tanh form's cubic coefficient, rounded to float.
INV_SQRT2 = float(torch.tensor(0.70710678, dtype=torch.float32))
GELU_A = float(torch.tensor(0.7978845608, dtype=torch.float32))
GELU_B = float(torch.tensor(0.044715, dtype=torch.float32))


def gelu_erf(v: torch.Tensor) -> torch.Tensor:
    return 0.5 * v * (1.0 + torch.special.erf(v * INV_SQRT2))


def gelu_tanh(v: torch.Tensor) -> torch.Tensor:
    return 0.5 * v * (1.0 + torch.tanh(GELU_A * (v + GELU_B * v * v * v)))


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu_erf(x[row][col] + bias[col]) in float64."""
    return gelu_erf(x.double() + bias.double()[None, :])


def chain(x: torch.Tensor, bias: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """bias, exact GELU, residual, in float64."""
    return bias_gelu(x, bias) + r.double()


def mistakes(x: torch.Tensor, bias: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    """What the usual wrong kernels compute: code -> (output, mask of elements where it is defined)."""
    xd, bd = x.double(), bias.double()
    rows, cols = xd.shape
    by_row_mask = None
    row_bias = torch.zeros(rows, dtype=torch.float64)
    k = min(rows, cols)
    row_bias[:k] = bd[:k]
    by_row_mask = (torch.arange(rows) < cols)[:, None].expand(rows, cols)
    return {
        "tanh_gelu": (gelu_tanh(xd + bd[None, :]), None),
        "bias_missing": (gelu_erf(xd), None),
        "bias_after_gelu": (gelu_erf(xd) + bd[None, :], None),
        "bias_by_row": (gelu_erf(xd + row_bias[:, None]), by_row_mask),
    }
