"""A class to grade, as one frozen object: the folder, the rubric, the backend and what the
instructor chose (where the reports go, the submission's file name, the roster, how many at once,
the shard, the counters, the similarity check's threshold and given code). `grader batch` builds it
once; grade_class, grade_entries and the Slurm array take it, so no step of a batch takes these one by one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from grader.analysis.similarity import DEFAULT_THRESHOLD
from grader.core.backend import AUTO, Backend, named
from grader.core.typed import doc_field
from grader.exercises.rubric import Rubric


@dataclass(frozen=True)
class ClassRequest:
    directory: Path = doc_field("The class folder: .cu files, or one folder per student.")
    rubric: Rubric = doc_field("The exercise's rubric.")
    backend: Backend | str = doc_field('Where to run: a Backend, or "auto" until the batch resolves it once for the '
                                  "whole class.", default=AUTO)
    report_dir: Path | None = doc_field("Each student's reports in report_dir/<student>/, and the class's files beside "
                                   "them (None: nothing written, nothing kept for a rerun).", default=None)
    file_name: str | None = doc_field("In per-student folders, the submission's file name (None: the folder's only .cu "
                                 "file).", default=None)
    roster: Path | None = doc_field("A roster CSV naming each student and listing those without a submission.",
                               default=None)
    jobs: int | None = doc_field("Submissions in flight at once (None: a few per GPU lane, one per core on the "
                            "emulator: grading.default_jobs).", default=None)
    shard: tuple[int, int] = doc_field("(K, N): only the K-th of N deterministic shares of the students.", default=(1, 1))
    counters: bool = doc_field("Each correct, timed kernel's counters' pass on a GPU (GradeOptions.counters).",
                          default=False)
    similarity_threshold: float = doc_field("The score (0 to 1) at which two students' kernels are named similar "
                                            "(analysis/similarity.py).", default=DEFAULT_THRESHOLD)
    similarity_given: tuple[Path, ...] = doc_field("Code the course handed out besides the exercise's reference "
                                                   "folder (the lesson's kernel): no match.", default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))
        if not isinstance(self.backend, Backend) and self.backend != AUTO:
            object.__setattr__(self, "backend", named(self.backend))

    def resolved(self, **decided) -> "ClassRequest":
        """This request with what the batch decided once (the backend, the jobs)."""
        return dataclasses.replace(self, **decided)
