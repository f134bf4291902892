"""Exercises as data: a rubric (rubrics/<exercise>.yaml), a reference folder
(reference/<exercise>/: reference.py and optional kernels.cu) and samples
(submissions/<exercise>/).

The core knows tensors and dimensions; everything an exercise means lives in these files.
Exercises are found in the grader's own rubrics folder and in every folder listed in
GRADER_EXERCISES (os.pathsep-separated), each laid out as rubrics/ and reference/ side by side.

The package: the rubric's schema and its loader and checks (schema.py, rubric.py), the cases
a rubric asks for (plan.py), their inputs and float64 answers (data.py), and the store of a
run's cases, drawn ahead or shared by a batch (pool.py). It imports core only.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import os
import sys
import threading
from pathlib import Path
from typing import Callable

from grader.core.errors import ExerciseError, UsageError
from grader.core.handin import SourceFile
from grader.core.locations import DEFAULT_EXERCISE, reference_dir, rubrics_dir
from grader.core.source import defines_function, scanned
from grader.exercises import rubric as rubric_loader  # its load_rubric looked up at each call (tests count loads)


def rubric_folders() -> list[Path]:
    """Where exercises are looked for: GRADER_EXERCISES's folders first, then the grader's own."""
    extra = [Path(p) / "rubrics" for p in os.environ.get("GRADER_EXERCISES", "").split(os.pathsep) if p]
    return [*extra, rubrics_dir()]


def exercise_files() -> dict[str, Path]:
    """Every exercise by name (the rubric file's stem); an earlier folder wins."""
    found: dict[str, Path] = {}
    for folder in rubric_folders():
        for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            found.setdefault(path.stem, path)
    return found


def load_all():
    """Every exercise's rubric, by name (a malformed one raises RubricError naming it)."""
    return {name: rubric_loader.load_rubric(path) for name, path in exercise_files().items()}


def load_exercise(name: str):
    files = exercise_files()
    if name not in files:
        raise UsageError(f"no exercise named {name!r} (known: {', '.join(sorted(files)) or 'none'}); "
                         "`grader exercises` lists them")
    return rubric_loader.load_rubric(files[name])




def choose(*, rubric_path: str | Path | None = None, exercise: str | None = None, file: Path | None = None,
           folder: Path | None = None):
    """The rubric to grade with: a rubric file, an exercise by name, the exercise whose kernel (or
    launcher) a file defines, the exercise a samples folder is named for, else the default."""
    if rubric_path is not None:
        return rubric_loader.load_rubric(rubric_path)
    if exercise:
        return load_exercise(exercise)
    files = exercise_files()
    if folder is not None and folder.resolve().name in files:
        return rubric_loader.load_rubric(files[folder.resolve().name])
    if file is not None:
        picked = exercise_for_source(file)
        if picked is not None:
            return picked
    return load_exercise(DEFAULT_EXERCISE) if DEFAULT_EXERCISE in files else rubric_loader.load_rubric(None)


def exercise_for_class(files: list):
    """The exercise most of a class's files define (by kernel or launcher); None when none does.
    files: each a path or a file as read (core/handin.py's SourceFile); a batch's Entry.path reads
    as the bytes its listing read (a HeldPath), so no student's file is opened again here."""
    counts: dict[str, int] = {}
    rubrics = {}
    for f in files:
        r = exercise_for_source(f)
        if r is not None:
            counts[r.exercise] = counts.get(r.exercise, 0) + 1
            rubrics[r.exercise] = r
    return rubrics[max(counts, key=counts.get)] if counts else None


def exercise_for_source(file):
    """The exercise whose kernel or launcher the file defines; else the one whose kernel name is
    closest to a kernel the file defines (so a misspelt kernel is told its exercise's name);
    None when the file cannot be read or nothing is close. file: a path, or a file as read
    (core/handin.py's SourceFile)."""
    try:
        text = file.data.decode("utf-8") if isinstance(file, SourceFile) else file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    code, found = scanned(text)              # the scan the grade's read_submission takes again
    kernels = [k.name for k in found]
    loaded = []
    for path in exercise_files().values():          # loaded one by one, up to the first that matches:
        r = rubric_loader.load_rubric(path)         # on the way to a grade's children (each took 10 ms)
        if r.kernel.name in kernels or (r.kernel.launcher and defines_function(code, r.kernel.launcher_name)):
            return r
        loaded.append(r)
    by_name = {r.kernel.name: r for r in loaded}
    for k in kernels:
        close = difflib.get_close_matches(k, list(by_name), n=1, cutoff=0.6)
        if close:
            return by_name[close[0]]
    return None


def reference_folder(rubric) -> Path:
    """reference/<exercise>/ beside the rubric's own rubrics/ folder, else the grader's."""
    if rubric.path:
        beside = Path(rubric.path).resolve().parent.parent / "reference" / rubric.exercise
        if beside.is_dir():
            return beside
    return reference_dir() / rubric.exercise


class Reference:
    """An exercise's reference, used in the parent only (it never runs in the child).

    Its modules are imported only when something needs them: inputs.py (GENERATORS, in numpy)
    to draw a case not yet in the cache; reference.py (expected) for a case's answers not yet in
    the cache. reference.py's functions are given torch tensors, or numpy arrays where it says
    `ARRAYS = "numpy"` (the three shipped exercises do: their first grade never imports torch);
    answers_for turns either into numpy. The mistakes a wrong output is named by are the rubric's
    (its `hypotheses`), not Python's.
    A warm submission reads both from the cache. An exercise without an inputs.py draws with
    reference.py's GENERATORS (torch tensors, as before).
    """

    def __init__(self, rubric, folder: Path, kernels: str, digest: str):
        self._rubric = rubric
        self.folder = folder
        self.kernels = kernels          # reference kernels' CUDA source ("" when none)
        self.digest = digest            # of reference.py, inputs.py and kernels.cu: a key for cached inputs and answers
        self._module = None
        self._inputs = None
        self._lock = threading.Lock()       # a grade computes several cases' answers at once

    @property
    def module(self):
        """reference.py itself, imported and checked against the rubric on first use."""
        with self._lock:
            if self._module is None:
                path = self.folder / "reference.py"
                self._module = _check_answers(self._rubric, path, _import(self._rubric, path, "reference"))
        return self._module

    @property
    def arrays(self) -> str:
        """What reference.py's functions are given and give back: "torch" tensors (the default)
        or "numpy" arrays (its ARRAYS says so)."""
        return _arrays_of(self.module)

    def answers_for(self, inputs: dict, dims: dict) -> dict:
        """expected() on a case's float32 inputs (writable copies): each output it gives, as a float64 array."""
        want = self.module.expected(self._given(inputs), dims)
        return {name: _float64(value) for name, value in want.items()}

    def _given(self, inputs: dict) -> dict:
        import numpy as np  # noqa: PLC0415  (lazy: numpy, 75 ms, only for answers: `grader exercises` never imports it)

        copies = {k: np.array(v) for k, v in inputs.items()}            # writable: a model may change them
        if self.arrays == "numpy":
            return copies
        import torch  # noqa: PLC0415  (lazy: a reference written with torch only; 1.5 s on the H200 host, 4-6 s cold)

        return {k: torch.from_numpy(v) for k, v in copies.items()}

    @property
    def inputs(self):
        """The module whose GENERATORS draw the inputs: inputs.py, else reference.py."""
        if self._inputs is None:
            path = self.folder / "inputs.py"
            if path.is_file():
                self._inputs = _check_generators(self._rubric, path, _import(self._rubric, path, "inputs"))
            else:
                self._inputs = _check_generators(self._rubric, self.folder / "reference.py", self.module)
        return self._inputs

    @property
    def generators(self) -> dict[str, Callable]:
        return dict(self.inputs.GENERATORS)

    def generate(self, generator: str, dims: dict, seed: int):
        return self.inputs.GENERATORS[generator](dims, seed)


_LOADED: dict[Path, Reference] = {}


def load_reference(rubric) -> Reference:
    """The exercise's reference: its kernels read and checked now, its reference.py when first needed."""
    folder = reference_folder(rubric)
    if folder in _LOADED:
        return _LOADED[folder]
    path = folder / "reference.py"
    if not path.is_file():
        raise ExerciseError(f"{path}: no such file: exercise {rubric.exercise!r} needs its reference "
                            "(expected; GENERATORS, or an inputs.py beside it) there")
    cu = folder / "kernels.cu"
    kernels = cu.read_text() if cu.is_file() else ""
    if rubric.chain.kernel and f"grader_ref_{rubric.chain.kernel}" not in kernels:
        raise ExerciseError(f"{cu}: exports no grader_ref_{rubric.chain.kernel}, which {rubric.path} "
                            "runs as chain.kernel")
    for run in rubric.calibrate.runs:
        for step in run.steps:
            if f"grader_ref_{step.kernel}" not in kernels:
                raise ExerciseError(f"{cu}: exports no grader_ref_{step.kernel}, which {rubric.path} times in "
                                    f"calibrate run {run.name!r}")
    inputs = folder / "inputs.py"
    digest = hashlib.sha256(path.read_bytes() + b"\0" + (inputs.read_bytes() if inputs.is_file() else b"") + b"\0"
                            + kernels.encode()).hexdigest()[:16]
    ref = Reference(rubric, folder, kernels, digest)
    _LOADED[folder] = ref
    return ref


def _import(rubric, path: Path, part: str):
    """Import one of an exercise's modules (reference.py, inputs.py) under a name of its own."""
    name = f"grader_exercise_{rubric.exercise}" + ("" if part == "reference" else f"_{part}")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - reported with the file's name
        raise ExerciseError(f"{path}: cannot be loaded: {type(exc).__name__}: {exc}") from exc
    return module


def _numpy(value):
    """A torch tensor as a numpy array (on the CPU); anything else as it is."""
    if type(value).__module__.startswith("torch"):
        return value.detach().cpu().numpy()
    return value


def _float64(value):
    """An output as a contiguous float64 numpy array."""
    import numpy as np  # noqa: PLC0415  (lazy: numpy, 75 ms, only for answers: `grader exercises` never imports it)

    return np.ascontiguousarray(np.asarray(_numpy(value), dtype=np.float64))


ARRAY_KINDS = ("torch", "numpy")


def _arrays_of(module) -> str:
    """reference.py's ARRAYS: what its functions are given (torch, where it says nothing)."""
    return getattr(module, "ARRAYS", ARRAY_KINDS[0])


def _check_answers(rubric, path: Path, module):
    """reference.py against its rubric: expected, and no MISTAKES (the rubric's hypotheses replace it)."""
    arrays = _arrays_of(module)
    if arrays not in ARRAY_KINDS:
        raise ExerciseError(f"{path}: ARRAYS is {arrays!r}; it says what expected() is given: "
                            f"{' or '.join(repr(k) for k in ARRAY_KINDS)} (torch when it is left out)")
    if not hasattr(module, "expected"):
        raise ExerciseError(f"{path}: defines no expected (an exercise's reference.py defines expected and "
                            "its inputs.py GENERATORS)")
    if hasattr(module, "MISTAKES"):
        raise ExerciseError(f"{path}: MISTAKES is no longer read: declare each mistake as a variant under "
                            f"hypotheses in {rubric.path} (an array expression of the inputs; docs/exercises.md "
                            "says how), and delete MISTAKES")
    return module


def _check_generators(rubric, path: Path, module):
    """The generators against the rubric: every case's, and `random` (the timed inputs)."""
    if not hasattr(module, "GENERATORS"):
        raise ExerciseError(f"{path}: defines no GENERATORS (an exercise's inputs.py defines its input generators "
                            "by name; without an inputs.py, reference.py does)")
    for i, case in enumerate(rubric.checks.cases):
        if case.inputs not in module.GENERATORS:
            raise ExerciseError(f"{rubric.path}: checks.cases[{i}].inputs: {path} has no generator {case.inputs!r} "
                                f"(GENERATORS: {', '.join(module.GENERATORS)})")
    if "random" not in module.GENERATORS:
        raise ExerciseError(f"{path}: GENERATORS has no 'random' (the timed inputs are drawn with it)")
    return module
