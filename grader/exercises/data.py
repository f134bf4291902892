"""A case's inputs: drawn by the exercise's generator, checked, kept on disk for the child.

The file of a case is float32 data, its input tensors one after another, in a directory of
its own in the build cache (named by the reference's digest and the case), so warm runs and
a class's batch draw each case once. The child maps it read-only; nothing crosses the pipe.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import torch

from grader.errors import ExerciseError
from grader.exercises import Reference
from grader.exercises.plan import Case, shape_of, tensors_of
from grader.rubric import Rubric, dims_values


def draw(rubric: Rubric, reference: Reference, case: Case) -> dict[str, torch.Tensor]:
    """The case's input tensors, float32 and contiguous, checked against the rubric's shapes."""
    drawn = reference.generate(case.inputs, dict(case.dims), case.seed)
    values = dims_values(rubric, case.dims)
    out = {}
    for t in tensors_of(rubric, case):
        if t.role != "in":
            continue
        if t.name not in drawn:
            raise ExerciseError(f"{reference.folder / 'reference.py'}: generator {case.inputs!r} gave no {t.name!r} "
                                f"for {case.name}")
        value = drawn[t.name]
        want = shape_of(t, values)
        if tuple(value.shape) != want or value.dtype != torch.float32:
            raise ExerciseError(f"{reference.folder / 'reference.py'}: generator {case.inputs!r} gave {t.name} as "
                                f"{value.dtype} {tuple(value.shape)} for {case.name}; the rubric says float32 {want}")
        out[t.name] = value.contiguous()
    return out


def _key(rubric: Rubric, reference: Reference, case: Case) -> str:
    parts = [rubric.exercise, reference.digest, case.inputs, repr(sorted(case.dims.items())), str(case.seed),
             str(case.chain)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def offsets(rubric: Rubric, case: Case) -> dict[str, int]:
    """Each input's byte offset in the case's file."""
    values = dims_values(rubric, case.dims)
    at, out = 0, {}
    for t in tensors_of(rubric, case):
        if t.role == "in":
            out[t.name] = at
            at += 4 * math.prod(shape_of(t, values))
    return out


def files_of(rubric: Rubric, reference: Reference, case: Case, cache: Path) -> dict[str, tuple[str, int]]:
    """Where each input of the case lies for the child: (its file, its byte offset there)."""
    path = str(input_file(rubric, reference, case, cache))
    return {name: (path, at) for name, at in offsets(rubric, case).items()}


def input_file(rubric: Rubric, reference: Reference, case: Case, cache: Path) -> Path:
    return cache / f"in-{_key(rubric, reference, case)}" / "inputs.f32"


def materialize(rubric: Rubric, reference: Reference, case: Case, cache: Path) -> dict[str, torch.Tensor]:
    """The case's inputs, from its file when an earlier run wrote it, else drawn and written."""
    path = input_file(rubric, reference, case, cache)
    where = offsets(rubric, case)
    values = dims_values(rubric, case.dims)
    shapes = {t.name: shape_of(t, values) for t in tensors_of(rubric, case) if t.role == "in"}
    total = sum(4 * math.prod(s) for s in shapes.values())
    if path.is_file() and path.stat().st_size == total:
        os.utime(path.parent)
        flat = torch.from_file(str(path), shared=False, size=total // 4, dtype=torch.float32)
        return {name: flat[where[name] // 4: where[name] // 4 + math.prod(s)].view(s) for name, s in shapes.items()}
    tensors = draw(rubric, reference, case)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        for name in shapes:
            f.write(memoryview(tensors[name].numpy()).cast("B"))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return tensors

