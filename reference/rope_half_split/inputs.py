"""rope_half_split's inputs, in numpy (grader/exercises/draws.py): in, and the float32 cos and sin
tables (of the double angle pos * theta_j, theta_j = 10000^(-2j/headDim), rounded)."""

from __future__ import annotations

import numpy as np

from grader.exercises.draws import uniform

BASE = 10000.0


def tables(seq: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    half = head_dim // 2
    j = np.arange(half, dtype=np.float64)
    theta = np.power(BASE, -2.0 * j / head_dim)
    angle = np.arange(seq, dtype=np.float64)[:, None] * theta[None, :]
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def _with_tables(x: np.ndarray, dims: dict) -> dict[str, np.ndarray]:
    cos, sin = tables(dims["seq"], dims["headDim"])
    shape = (dims["batch"], dims["seq"], dims["heads"], dims["headDim"])
    return {"in": x.reshape(shape), "cosTab": cos, "sinTab": sin}


def lesson(dims: dict, seed: int) -> dict[str, np.ndarray]:
    """The lesson's pattern: in[i] = ((i % 61) - 30) * 0.125."""
    n = dims["batch"] * dims["seq"] * dims["heads"] * dims["headDim"]
    i = np.arange(n, dtype=np.int64)
    return _with_tables(((i % 61) - 30).astype(np.float32) * np.float32(0.125), dims)


def random(dims: dict, seed: int) -> dict[str, np.ndarray]:
    """in uniform over [-4, 4], a query's or key's range."""
    n = dims["batch"] * dims["seq"] * dims["heads"] * dims["headDim"]
    s = seed * 7919 + dims["batch"] * 1009 + dims["seq"] * 101 + dims["heads"] * 11 + dims["headDim"]
    return _with_tables(uniform(n, s, 0, -4.0, 4.0), dims)


GENERATORS = {"lesson": lesson, "random": random}
