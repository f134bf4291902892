"""bias_gelu_fused: out[row][col] = gelu_erf(x[row][col] + bias[col]), in float64.

GELU comes from grader.exercises.refmath: the float-rounded constants a kernel writes, promoted
to double, and erf to within one unit in the last place of the C library's, as the lesson does.
Written with numpy (ARRAYS): a first grade computes its answers without importing torch. The
inputs are drawn by inputs.py.
"""

from __future__ import annotations

import numpy as np

from grader.exercises.refmath import INV_SQRT2, gelu_erf, gelu_tanh  # noqa: F401 - the exercise's own names

ARRAYS = "numpy"        # expected() and MISTAKES are given numpy arrays (the default is torch tensors)

# -- the answer ----------------------------------------------------------------


def bias_gelu(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """gelu_erf(x[row][col] + bias[col]) in float64."""
    return gelu_erf(x.astype(np.float64) + bias.astype(np.float64)[None, :])


def expected(t: dict[str, np.ndarray], dims: dict) -> dict[str, np.ndarray]:
    """Every output in float64: out, and the chain's out + r where the case has r."""
    out = bias_gelu(t["x"], t["bias"])
    answer = {"out": out}
    if "r" in t:
        answer["chain"] = out + t["r"].astype(np.float64)
    return answer


# -- the usual mistakes: what each would write to out (and where that is defined) ---


def _by_row(t: dict, dims: dict):
    x, b = t["x"].astype(np.float64), t["bias"].astype(np.float64)
    rows, cols = x.shape
    row_bias = np.zeros(rows, dtype=np.float64)
    k = min(rows, cols)
    row_bias[:k] = b[:k]
    mask = np.broadcast_to((np.arange(rows) < cols)[:, None], (rows, cols))
    return gelu_erf(x + row_bias[:, None]), mask


def _transposed(t: dict, dims: dict):
    """The flat index column-major (col * rows + row) on both x and out: element k of the flat
    output holds gelu(x_flat[k] + bias[k // rows]); every element is written once."""
    x, b = t["x"].astype(np.float64), t["bias"].astype(np.float64)
    rows, cols = x.shape
    flat = x.reshape(-1)
    return gelu_erf(flat + b[np.arange(rows * cols) // rows]).reshape(rows, cols), None


def _double(t: dict, name: str) -> np.ndarray:
    return t[name].astype(np.float64)


MISTAKES = {
    "tanh_gelu": lambda t, d: (gelu_tanh(_double(t, "x") + _double(t, "bias")[None, :]), None),
    "bias_missing": lambda t, d: (gelu_erf(_double(t, "x")), None),
    "bias_after_gelu": lambda t, d: (gelu_erf(_double(t, "x")) + _double(t, "bias")[None, :], None),
    "bias_by_row": _by_row,
    "transposed_index": _transposed,
}
