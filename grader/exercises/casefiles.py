"""Where a case's files lie: its inputs' file (keyed on everything that decides its bytes), each
input's offset there, and its answers beside them. No numpy: a grade asks where its cases lie
before numpy is imported (grade/children.py), and the child's job names the files (grade/jobs.py).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from grader.exercises import Reference
from grader.exercises.plan import Case, shape_of, tensors_of
from grader.exercises.rubric import Rubric, dims_values

_SHARED = hashlib.sha256(b"".join((Path(__file__).parent / f).read_bytes()
                                  for f in ("draws.py", "inputs.py", "refmath.py"))).hexdigest()[:16]


def _key(rubric: Rubric, reference: Reference, case: Case) -> str:
    parts = [rubric.exercise, reference.digest, _SHARED, case.inputs, repr(sorted(case.dims.items())),
             str(case.draw_seed), str(case.chain)]
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


def answers_file(rubric: Rubric, reference: Reference, case: Case, cache: Path) -> Path:
    """Where answers() keeps the case's float64 answers: beside its inputs."""
    return input_file(rubric, reference, case, cache).with_name("answers.f64")


def answers_kept(rubric: Rubric, reference: Reference, case: Case, cache: Path) -> bool:
    """Whether answers() will find the case's answers on disk rather than compute them (with the reference)."""
    return answers_file(rubric, reference, case, cache).is_file()
