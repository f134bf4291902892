"""Naming the mistake behind a wrong output.

Writes outside the output (its guard regions changed); slices never written, along any
dimension (unwritten_<dim>: rows, columns, the upper half of a head); then the output is
matched against the exercise's hypotheses, what its usual wrong kernels compute (the rubric's
`hypotheses`: the tanh GELU, a missing bias, a factor, erf's argument scaled, ...; fitted and
matched in verdict/hypotheses.py); then values that are NaN or infinite (each counted as what
it is) or only slightly off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.core.checking import FailedOutput, GuardDamage, unwritten_mask, within
from grader.core.contract import SHARED_POISON_BITS
from grader.exercises.schema import Hypotheses
from grader.verdict.hypotheses import NEAR, name_output


@dataclass
class Diagnosis:
    code: str
    message: str          # what was seen, specific to this output
    case: str = ""


def _ranges(indices: list[int]) -> str:
    out, start, prev = [], None, None
    for i in indices:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}" if start == prev else f"{start}..{prev}")
            start = prev = i
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}..{prev}")
    text = ", ".join(out[:6])
    return text + (", ..." if len(out) > 6 else "")


def _still(init: str) -> str:
    return "; they still hold the zero the output starts with" if init == "zero" else ""


def diagnose(failed: FailedOutput, *, hypotheses: Hypotheses | None = None,
             values: dict | None = None) -> list[Diagnosis]:
    """What went wrong in one output: writes outside it, slices never written, the exercise's
    hypotheses (the rubric's variants of the reference, verdict/hypotheses.py; None: not tried,
    as for an output other than the first, or where an earlier case tried them), then NaN and
    infinities, a near miss or the catch-all. values: the case's dimensions and derived values
    (the case's dimensions where not given)."""
    got, want, cmp, axes, init, atol = failed.got, failed.want, failed.cmp, failed.axes, failed.init, failed.atol
    found = _guard_writes(failed.guards)
    if cmp.passed:
        return found
    unwritten = unwritten_mask(got, want, init, atol)
    slices = _unwritten(unwritten, axes, init)
    written = ~unwritten
    g = got.astype(np.float64)
    named = _hypothesis(failed, g, written, hypotheses, values)
    if named is not None:
        # the mistake first: rows it never writes (a reduction along the wrong axis) follow from it
        return found + [named] + slices
    found += slices
    finite_want = np.isfinite(want)
    shared = _from_unwritten_shared(got, written & finite_want)
    nan = int((np.isnan(g) & written & finite_want).sum())
    pos_inf = int((np.isposinf(g) & written & finite_want).sum())
    neg_inf = int((np.isneginf(g) & written & finite_want).sum())
    if shared:
        found.append(Diagnosis("reads_unwritten_shared", _shared_said(shared, nan, int(written.sum()))))
    elif nan or pos_inf or neg_inf:
        found.append(Diagnosis("nan_output", _not_finite(nan, pos_inf, neg_inf, int(written.sum()))))
    elif written.all() and cmp.max_rel_error < NEAR:
        found.append(Diagnosis("near_miss", f"largest relative error {cmp.max_rel_error:.2e}, above the tolerance"))
    elif not any(d.code.startswith(("unwritten", "writes_")) for d in found):
        found.append(Diagnosis("wrong_values", f"{cmp.bad} of {cmp.total} elements wrong"))
    return found


def _from_unwritten_shared(got: np.ndarray, where: np.ndarray) -> int:
    """How many elements (of where) are the NaN the emulator fills shared memory with, either sign:
    a value read from shared memory no thread of the block wrote, carried through the arithmetic."""
    if got.dtype != np.float32:
        return 0
    raw = np.ascontiguousarray(got).view(np.uint32) & np.uint32(0x7FFFFFFF)
    return int(((raw == SHARED_POISON_BITS) & where).sum())


def _shared_said(shared: int, nan: int, written: int) -> str:
    """'40 of the 9797 elements written are NaN from shared memory no thread of the block wrote'."""
    others = nan - shared
    rest = f" ({others} more NaN otherwise)" if others else ""
    return (f"{shared} of the {written} elements written {'is' if shared == 1 else 'are'} the NaN the emulator fills "
            f"shared memory with before each block{rest}: they read shared memory no thread of the block wrote")


def _not_finite(nan: int, pos_inf: int, neg_inf: int, written: int) -> str:
    """'3 elements are NaN and 4000 are +infinity, of the 4000 written, where the reference is finite'."""
    parts = [f"{nan} {'is' if nan == 1 else 'are'} NaN" if nan else "",
             f"{pos_inf} {'is' if pos_inf == 1 else 'are'} +infinity" if pos_inf else "",
             f"{neg_inf} {'is' if neg_inf == 1 else 'are'} -infinity" if neg_inf else ""]
    said = [p for p in parts if p]
    text = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    return f"of the {written} elements written, {text} where the reference is finite"


def _floats(n: int) -> str:
    return f"{n} float" + ("" if n == 1 else "s")


def _guard_writes(guards: GuardDamage) -> list[Diagnosis]:
    found = []
    if guards.after:
        found.append(Diagnosis("writes_past_output",
                               f"{_floats(guards.after)} past the end of the output changed, the farthest "
                               f"{_floats(guards.farthest_after)} past its end"))
    if guards.before:
        found.append(Diagnosis("writes_before_output", f"{_floats(guards.before)} before the output changed"))
    return found


def _unwritten(unwritten: np.ndarray, axes: list[str], init: str) -> list[Diagnosis]:
    """Elements never written: all of them, whole slices along a named dimension, or some."""
    if bool(unwritten.all()):
        return [Diagnosis("unwritten_elements", f"none of the {unwritten.size} elements was written" + _still(init))]
    if not bool(unwritten.any()):
        return []
    whole = []
    if unwritten.ndim >= 2:
        for k, axis in enumerate(axes):
            others = tuple(d for d in range(unwritten.ndim) if d != k)
            slices = [int(i) for i in np.flatnonzero(unwritten.all(axis=others))]
            if slices:
                whole.append(Diagnosis(f"unwritten_{axis}", f"{len(slices)} of {unwritten.shape[k]} {axis} never "
                                       f"written ({axis} {_ranges(slices)})" + _still(init)))
    return whole or [Diagnosis("unwritten_elements",
                               f"{int(unwritten.sum())} of {unwritten.size} elements never written" + _still(init))]


def _hypothesis(failed: FailedOutput, g: np.ndarray, written: np.ndarray, hypotheses: Hypotheses | None,
                values: dict | None) -> Diagnosis | None:
    """The first of the exercise's hypotheses that explains the written elements, if any.

    A variant must explain more of the written elements than the right answer does: where every
    written element is already right (only unwritten ones are wrong, as with rows skipped at the
    timed shape) none can, and none is evaluated (each is a float64 pass over the whole output:
    2.5 s a variant at 16M elements on 2 cores)."""
    if hypotheses is None or not hypotheses.variants:
        return None
    right = within(g, failed.want, rtol=failed.rtol, atol=failed.atol)   # where got is the right answer
    if bool(right[written].all()):
        return None
    named = name_output(failed, hypotheses, dict(failed.dims) if values is None else values, g, written, right)
    return None if named is None else Diagnosis(named.code, named.message)
