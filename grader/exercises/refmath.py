"""Float64 references of functions exercises share, for reference.py files to import.

As in the lesson, constants are the float-rounded ones a kernel writes (0.70710678f), promoted
to double, so a check prices the kernel's arithmetic and not its choice of literal; erf and tanh
come from the library, not from the kernel.
"""

from __future__ import annotations

import torch


def f32(value: float) -> float:
    """value rounded to float32, as a kernel's literal is."""
    return float(torch.tensor(value, dtype=torch.float32))


INV_SQRT2 = f32(0.70710678)        # 1/sqrt(2)
GELU_A = f32(0.7978845608)         # sqrt(2/pi)
GELU_B = f32(0.044715)             # the tanh form's cubic coefficient


def gelu_erf(v: torch.Tensor) -> torch.Tensor:
    """The exact GELU (F.gelu's default): 0.5 v (1 + erf(v / sqrt(2)))."""
    return 0.5 * v * (1.0 + torch.special.erf(v * INV_SQRT2))


def gelu_tanh(v: torch.Tensor) -> torch.Tensor:
    """The tanh approximation: 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))."""
    return 0.5 * v * (1.0 + torch.tanh(GELU_A * (v + GELU_B * v * v * v)))
