"""rope_half_split: rotary position embedding over in[batch][seq][heads][headDim], in float64.

Dimension j of a head is rotated with dimension j + headDim/2 (Llama's rotate_half) by the angle
pos * theta_j, theta_j = 10000^(-2j/headDim) (RoFormer's equation 15 with i = j + 1):

    out[j]          = x0 * cos - x1 * sin
    out[j + half]   = x0 * sin + x1 * cos,    x0 = in[j], x1 = in[j + half].

The tables are float32 (cos and sin of the double angle, rounded), as the kernel reads them;
the reference promotes those same floats to double, so a check prices the kernel's arithmetic
and not the tables'. Written with numpy (ARRAYS). The inputs and the tables are drawn by
inputs.py; the usual mistakes are the rubric's hypotheses.
"""

from __future__ import annotations

import numpy as np

ARRAYS = "numpy"        # expected() is given numpy arrays (the default is torch tensors)


def _parts(t: dict):
    """x0, x1 (the two halves), cos and sin broadcast over [batch, seq, heads, half], in float64."""
    x = t["in"].astype(np.float64)
    half = x.shape[-1] // 2
    cos, sin = t["cosTab"].astype(np.float64), t["sinTab"].astype(np.float64)
    return x[..., :half], x[..., half:], cos[None, :, None, :], sin[None, :, None, :]


def _join(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.concatenate([lo, hi], axis=-1)


def expected(t: dict, dims: dict) -> dict[str, np.ndarray]:
    x0, x1, c, s = _parts(t)
    return {"out": _join(x0 * c - x1 * s, x0 * s + x1 * c)}
