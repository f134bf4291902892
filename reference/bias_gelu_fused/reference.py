"""bias_gelu_fused: out[row][col] = gelu_erf(x[row][col] + bias[col]), in float64.

GELU comes from grader.exercises.refmath: the float-rounded constants a kernel writes, promoted
to double, and erf to within one unit in the last place of the C library's, as the lesson does.
Written with numpy (ARRAYS): a first grade computes its answers without importing torch. The
inputs are drawn by inputs.py; the usual mistakes are the rubric's hypotheses.
"""

from __future__ import annotations

import numpy as np

from grader.exercises.refmath import INV_SQRT2, gelu_erf, gelu_tanh  # noqa: F401 - the exercise's own names

ARRAYS = "numpy"        # expected() is given numpy arrays (the default is torch tensors)

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
