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

from grader.core.blocks import BLOCK, each_block, mapped

if BLOCK % 4:
    raise ImportError("grader/core/blocks.py's BLOCK must be a multiple of Philox's four values a step")

_MASK = 0xFFFFFFFF


def _key(seed: int, stream: int) -> int:
    digest = hashlib.blake2b(f"grader inputs {int(seed)} {int(stream)}".encode(), digest_size=16).digest()
    return int.from_bytes(digest, "little")


def hashes(n: int, seed: int, stream: int) -> np.ndarray:
    """n uniformly distributed 32-bit values (uint32) of (index, seed, stream). Kept in 32 bits:
    the timed shape's 16M values took a second more through int64 arithmetic. Drawn in blocks
    (grader/core/blocks.py), each from the generator advanced to its start: the same bits."""
    key = _key(seed, stream)
    raw = np.empty((n + 1) // 2, dtype=np.uint64)

    def one(span: slice) -> None:
        bits = np.random.Philox(key=key)
        bits.advance(span.start // 4)           # a step is four 64-bit values; a block's start is a multiple
        raw[span] = bits.random_raw(span.stop - span.start)

    each_block(raw.size, one)
    return raw.view(np.uint32)[:n]


def unit(h: np.ndarray) -> np.ndarray:
    """The top 24 bits of each hash as an exact float32 in [0, 1)."""
    return mapped(_unit, h, np.float32)


def _unit(h: np.ndarray) -> np.ndarray:
    return (h >> 8).astype(np.float32) * np.float32(1.0 / (1 << 24))


def uniform(n: int, seed: int, stream: int, low: float, high: float) -> np.ndarray:
    """n float32 values uniform over [low, high)."""
    scale, low32 = np.float32(high - low), np.float32(low)
    return mapped(lambda h: _unit(h) * scale + low32, hashes(n, seed, stream), np.float32)
