"""A case's inputs and answers: drawn by the exercise's generator and computed by its reference,
checked, kept on disk.

The inputs of a case are one float32 file, its input tensors one after another; its answers
one float64 file, its outputs one after another; both in a directory of their own in the
build cache (named by the reference's digest and the case), so warm runs and a class's batch
draw and compute each case once. The child maps the inputs read-only; nothing crosses the pipe.
Only a miss runs the reference (and imports torch, which it is written with): a warm
submission reads numpy arrays from these files.

A private case (plan.py: a GPU run's random checks and timed sets, drawn from the run's secret)
lies in the run's own folder (Store): under the cache's runs/, which no one else may list, named
by 128 random bits, removed when the grade ends. It was drawn ahead by the previous grade's
detached process (pool.py), answers included; else the grade draws it itself, and then its answers
are computed in memory and never written.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.core import exprs, sealed
from grader.core.checking import Prepared, prepare
from grader.core.errors import ExerciseError
from grader.exercises import Reference
from grader.exercises.casefiles import answers_file, input_file
from grader.exercises.plan import Case, shape_of, tensors_of
from grader.exercises.rubric import Rubric, dims_values


def draw(rubric: Rubric, reference: Reference, case: Case) -> dict[str, np.ndarray]:
    """The case's input tensors (float32, contiguous numpy arrays), checked against the rubric's
    shapes. A generator returns numpy arrays (inputs.py); torch tensors (an older reference.py's
    GENERATORS) are taken as they are, and only then is torch imported."""
    drawn = reference.generate(case.inputs, dict(case.dims), case.draw_seed)
    values = dims_values(rubric, case.dims)
    source = reference.folder / ("inputs.py" if (reference.folder / "inputs.py").is_file() else "reference.py")
    out = {}
    for t in tensors_of(rubric, case):
        if t.role != "in":
            continue
        if t.name not in drawn:
            raise ExerciseError(f"{source}: generator {case.inputs!r} gave no {t.name!r} for {case.name}")
        value = drawn[t.name]
        kind = str(getattr(value, "dtype", type(value).__name__))
        if not isinstance(value, np.ndarray):
            value = _from_torch(value)
        want = shape_of(t, values)
        if value is None or value.shape != want or value.dtype != np.float32:
            shape = tuple(getattr(drawn[t.name], "shape", ()))
            raise ExerciseError(f"{source}: generator {case.inputs!r} gave {t.name} as {kind} {shape} for "
                                f"{case.name}; the rubric says float32 {want}")
        out[t.name] = np.ascontiguousarray(value)
    return out


def _from_torch(value) -> np.ndarray | None:
    """A float32 torch tensor as a numpy array; None for anything else."""
    import torch  # noqa: PLC0415  (lazy: only for a generator that gave torch; 1.5 s on the H200 host, 4-6 s cold)

    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
        return None
    return value.detach().cpu().contiguous().numpy()


# What exercises import from the grader (the hash generators, GELU): part of every case's key.
def _shapes(rubric: Rubric, case: Case, role: str) -> dict[str, tuple[int, ...]]:
    values = dims_values(rubric, case.dims)
    return {t.name: shape_of(t, values) for t in tensors_of(rubric, case) if t.role == role}


def _read(path: Path, shapes: dict[str, tuple[int, ...]], dtype) -> dict[str, np.ndarray] | None:
    """The arrays of a file written by _write, or None when there is none of the right size."""
    size = np.dtype(dtype).itemsize
    total = sum(size * math.prod(s) for s in shapes.values())
    try:
        if path.stat().st_size != total:
            return None
    except OSError:
        return None
    problem = sealed.check(path)
    if problem:                                     # truncated, overwritten, or written before seals
        if "no valid seal" not in problem:
            sealed.say_healed(f"case file {path.parent.name}/{path.name}", problem)
        return None
    os.utime(path.parent)
    # mapped, not read: the inputs are only looked at to name a mistake, and the timed shape's are 64 MB
    flat = np.memmap(path, dtype=dtype, mode="r") if total else np.zeros(0, dtype=dtype)
    out, at = {}, 0
    for name, s in shapes.items():
        n = math.prod(s)
        out[name] = flat[at: at + n].reshape(s)
        at += n
    return out


def _write(path: Path, arrays: list[np.ndarray]) -> None:
    """Write the arrays one after another, atomically: a file of its own for each writer (a batch
    grades several submissions at once, in threads of one process), then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as f:
            for a in arrays:
                data = np.ascontiguousarray(a).tobytes()
                digest.update(data)
                f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        sealed.seal(path, digest.hexdigest())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def materialize(rubric: Rubric, reference: Reference, case: Case, cache: Path) -> dict[str, np.ndarray]:
    """The case's inputs (float32), from its file when an earlier run wrote it, else drawn and written."""
    path = input_file(rubric, reference, case, cache)
    shapes = _shapes(rubric, case, "in")
    found = _read(path, shapes, np.float32)          # a private case's: drawn ahead into the run's folder
    if found is not None:
        return found
    arrays = draw(rubric, reference, case)
    _write(path, [arrays[name] for name in shapes])
    return arrays


def answers(rubric: Rubric, reference: Reference, case: Case, cache: Path,
            inputs: dict[str, np.ndarray], *, keep: bool = False) -> dict[str, np.ndarray]:
    """The case's outputs in float64, from the file beside its inputs when an earlier run computed
    them (or the process that drew a private case ahead), else computed by the exercise's
    expected() and written; a private case's only when keep (drawing ahead)."""
    path = answers_file(rubric, reference, case, cache)
    shapes = _shapes(rubric, case, "out")
    found = _read(path, shapes, np.float64)
    if found is not None:
        return found
    want = reference.answers_for(inputs, dict(case.dims))
    out = {}
    for name, shape in shapes.items():
        if name not in want:
            raise ExerciseError(f"{reference.folder / 'reference.py'}: expected() gave no {name!r} for {case.name}")
        value = want[name]
        if value.size != math.prod(shape):
            raise ExerciseError(f"{reference.folder / 'reference.py'}: expected() gave {name} as {tuple(value.shape)} "
                                f"for {case.name}; the rubric says {shape}")
        out[name] = value.reshape(shape)
    if keep or not case.private:                    # a private case's answers stay in this process
        _write(path, [out[name] for name in shapes])
    return out


def prepared(beside: Path, want: dict[str, np.ndarray], *, rtol: float, atol: float, keep: bool) -> dict:
    """Each output's answers made ready for the fast float32 check (checking.prepare), kept (keep) in
    the case's folder (beside its inputs' file) for this tolerance: preparing the timed shape's 16M
    values took longer than the rest of a warm check."""
    tag = hashlib.sha256(repr((float(rtol), float(atol))).encode()).hexdigest()[:12]
    path = beside.with_name(f"prepared-{tag}.f32")
    shapes = {}
    for name, w in want.items():
        shapes[f"{name} want"] = shapes[f"{name} limit"] = tuple(w.shape)
    found = _read(path, shapes, np.float32)
    if found is not None:
        return {name: Prepared(found[f"{name} want"], found[f"{name} limit"]) for name in want}
    out = {name: prepare(w, rtol=rtol, atol=atol) for name, w in want.items()}
    if keep:
        _write(path, [a for p in out.values() for a in (p.want32, p.limit32)])
    return out


@dataclass
class Expected:
    """A case's inputs and its float64 answers, with the tolerance at its dimensions."""

    inputs: dict[str, np.ndarray]
    want: dict[str, np.ndarray]
    prepared: dict[str, Prepared]
    rtol: float
    atol: float


def expected_for(case: Case, rubric: Rubric, reference: Reference, inputs: dict[str, np.ndarray],
                 cache: Path, *, keep: bool = False) -> Expected:
    """The case's answers from the exercise's reference, read from the cache when an earlier run
    computed them (in the parent, while the child runs); keep: write a private case's too (drawing ahead)."""
    want = answers(rubric, reference, case, cache, inputs, keep=keep)
    scale = float(exprs.evaluate(rubric.tolerance.scale, dims_values(rubric, case.dims), integer=False))
    rtol, atol = rubric.tolerance.rtol * scale, rubric.tolerance.atol * scale
    ready = prepared(input_file(rubric, reference, case, cache), want, rtol=rtol, atol=atol,
                     keep=keep or not case.private)
    return Expected(inputs, want, ready, rtol, atol)
