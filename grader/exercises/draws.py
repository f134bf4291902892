"""Inputs for exercises' generators, in numpy: the same bits on every machine and version, and
nothing to predict without the seed.

An exercise's inputs.py draws its inputs from these (its GENERATORS, returning float32 arrays).
They are a keyed counter generator, not a library's generators (which change between versions
and devices): a case's inputs are a pure function of (seed, stream, index), so a result can be
reproduced anywhere.

The key is Philox-4x32-10's 128 bits, taken from a BLAKE2b digest of (seed, stream): knowing
some values of a stream tells nothing usable about the others, and a seed of any size is taken
whole. On a GPU the grader draws the random cases' seeds afresh for every run and never shows
them to a process that runs student code (exercises/plan.py), so a kernel cannot recognise its
inputs and regenerate them instead of reading them. numpy's bit generators keep their streams
stable across versions (NEP 19).

Written in numpy so that drawing a run's cases never waits for torch's import (seconds on a
freshly started machine): torch is needed only for the answers, which the verdict waits for
after the child has run. inputs.py gives the same values as torch tensors.
"""

from __future__ import annotations

import hashlib

import numpy as np

_MASK = 0xFFFFFFFF


def _key(seed: int, stream: int) -> int:
    digest = hashlib.blake2b(f"grader inputs {int(seed)} {int(stream)}".encode(), digest_size=16).digest()
    return int.from_bytes(digest, "little")


def hashes(n: int, seed: int, stream: int) -> np.ndarray:
    """n uniformly distributed 32-bit values (uint32) of (index, seed, stream). Kept in 32 bits:
    the timed shape's 16M values took a second more through int64 arithmetic."""
    raw = np.random.Philox(key=_key(seed, stream)).random_raw((n + 1) // 2)
    return raw.view(np.uint32)[:n]


def unit(h: np.ndarray) -> np.ndarray:
    """The top 24 bits of each hash as an exact float32 in [0, 1)."""
    return (h >> 8).astype(np.float32) * np.float32(1.0 / (1 << 24))


def uniform(n: int, seed: int, stream: int, low: float, high: float) -> np.ndarray:
    """n float32 values uniform over [low, high)."""
    return unit(hashes(n, seed, stream)) * np.float32(high - low) + np.float32(low)
