"""A class's similar kernels (analysis/similarity.py) with the exercise's own code set aside: the
files of its reference folder (reference/<exercise>/, where any skeleton handed to the students
lies too) and any file the instructor names as given (`grader batch --similarity-given`, the
lesson's code). `grader batch` calls class_similarity once per class; the course server's
instructor page calls similarity_of on the uploads it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from grader.analysis.similarity import DEFAULT_THRESHOLD, Similarity, compare, given_files
from grader.batch.grading import Graded
from grader.exercises import reference_folder
from grader.exercises.rubric import Rubric

__all__ = ["DEFAULT_THRESHOLD", "Similarity", "class_similarity", "exercise_given", "similarity_of"]


def exercise_given(rubric: Rubric, extra: Sequence[Path] = ()) -> list[bytes]:
    """The exercise's own code: its reference folder's code files, and the extra files named."""
    return given_files(reference_folder(rubric)) + [Path(p).read_bytes() for p in extra]


def similarity_of(sources: Sequence[tuple[str, bytes]], *, rubric: Rubric, threshold: float = DEFAULT_THRESHOLD,
                  given: Sequence[Path] = ()) -> Similarity:
    """The pairs among sources ((student, the file's bytes), one a student) at or above threshold,
    best first, the exercise's own code (and given's files) set aside."""
    return compare(sources, given=exercise_given(rubric, given), threshold=threshold)


def class_similarity(graded: Sequence[Graded], *, rubric: Rubric, threshold: float = DEFAULT_THRESHOLD,
                     given: Sequence[Path] = ()) -> Similarity:
    """similarity_of the class's submissions as they were read at the listing (a student without
    one, or whose bytes the batch does not hold, e.g. a merged shard's row, is left out)."""
    sources = [(g.entry.student, g.entry.source.data) for g in graded if g.entry.source is not None]
    return similarity_of(sources, rubric=rubric, threshold=threshold, given=given)
