"""A grade asked for, as one frozen object: the submission, the rubric, the machine (decided once at
the edge) and the options the caller chose. The command line and the batch build it once;
grade/pipeline.grade() takes it and hands it down, so no step past the command line takes these one
by one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from grader.core.backend import Backend
from grader.core.contract import GuardMode
from grader.core.handin import SourceFile, read_file
from grader.core.typed import doc_field
from grader.exercises.rubric import Rubric
from grader.grade.machine import Machine


@dataclass(frozen=True)
class GradeOptions:
    """What a caller may choose for one grade; every field has its default and says what it does."""

    device: str | None = doc_field("The GPU to run on, as a CUDA_VISIBLE_DEVICES entry (None: the first visible one). The "
                              "child's checks and timing run inside that GPU's lane (run/lanes.py).", default=None)
    emulator_threads: int = doc_field("The OS threads a large emulated launch runs on (0: every core the child may use); a "
                                 "batch grading several submissions at once on the emulator gives each one.", default=0)
    counters: bool = doc_field("After a correct, timed grade on a GPU, replay the timed call once more under Nsight "
                          "Compute (run/profiling.py) for what the hardware counted (result.counters); it never "
                          "changes the fraction or the tier.", default=False)
    draw_ahead: bool = doc_field("After a GPU grade, start the detached process that draws the next run's private cases "
                            "(exercises/pool.py), so that the next grade of this exercise need not (`grader submit`).",
                            default=False)
    one_grade: bool = doc_field("This grade is its process's only one (`grader submit`): on a GPU, the management "
                                "library (NVML) is let go of once the reading after the timing is taken, beside "
                                "the verdict, not at the process's exit; a batch keeps it to its end.",
                                default=False)
    cache_prune_every_s: float = doc_field("The least time between two prunes of the build cache after a grade that built "
                                           "something new (0: after each such grade). Sizing the cache walks every "
                                           "build in it, so a batch, whose every grade builds, prunes at most once a "
                                           "minute and once at its end (each prune after a grade made a batch's "
                                           "time grow with the square of the class).", default=0.0)
    audit_syscalls: bool = doc_field("Run the child's filter in audit mode: every system call allowed and recorded "
                                "(result.sandbox.audit). For measuring what CUDA and the grader need, never for "
                                "grading students; the command line does not offer it.", default=False)

    @property
    def guard_mode(self) -> GuardMode:
        return GuardMode.AUDIT if self.audit_syscalls else GuardMode.ENFORCE


@dataclass(frozen=True)
class GradeRequest:
    """One grade: the .cu file at path against rubric on machine (grade/machine.py: the backend, the
    GPUs and their reading, decided once at the edge), with options. source: the file as read once
    (a batch reads each student's when it lists the class, `grader submit` before it chooses the
    exercise; core/handin.py), which every step of the grade takes, never opening path again; None:
    the grade reads path itself, once, first (handin.read_file), and carries it from there. With a
    source, path is the source's (a HeldPath, reading as its bytes)."""

    path: Path
    rubric: Rubric
    machine: Machine
    options: GradeOptions = field(default_factory=GradeOptions)
    source: SourceFile | None = None

    def __post_init__(self) -> None:
        if self.source is not None:
            object.__setattr__(self, "path", self.source.path)
        elif not isinstance(self.path, Path):
            object.__setattr__(self, "path", Path(self.path))
        if not isinstance(self.machine, Machine):
            raise TypeError("GradeRequest takes a Machine (grade/machine.decide), decided once where the grade "
                            f"is asked for, not {self.machine!r}")

    @property
    def backend(self) -> Backend:
        return self.machine.backend

    def read(self) -> "GradeRequest":
        """This request with its source: the one given, else path read now (UsageError where it
        cannot be: a folder, no such file, a link)."""
        if self.source is not None:
            return self
        return dataclasses.replace(self, source=read_file(self.path))
