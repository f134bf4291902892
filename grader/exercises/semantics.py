"""A rubric checked as a whole, once its keys have their types (fromyaml.py): every name an
expression uses resolves, the signatures match the tensors, every case gives a launchable grid,
and the tiers, tolerances, limits, timing settings, diagnosis codes, points and findings make
sense. The first problem raises RubricError naming the key and its line, with how to fix it. Also
the rubric's expressions at a case's dimensions (dims_values, default_launch) and the codes a
grade can carry (diagnosis_codes). Imports only core, exercises.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import string
from typing import Callable

from grader.core import exprs
from grader.core.backend import CUDA_RUNTIME  # the language rubrics are written in, for every backend
from grader.core.errors import RubricError
from grader.exercises import arrayexprs
from grader.exercises.fromyaml import key_line
from grader.exercises.schema import CORE_CODES, FINDING_FACTS, FLOOR_KINDS, TIER_NAMES, Rubric, Variant


def check_semantics(r: Rubric, path: str) -> None:
    """The rubric as a whole (see above); path names the file, and a problem's line is found in it."""
    def bad(key: str, problem: str) -> None:
        raise RubricError(path, key, problem, key_line(path, key) if path else None)

    _check_exercise(r, bad)
    _check_hypotheses(r, bad)
    _check_bounds(r, bad)
    _check_timing_settings(r, bad)
    _check_feedback(r, bad)
    _check_points(r, bad)


def _check_bounds(r: Rubric, bad: Callable[[str, str], None]) -> None:
    """The tiers' fractions, the tolerances, the guard and the limits: none below what makes sense."""
    if not 0 < r.tiers.silver < r.tiers.gold <= 1:
        bad("tiers.gold" if r.tiers.gold > 1 else "tiers",
            f"need 0 < silver < gold <= 1 (fractions of the floor), got silver {r.tiers.silver} and gold {r.tiers.gold}")
    band = r.tiers.borderline_band
    if not 0 <= band or r.tiers.silver * (1 + band) >= r.tiers.gold * (1 - band):
        bad("tiers.borderline_band", f"need 0 <= band and the silver line's band clear of the gold line's (got {band} "
            f"with silver {r.tiers.silver} and gold {r.tiers.gold}): a kernel would be on both lines at once")
    if r.tiers.exceeds_floor_margin < 0:
        bad("tiers.exceeds_floor_margin", f"cannot be negative (got {r.tiers.exceeds_floor_margin}): a correct kernel "
            "at the floor would then count as faster than a copy, and get no gold")
    for key in ("rtol", "atol"):
        if getattr(r.tolerance, key) < 0:
            bad(f"tolerance.{key}", f"cannot be negative (got {getattr(r.tolerance, key)}): it would fail correct kernels")
    if r.checks.guard_floats < 0:
        bad("checks.guard_floats", f"cannot be negative (got {r.checks.guard_floats})")
    for f in dataclasses.fields(r.limits):
        value = getattr(r.limits, f.name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            bad(f"limits.{f.name}", f"cannot be negative (got {value})")


def _check_timing_settings(r: Rubric, bad: Callable[[str, str], None]) -> None:
    """The floor's copies, the samples, the budgets, the input sets and buffers, the seeds."""
    for i, kind in enumerate(r.timing.floor):
        if kind not in FLOOR_KINDS:
            bad(f"timing.floor[{i}]", f"unknown copy {kind!r} (known: {', '.join(FLOOR_KINDS)})")
    if not r.timing.floor:
        bad("timing.floor", "name at least one copy")
    if r.timing.informational_floor not in FLOOR_KINDS:
        bad("timing.informational_floor", f"unknown copy {r.timing.informational_floor!r}")
    if r.timing.min_samples < 10 or r.timing.max_samples < r.timing.min_samples:
        bad("timing.min_samples", "need 10 <= min_samples <= max_samples")
    if r.timing.hard_budget_s < r.timing.budget_s:
        bad("timing.hard_budget_s", "must be at least timing.budget_s")
    if r.timing.input_sets < 1:
        bad("timing.input_sets", "at least 1")
    if not 1 <= r.timing.floor_buffers <= 16:
        bad("timing.floor_buffers", "need 1 <= floor_buffers <= 16")
    if not r.checks.seeds:
        bad("checks.seeds", "name at least one seed")


def _check_feedback(r: Rubric, bad: Callable[[str, str], None]) -> None:
    """Every diagnosis code and tier the feedback explains is one a grade can carry (a likely
    misspelling of a mistake's name is said as one)."""
    known = diagnosis_codes(r)
    for code in r.feedback.diagnosis:
        if code not in known:
            unexplained = [(i, m) for i, m in enumerate(r.mistakes) if m not in r.feedback.diagnosis]
            close = difflib.get_close_matches(code, [m for _, m in unexplained], n=1, cutoff=0.6)
            if close:
                i = next(i for i, m in unexplained if m == close[0])
                bad(f"hypotheses.variants[{i}].code", f"{close[0]!r} is explained by no feedback.diagnosis entry; did you mean "
                                      f"{code!r} (feedback.diagnosis has it)?")
            bad(f"feedback.diagnosis.{code}", f"unknown diagnosis code (known: {', '.join(known)})")
    for tier in r.feedback.tiers:
        if tier not in TIER_NAMES:
            bad(f"feedback.tiers.{tier}", f"unknown tier (known: {', '.join(TIER_NAMES)})")


def _check_points(r: Rubric, bad: Callable[[str, str], None]) -> None:
    """The time limit, the points (none negative, every tier known) and the findings' conditions."""
    if r.limits.time_limit_s <= 0:
        bad("limits.time_limit_s", "must be positive")
    for tier, pts in r.points.tiers.items():
        if tier not in TIER_NAMES:
            bad(f"points.tiers.{tier}", f"unknown tier (known: {', '.join(TIER_NAMES)})")
        if pts < 0:
            bad(f"points.tiers.{tier}", "points cannot be negative")
    if r.points.correct < 0:
        bad("points.correct", "points cannot be negative")
    for i, rule in enumerate(r.findings):
        for j, c in enumerate(rule.when):
            if c.fact not in FINDING_FACTS:
                bad(f"findings[{i}].when[{j}].fact", f"unknown fact {c.fact!r} (known: {', '.join(FINDING_FACTS)})")
        if not rule.when:
            bad(f"findings[{i}].when", "name at least one condition")


def _check_hypotheses(r: Rubric, bad: Callable[[str, str], None]) -> None:
    """The hypotheses: every term's and variant's expression parses and reads only names it may (the
    input tensors, the dimensions and derived values, `answer`, the terms above it, its fitted
    parameter); codes unique and not the core's; at most one fitted parameter, with bounds low < high;
    the message's braces name that parameter; each meaning is a number."""
    known = {t.name for t in r.tensors if t.role == "in" and not t.chain} | set(r.dims) | set(r.derived)
    known |= {"answer", *arrayexprs.CONSTANTS}
    for name, text in r.hypotheses.terms.items():
        if name in known or not name.isidentifier():
            bad(f"hypotheses.terms.{name}", "a term's name must be a new identifier (not a tensor, a dimension, "
                                            "`answer` or an earlier term)")
        _readable(f"hypotheses.terms.{name}", text, known, bad)
        known.add(name)
    seen: set[str] = set()
    for i, v in enumerate(r.hypotheses.variants):
        key = f"hypotheses.variants[{i}]"
        if not v.code.isidentifier() or v.code in CORE_CODES or v.code.startswith("unwritten_"):
            bad(f"{key}.code", f"{v.code!r}: a variant's code is an identifier of its own (not one of the core's: "
                               f"{', '.join(CORE_CODES)}, nor unwritten_<dim>)")
        if v.code in seen:
            bad(f"{key}.code", f"{v.code!r} is given twice: each variant has a code of its own")
        seen.add(v.code)
        _check_fit(key, v, known, bad)
        _readable(f"{key}.output", v.output, known | set(v.fit), bad)
        if v.defined:                    # where it is defined is known before its parameter is fitted
            _readable(f"{key}.defined", v.defined, known, bad)
        _check_says(key, v, bad)
        _check_meanings(key, v, bad)


def _readable(key: str, text: str, names: set[str], bad: Callable[[str, str], None]) -> None:
    """An array expression that parses and reads only the names given."""
    _reads_only(key, text, names, bad, arrayexprs.names, arrayexprs.ArrayExprError)


def _reads_only(key: str, text: str, names: set[str], bad: Callable[[str, str], None],
                read: Callable[[str], set[str]], error: type[Exception]) -> None:
    """text parsed by read (which raises error where it cannot) names only the names given: else
    bad() says so (it raises the rubric's error)."""
    try:
        unknown = read(text) - names
    except error as exc:
        bad(key, str(exc))
        raise                           # bad() raises; never reached
    if unknown:
        bad(key, f"unknown name {sorted(unknown)[0]!r} in {text!r} (known: {', '.join(sorted(names))})")


def _check_fit(key: str, v: Variant, known: set[str], bad: Callable[[str, str], None]) -> None:
    """At most one fitted parameter, a new identifier, with bounds low < high."""
    if len(v.fit) > 1:
        bad(f"{key}.fit", "fit at most one parameter (a 1-D search keeps a wrong grade's diagnosis cheap)")
    for p, bounds in v.fit.items():
        if p in known or not p.isidentifier():
            bad(f"{key}.fit.{p}", "a parameter's name must be a new identifier (not a tensor, a dimension, "
                                  "`answer` or a term)")
        if len(bounds) != 2 or not bounds[0] < bounds[1]:
            bad(f"{key}.fit.{p}", f"give its bounds as [low, high] with low < high (got {bounds})")


def _check_says(key: str, v: Variant, bad: Callable[[str, str], None]) -> None:
    """The message's braces name the fitted parameter, and it formats with a number."""
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(v.says) if f is not None}
    except ValueError as exc:
        bad(f"{key}.says", f"{exc} (braces name the fitted parameter: {{k:.3f}}; write {{{{ for a brace)")
    for f in fields:
        if f.split(".")[0].split("[")[0] not in v.fit or f != f.split(".")[0].split("[")[0]:
            bad(f"{key}.says", f"{{{f}}} names no fitted parameter (fit: {', '.join(v.fit) or 'none'})")
    try:
        v.says.format(**{p: 1.0 for p in v.fit})
    except (ValueError, KeyError, IndexError) as exc:
        bad(f"{key}.says", f"cannot be formatted with a number: {exc}")


def _check_meanings(key: str, v: Variant, bad: Callable[[str, str], None]) -> None:
    """Each meaning's key is a value of the fitted parameter."""
    for value in v.meanings:
        try:
            float(value)
        except ValueError:
            bad(f"{key}.meanings.{value}", "a meaning's key is a value of the fitted parameter (a number)")
    if v.meanings and not v.fit:
        bad(f"{key}.meanings", "meanings name values of a fitted parameter: this variant fits none")


def diagnosis_codes(r: Rubric) -> tuple[str, ...]:
    """Every code a grade against this exercise can carry."""
    axes = [f"unwritten_{d}" for t in r.tensors if t.role == "out" and len(t.shape) >= 2 for d in t.shape
            if d in r.dims]
    return tuple(dict.fromkeys([*r.mistakes, *axes, *CORE_CODES]))


def _check_exercise(r: Rubric, bad: Callable[[str, str], None]) -> None:
    """The exercise's contract: every name resolves, every case gives a launchable grid."""
    names = _check_dims(r, bad)
    tensors = _check_tensors(r, names, bad)
    _check_kernel(r, tensors, names, bad)
    _check_cases(r, tensors, names, bad)
    _check_calibrate(r, tensors, names, bad)
    _check_timing(r, names, bad)


def _check_dims(r: Rubric, bad: Callable[[str, str], None]) -> set[str]:
    """The dimensions and the derived values; every name an expression may use."""
    if not r.dims:
        bad("dims", "name at least one dimension")
    names = set(r.dims)
    for key, text in r.derived.items():
        _expr_ok(f"derived.{key}", text, names, bad)
        names.add(key)
    return names


def _check_tensors(r: Rubric, names: set[str], bad: Callable[[str, str], None]) -> dict:
    tensors = {t.name: t for t in r.tensors}
    if len(tensors) != len(r.tensors):
        bad("tensors", "two tensors have the same name")
    if not any(t.role == "out" and not t.chain for t in r.tensors):
        bad("tensors", "name at least one output (role: out)")
    for i, t in enumerate(r.tensors):
        if not t.shape:
            bad(f"tensors[{i}].shape", "give at least one dimension")
        for j, e in enumerate(t.shape):
            _expr_ok(f"tensors[{i}].shape[{j}]", e, names, bad)
    return tensors


def _check_kernel(r: Rubric, tensors: dict, names: set[str], bad: Callable[[str, str], None]) -> None:
    """The kernel's and the launcher's signatures (parsed here first, and kept), the default launch."""
    try:
        sig = r.kernel.parsed
    except ValueError as exc:
        bad("kernel.signature", str(exc))
    if sig.name != r.kernel.name:
        bad("kernel.signature", f"declares {sig.name!r}, but kernel.name is {r.kernel.name!r}")
    _params_ok("kernel.signature", sig.params, tensors, names, bad)
    if r.kernel.launcher:
        try:
            launcher = r.kernel.parsed_launcher
        except ValueError as exc:
            bad("kernel.launcher", str(exc))
        if not launcher.params or not launcher.params[-1].stream:
            bad("kernel.launcher", f"the last parameter must be `{CUDA_RUNTIME.stream} stream` (the stream to launch on)")
        _params_ok("kernel.launcher", launcher.params[:-1], tensors, names, bad)
    for key, dims in (("kernel.grid", r.kernel.grid), ("kernel.block", r.kernel.block)):
        if not 1 <= len(dims) <= 3:
            bad(key, "give 1 to 3 expressions (x, y, z)")
        for j, e in enumerate(dims):
            _expr_ok(f"{key}[{j}]", e, names, bad)


def _check_cases(r: Rubric, tensors: dict, names: set[str], bad: Callable[[str, str], None]) -> None:
    """The chain, the check cases and the timed shape."""
    if r.chain.kernel:
        for j, a in enumerate(r.chain.args):
            if a not in tensors:
                _expr_ok(f"chain.args[{j}]", a, names, bad)
        if r.chain.output not in tensors or tensors[r.chain.output].role != "out":
            bad("chain.output", f"name an output tensor (got {r.chain.output!r})")
    if not r.checks.cases:
        bad("checks.cases", "give at least one case")
    for i, case in enumerate(r.checks.cases):
        _case_ok(f"checks.cases[{i}]", case.dims, r, bad)
        if case.chain and not r.chain.kernel:
            bad(f"checks.cases[{i}].chain", "the exercise has no chain (the `chain` key)")
    _case_ok("timing.dims", r.timing.dims, r, bad)


def _check_calibrate(r: Rubric, tensors: dict, names: set[str], bad: Callable[[str, str], None]) -> None:
    every = dict(tensors)
    for i, t in enumerate(r.calibrate.scratch):
        if t.name in every:
            bad(f"calibrate.scratch[{i}].name", f"{t.name!r} is already a tensor")
        for j, e in enumerate(t.shape):
            _expr_ok(f"calibrate.scratch[{i}].shape[{j}]", e, names, bad)
        every[t.name] = t
    for i, run in enumerate(r.calibrate.runs):
        _expr_ok(f"calibrate.runs[{i}].bytes", run.bytes, names, bad)
        if not run.steps:
            bad(f"calibrate.runs[{i}].steps", "give at least one step")
        for j, step in enumerate(run.steps):
            for k, a in enumerate(step.args):
                if a not in every:
                    _expr_ok(f"calibrate.runs[{i}].steps[{j}].args[{k}]", a, names, bad)


def _check_timing(r: Rubric, names: set[str], bad: Callable[[str, str], None]) -> None:
    """The byte model, the tolerance's scale and the PyTorch baseline."""
    for key in ("bytes", "copy_floats") + (("chain_bytes",) if r.timing.chain_bytes else ()):
        _expr_ok(f"timing.{key}", getattr(r.timing, key), names, bad)
    _expr_ok("tolerance.scale", r.tolerance.scale, names, bad)
    _check_baseline(r, bad)
    _check_scale(r, bad)
    values = dims_values(r, r.timing.dims)
    for key, text in (("timing.bytes", r.timing.bytes), ("timing.copy_floats", r.timing.copy_floats)):
        try:                             # evaluated once here: a bound passed is the rubric's error, not a grade's
            if text and exprs.evaluate(text, values) < 1 and key == "timing.copy_floats":
                bad(key, "must be at least 1 at the timed shape")
        except exprs.ExprError as exc:
            bad(key, str(exc))
    if r.timing.floor_placement == "submission":
        _placement_ok(r, values, bad)


def _check_baseline(r: Rubric, bad: Callable[[str, str], None]) -> None:
    """The PyTorch baseline parses as Python; its shapes are cases of the exercise."""
    if r.timing.baseline:
        try:
            compile(r.timing.baseline, "timing.baseline", "eval")
        except SyntaxError as exc:
            bad("timing.baseline", f"not a Python expression: {exc.msg}")
        except (ValueError, RecursionError, MemoryError) as exc:     # a NUL byte; 100,000 signs
            bad("timing.baseline", f"not a Python expression Python can parse ({type(exc).__name__})")
    elif r.timing.baseline_dims:
        bad("timing.baseline_dims", "needs timing.baseline")
    for i, dims in enumerate(r.timing.baseline_dims):
        _case_ok(f"timing.baseline_dims[{i}]", dims, r, bad)


def _check_scale(r: Rubric, bad: Callable[[str, str], None]) -> None:
    """The tolerance's scale at each check case: both tolerances are multiplied by it, so finite and above 0."""
    for i, case in enumerate(r.checks.cases):
        try:
            scale = exprs.evaluate(r.tolerance.scale, dims_values(r, case.dims), integer=False)
        except exprs.ExprError as exc:
            bad("tolerance.scale", f"{exc} (at checks.cases[{i}]'s dimensions)")
        if not scale > 0:
            bad("tolerance.scale", f"is {scale} at checks.cases[{i}]'s dimensions: it must be above 0, or every "
                                   "check of a correct kernel fails")


def _placement_ok(r: Rubric, values: dict[str, int], bad: Callable[[str, str], None]) -> None:
    """floor_placement: submission copies a timed set's largest input into its largest output:
    both must hold copy_floats floats at the timed shape."""
    try:
        need = exprs.evaluate(r.timing.copy_floats, values)
        largest = {role: max((math.prod(exprs.evaluate(e, values) for e in t.shape)
                              for t in r.tensors if t.role == role and not t.chain), default=0)
                   for role in ("in", "out")}
    except exprs.ExprError:
        return                           # said above, or under tensors
    short = [f"the largest {'input' if role == 'in' else 'output'} tensor holds {n}"
             for role, n in largest.items() if n < need]
    if short:
        bad("timing.floor_placement", f"'submission' copies copy_floats ({need}) floats from an input tensor into an "
            f"output tensor at the timed shape, but {' and '.join(short)}: use 'own', or a smaller copy_floats")


def _expr_ok(key: str, text: str, names: set[str], bad: Callable[[str, str], None]) -> None:
    """A dimension expression that parses and reads only the names given."""
    _reads_only(key, text, names, bad, exprs.names, exprs.ExprError)


def _params_ok(key: str, params, tensors: dict, names: set[str], bad: Callable[[str, str], None]) -> None:
    for p in params:
        if p.pointer:
            if p.name not in tensors:
                bad(key, f"parameter {p.name!r} is a pointer but no tensor has that name "
                         f"(tensors: {', '.join(tensors)})")
            if tensors[p.name].role == "out" and p.const_data:
                bad(key, f"parameter {p.name!r} is an output: it cannot point to const")
        elif p.name not in names:
            bad(key, f"parameter {p.name!r} is neither a tensor, a dimension nor a derived value")


def dims_values(r: Rubric, dims: dict[str, int]) -> dict[str, int]:
    """The dimensions of a case with the derived values added."""
    values = dict(dims)
    for key, text in r.derived.items():
        values[key] = exprs.evaluate(text, values)
    return values


def default_launch(r: Rubric, values: dict[str, int]) -> tuple[list[int], list[int]]:
    """The default launch's grid and block at these dimensions, each padded to (x, y, z) with 1."""
    def three(exprs_: list[str]) -> list[int]:
        return ([int(exprs.evaluate(e, values)) for e in exprs_] + [1, 1, 1])[:3]

    return three(r.kernel.grid), three(r.kernel.block)


def _case_ok(key: str, dims: dict[str, int], r: Rubric, bad: Callable[[str, str], None]) -> None:
    missing = [d for d in r.dims if d not in dims]
    extra = [d for d in dims if d not in r.dims]
    if missing or extra:
        bad(key, f"give every dimension and no other ({', '.join(r.dims)})" +
            (f"; missing {', '.join(missing)}" if missing else f"; unknown {', '.join(extra)}"))
    if any(v < 1 for v in dims.values()):
        bad(key, "every dimension must be at least 1")
    try:
        grid, block = default_launch(r, dims_values(r, dims))
    except exprs.ExprError as exc:
        bad("kernel.grid", f"{exc} (at {key}'s dimensions)")
        return
    limits = (2**31 - 1, 65535, 65535)
    for axis, (g, top) in enumerate(zip(grid, limits, strict=False)):
        if not 1 <= g <= top:
            bad(key, f"the default launch's grid is {grid}: gridDim.{'xyz'[axis]} must be 1 to {top}")
    threads = 1
    for b in block:
        threads *= b
    if not 1 <= threads <= 1024:
        bad(key, f"the default launch's block is {block}: 1 to 1024 threads")
