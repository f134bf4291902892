"""rope_half_split: rotary position embedding over in[batch][seq][heads][headDim], in float64.

Dimension j of a head is rotated with dimension j + headDim/2 (Llama's rotate_half) by the angle
pos * theta_j, theta_j = 10000^(-2j/headDim) (RoFormer's equation 15 with i = j + 1):

    out[j]          = x0 * cos - x1 * sin
    out[j + half]   = x0 * sin + x1 * cos,    x0 = in[j], x1 = in[j + half].

The tables are float32 (cos and sin of the double angle, rounded), as the kernel reads them;
the reference promotes those same floats to double, so a check prices the kernel's arithmetic
and not the tables'. Written with numpy (ARRAYS). The inputs and the tables are drawn by
inputs.py.
"""

from __future__ import annotations

import numpy as np

ARRAYS = "numpy"        # expected() and MISTAKES are given numpy arrays (the default is torch tensors)


def _parts(t: dict, pos: np.ndarray | None = None):
    """x0, x1 (the two halves), cos and sin broadcast over [batch, seq, heads, half], in float64.
    pos: the position each (batch, seq, heads) row is rotated by (default: its seq index)."""
    x = t["in"].astype(np.float64)
    half = x.shape[-1] // 2
    cos, sin = t["cosTab"].astype(np.float64), t["sinTab"].astype(np.float64)
    if pos is None:
        c, s = cos[None, :, None, :], sin[None, :, None, :]
    else:
        c, s = cos[pos], sin[pos]
    return x[..., :half], x[..., half:], c, s


def _join(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.concatenate([lo, hi], axis=-1)


def expected(t: dict, dims: dict) -> dict[str, np.ndarray]:
    x0, x1, c, s = _parts(t)
    return {"out": _join(x0 * c - x1 * s, x0 * s + x1 * c)}


# -- the usual mistakes ----------------------------------------------------------


def _interleaved(t: dict, dims: dict):
    """RoFormer's adjacent pairs (2j, 2j+1) instead of (j, j + half)."""
    x = t["in"].astype(np.float64)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = t["cosTab"].astype(np.float64)[None, :, None, :], t["sinTab"].astype(np.float64)[None, :, None, :]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out, None


def _sign_flipped(t: dict, dims: dict):
    x0, x1, c, s = _parts(t)
    return _join(x0 * c + x1 * s, -x0 * s + x1 * c), None


def _swapped(t: dict, dims: dict):
    x0, x1, c, s = _parts(t)
    return _join(x0 * s - x1 * c, x0 * c + x1 * s), None


def _rows(dims: dict) -> np.ndarray:
    """The flat (batch, seq, heads) row index of every row, shaped [batch, seq, heads]."""
    b, q, h = dims["batch"], dims["seq"], dims["heads"]
    return np.arange(b * q * h).reshape(b, q, h)


def _ignores_heads(t: dict, dims: dict):
    """pos = (p / halfDim) % seq: the head axis folded into the position."""
    pos = _rows(dims) % dims["seq"]
    x0, x1, c, s = _parts(t, pos)
    return _join(x0 * c - x1 * s, x0 * s + x1 * c), None


def _from_head(t: dict, dims: dict):
    """pos = the head index (defined where it is below seq)."""
    b, q, h = dims["batch"], dims["seq"], dims["heads"]
    head = np.broadcast_to(np.arange(h).reshape(1, 1, h), (b, q, h))
    x0, x1, c, s = _parts(t, np.minimum(head, q - 1))
    mask = np.broadcast_to((head < q)[..., None], (b, q, h, dims["headDim"]))
    return _join(x0 * c - x1 * s, x0 * s + x1 * c), mask


MISTAKES = {
    "interleaved": _interleaved,
    "sign_flipped": _sign_flipped,
    "cos_sin_swapped": _swapped,
    "position_ignores_heads": _ignores_heads,
    "position_from_head": _from_head,
}
