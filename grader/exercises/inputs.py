"""Inputs for exercises' generators, as torch tensors: draws.py's values, bit for bit, for a
reference.py written with torch that draws its own inputs (its GENERATORS: an exercise without an
inputs.py). A new exercise writes its generators in numpy with draws.py (see its docstring), so
that drawing a run's cases never waits for torch's import.
"""

from __future__ import annotations

import torch

from grader.exercises import draws


def hashes(n: int, seed: int, stream: int) -> torch.Tensor:
    """n uniformly distributed 32-bit values (in int64) of (index, seed, stream)."""
    return torch.from_numpy(draws.hashes(n, seed, stream).astype("int64"))


def unit(h: torch.Tensor) -> torch.Tensor:
    """The top 24 bits of each hash as an exact float32 in [0, 1)."""
    return (h >> 8).to(torch.float32).mul_(1.0 / (1 << 24))


def uniform(n: int, seed: int, stream: int, low: float, high: float) -> torch.Tensor:
    """n float32 values uniform over [low, high)."""
    return unit(hashes(n, seed, stream)).mul_(high - low).add_(low)
