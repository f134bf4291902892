"""Comparing an output with its float64 reference, and reading the guard regions.

Before every run the output is filled with POISON (a NaN with a payload no
arithmetic produces) and the guard regions on both sides with GUARD, so an
unwritten element and an out-of-bounds write can be told apart from a wrong
value afterwards, bit for bit (grader.core.contract holds the two patterns).

numpy arrays throughout: numpy imports in a tenth of the time torch does, and a
warm submission needs nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grader.core.blocks import BLOCK, each_block
from grader.core.contract import GUARD_BITS, POISON_BITS  # noqa: F401 - the patterns, as the checks read them


def tolerance_limit(want: np.ndarray, *, rtol: float, atol: float) -> np.ndarray:
    """How far from want an output may be: atol + rtol * |want|, element by element. The one
    statement of the rubric's tolerance; every check, map and diagnosis measures against it."""
    return np.abs(want) * rtol + atol


def within(got: np.ndarray, want: np.ndarray, *, rtol: float, atol: float, slack: float = 1.0) -> np.ndarray:
    """Where |got - want| <= slack * tolerance_limit(want), in float64; NaN (an unwritten element
    too) is never within. Block by block over the shared threads (a map or a diagnosis of the
    timed shape is 16M values)."""
    g, w = np.broadcast_arrays(np.asarray(got), np.asarray(want))
    out = np.empty(g.shape, dtype=bool)
    gf, wf, of = g.reshape(-1), w.reshape(-1), out.reshape(-1)

    def one(span: slice) -> None:
        gs, ws = np.asarray(gf[span], dtype=np.float64), np.asarray(wf[span], dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            of[span] = np.abs(gs - ws) <= slack * tolerance_limit(ws, rtol=rtol, atol=atol)

    each_block(gf.size, one)
    return out


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
    # Where the float64 pass ran: (wrong, unwritten), one flag an element in got's order (wrong: written
    # and outside the tolerance), so that a failed output's map need not make them again (a wrong
    # timed shape is 16M values: that second float64 pass was 40% of its check).
    masks: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)


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
    decided by the exact float64 comparison, block by block over the shared threads (blocks.py:
    an incorrect timed shape is 16M values, and one float64 pass over it took 6 s on 2 cores)."""
    if prepared is not None:
        clear, worst = _within_prepared(got, prepared)
        if clear:
            return Comparison(passed=True, total=got.size, bad=0, unwritten=0, first=None,
                              max_abs_error=worst, max_rel_error=0.0)
    g, w = np.ascontiguousarray(got).reshape(-1), np.ascontiguousarray(want).reshape(-1)
    count = -(-g.size // BLOCK)
    bad, unwritten = np.zeros(count, dtype=np.int64), np.zeros(count, dtype=np.int64)
    first = np.full(count, -1, dtype=np.int64)
    max_abs, max_rel = np.zeros(count), np.zeros(count)
    wrong_all, unwritten_all = np.empty(g.size, dtype=bool), np.empty(g.size, dtype=bool)

    def one(span: slice) -> None:
        # Two float64 temporaries a block, each reused in place: an all-wrong timed shape (16M
        # values) is the case this is timed for.
        at = span.start // BLOCK
        gs, ws = g[span], np.asarray(w[span], dtype=np.float64)
        never = unwritten_all[span] = unwritten_mask(gs, ws, init, atol)
        unwritten[at] = int(np.count_nonzero(never))
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            diff = gs.astype(np.float64)
            np.subtract(diff, ws, out=diff)
            np.abs(diff, out=diff)
            scale = np.abs(ws)
            limit = np.multiply(scale, rtol)
            limit += atol                                        # tolerance_limit(ws), in place
            bad_mask = ~(diff <= limit)                          # NaN (unwritten too) is never <=
            np.logical_and(bad_mask, ~never, out=wrong_all[span])   # within()'s complement, less the unwritten
            max_abs[at] = float(np.max(diff, where=np.isfinite(diff), initial=0.0))
            count = int(np.count_nonzero(bad_mask))
            bad[at] = count
            if count:
                first[at] = span.start + int(np.argmax(bad_mask))
                np.maximum(scale, atol, out=scale)
                np.divide(diff, scale, out=scale)                # the relative error; the worst is at a bad element
                worst = float(np.max(scale, where=bad_mask & np.isfinite(scale), initial=-np.inf))
                max_rel[at] = worst if worst != -np.inf else np.nan     # bad, none with a finite error

    each_block(g.size, one)
    total_bad = int(bad.sum())
    mismatch = None
    if total_bad:
        flat = int(first[first >= 0][0])
        index = [int(i) for i in np.unravel_index(flat, want.shape)]
        mismatch = Mismatch(index, float(g[flat]), float(w[flat]))
    return Comparison(passed=total_bad == 0, total=got.size, bad=total_bad, unwritten=int(unwritten.sum()),
                      first=mismatch, max_abs_error=float(max_abs.max()) if count else 0.0,
                      max_rel_error=_worst_relative(max_rel[bad > 0]) if total_bad else 0.0,
                      masks=(wrong_all, unwritten_all))


def _worst_relative(per_block: np.ndarray) -> float:
    """The largest finite relative error over the blocks with bad elements; inf where none is finite."""
    finite = per_block[~np.isnan(per_block)]
    return float(finite.max()) if finite.size else float("inf")


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

    each_block(g.size, one, urgent=True)
    return bool(clear.all()), float(worst.max()) if count else 0.0


@dataclass(frozen=True)
class FailedOutput:
    """One output that failed its check, with everything judging it takes, made once by the case's
    check (verdict/checks.py) for its map and its diagnosis: the case and the tensor, each
    dimension's name, what came back (float32) and what was wanted (float64, the same shape), the
    case's inputs and dimensions (an exercise's mistake is modelled on them), the tolerance, how the
    output starts (init: poison or zero), its comparison and its guards."""

    case: str
    tensor: str
    axes: list[str]
    got: np.ndarray
    want: np.ndarray
    inputs: dict
    dims: dict
    rtol: float
    atol: float
    init: str
    cmp: "Comparison"
    guards: "GuardDamage"


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
