"""Deterministic inputs for exercises' generators: the same bits on every machine and version.

An exercise's reference.py draws its inputs from these (its GENERATORS). They are counter
hashes, not torch's generators, which change between versions and devices: a case's inputs
are a pure function of (seed, stream, index), so a result can be reproduced anywhere.
"""

from __future__ import annotations

import torch

_MASK = 0xFFFFFFFF


def hashes(n: int, seed: int, stream: int) -> torch.Tensor:
    """n 32-bit hashes (in int64) of (index, seed, stream).

    Wellons' two-multiply mixer with constants below 2^31, so every product fits in int64.
    """
    key = (seed * 0x5BD1E995 + stream * 0x27D4EB2F + 0x165667B1) & _MASK
    h = torch.arange(n, dtype=torch.int64).add_(key).bitwise_and_(_MASK)
    h.bitwise_xor_(h >> 16).mul_(0x21F0AAAD).bitwise_and_(_MASK)
    h.bitwise_xor_(h >> 15).mul_(0x735A2D97).bitwise_and_(_MASK)
    return h.bitwise_xor_(h >> 15)


def unit(h: torch.Tensor) -> torch.Tensor:
    """The top 24 bits of each hash as an exact float32 in [0, 1)."""
    return (h >> 8).to(torch.float32).mul_(1.0 / (1 << 24))


def uniform(n: int, seed: int, stream: int, low: float, high: float) -> torch.Tensor:
    """n float32 values uniform over [low, high)."""
    return unit(hashes(n, seed, stream)).mul_(high - low).add_(low)
