"""Grading one submission: scan, build, run in a child, check, time, tier.

The one entry point is grade(), given a GradeRequest (grade/request.py) and the Launcher that starts
its children (grade/launcher.py); it returns a Result whatever the student's code does
(grade_submission() makes the request for a script or a test). It raises only the grader's own
errors (errors.py): a missing file, a bad rubric, a machine without the tools.
"""

from __future__ import annotations

import dataclasses
import importlib
import resource
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from grader import __version__
from grader.analysis import findings, launches, sass
from grader.core import fswall
from grader.core.backend import AUTO, Backend
from grader.core.errors import GraderError, InfrastructureError, UsageError
from grader.core.limits import lowered
from grader.core.outcomes import Outcome
from grader.core.results import CountersSummary, DeviceSummary, Result, SandboxSummary, SassSummary, SourceNote, Stop
from grader.core.source import Submission
from grader.exercises.rubric import Rubric
from grader.grade.children import GradeRun, output_of
from grader.grade.faults import cpu_limit_too_short, machine_limit
from grader.grade.launcher import Launcher
from grader.grade.machine import decide
from grader.grade.phases import CheckClock, Phases
from grader.grade.request import GradeOptions, GradeRequest
from grader.grade.steps import Progress, build_and_screen, read_source, vet_source
from grader.run.sandbox import Worker
from grader.toolchain import cache, tools
from grader.toolchain.build import submission_limits
from grader.toolchain.outcome import BuildResult
from grader.toolchain.running import builds_held

if TYPE_CHECKING:
    from grader.verdict import Verdict



def grade_submission(path: str | Path, *, rubric: Rubric, backend: str | Backend = AUTO,
                     progress: Progress | None = None, **options) -> Result:
    """Grade the .cu file at path against rubric on backend ('auto', a name, or a Backend), with
    options (GradeOptions' fields): the machine decided here, then grade() on the GradeRequest they
    make, for a caller with no cases shared and nothing started ahead (a script, a test)."""
    return grade(GradeRequest(Path(path), rubric, decide(backend), GradeOptions(**options)), progress=progress)


def grade(request: GradeRequest, *, progress: Progress | None = None, inputs=None,
          launcher: Launcher | None = None) -> Result:
    """Grade what request asks for (grade/request.py: the file, the rubric, the machine, the options).

    Whatever the submission does, and when the machine lacks a tool or a GPU, the answer is a
    Result (status infrastructure_error for the latter). Only a usage or rubric error raises.
    The machine (request.machine) was decided by the caller, once: nothing here probes the GPU or
    resolves a backend. Every child is started by the launcher; what it started ahead and the grade
    did not take is ended whatever comes of the grade.

    What the caller lends the grade, beside the request:
    - progress: told each step, in the student's words (core/progress.py);
    - inputs: a batch's store of cases (exercises/pool.SharedStore), made by its first GPU grade,
      shared by the rest and closed by the batch; by default a grade makes its own;
    - launcher: what starts the grade's children (grade/launcher.py): `grader submit`'s has them
      started ahead and says the command's own start (result.phases cli_to_*); by default one that
      starts them when the grade asks.

    result.phases is made here, once, from the typed record the steps' values fill (grade/phases.py).
    """
    started = time.perf_counter()
    say = progress or (lambda _msg: None)
    machine = request.machine
    launcher = launcher if launcher is not None else Launcher()
    try:
        request = request.read()                    # the file, read once: every step takes these bytes
    except UsageError:
        launcher.end_unused()
        raise
    p, rubric, chosen, source = request.path, request.rubric, request.backend, request.source
    # this grade's own GPU's, before its run: a batch's grade reads it now; submit's one grade was
    # decided a moment ago
    reading = machine.reading if request.options.one_grade else machine.reading_of(request.options.device)

    # the file's digest whatever comes of it (an empty file too)
    result = Result(exercise=rubric.exercise, submission={"path": str(p), "sha256": source.sha256}, backend=chosen.name,
                    status=Outcome.GRADED, grader_version=__version__)
    phases = Phases(probe_s=round(machine.probe_s, 3), command=launcher.command_start())

    def run_grade() -> None:
        short = cpu_limit_too_short(rubric)
        if short:
            raise InfrastructureError(short)
        if chosen.on_gpu and not machine.has_gpu:
            raise InfrastructureError(
                f"--backend {chosen.name} needs an NVIDIA GPU and none is visible here (nothing was compiled). Run on a GPU "
                "machine, or use --backend emulator to check correctness on the CPU.")
        _grade(request, GradeParts(reading, result, phases, launcher, inputs), say=say)

    try:
        whatever_happens(result, run_grade)
    finally:
        launcher.end_unused()       # what the grade did not take (it ended before its children's run)
    result.phases = phases.as_dict()
    result.seconds = round(time.perf_counter() - started, 3)
    keep_cache_in_bounds(rubric, at_most_every_s=request.options.cache_prune_every_s)
    if (request.options.draw_ahead and chosen.private_cases and rubric.path
            and result.status != Outcome.INFRASTRUCTURE_ERROR):
        from grader.exercises.pool import start_drawing_ahead  # noqa: PLC0415  (numpy's import: a GPU grade's only)

        start_drawing_ahead(rubric.path)
    return result


def whatever_happens(result: Result, grade: Callable[[], None]) -> None:
    """Run grade, which fills result; whatever it raises but the grader's own usage and rubric
    errors, result ends valid: the machine's problem (a missing GPU, a full disk) or a bug of
    ours, said as such (infrastructure_error)."""
    try:
        grade()
    except InfrastructureError as exc:          # the machine, not the submission: still a valid result
        result.stop(Outcome.INFRASTRUCTURE_ERROR, str(exc))
    except GraderError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug of ours still leaves a valid result behind
        machine = machine_limit(exc)
        if machine:
            result.stop(Outcome.INFRASTRUCTURE_ERROR, machine)             # the machine's limit, said as such
        else:
            result.stop(Outcome.INFRASTRUCTURE_ERROR, "internal error in the grader (please report it): "
                        + "".join(traceback.format_exception_only(type(exc), exc)).strip()
                        + "\n" + "".join(traceback.format_tb(exc.__traceback__)[-3:]))


def keep_cache_in_bounds(rubric: Rubric, *, at_most_every_s: float = 0.0) -> None:
    """Prune the build cache to its cap (least recently used first), where it grew since the last
    prune and that was at least at_most_every_s ago; never fails a grade."""
    try:
        cache.prune_if_grown(limit_bytes=cache.max_bytes(rubric.limits.cache_max_mib), at_most_every_s=at_most_every_s)
    except OSError:
        pass


@dataclass(frozen=True)
class GradeParts:
    """What _grade works with beside the request: the GPU's reading before the run, the Result and
    the phases it fills, the launcher that starts its children, and a batch's shared cases (or None)."""

    reading: dict | None
    result: Result
    phases: Phases
    launcher: Launcher
    shared: object = None


def _grade(request: GradeRequest, parts: GradeParts, *, say: Progress) -> None:
    """Grade the request (its backend resolved) into parts.result and parts.phases: each step
    returns what it found and only this function (with take_verdict) writes them."""
    p, rubric, backend, counters = request.path, request.rubric, request.backend, request.options.counters
    result, phases, reading = parts.result, parts.phases, parts.reading
    sub = read_source(request.source, rubric)
    if isinstance(sub, Stop):
        return result.end(sub)
    result.submission["sha256"] = sub.sha256
    stop = vet_source(p, sub, rubric)
    if stop:
        return result.end(stop)
    run = GradeRun(request, reading=reading, say=say, launcher=parts.launcher)
    try:
        prepared = run.start(parts.shared)
        # The verdict's imports (numpy's among them) in the pool, not on the way to the children: the
        # main thread waits on them meanwhile (0.1 to 0.2 s of a warm grade's build phase on the H100 host).
        verdict_module = run.pool.submit(importlib.import_module, "grader.verdict")

        built = build_and_screen(p, sub, rubric, backend, run.arch, say)
        phases.build_s = round(time.perf_counter() - run.started, 3)
        result.build = built.summary
        if built.stop:
            return result.end(built.stop)
        build, gpu_build = built.build, built.gpu_build
        sass_future = run.pool.submit(_analyse_sass, gpu_build, sub, rubric) if gpu_build else None
        children = run.run_children(prepared, build, sub)
        phases.run = children.clock
        result.output = output_of(children.runs)
        stop = _refused_by_replay(children.refusals, p) if children.refusals else None
        if stop:
            return result.end(stop)
        clock = time.perf_counter()
        verdict = verdict_module.result()
        judged = verdict.judge_run(children.judged, prepared.cases, prepared.answers,
                                   verdict.Judging(rubric, prepared.exercise, build, sub, backend))
        judge_s = time.perf_counter() - clock
        take_verdict(result, judged)
        phases.child, phases.answers_wait_s = judged.child_clock, judged.answers_wait_s
        phases.draws = dataclasses.replace(run.draw_clock)      # as they stand now: the answers were all waited for
        unwalled = _sandbox(result, run, children, prepared, verdict)
        if unwalled is not None:                   # the recorder, where the submission's host code ran, read unconfined
            return result.end(unwalled)
        waited = time.perf_counter()
        after = children.after                      # the GPU's reading after the timing, taken beside the verdict
        reading_wait_s = time.perf_counter() - waited
        result.device = _device(judged.device, gpu=run.device if backend.on_gpu else None,
                                before=reading if backend.on_gpu else None, after=after, compiler=build.compiler)
        result.launches_timed_shape, result.launches = _launches(children, prepared, build, gpu_build or build, run.arch)
        # where check_s went: the verdict (answers_wait_s of it: the answers not ready), the reading
        phases.check = CheckClock(check_s=round(time.perf_counter() - clock, 3), judge_s=round(judge_s, 3),
                                  reading_wait_s=round(reading_wait_s, 3))
        if counters and result.graded:
            result.counters = _counters(run, children, result)
            phases.counters_s = result.counters.seconds
        if sass_future is not None and result.graded:
            result.sass, result.findings = _findings(sass_future.result(), result, rubric, run.arch)
        elif result.graded:                         # said, never a silent absence (report/files.notices)
            result.sass = SassSummary(unavailable=_no_gpu_code(backend))
    finally:
        run.close()


def _sandbox(result: Result, run: GradeRun, children, prepared, verdict) -> Stop | None:
    """What the sandbox's summary gains from the parent (the private inputs, the recorder's own, the
    limits lowered and adapted); the Stop of a recorder that read unconfined."""
    if result.sandbox is None:
        return None
    result.sandbox.inputs = prepared.private_inputs()
    result.sandbox.recorder = children.recorder_sandbox
    unwalled = verdict.read_wall_stop(run.rubric, result.sandbox) if result.graded else None
    if unwalled is None:
        result.sandbox.lowered_limits = _lowered_limits(run.rubric, run.worker, result.sandbox)
        result.sandbox.adapted = list(run.worker.adapted)
        result.sandbox.root = run.worker.root
        result.sandbox.limits = {**run.worker.held, "builds": builds_held(submission_limits(run.rubric))}
        result.sandbox.pids = run.worker.pids
        result.sandbox.environment = list(run.worker.environment)
        result.sandbox.etc = fswall.etc_view()
    return unwalled


def _launches(children, prepared, build: BuildResult, compiled: BuildResult, arch: str) -> tuple[bool, list]:
    """Each kernel's launch configuration and occupancy, from the log of the timed shape (else the
    largest check's; build: the library that ran, compiled: the build whose resources ptxas
    reported): whether it is the timed shape's, and the launches."""
    log, timed_shape = launches.pick_log([f.data for f in children.judged.frames],
                                         {c.name for c in prepared.cases if c.timed})
    return timed_shape, launches.resolve(log, timed_shape=timed_shape, library=build.library,
                                         resources=compiled.resources, arch=arch)


def _counters(run: GradeRun, children, result: Result) -> CountersSummary:
    """The counters' pass, or why there is none (--counters)."""
    backend = run.backend
    if not backend.toolchain.profiler:
        return CountersSummary(problem=f"the counters are the GPU's (Nsight Compute); the {backend.name} backend has "
                                       "none: submit on a machine with an NVIDIA GPU.")
    if not result.correct or result.timing is None:
        return CountersSummary(problem="the counters are read for a correct kernel, once it is timed.")
    return run.counters(children, launches=result.launches, model_bytes=result.timing.bytes_moved)


def _device(timing_read: dict, **seen) -> DeviceSummary:
    """The machine: the GPU as the timing read it (the measuring process's claim: only the known
    facts are kept) and what the parent saw."""
    known = {f.name for f in dataclasses.fields(DeviceSummary)} - set(seen)
    return DeviceSummary(**{k: v for k, v in timing_read.items() if k in known}, **seen)


def take_verdict(result: Result, v: Verdict) -> None:
    """The verdict's parts into the Result (the other half of the one place that writes it; its
    phases are the pipeline's: Phases). What the run said is kept where it ended the grade (the
    cases, their maps and diagnosis, the sandbox); its grade only where it did not. The fraction,
    its interval and the GB/s are the timing's, read from it here alone."""
    result.cases, result.maps, result.diagnosis, result.sandbox = v.cases, v.maps, v.diagnosis, v.sandbox
    result.flags += v.flags
    if v.stop is not None:
        result.end(v.stop)
        return
    result.correct, result.tier, result.borderline, result.feedback = v.correct, v.tier, v.borderline, v.feedback
    result.timing, result.floor = v.timing, v.floor
    if v.timing is not None:
        result.fraction, result.fraction_ci, result.gbps = v.timing.fraction, v.timing.fraction_ci, v.timing.submission_gbps


def _lowered_limits(rubric: Rubric, worker: Worker, reported: SandboxSummary | None) -> dict:
    """The grader's limits an inherited hard limit lowered (each only stricter: grader/core/limits.py)."""
    found = {**lowered({resource.RLIMIT_AS: rubric.limits.build_memory_mib << 20}), **worker.lowered}
    if reported is not None and reported.host_memory_lowered_to_mib is not None:   # the child's own cap
        found["private memory (the child)"] = {"wanted_mib": rubric.limits.host_memory_mib,
                                               "got_mib": reported.host_memory_lowered_to_mib}
    return found


def _refused_by_replay(reasons: list[str], p: Path) -> Stop:
    """A recording the grader will not replay: the launches it holds cannot be timed fairly."""
    return Stop(Outcome.REJECTED, "\n".join(f"{p.name}: {r}" for r in reasons),
                [SourceNote(str(p), None, "not accepted for grading", r) for r in reasons], ["refused_by_replay"])


def _no_gpu_code(backend: Backend) -> str:
    """Why a graded run has no compiled GPU code to read."""
    checker = backend.checked_by or backend
    if tools.locate(checker.toolchain.compiler) is None:
        return (f"{checker.toolchain.compiler} is not installed here, so only the {backend.name} build of the file "
                f"exists: install the CUDA toolkit ({checker.toolchain.compiler}) or grade on the course's GPU machine")
    return f"the {backend.name} backend builds no GPU code"


def _analyse_sass(build: BuildResult, sub: Submission, rubric: Rubric):
    return sass.analyse(build.object, launcher=rubric.kernel.launcher_name if sub.has_launcher else None,
                        default_kernel=rubric.kernel.name, resources=build.resources)


def _findings(kernels, result: Result, rubric: Rubric, arch: str) -> tuple[SassSummary, list]:
    """What the compiled code shows (kernels: analysis.sass's, or why there are none) and the
    rubric's findings from it, with this run's launches and timing."""
    if isinstance(kernels, str):
        return SassSummary(unavailable=kernels), []
    kernels = findings.with_launches(kernels, result.launches, launches.sm_count(arch, result.device.sms))
    kernels = findings.with_counters(kernels, result.counters)
    return (SassSummary({k.name: dict(k.facts, launched=k.launched) for k in kernels}),
            findings.explain(kernels, rubric, result.timing, result.device.name))
