"""Grading one submission: scan, build, run in a child, check, time, tier.

The one entry point is grade_submission(); it returns a Result whatever the
student's code does. It raises only the grader's own errors (errors.py):
a missing file, a bad rubric, a machine without the tools.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from grader import __version__
from grader.toolchain import gpuinfo
from grader.run import lanes
from grader.analysis import launches
from grader.toolchain.outcome import BuildResult
from grader.toolchain.build import build_guard, build_reference
from grader.core.contract import ChildSandbox, spread_threads
from grader.core.backend import AUTO, Backend, named
from grader.core.errors import GraderError, InfrastructureError, UsageError
from grader.exercises import load_reference
from grader.exercises.plan import run_cases
from grader.grade.jobs import child_job, draw_inputs
from grader.core.results import (DeviceSummary, OutputSummary, PrivateInputs, Result, SandboxSummary, SassSummary,
                                 SourceNote, Stop)
from grader.exercises.rubric import Rubric
from grader.run.replaying import record_then_replay
from grader.run.sandbox import ChildRun, Worker
from grader.core.source import Submission
from grader.grade.steps import build_and_screen, read_source, vet_source

if TYPE_CHECKING:
    from grader.verdict import Verdict

Progress = Callable[[str], None]


def grade_submission(path: str | Path, *, rubric: Rubric, backend: str | Backend = AUTO,
                     progress: Progress | None = None, audit_syscalls: bool = False,
                     device: str | None = None, emulator_threads: int = 0, draw_ahead: bool = False,
                     inputs=None) -> Result:
    """Grade the .cu file at path against rubric on backend ('auto', 'cuda' or 'emulator').

    Whatever the submission does, and when the machine lacks a tool or a GPU, the answer is a
    Result (status infrastructure_error for the latter). Only a usage or rubric error raises.

    device names the GPU to run on, as a CUDA_VISIBLE_DEVICES entry (default: the first visible
    one). The child's checks and timing run inside that GPU's lane (lanes.py): no other grader
    times on it meanwhile.

    emulator_threads caps the OS threads a large emulated launch runs on (0: every core the child
    may use); a batch grading several submissions at once on the emulator gives each one.

    audit_syscalls runs the child's filter in audit mode: every system call is allowed and
    recorded (result.sandbox['audit']). It measures what CUDA and the grader need; it is
    never for grading students, and the command line does not offer it.

    inputs: a batch's store of cases (exercises/pool.SharedStore), made by its first GPU grade,
    shared by the rest and closed by the batch; by default a grade makes its own.

    draw_ahead: after a GPU grade, start the detached process that draws the next run's private
    cases (exercises/pool.py), so that the next grade of this exercise need not (`grader submit`).
    """
    started = time.perf_counter()
    say = progress or (lambda _msg: None)
    p = Path(path)
    requested = backend if backend == AUTO else named(backend)     # an unknown name is a UsageError
    if p.is_dir():
        raise UsageError(f"{path}: a folder, not a .cu file (`grader batch {path}` grades a folder of submissions)")
    if not p.is_file():
        raise UsageError(f"{path}: no such file")
    reading = gpuinfo.probe() if requested == AUTO or requested.on_gpu else None
    probed = time.perf_counter() - started          # nvidia-smi's answer, before anything else can start
    has_gpu = reading is not None
    chosen = gpuinfo.resolve_backend(requested, has_gpu=has_gpu)

    result = Result(exercise=rubric.exercise, submission={"path": str(path), "sha256": None}, backend=chosen.name,
                    status="graded", grader_version=__version__)
    result.phases["probe_s"] = round(probed, 3)
    def grade() -> None:
        if chosen.on_gpu and not has_gpu:
            raise InfrastructureError(
                "--backend cuda needs an NVIDIA GPU and none is visible here (nothing was compiled). Run on a GPU "
                "machine, or use --backend emulator to check correctness on the CPU.")
        _grade(p, rubric, chosen, reading, result, say, "audit" if audit_syscalls else "enforce", device,
               emulator_threads, inputs)

    _whatever_happens(result, grade)
    result.seconds = round(time.perf_counter() - started, 3)
    _keep_cache_in_bounds(rubric)
    if draw_ahead and chosen.private_cases and rubric.path and result.status != "infrastructure_error":
        from grader.exercises.pool import start_drawing_ahead

        start_drawing_ahead(rubric.path)
    return result


def _whatever_happens(result: Result, grade: Callable[[], None]) -> None:
    """Run grade, which fills result; whatever it raises but the grader's own usage and rubric
    errors, result ends valid: the machine's problem (a missing GPU, a full disk) or a bug of
    ours, said as such (infrastructure_error)."""
    try:
        grade()
    except InfrastructureError as exc:          # the machine, not the submission: still a valid result
        result.stop("infrastructure_error", str(exc))
    except GraderError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug of ours still leaves a valid result behind
        if isinstance(exc, OSError) and exc.errno in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT):
            result.stop("infrastructure_error", _no_room(exc))      # the machine's limit, said as such
        else:
            result.stop("infrastructure_error", "internal error in the grader (please report it): "
                        + "".join(traceback.format_exception_only(type(exc), exc)).strip()
                        + "\n" + "".join(traceback.format_tb(exc.__traceback__)[-3:]))


def _answers(case, rubric: Rubric, exercise, drawn, store):
    """One case's float64 answers (verdict.expected_for), from its inputs once they are drawn."""
    from grader import verdict

    return verdict.expected_for(case, rubric, exercise, drawn.result(), store.folder_for(case), keep=store.keep)


def _no_room(exc: OSError) -> str:
    """What to do when the grader cannot write its own files: a file-size limit, a full disk."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    why = (f"the file-size limit this grader inherited ({limit} bytes: `ulimit -f`)" if exc.errno == errno.EFBIG
           else "the disk (or its quota)")
    return (f"the grader could not write {exc.filename or 'its data'}: {why} is too small for what it writes "
            "(the timed shape's inputs are 64 MiB a set). Raise it, or set GRADER_CACHE_DIR to a folder with "
            "room, and grade again.")


def _keep_cache_in_bounds(rubric: Rubric) -> None:
    """Prune the build cache to its cap (least recently used first); never fails a grade."""
    from grader.toolchain import cache

    try:
        cache.prune_if_grown(limit_bytes=cache.max_bytes(rubric.limits.cache_max_mib))
    except OSError:
        pass


def _grade(p: Path, rubric: Rubric, backend: Backend, reading: dict | None, result: Result, say: Progress,
           guard_mode: str, device: str | None, emulator_threads: int = 0, shared=None) -> None:
    """Grade p into result: each step returns what it found and only this function (with
    take_verdict) writes the Result."""
    sub = read_source(p, rubric)
    if isinstance(sub, Stop):
        return result.end(sub)
    result.submission["sha256"] = sub.sha256
    stop = vet_source(p, sub, rubric)
    if stop:
        return result.end(stop)
    run = _Run(p, rubric, backend, reading, say, guard_mode, device, emulator_threads)
    try:
        run.start(shared)
        from grader import verdict          # numpy's import, with the children already starting

        built = build_and_screen(p, sub, rubric, backend, run.arch, say)
        result.phases["build_s"] = round(time.perf_counter() - run.started, 3)
        result.build = built.summary
        if built.stop:
            return result.end(built.stop)
        build, gpu_build = built.build, built.gpu_build
        sass_future = run.pool.submit(_analyse_sass, gpu_build, sub, rubric) if gpu_build else None
        if run.worker is None:
            raise InfrastructureError(
                f"{p.name} compiled for {run.arch}, but grading on the cuda backend needs an NVIDIA GPU and none "
                "is visible. Run on a GPU machine, or use --backend emulator to check correctness on the CPU.")
        children = run.run_children(build, sub, result.phases)
        result.output = _output_of(children.runs)
        stop = _refused_by_replay(children.refusals, p) if children.refusals else None
        if stop:
            return result.end(stop)
        clock = time.perf_counter()
        judged = verdict.judge_run(children.judged, run.cases, run.references, rubric, run.exercise, build, p,
                                   backend)
        take_verdict(result, judged)
        result.phases.update(run.draw_times)
        if result.sandbox is not None:
            result.sandbox.inputs = run.private_inputs()
            result.sandbox.recorder = children.recorder_sandbox
            result.sandbox.lowered_limits = _lowered_limits(rubric, run.worker, result.sandbox)
            result.sandbox.adapted = list(run.worker.adapted)
        result.device = _device(judged.device, gpu=run.device if backend.on_gpu else None,
                                before=reading if backend.on_gpu else None, after=children.after,
                                compiler=build.compiler)
        log, timed_shape = launches.pick_log([f.data for f in children.judged.frames],
                                             {c.name for c in run.cases if c.timed})
        result.launches = launches.resolve(log, timed_shape=timed_shape, library=build.library,
                                           resources=(gpu_build or build).resources, arch=run.arch)
        result.phases["check_s"] = round(time.perf_counter() - clock, 3)
        if sass_future is not None and result.status == "graded":
            result.sass, result.findings = _findings(sass_future.result(), result, rubric, run.arch)
    finally:
        run.close()


def _device(timing_read: dict, **seen) -> DeviceSummary:
    """The machine: the GPU as the timing read it (the measuring process's claim: only the known
    facts are kept) and what the parent saw."""
    known = {f.name for f in dataclasses.fields(DeviceSummary)} - set(seen)
    return DeviceSummary(**{k: v for k, v in timing_read.items() if k in known}, **seen)


def take_verdict(result: Result, v: Verdict) -> None:
    """The verdict's parts into the Result (the other half of the one place that writes it)."""
    result.cases, result.maps, result.diagnosis = v.cases, v.maps, v.diagnosis
    result.sandbox = v.sandbox
    result.phases.update(v.phases)
    result.flags += v.flags
    if v.stop is not None:
        result.end(v.stop)
        return
    result.correct, result.timing, result.floor = v.correct, v.timing, v.floor
    result.tier, result.borderline, result.feedback = v.tier, v.borderline, v.feedback
    if v.timing is not None:
        result.fraction, result.fraction_ci, result.gbps = v.timing.fraction, v.timing.fraction_ci, v.timing.submission_gbps


@dataclass
class _Children:
    """What the children's runs gave back: the run judged, every run (for their output), the
    recorder's refusals and sandbox, and the GPU's state after them."""

    judged: ChildRun
    runs: list[ChildRun]
    refusals: list[str] = field(default_factory=list)
    recorder_sandbox: ChildSandbox | None = None
    reading: Future | None = None       # nvidia-smi's reading after them, taken while the verdict is judged

    @property
    def after(self) -> dict | None:
        return None if self.reading is None else self.reading.result()


class _Run:
    """One grade's moving parts: its children (started first, so that their imports and CUDA
    context overlap the build), its thread pools, its store of cases with their inputs and
    answers being drawn, and the reference and guard builds."""

    def __init__(self, p: Path, rubric: Rubric, backend: Backend, reading: dict | None, say: Progress,
                 guard_mode: str, device: str | None, emulator_threads: int):
        self.p, self.rubric, self.backend, self.say, self.guard_mode = p, rubric, backend, say, guard_mode
        self.has_gpu = reading is not None
        self.arch = (gpuinfo.arch(reading) if backend.on_gpu and self.has_gpu
                     else os.environ.get("GRADER_CUDA_ARCH", "sm_90"))
        self.device, self.emulator_threads = device, emulator_threads
        self.started = time.perf_counter()
        self.worker = self.recorder = self.store = None
        self.pool = ThreadPoolExecutor(max_workers=3)           # the builds, the SASS, the device code
        # The cases' inputs and answers, beside the builds: a first grade draws every case, a GPU
        # grade without cases drawn ahead its private ones (numpy and torch release the GIL).
        self.draws = ThreadPoolExecutor(max_workers=max(2, min(6, (os.cpu_count() or 2) // 2)))
        self.inputs: dict = {}          # case name -> the future of its inputs on disk
        self.references: dict = {}      # case name -> the future of its float64 answers
        self.cases: list = []
        self.exercise = None
        self.reference = self.guard = None   # the futures of the reference and guard builds (start)
        self.draw_times: dict[str, float] = {}     # _clocked's: when reference.py was loaded, the answers ready

    def start(self, shared) -> None:
        """Start the children, then the reference and guard builds and the draws, beside the build."""
        rubric, backend = self.rubric, self.backend
        limits = rubric.limits
        if not backend.on_gpu or self.has_gpu:
            # It loads nothing of the student's until it is handed the job. On a GPU, two: the
            # recorder, which runs the submission's host code, and the measuring process, which
            # runs none (run/child/replay.py).
            if backend.records_then_replays:
                from grader.core.processes import close_to_children

                close_to_children()         # the recorder runs as this user: keep it out of /proc/<grader>
                self.device = self.device or lanes.default_device()
                self.recorder = Worker(backend=backend.name, output_cap=limits.output_cap_bytes,
                                       cpu_limit_s=limits.time_limit_s, device=self.device)
            self.worker = Worker(backend=backend.name, output_cap=limits.output_cap_bytes,
                                 cpu_limit_s=limits.time_limit_s, device=self.device if backend.on_gpu else None,
                                 torch=backend.times and bool(rubric.timing.baseline),
                                 cpu_threads=1 if backend.on_gpu else spread_threads(self.emulator_threads))
        # Imported only now, with the child already starting: numpy's import overlaps its start-up.
        from grader.core.locations import cache_root
        from grader.exercises import data
        from grader.exercises.pool import Store

        self.exercise = load_reference(rubric)
        if self.worker is None:
            return
        # On a GPU the random cases are drawn from 64 bits chosen for this run alone, kept in this
        # process (exercises/plan.py): the emulator runs the student's host code beside the device
        # code, so there they are the rubric's seeds, reproducible and public.
        if shared is not None and backend.private_cases:
            self.store = shared.get()
        elif backend.private_cases:
            self.store = Store.for_gpu_run(cache_root(), rubric, self.exercise,
                                           lambda s: run_cases(rubric, backend, s))
        else:
            self.store = Store(cache_root())
        self.reference = self.pool.submit(build_reference, backend=backend, arch=self.arch,
                                          exercise_kernels=self.exercise.kernels)
        cases = run_cases(rubric, backend, self.store.secret)
        if not all(data.answers_kept(rubric, self.exercise, c, self.store.folder_for(c)) for c in cases):
            # Some answers are computed: reference.py is imported now, beside the build, not after
            # the draws (written with torch, it imports torch: seconds on a freshly started machine).
            self.draws.submit(self._clocked, "reference_loaded_t", lambda: self.exercise.module)
        self.inputs = draw_inputs(self.draws, rubric, self.exercise, backend, self.store)
        # Each case's float64 answers as soon as its inputs are drawn: on a first grade (or one
        # with nothing drawn ahead) they are computed beside the builds, not after them. Queued
        # after every draw, so a thread waiting on a draw never holds up one that is yet to start.
        self.references = {c.name: self.draws.submit(self._clocked, "answers_ready_t", _answers, c, rubric,
                                                     self.exercise, self.inputs[c.name],
                                                     self.store)
                           for c in cases}
        self.guard = self.pool.submit(build_guard)

    def _clocked(self, name: str, fn, *args):
        """fn(*args), noting when the last call under this name ended (seconds since the grade
        started; phases): when reference.py was loaded, when the last answers were ready."""
        out = fn(*args)
        self.draw_times[name] = round(time.perf_counter() - self.started, 3)
        return out

    def private_inputs(self) -> PrivateInputs | None:
        store = self.store
        if store is None or store.secret is None:
            return None
        return PrivateInputs(drawn_ahead=store.drawn_ahead, batch=store.keep)

    def run_children(self, build: BuildResult, sub: Submission, phases: dict) -> _Children:
        """The child's job, its inputs on disk, then the children's run in the GPU's lane."""
        rubric, backend = self.rubric, self.backend
        job, self.cases = child_job(rubric, backend=backend, build=build, reference=self.reference.result(),
                                    guard=self.guard.result(), guard_mode=self.guard_mode,
                                    has_launcher=sub.has_launcher, emulator_threads=self.emulator_threads,
                                    store=self.store)
        # The inputs are on disk before the child is told to start; the answers may still be
        # being computed while it runs.
        wait = time.perf_counter()
        for f in self.inputs.values():
            f.result()
        phases["inputs_wait_s"] = round(time.perf_counter() - wait, 3)
        # The count the verdict will report: every case whose output comes back, and each check's chain.
        checks = len(self.cases) + sum(1 for cj in job.cases if cj.chain is not None)
        self.say(f"running {checks} checks{' and the timing' if backend.times else ''}"
                 f"{' in two child processes' if backend.records_then_replays else ' in a child process'}")
        device_code = self.pool.submit(_device_code, build) if backend.records_then_replays else None
        # The children's start-up (imports, CUDA context) stays out of the GPU's lane.
        waited = self.worker.wait_ready(timeout_s=rubric.limits.time_limit_s)
        if self.recorder is not None:
            waited = max(waited, self.recorder.wait_ready(timeout_s=rubric.limits.time_limit_s))
        phases["child_start_wait_s"] = round(waited, 3)
        with lanes.gpu_lane(self.device) if backend.on_gpu else contextlib.nullcontext() as lane:
            phases["lane_wait_s"] = round(lane.waited, 3) if lane else 0.0
            clock = time.perf_counter()

            def handed_on() -> None:     # the lane is handed on once the child has sent everything
                lane.release()
                phases["lane_s"] = round(time.perf_counter() - clock, 3)

            if self.recorder is not None:
                both = record_then_replay(self.recorder, self.worker, job, device_code=device_code.result(),
                                          time_limit_s=rubric.limits.time_limit_s, on_sent=handed_on,
                                          launcher=rubric.kernel.launcher_name if sub.has_launcher else None)
                phases["record_s"] = round(both.recorder.seconds, 3)
                phases["gate_wait_s"] = round(both.gate_wait_s, 3)
                phases.update(_recorder_times(both.recorder))
                out = _Children(both.judged, [both.recorder] + ([both.measurer] if both.measurer else []),
                                both.refusals, _hello_sandbox(both.recorder) if both.measurer else None)
            else:
                run = self.worker.run(job, time_limit_s=rubric.limits.time_limit_s,
                                      on_sent=handed_on if lane else None)
                out = _Children(run, [run])
            phases["child_s"] = round(time.perf_counter() - clock, 3)
        if backend.on_gpu:
            out.reading = self.pool.submit(gpuinfo.snapshot)     # nvidia-smi takes a while: beside the verdict
        return out

    def close(self) -> None:
        for child in (self.recorder, self.worker):
            if child is not None:
                child.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.draws.shutdown(wait=False, cancel_futures=True)
        if self.store is not None and not self.store.keep:          # a batch's store is the batch's to close
            self.store.close()


def _lowered_limits(rubric: Rubric, worker: Worker, reported: SandboxSummary | None) -> dict:
    """The grader's limits an inherited hard limit lowered (each only stricter: grader/core/limits.py)."""
    import resource

    from grader.core.limits import lowered

    found = {**lowered({resource.RLIMIT_AS: rubric.limits.build_memory_mib << 20}), **worker.lowered}
    if reported is not None and reported.host_memory_lowered_to_mib is not None:   # the child's own cap
        found["private memory (the child)"] = {"wanted_mib": rubric.limits.host_memory_mib,
                                               "got_mib": reported.host_memory_lowered_to_mib}
    return found


def _recorder_times(run: ChildRun) -> dict[str, float]:
    """When the recorder was ready, was handed its job, loaded the library, ended the checks' calls
    and the timing's, and sent everything (its own clock): where record_s goes."""
    from grader.core.contract import DoneFrame, HelloFrame, clock_phases

    out: dict[str, float] = {}
    for f in run.frames:
        if isinstance(f.data, (HelloFrame, DoneFrame)):
            out.update(clock_phases(f.data, "recorder"))
    return out


def _device_code(build: BuildResult) -> list[str]:
    from grader.toolchain.build import device_code

    return [str(p) for p in device_code(build.library)]


def _output_of(runs: list[ChildRun]) -> OutputSummary:
    """What the submission printed: the recorder's (its host code) then the measuring process's
    (device printf)."""
    return OutputSummary(stdout="".join(r.stdout.text() for r in runs), stderr="".join(r.stderr.text() for r in runs),
                         stdout_bytes=sum(r.stdout.total for r in runs), stderr_bytes=sum(r.stderr.total for r in runs),
                         dropped_bytes=sum(r.stdout.dropped + r.stderr.dropped for r in runs))


def _hello_sandbox(run: ChildRun) -> ChildSandbox | None:
    """What a child (the recorder) said was in force."""
    from grader.core.contract import HelloFrame

    said = next((f.data.sandbox for f in run.frames if isinstance(f.data, HelloFrame)), None)
    return said if isinstance(said, ChildSandbox) else None


def _refused_by_replay(reasons: list[str], p: Path) -> Stop:
    """A recording the grader will not replay: the launches it holds cannot be timed fairly."""
    return Stop("rejected", "\n".join(f"{p.name}: {r}" for r in reasons),
                [SourceNote(str(p), None, "not accepted for grading", r) for r in reasons], ["refused_by_replay"])


def _analyse_sass(build: BuildResult, sub: Submission, rubric: Rubric):
    from grader.analysis import sass

    return sass.analyse(build.object, launcher=rubric.kernel.launcher_name if sub.has_launcher else None,
                        default_kernel=rubric.kernel.name, resources=[vars(r) for r in build.resources])


def _findings(kernels, result: Result, rubric: Rubric, arch: str) -> tuple[SassSummary, list]:
    """What the compiled code shows (kernels: analysis.sass's, or why there are none) and the
    rubric's findings from it, with this run's launches and timing."""
    from grader.analysis import findings

    if isinstance(kernels, str):
        return SassSummary(unavailable=kernels), []
    kernels = findings.with_launches(kernels, result.launches, launches.sm_count(arch, result.device.sms))
    return (SassSummary({k.name: dict(k.facts, launched=k.launched) for k in kernels}),
            findings.explain(kernels, rubric, result.timing, result.device.name))
