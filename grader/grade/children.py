"""A grade's run: its children started beside the build, its cases drawn and answered beside it
(GradeRun.start returns them, Prepared), then the children's run, the way this grade runs them
(grade/ways.py: a recording without a GPU then its replay, a recording on the GPU then its replay,
or the emulator's child; GradeRun.run_children chooses one and returns what came back, ChildRuns),
for the pipeline to judge (pipeline.py). Every child is started by the Launcher the grade is handed
(grade/launcher.py).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from grader.core.contract import Job
from grader.core.errors import InfrastructureError
from grader.core.locations import cache_root
from grader.core.progress import Phase, Progress, Said
from grader.core.results import CountersSummary, OutputSummary, PrivateInputs
from grader.core.source import Submission
from grader.exercises import Reference, load_reference
from grader.exercises.plan import Case, run_cases
from grader.exercises.rubric import Rubric
from grader.grade.jobs import JobParts, child_job, draw_inputs
from grader.grade.launcher import Launcher
from grader.grade.phases import DrawClock
from grader.grade.request import GradeRequest
from grader.grade.ways import ChildRuns, Emulated, RecordedOffline, RecordedOnGpu, Way, clocked_lane
from grader.run import lanes, profiling
from grader.run.replaying import DeviceCode
from grader.run.sandbox import ChildRun
from grader.toolchain import gpuinfo, tools
from grader.toolchain.build import (
    build_driver_stand_in,
    build_guard,
    build_reference,
    device_code,
    device_variables,
    kernel_parameters,
    uses_device_heap,
)
from grader.toolchain.outcome import BuildResult


def _answers(case, rubric: Rubric, exercise, drawn, store):
    """One case's float64 answers (verdict.expected_for), from its inputs once they are drawn."""
    # lazy: the verdict (and numpy) imported in the drawing thread, off the main thread's way to the
    # build (0.1 to 0.2 s of a warm grade on the H100 host; pipeline.grade also imports it in its pool)
    from grader import verdict  # noqa: PLC0415  (numpy's import in the drawing thread: the comment above)

    return verdict.expected_for(case, rubric, exercise, drawn.result(), store.folder_for(case), keep=store.keep)


@dataclass
class Prepared:
    """What GradeRun.start set going beside the build: the exercise's reference (reference.py and its
    kernels), the store the run's cases lie in, the case plan (made once: run_cases), each case's
    inputs and float64 answers as futures, and the builds of the reference kernels and the guard."""

    exercise: Reference
    store: object                       # exercises/pool.Store
    cases: list[Case]
    inputs: dict[str, Future]           # case name -> its inputs on disk
    answers: dict[str, Future]          # case name -> its float64 answers
    reference_build: Future
    guard_build: Future
    driver_stand_in: Future | None = None   # the recorder without a GPU's stand-in driver (built once a machine)

    def private_inputs(self) -> PrivateInputs | None:
        if self.store.secret is None:
            return None
        return PrivateInputs(drawn_ahead=self.store.drawn_ahead, batch=self.store.keep)


class GradeRun:
    """One grade's moving parts: its children (started first, so that their imports and CUDA
    context overlap the build) and its thread pools; start() sets the draws and the reference and
    guard builds going and returns them (Prepared)."""

    def __init__(self, request: GradeRequest, *, reading: dict | None, say: Progress, launcher: Launcher | None = None):
        """request: its backend resolved. launcher: what starts the children (grade/launcher.py:
        `grader submit`'s has them started before the pipeline is imported); by default one that
        starts them when start() asks."""
        backend, options = request.backend, request.options
        self.p, self.rubric, self.backend, self.say = request.path, request.rubric, backend, say
        self.guard_mode = options.guard_mode
        self.one_grade = options.one_grade
        self.has_gpu = reading is not None
        # the GPU's own, else the architecture of the backend that builds the code (the emulator's judge)
        self.arch = (gpuinfo.arch(reading) if backend.on_gpu and self.has_gpu
                     else (backend.checked_by or backend).default_arch)
        self.device, self.emulator_threads = options.device, options.emulator_threads
        self.started = time.perf_counter()
        self.worker = self.recorder = self.store = None
        self.launcher = launcher if launcher is not None else Launcher()
        self.children = None                                    # the launcher's, once start() has taken them
        self.pool = ThreadPoolExecutor(max_workers=5)           # the builds, the SASS, the device code, NVML
        # The cases' inputs and answers, beside the builds: a first grade draws every case, a GPU
        # grade without cases drawn ahead its private ones (numpy and torch release the GIL).
        self.draws = ThreadPoolExecutor(max_workers=max(2, min(6, (os.cpu_count() or 2) // 2)))
        self.draw_clock = DrawClock(self.started)  # _clocked's: when reference.py was loaded, the answers ready
        self._nvml: Future | None = None           # warm_reading's hold on NVML (True: held), until let go of
        self._nvml_lock = threading.Lock()

    def start(self, shared) -> Prepared:
        """Take the children from the launcher (started ahead, or now), then start the reference and
        guard builds and the draws, beside the build. (pipeline.grade has refused a GPU backend on a
        machine without a GPU before this.)"""
        rubric, backend = self.rubric, self.backend
        if not backend.on_gpu or self.has_gpu:
            self.children = self.launcher.children(rubric=rubric, backend=backend, device=self.device,
                                                   emulator_threads=self.emulator_threads)
        if self.children is not None:
            self.worker, self.recorder = self.children.worker, self.children.recorder
            self.device = self.children.device or self.device
        # lazy: imported only now, with the child already starting (the emulator's are not started
        # ahead): numpy's import (exercises.pool's) overlaps its start-up.
        from grader.exercises import casefiles  # noqa: PLC0415  (numpy's import after the children's start: above)
        from grader.exercises.pool import Store  # noqa: PLC0415  (as above)

        exercise = load_reference(rubric)
        if self.worker is None:
            raise InfrastructureError(f"the {backend.name} backend needs an NVIDIA GPU and none is visible here")
        # On a GPU the random cases are drawn from 64 bits chosen for this run alone, kept in this
        # process (exercises/plan.py): the emulator runs the student's host code beside the device
        # code, so there they are the rubric's seeds, reproducible and public.
        if shared is not None and backend.private_cases:
            self.store = shared.get()
        elif backend.private_cases:
            self.store = Store.for_gpu_run(cache_root(), rubric, exercise,
                                           lambda s: run_cases(rubric, timed=backend.times, secret=s))
        else:
            self.store = Store(cache_root())
        if backend.on_gpu:
            self._nvml = self.pool.submit(gpuinfo.warm_reading)     # the reading after the timing, made quick
        reference_build = self.pool.submit(build_reference, backend=backend, arch=self.arch,
                                           exercise_kernels=exercise.kernels)
        cases = run_cases(rubric, timed=backend.times, secret=self.store.secret)
        if not all(casefiles.answers_kept(rubric, exercise, c, self.store.folder_for(c)) for c in cases):
            # Some answers are computed: reference.py is imported now, beside the build, not after
            # the draws (written with torch, it imports torch: seconds on a freshly started machine).
            self.draws.submit(self._clocked, self.draw_clock.reference_loaded, lambda: exercise.module)
        inputs = draw_inputs(self.draws, rubric, exercise, backend, self.store, cases)
        # Each case's float64 answers as soon as its inputs are drawn: on a first grade (or one
        # with nothing drawn ahead) they are computed beside the builds, not after them. Queued
        # after every draw, so a thread waiting on a draw never holds up one that is yet to start.
        answers = {c.name: self.draws.submit(self._clocked, self.draw_clock.answers_ready, _answers, c, rubric, exercise,
                                             inputs[c.name], self.store)
                   for c in cases}
        # Built beside the submission, not after it: on a machine's first grade its compile took 0.6 s.
        stand_in = self.pool.submit(build_driver_stand_in) if backend.records_then_replays else None
        return Prepared(exercise, self.store, cases, inputs, answers, reference_build, self.pool.submit(build_guard),
                        stand_in)

    @staticmethod
    def _clocked(noted: Callable[[], None], fn, *args):
        """fn(*args), then noted(): the draw clock's moment (DrawClock.reference_loaded, .answers_ready)
        is when the last such call ended."""
        out = fn(*args)
        noted()
        return out

    def run_children(self, prepared: Prepared, build: BuildResult, sub: Submission) -> ChildRuns:
        """The child's job, its inputs on disk, then the children's run in the GPU's lane."""
        rubric, backend = self.rubric, self.backend
        parts = JobParts(prepared.reference_build.result(), sub.has_launcher, guard=prepared.guard_build.result(),
                         guard_mode=self.guard_mode, emulator_threads=self.emulator_threads)
        job, _ = child_job(rubric, backend=backend, build=build, parts=parts, store=prepared.store, cases=prepared.cases)
        # The count the verdict will report: every case whose output comes back, and each check's chain.
        checks = len(prepared.cases) + sum(1 for cj in job.cases if cj.chain is not None)
        self.say(Said(f"running {checks} checks{' and the timing' if backend.times else ''}"
                      f"{' in two child processes' if backend.records_then_replays else ' in a child process'}",
                      Phase.CHECKING))
        code = self.pool.submit(_device_code, build, prepared.driver_stand_in) if backend.records_then_replays else None
        if backend.records_then_replays:
            # The grader's own library (its runtime's start on the CUDA context) loaded now, while the
            # recorder records: the measuring process's job then loads only the submission's device code.
            self.worker.preload([job.reference_library], job)
        # The children's start-up (imports, CUDA context) stays out of the GPU's lane: each way waits
        # for the children it needs before the lane (the recorder without a GPU records meanwhile).
        way = self._way(job, code, sub, prepared).before_lane()
        if isinstance(way, RecordedOnGpu):
            self.recorder = way.recorder               # the one started on the GPU, where the launcher needed it
        after: list[Future] = []

        def read_after() -> None:
            # The GPU's state right after the timing, as the measuring process ends: beside the verdict.
            after.append(self.pool.submit(gpuinfo.reading, self.device))
            if self.one_grade:
                # then NVML let go of, beside the verdict too, not at the process's exit (a thread of
                # its own: the pool's queue may be cancelled by close() before it runs)
                threading.Thread(target=self._let_go_of_nvml, args=(after[0],), daemon=True,
                                 name="nvml-release").start()

        lane = lanes.gpu_lane(self.device) if backend.on_gpu else None      # taken by the way, as late as it can
        out = clocked_lane(way, lane, then=read_after if backend.on_gpu else None,
                           timing=lambda: self.say(Said(f"timing on GPU {self.device}" if self.device else "timing on the GPU",
                                                        Phase.TIMING)))
        if backend.on_gpu:
            out.reading = after[0] if after else self.pool.submit(gpuinfo.reading, self.device)
        return out

    def _way(self, job: Job, code: Future | None, sub: Submission, prepared: Prepared) -> Way:
        """How this grade runs its children (grade/ways.py): the emulator's one child, or a recording
        then its replay, the recording made without a GPU where the recorder started without one.
        Each way waits for the inputs on disk before a child that reads them is told to start (the
        answers may still be being computed while it runs)."""
        rubric, limit = self.rubric, self.rubric.limits.time_limit_s
        launcher = rubric.kernel.launcher_name if sub.has_launcher else None

        def inputs() -> None:
            for f in prepared.inputs.values():
                f.result()

        if self.recorder is None:
            return Emulated(job, limit, launcher, inputs=inputs, worker=self.worker)
        if self.recorder.gpu:
            return RecordedOnGpu(job, limit, launcher, inputs=inputs, recorder=self.recorder, measurer=self.worker,
                                 code=code)
        return RecordedOffline(job, limit, launcher, inputs=inputs, recorder=self.recorder, measurer=self.worker,
                               code=code,
                               on_gpu_recorder=lambda: self.launcher.recorder(rubric=rubric, backend=self.backend,
                                                                              device=self.device, gpu=True),
                               say=self.say)

    def counters(self, children: ChildRuns, *, launches, model_bytes: int | None) -> CountersSummary:
        """The counters' pass (run/profiling.py) over the timed call the measuring process replayed,
        in the GPU's lane again: what the hardware counted, or why nothing was."""
        replay = children.replay
        if not self.backend.on_gpu or not self.backend.toolchain.profiler or replay is None or not replay.timed_cases:
            return CountersSummary(problem="the counters are read on a GPU, from the timed call of a timed grade.")
        ncu = tools.locate(self.backend.toolchain.profiler)
        if ncu is None:
            return CountersSummary(problem=f"{self.backend.toolchain.profiler} was not found: "
                                           f"{tools.INSTALL_HINTS.get(self.backend.toolchain.profiler, 'install it')}.")
        kernels = profiling.call_kernels(replay.replay.recording, replay.timed_cases[0].launch.key)
        names = {lc.mangled: lc.kernel for lc in launches}
        self.say(Said("reading the hardware's counters (Nsight Compute)", Phase.COUNTERS))
        try:
            with lanes.gpu_lane(self.device):
                return profiling.profile_call(replay, profiling.CountersCall(
                    ncu=ncu, kernels=kernels, names=names, model_bytes=model_bytes,
                    output_cap=self.rubric.limits.output_cap_bytes,
                    time_limit_s=max(60.0, self.rubric.limits.time_limit_s), device=self.device))
        except Exception as exc:  # noqa: BLE001 - the counters never fail a grade: said, not raised
            return CountersSummary(problem=f"the counters' pass could not run ({type(exc).__name__}: {exc}); "
                                           "the grade above stands.")

    def _let_go_of_nvml(self, reading: Future | None = None) -> None:
        """warm_reading's hold on NVML ended, once (after the reading where there is one)."""
        if reading is not None:
            reading.exception()                      # waited for, whatever it gave
        with self._nvml_lock:
            held, self._nvml = self._nvml, None
        if held is not None and held.exception() is None and held.result():
            gpuinfo.release_reading()

    def close(self) -> None:
        for child in (self.recorder, self.worker):
            if child is not None:
                child.cancel()
        if self._nvml is not None and self.one_grade:        # a grade that ended before its reading
            threading.Thread(target=self._let_go_of_nvml, daemon=True, name="nvml-release").start()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.draws.shutdown(wait=False, cancel_futures=True)
        if self.store is not None and not self.store.keep:          # a batch's store is the batch's to close
            self.store.close()


def _device_code(build: BuildResult, stand_in: Future) -> DeviceCode:
    fatbins = device_code(build.library)
    return DeviceCode([str(p) for p in fatbins], device_variables(build.object), uses_device_heap(build.object),
                      kernel_parameters(fatbins), stand_in.result())


def output_of(runs: list[ChildRun]) -> OutputSummary:
    """What the submission printed: the recorder's (its host code) then the measuring process's
    (device printf)."""
    return OutputSummary(stdout="".join(r.stdout.text() for r in runs), stderr="".join(r.stderr.text() for r in runs),
                         stdout_bytes=sum(r.stdout.total for r in runs), stderr_bytes=sum(r.stderr.total for r in runs),
                         dropped_bytes=sum(r.stdout.dropped + r.stderr.dropped for r in runs))
