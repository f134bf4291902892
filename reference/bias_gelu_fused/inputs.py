"""bias_gelu_fused's inputs, in numpy (grader/exercises/draws.py): x, the bias and the chain's r."""

from __future__ import annotations

import numpy as np

from grader.exercises.draws import hashes, uniform, unit


def lesson(dims: dict, seed: int) -> dict[str, np.ndarray]:
    """The lesson's pattern: x cycles over 53 values, the bias over 11, r over 29."""
    rows, cols = dims["rows"], dims["cols"]
    i = np.arange(rows * cols, dtype=np.int64)
    c = np.arange(cols, dtype=np.int64)
    return {"x": (((i % 53) - 26).astype(np.float32) * np.float32(0.1875)).reshape(rows, cols),
            "bias": ((c % 11) - 5).astype(np.float32) * np.float32(0.25),
            "r": (((i % 29) - 14).astype(np.float32) * np.float32(0.0625)).reshape(rows, cols)}


def random(dims: dict, seed: int) -> dict[str, np.ndarray]:
    """Nine in ten x uniform over [-4, 4], GELU's knee and its neighbourhood; one in ten (the
    hash's low byte below 26) over [-12, 12], both tails. The bias over [-1, 1], r over [-2, 2]."""
    rows, cols = dims["rows"], dims["cols"]
    n = rows * cols
    s = seed * 7919 + rows * 31 + cols
    h = hashes(n, s, 0)
    u = unit(h)
    tails = (h & np.uint32(0xFF)) < np.uint32(26)
    x = np.where(tails, u * np.float32(24.0) - np.float32(12.0), u * np.float32(8.0) - np.float32(4.0))
    return {"x": x.reshape(rows, cols), "bias": uniform(cols, s, 1, -1.0, 1.0),
            "r": uniform(n, s, 2, -2.0, 2.0).reshape(rows, cols)}


GENERATORS = {"lesson": lesson, "random": random}
