"""Naming the mistake behind a wrong output.

Writes outside the output (its guard regions changed); slices never written, along any
dimension (unwritten_<dim>: rows, columns, the upper half of a head); then the output is
matched against what the exercise's usual wrong kernels compute (its reference's MISTAKES:
the tanh GELU, a missing bias, ...); then values that are NaN or only slightly off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from grader.core.checking import FailedOutput, GuardDamage, unwritten_mask, within


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


def _run_mistake(model: Callable, inputs: dict[str, np.ndarray], dims: dict, shape) -> tuple[np.ndarray, np.ndarray | None]:
    """An exercise's mistake model (Reference.mistakes: numpy in, numpy out) at the output's shape:
    what it outputs, as float64, and where that is defined (None: everywhere)."""
    alt, mask = model(inputs, dims)
    return alt.reshape(shape), (None if mask is None else mask.reshape(shape))


def diagnose(failed: FailedOutput, *, mistakes: dict[str, Callable]) -> list[Diagnosis]:
    """What went wrong in one output: mistakes maps a code to a function (inputs, dims) -> (what that
    mistake outputs, mask of where that is defined), on numpy arrays (Reference.mistakes: the
    exercise's reference.py, whatever it is written with)."""
    got, want, cmp, axes, init, atol = failed.got, failed.want, failed.cmp, failed.axes, failed.init, failed.atol
    found = _guard_writes(failed.guards)
    if cmp.passed:
        return found
    unwritten = unwritten_mask(got, want, init, atol)
    found += _unwritten(unwritten, axes, init)
    written = ~unwritten
    g = got.astype(np.float64)
    named = _mistake(failed, g, written, mistakes)
    if named is not None:
        return found + [named]
    nan_where_finite = np.isnan(g) & written & np.isfinite(want)
    if bool(nan_where_finite.any()) or bool(np.isinf(g).any()):
        found.append(Diagnosis("nan_output", f"{int(nan_where_finite.sum())} elements are NaN or infinite where the reference is finite"))
    elif written.all() and cmp.max_rel_error < 1e-3:
        found.append(Diagnosis("near_miss", f"largest relative error {cmp.max_rel_error:.2e}, above the tolerance"))
    elif not any(d.code.startswith(("unwritten", "writes_")) for d in found):
        found.append(Diagnosis("wrong_values", f"{cmp.bad} of {cmp.total} elements wrong"))
    return found


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


def _mistake(failed: FailedOutput, g: np.ndarray, written: np.ndarray,
             mistakes: dict[str, Callable]) -> Diagnosis | None:
    """The first of the exercise's usual mistakes that explains the written elements, if any.

    A mistake must explain more of the written elements than the right answer does: where every
    written element is already right (only unwritten ones are wrong, as with rows skipped at the
    timed shape) none can, and no model is run (each is a float64 pass over the whole output:
    2.5 s a model at 16M elements on 2 cores)."""
    if not mistakes:
        return None
    want, inputs, dims, rtol, atol = failed.want, failed.inputs, failed.dims, failed.rtol, failed.atol
    right = within(g, want, rtol=rtol, atol=atol)       # where got is the right answer: the same for every model
    if bool(right[written].all()):
        return None
    for code, model in mistakes.items():
        alt, mask = _run_mistake(model, inputs, dims, g.shape)
        region = written if mask is None else written & mask
        n = int(region.sum())
        if n == 0:
            continue
        matches_alt = int((within(g, alt, rtol=rtol, atol=atol, slack=4) & region).sum())
        matches_ref = int((right & region).sum())
        # The mistake explains the output if it matches (almost) everywhere it is defined
        # and explains more than the right answer does.
        if matches_alt >= 0.98 * n and matches_alt > matches_ref:
            total, unwritten = int(written.size), int(written.size - written.sum())
            where = (f"{matches_alt} of the {n} elements where this mistake is defined" if mask is not None and
                     n < total - unwritten else f"{matches_alt} of the {n} elements written")
            rest = (f" ({total - unwritten - n} more written elements lie where it is not defined)"
                    if mask is not None and n < total - unwritten else "")
            return Diagnosis(code, f"{where} match this mistake within tolerance{rest}")
    return None
