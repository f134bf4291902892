"""gelu_sum: out[b][d] = sum over r of gelu_erf(x[r][b][d]), in float64 (F.gelu(x).sum(0)).

GELU is the exact form PyTorch's F.gelu computes by default, x * 0.5 * (1 + erf(x / sqrt(2))),
with the float-rounded 1/sqrt(2) a kernel writes, promoted to double. Written with numpy
(ARRAYS); the timing's baseline is still PyTorch's own (the rubric's timing.baseline). The
inputs are drawn by inputs.py; the usual mistakes are the rubric's hypotheses.
"""

from __future__ import annotations

import numpy as np

from grader.exercises.refmath import gelu_erf

ARRAYS = "numpy"        # expected() is given numpy arrays (the default is torch tensors)


def _double(t: dict) -> np.ndarray:
    return t["x"].astype(np.float64)


def expected(t: dict, dims: dict) -> dict[str, np.ndarray]:
    return {"out": gelu_erf(_double(t)).sum(0)}
