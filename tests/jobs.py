"""A child's job as the tests make one, standing alone: the reference built, the cases planned and
(draw=True) their inputs written here, where a grade's pipeline does each beside the build
(grade/children.GradeRun) and hands grade/jobs.child_job the parts."""

from pathlib import Path

from grader.core.backend import Backend
from grader.core.locations import cache_root
from grader.exercises import data, load_reference
from grader.exercises.plan import run_cases
from grader.exercises.pool import Store
from grader.exercises.rubric import Rubric
from grader.grade import jobs
from grader.toolchain.build import build_reference
from grader.toolchain.outcome import BuildResult


def child_job(rubric: Rubric, *, backend: Backend, build: BuildResult, has_launcher: bool,
              reference: BuildResult | None = None, arch: str = "sm_90", guard: Path | None = None,
              draw: bool = False, store: Store | None = None):
    """grade/jobs.child_job with what a grade prepares made here; (job, every case)."""
    store = store or Store(cache_root())
    exercise = load_reference(rubric)
    cases = run_cases(rubric, timed=backend.times, secret=store.secret)
    if reference is None:
        reference = build_reference(backend=backend, arch=arch, exercise_kernels=exercise.kernels)
    if draw:
        for c in cases + jobs.baseline_cases_for(rubric, backend):
            data.materialize(rubric, exercise, c, store.folder_for(c))
    return jobs.child_job(rubric, backend=backend, build=build,
                          parts=jobs.JobParts(reference, has_launcher, guard=guard), store=store, cases=cases)
