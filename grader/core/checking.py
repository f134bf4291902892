"""Comparing an output with its float64 reference, and reading the guard regions.

Before every run the output is filled with POISON (a NaN with a payload no
arithmetic produces) and the guard regions on both sides with GUARD, so an
unwritten element and an out-of-bounds write can be told apart from a wrong
value afterwards, bit for bit (grader.core.contract holds the two patterns).

numpy arrays throughout: numpy imports in a tenth of the time torch does, and a
warm submission needs nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.core.blocks import BLOCK, each_block
from grader.core.contract import GUARD_BITS, POISON_BITS  # noqa: F401 - the patterns, as the checks read them


def tolerance_limit(want: np.ndarray, *, rtol: float, atol: float) -> np.ndarray:
    """How far from want an output may be: atol + rtol * |want|, element by element. The one
    statement of the rubric's tolerance; every check, map and diagnosis measures against it."""
    return np.abs(want) * rtol + atol


def within(got: np.ndarray, want: np.ndarray, *, rtol: float, atol: float, slack: float = 1.0) -> np.ndarray:
    """Where |got - want| <= slack * tolerance_limit(want), in float64; NaN (an unwritten element
    too) is never within."""
    g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.abs(g - w) <= slack * tolerance_limit(w, rtol=rtol, atol=atol)


def bits_array(value_bits: int, n: int) -> np.ndarray:
    """n float32s whose bits are value_bits."""
    return np.full(n, value_bits, dtype=np.uint32).view(np.float32)


@dataclass
class Mismatch:
    index: list[int]          # the element's index, outermost dimension first
    got: float
    want: float


@dataclass
class Comparison:
    passed: bool
    total: int
    bad: int
    unwritten: int
    first: Mismatch | None
    max_abs_error: float
    max_rel_error: float          # over the elements that were written and are finite


@dataclass
class Prepared:
    """A reference made ready for a fast check (computed while the child runs).

    want32 is the float64 reference rounded to float32, and limit32 the tolerance
    atol + rtol*|want| shrunk by 1% and rounded down: the float32 rounding of want and of
    the difference is far below 1% of the tolerance, so an element within limit32 in
    float32 is certainly within the tolerance in float64.
    """

    want32: np.ndarray
    limit32: np.ndarray


def prepare(want: np.ndarray, *, rtol: float, atol: float) -> Prepared:
    """want in float32, and each element's limit a little inside the tolerance, block by block
    (blocks.py: the timed shape is 16M values)."""
    flat = np.ascontiguousarray(want).reshape(-1)
    want32, limit32 = np.empty(flat.shape, np.float32), np.empty(flat.shape, np.float32)

    def one(span: slice) -> None:
        want32[span] = flat[span]
        limit = tolerance_limit(flat[span], rtol=rtol, atol=atol)     # one temporary a block, scaled in place
        limit *= 0.99
        limit32[span] = limit

    each_block(flat.size, one)
    return Prepared(want32.reshape(want.shape), limit32.reshape(want.shape))


def unwritten_mask(got: np.ndarray, want: np.ndarray, init: str = "poison", atol: float = 0.0) -> np.ndarray:
    """Elements the kernel never wrote: still the poison; or, for an output that starts at zero
    (an accumulator), still exactly zero where the answer is clearly not."""
    raw = np.ascontiguousarray(got).view(np.uint32)
    if init == "zero":
        return (raw == 0) & (np.abs(want) > 10 * atol)
    return raw == POISON_BITS


def compare(got: np.ndarray, want: np.ndarray, *, rtol: float, atol: float,
            prepared: Prepared | None = None, init: str = "poison") -> Comparison:
    """got: float32; want: float64 of the same shape (any number of dimensions). With prepared, a float32 pass
    settles the usual case (every element clearly within tolerance); anything else is
    decided by the exact float64 comparison."""
    with np.errstate(invalid="ignore", over="ignore"):
        if prepared is not None:
            clear, worst = _within_prepared(got, prepared)
            if clear:
                return Comparison(passed=True, total=got.size, bad=0, unwritten=0, first=None,
                                  max_abs_error=worst, max_rel_error=0.0)
        unwritten = unwritten_mask(got, want, init, atol)
        diff = np.abs(got.astype(np.float64) - want)
        bad_mask = ~(diff <= tolerance_limit(want, rtol=rtol, atol=atol))     # NaN (unwritten too) is never <=
        bad = int(bad_mask.sum())
        first = None
        max_rel = 0.0
        if bad:
            flat = np.flatnonzero(bad_mask)
            index = [int(i) for i in np.unravel_index(int(flat[0]), want.shape)]
            first = Mismatch(index, float(got[tuple(index)]), float(want[tuple(index)]))
            # the worst relative error is reached at a bad element
            d, w = diff.reshape(-1)[flat], np.maximum(np.abs(want.reshape(-1)[flat]), atol)
            rel = d / w
            rel = rel[np.isfinite(rel)]
            max_rel = float(rel.max()) if rel.size else float("inf")
        max_abs = float(np.nan_to_num(diff, nan=0.0, posinf=0.0).max()) if diff.size else 0.0
    return Comparison(passed=bad == 0, total=got.size, bad=bad, unwritten=int(unwritten.sum()),
                      first=first, max_abs_error=max_abs, max_rel_error=max_rel)


def _within_prepared(got: np.ndarray, prepared: Prepared) -> tuple[bool, float]:
    """The float32 pass, block by block: whether every element is clearly within its limit, and
    the largest difference (meaningful only then)."""
    g, w32, l32 = (np.ascontiguousarray(a).reshape(-1) for a in (got, prepared.want32, prepared.limit32))
    count = -(-g.size // BLOCK)
    clear, worst = np.ones(count, dtype=bool), np.zeros(count)

    def one(span: slice) -> None:
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.subtract(g[span], w32[span])
            np.abs(diff, out=diff)
            at = span.start // BLOCK
            clear[at] = bool((diff <= l32[span]).all())
            worst[at] = float(diff.max()) if clear[at] else 0.0

    each_block(g.size, one)
    return bool(clear.all()), float(worst.max()) if count else 0.0


@dataclass
class GuardDamage:
    before: int            # guard elements changed before the output
    after: int             # guard elements changed after it
    farthest_after: int    # how many floats past the end the farthest changed one is (0 if none)

    @property
    def damaged(self) -> bool:
        return bool(self.before or self.after)


def read_guards(full: np.ndarray, pad: int, n: int) -> GuardDamage:
    """full = [pad guard floats][n output floats][pad guard floats], as a float32 array."""
    raw = np.ascontiguousarray(full).view(np.uint32)
    before = raw[:pad] != GUARD_BITS
    after = raw[pad + n :] != GUARD_BITS
    far = int(np.flatnonzero(after)[-1]) + 1 if bool(after.any()) else 0
    return GuardDamage(before=int(before.sum()), after=int(after.sum()), farthest_after=far)
