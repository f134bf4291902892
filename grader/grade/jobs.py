"""What a grading child is told: the job built from the rubric, the build and the run's cases.

Below grading (which runs it) and above the exercise's plan and data (which it reads).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader.core import exprs
from grader.core.backend import Backend
from grader.core.contract import CaseJob, FloorPlacement, GuardMode, Job, Limits, TimingJob
from grader.exercises import Reference, casefiles, load_reference
from grader.exercises.plan import Case, baseline_cases, case_job
from grader.exercises.pool import Store
from grader.exercises.rubric import Rubric, dims_values
from grader.toolchain.outcome import BuildResult


def baseline_cases_for(rubric: Rubric, backend: Backend) -> list[Case]:
    """The shapes timed against the exercise's PyTorch baseline (where the backend times)."""
    return baseline_cases(rubric) if backend.times and rubric.timing.baseline else []


def child_limits(rubric: Rubric) -> Limits:
    """The rubric's limits as the child applies them."""
    lim = rubric.limits
    return Limits(host_memory_mib=lim.host_memory_mib, device_heap_bytes=lim.device_heap_mib << 20,
                  drop_privileges=lim.drop_privileges, workspace_bytes=lim.workspace_mib << 20,
                  require_read_wall=lim.require_read_wall)


def draw_inputs(pool: ThreadPoolExecutor, rubric: Rubric, exercise: Reference, backend: Backend, store,
                cases: list[Case]) -> dict:
    """Every case's inputs (cases: the run's, run_cases; and the baseline's shapes), drawn (or read
    from the cache) in the background, by case name."""
    extra = baseline_cases_for(rubric, backend)
    return {c.name: pool.submit(_materialize, rubric, exercise, c, store.folder_for(c)) for c in cases + extra}


def _materialize(rubric: Rubric, exercise: Reference, case: Case, folder: Path):
    """data.materialize, imported in the drawing thread: numpy's import off the grade's way to its
    children (the main thread builds, then waits on them)."""
    from grader.exercises import data  # noqa: PLC0415  (numpy's import in the drawing thread: the docstring)

    return data.materialize(rubric, exercise, case, folder)


@dataclass(frozen=True)
class JobParts:
    """What a grade built and chose beside the submission's build, for its child's job."""

    reference: BuildResult                  # the exercise's reference library
    has_launcher: bool                      # the file defines the exercise's launcher (else the kernel is launched)
    guard: Path | None = None               # the seccomp guard's library (None: none loaded)
    guard_mode: GuardMode = GuardMode.ENFORCE
    emulator_threads: int = 0               # the OS threads a large emulated launch runs on (0: every core)


def child_job(rubric: Rubric, *, backend: Backend, build: BuildResult, parts: JobParts, store: Store,
              cases: list[Case]) -> tuple[Job, list[Case]]:
    """What the child is told to do, and every case whose output it will send back. store
    (exercises/pool.Store): where the cases lie, and the run's secret; cases: the run's plan
    (run_cases with the store's secret); their inputs are drawn by the caller (draw_inputs)."""
    exercise = load_reference(rubric)
    every = cases
    reference, has_launcher = parts.reference, parts.has_launcher
    extra = baseline_cases_for(rubric, backend)

    def resolve(case: Case) -> CaseJob:
        return case_job(rubric, case, has_launcher=has_launcher,
                        files=casefiles.files_of(rubric, exercise, case, store.folder_for(case)))

    checks = [resolve(c) for c in every if not c.timed]
    timed = [resolve(c) for c in every if c.timed]
    job = Job(
        backend=backend, library=str(build.library), reference_library=str(reference.library),
        guard_library=str(parts.guard) if parts.guard else None, guard_mode=parts.guard_mode,
        limits=child_limits(rubric),
        cases=checks, guard_floats=rubric.checks.guard_floats,
        reverse_check=backend.reverse_check and rubric.emulator.reverse_order_check,
        order_exact=rubric.checks.order_exact, emulator_threads=parts.emulator_threads,
    )
    if backend.times:
        job.timing = _timing_job(rubric)
        job.timed_cases = timed
        job.baseline_cases = [resolve(c) for c in extra]
    else:
        job.verify_cases = timed
    return job, every


def _timing_job(rubric: Rubric) -> TimingJob:
    """The child's timing settings: each of the rubric's timing keys the child reads, by the same
    name (so a key added to both is passed on without another line here), and what is worked out
    from the rubric: the copy's length at the timed shape, whether the chain is timed, the tiers'
    lines."""
    t = rubric.timing
    worked_out = {"floor": list(t.floor),
                  "copy_floats": int(exprs.evaluate(t.copy_floats, dims_values(rubric, t.dims))),
                  "chain": bool(rubric.chain.kernel and t.chain_bytes),
                  "floor_placement": FloorPlacement(t.floor_placement),
                  # where the tier changes (the policy's lines), where exceeding the floor begins, and the floor
                  # itself (a fraction near 1 is read against it: sampled to target_half_width, not stopped
                  # at tier_half_width)
                  "tier_lines": sorted({*rubric.tiers.decision_lines(), 1.0 + rubric.tiers.exceeds_floor_margin,
                                        1.0})}
    same = {f.name: getattr(t, f.name) for f in dataclasses.fields(TimingJob) if f.name not in worked_out}
    return TimingJob(**same, **worked_out)
