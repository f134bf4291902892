"""A wrong output named by the exercise's declared hypotheses (the rubric's `hypotheses` key).

Each variant is an array expression of the case's inputs (exercises/arrayexprs.py): what a kernel
with that mistake writes. A variant with a parameter has it fitted to the student's output first,
on a sample of the elements it explains: in closed form where the output is linear in it (a
factor: ordinary least squares from three evaluations), else from the best of a few values across
its bounds by Gauss-Newton steps (an erf's argument scaled: about 17 evaluations). The first
variant that explains the written elements names the output, with the fitted value in its message.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np

from grader.core.checking import FailedOutput, within
from grader.exercises.arrayeval import evaluate
from grader.exercises.arrayexprs import ArrayExprError
from grader.exercises.schema import Hypotheses, Variant

MATCH = 0.98            # of the elements a variant defines, within SLACK times the tolerance
SLACK = 4.0
SAMPLE = 4096           # elements a fit is measured on
GRID = 9                # values a search starts from, evenly across a parameter's bounds
MIN_FITTED = 16         # a fitted variant explains at least this many elements (one number fits any one element)
NEAR = 1e-3             # a fitted variant within this relative error of the answer everywhere is a near miss, not a mistake
MEANING = 1e-3          # a fit within this relative distance of a meaning's value is that meaning
# A case whose output or inputs hold more elements than this is not tried: only a timed shape does
# (16M elements: a variant is a float64 pass over them, 2.5 s on 2 cores, and a fit 20 of them; 64M
# inputs took 4 GB), and the check cases before it, far smaller, show a mistake in the formula first.
MAX_ELEMENTS = 1 << 21


@dataclass
class Named:
    """A variant that explains the output: its code, what was seen, the fitted values."""

    code: str
    message: str
    fitted: dict[str, float]


class _Arrays(Mapping):
    """The names an expression may read at one case: the inputs (float64, converted when first
    read), the dimensions and derived values, `answer`, and the terms (evaluated when first read)."""

    def __init__(self, hypotheses: Hypotheses, inputs: dict, values: dict, answer: np.ndarray):
        self._terms = hypotheses.terms
        self._inputs = inputs
        self._plain: dict[str, Any] = {**values, "answer": answer}
        self._made: dict[str, Any] = {}
        self.largest = max([answer.size] + [getattr(v, "size", 1) for v in inputs.values()])

    def __getitem__(self, name: str) -> Any:
        if name in self._plain:
            return self._plain[name]
        if name not in self._made:
            if name in self._inputs:
                self._made[name] = np.asarray(self._inputs[name], dtype=np.float64)
            elif name in self._terms:
                self._made[name] = evaluate(self._terms[name], self, largest=self.largest)
            else:
                raise KeyError(name)
        return self._made[name]

    def __contains__(self, name: object) -> bool:
        return name in self._plain or name in self._inputs or name in self._terms

    def __iter__(self) -> Iterator[str]:
        return iter([*self._plain, *self._inputs, *self._terms])

    def __len__(self) -> int:
        return len(self._plain) + len(self._inputs) + len(self._terms)


class _With(Mapping):
    """The case's names and one fitted parameter's value."""

    def __init__(self, base: _Arrays, name: str, value: float):
        self._base, self._name, self._value = base, name, value
        self.largest = base.largest

    def __getitem__(self, name: str) -> Any:
        return self._value if name == self._name else self._base[name]

    def __contains__(self, name: object) -> bool:
        return name == self._name or name in self._base

    def __iter__(self) -> Iterator[str]:
        return iter([self._name, *self._base])

    def __len__(self) -> int:
        return len(self._base) + 1


def variant_output(hypotheses: Hypotheses, variant: Variant, inputs: dict, values: dict, answer: np.ndarray,
                   fitted: float | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """What a variant outputs at one case (float64, the answer's shape) and where it is defined
    (None: everywhere); fitted: its parameter's value (the middle of its bounds where not given)."""
    names: Mapping = _Arrays(hypotheses, inputs, values, answer)
    if variant.fit:
        (param, (lo, hi)), = variant.fit.items()
        names = _With(names, param, 0.5 * (lo + hi) if fitted is None else fitted)
    alt = np.broadcast_to(np.asarray(evaluate(variant.output, names, largest=names.largest), dtype=np.float64),
                          answer.shape)
    mask = None
    if variant.defined:
        mask = np.broadcast_to(np.asarray(evaluate(variant.defined, names, largest=names.largest), dtype=bool),
                               answer.shape)
    return alt, mask


@dataclass
class _Judged:
    """One output being named: the case's names, the failed output, the output in float64 (g), where
    it was written, where it is finite and written, and where it is the right answer."""

    arrays: _Arrays
    failed: FailedOutput
    g: np.ndarray
    written: np.ndarray
    finite: np.ndarray
    right: np.ndarray


def name_output(failed: FailedOutput, hypotheses: Hypotheses, values: dict, g: np.ndarray, written: np.ndarray,
                right: np.ndarray) -> Named | None:
    """The first variant that explains the written elements of g (the output, float64): it matches
    MATCH of the written elements where it is defined, within SLACK times the tolerance, and more of
    them than the right answer does. values: the case's dimensions and derived values; right: where
    g is the answer."""
    if max([g.size] + [getattr(a, "size", 1) for a in failed.inputs.values()]) > MAX_ELEMENTS:
        return None
    judged = _Judged(_Arrays(hypotheses, failed.inputs, values, failed.want), failed, g, written,
                     written & np.isfinite(g), right)
    for variant in hypotheses.variants:
        try:
            named = _try(variant, judged)
        except ArrayExprError as exc:
            warnings.warn(f"hypothesis {variant.code!r} could not be evaluated at {failed.case}: {exc}", stacklevel=2)
            continue
        if named is not None:
            return named
    return None


def _try(variant: Variant, j: _Judged) -> Named | None:
    shape, failed, arrays = j.g.shape, j.failed, j.arrays
    mask = None
    if variant.defined:
        mask = np.broadcast_to(np.asarray(evaluate(variant.defined, arrays, largest=arrays.largest), dtype=bool), shape)
    region = j.written if mask is None else j.written & mask
    n = int(region.sum())
    if n == 0 or (variant.fit and n < MIN_FITTED):
        return None
    fitted: dict[str, float] = {}
    names: Mapping = arrays
    if variant.fit:
        (param, bounds), = variant.fit.items()
        value = _fit(j, variant.output, param, bounds, np.flatnonzero(j.finite & region))
        if value is None:
            return None
        fitted[param] = value
        names = _With(arrays, param, value)
    alt = np.broadcast_to(np.asarray(evaluate(variant.output, names, largest=arrays.largest), dtype=np.float64), shape)
    matches_alt = int((within(j.g, alt, rtol=failed.rtol, atol=failed.atol, slack=SLACK) & region).sum())
    matches_ref = int((j.right & region).sum())
    if not (matches_alt >= MATCH * n and matches_alt > matches_ref):
        return None
    if fitted:
        want = failed.want
        with np.errstate(invalid="ignore", divide="ignore"):
            gap = np.abs(alt - want)[region] / (np.abs(want[region]) + failed.atol)
        if not float(np.max(gap, initial=0.0)) > NEAR:
            return None                  # the fit is the answer, give or take a rounding: a near miss
    return Named(variant.code, _message(variant, fitted, matches_alt, n, j.written, mask), fitted)


def _fit(j: _Judged, text: str, param: str, bounds: list[float], sample: np.ndarray) -> float | None:
    """The parameter's value within its bounds that brings the variant closest to the output on a
    sample of the elements (flat indices into it), in least squares weighted by each element's
    tolerance; None where none does."""
    if sample.size == 0:
        return None
    lo, hi = bounds
    shape = j.g.shape
    sample = sample[np.linspace(0, sample.size - 1, min(SAMPLE, sample.size)).astype(np.int64)]
    at, gs = np.unravel_index(sample, shape), j.g.reshape(-1)[sample]
    weight = 1.0 / (j.failed.atol + j.failed.rtol * np.abs(gs))

    def at_value(v: float) -> np.ndarray:
        names = _With(j.arrays, param, v)
        return np.broadcast_to(np.asarray(evaluate(text, names, largest=names.largest), dtype=np.float64), shape)[at]

    e_lo, e_hi, mid = at_value(lo), at_value(hi), 0.5 * (lo + hi)
    e_mid = at_value(mid)
    with np.errstate(all="ignore"):
        scale = np.abs(e_lo) + np.abs(e_hi) + 1e-300
        linear = bool(np.all(np.abs(e_mid - 0.5 * (e_lo + e_hi)) <= 1e-9 * scale))
        if linear:               # e(v) = e_lo + t (e_hi - e_lo), t = (v - lo) / (hi - lo): least squares in closed form
            d = (e_hi - e_lo) * weight
            dd = float(np.dot(d, d))
            if not dd > 0 or not math.isfinite(dd):
                return None
            t = float(np.dot((gs - e_lo) * weight, d)) / dd
            value = lo + t * (hi - lo)
            return value if lo <= value <= hi else None
        return _search(at_value, gs, weight, lo, hi, {lo: e_lo, mid: e_mid, hi: e_hi})


def _search(at_value, gs: np.ndarray, weight: np.ndarray, lo: float, hi: float, known: dict) -> float:
    """The value in [lo, hi] where the weighted squared distance from the sampled output is least:
    the best of GRID points evenly across the bounds (three of them already known), then Gauss-Newton
    steps from it (a derivative by a forward difference: two evaluations a step, each step halved
    while it does not improve), to a relative 1e-9. About 17 evaluations where the variant is right."""
    def cost(e: np.ndarray) -> float:
        r = (gs - e) * weight
        c = float(np.dot(r, r))
        return c if math.isfinite(c) else math.inf

    grid = {v: known[v] if v in known else at_value(v) for v in np.linspace(lo, hi, GRID).tolist()}
    grid.update(known)
    value = min(grid, key=lambda v: cost(grid[v]))
    e, best = grid[value], cost(grid[value])
    for _ in range(8):
        h = 1e-7 * max(1.0, abs(value)) * (1 if value < hi else -1)
        jac = (at_value(value + h) - e) / h * weight
        jj = float(np.dot(jac, jac))
        if not jj > 0 or not math.isfinite(jj):
            break
        step = float(np.dot((gs - e) * weight, jac)) / jj
        for _ in range(4):                       # halved until it improves
            trial = min(hi, max(lo, value + step))
            e_trial = at_value(trial)
            c = cost(e_trial)
            if c < best:
                break
            step /= 2
        else:
            break
        moved = abs(trial - value)
        value, e, best = trial, e_trial, c
        if moved <= 1e-9 * max(1.0, abs(value)):
            break
    return value


def _message(variant: Variant, fitted: dict[str, float], matches: int, n: int, written: np.ndarray,
             mask: np.ndarray | None) -> str:
    """What the output shows: the variant's own words with the fitted value (and what that value
    means, where the rubric names it), and how many elements it explains."""
    total = int(written.sum())
    partial = mask is not None and n < total
    where = (f"{matches} of the {n} elements where this mistake is defined" if partial
             else f"{matches} of the {n} elements written")
    rest = f" ({total - n} more written elements lie where it is not defined)" if partial else ""
    if not variant.says:
        return f"{where} match this mistake within tolerance{rest}"
    text = variant.says.format(**fitted)
    for value, meaning in variant.meanings.items():
        target = float(value)
        if fitted and all(abs(v - target) <= MEANING * max(1.0, abs(target)) for v in fitted.values()):
            text += f": {meaning}"
            break
    return f"{text} ({where} match within the tolerance{rest})"
