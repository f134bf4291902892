"""The one place that starts a grade's children: the Launcher, handed to the pipeline.

A child's start (its interpreter, imports and CUDA context: about 0.45 s on an H200 host) is the
longest wait of a warm grade, so `grader submit` starts children as early as it can, and the
Launcher keeps what it started until a grade asks for it:

- the head start: on a machine with a GPU, the command's entry (grader/entry.py, before click, the
  rubrics and the probe are imported) has the Launcher start the measuring process as a rubric with
  the default limits would (Launcher.for_command). A grade takes it where it asks for exactly that
  process; otherwise it is ended. On an H100 host the CLI had spent 0.14 s before its children
  started, and the grade then waited 0.13 to 0.19 s for the measuring process's CUDA context.
- the children started ahead: once `grader submit` has decided its machine (grade/machine.py, a
  plain value) and knows the rubric, it has the Launcher start the first grade's children
  (start_ahead), so that they start while the CLI imports the pipeline, numpy and the verdict.

The pipeline asks the Launcher it is handed for its children (children(); recorder() for one
started on the GPU later): those started ahead, once, else started now. The children load nothing
of the student's until their job arrives; what no grade took is ended (end_unused). A Launcher made
for the command also says the command's own start in its first grade's phases (command_start).

Everything here imports only what a child's start needs (tests/test_imports.py).
"""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grader.core import processes
from grader.core.backend import AUTO, BACKENDS, Backend, named
from grader.core.errors import UsageError
from grader.core.limits import OUTPUT_CAP_BYTES, TIME_LIMIT_S, spread_threads
from grader.grade.phases import CommandStart
from grader.run import lanes
from grader.run.sandbox import ChildSpec, Worker
from grader.toolchain import gpuinfo

if TYPE_CHECKING:
    from grader.grade.machine import Machine


@dataclass
class LiveChildren:
    """A grade's children as started, waiting for their job: the recorder (None unless the backend
    records then replays) and the process that runs (or replays) the job, and the GPU they may see."""

    worker: Worker
    recorder: Worker | None
    device: str | None
    head_started_at_s: float | None = None      # the measuring process is the head start's, started then (process age)

    def cancel(self) -> None:
        for child in (self.recorder, self.worker):
            if child is not None:
                child.cancel()


@dataclass(frozen=True)
class MeasurerSpec:
    """The measuring process as a grade asks for it (sandbox.Worker's arguments): a head start is
    taken only where it was started with exactly these."""

    backend: Backend
    output_cap: int
    cpu_limit_s: float
    device: str | None
    torch: bool
    cpu_threads: int

    def start(self) -> Worker:
        return Worker(ChildSpec(backend=self.backend, output_cap=self.output_cap, cpu_limit_s=self.cpu_limit_s,
                                device=self.device, torch=self.torch, cpu_threads=self.cpu_threads))


@dataclass(frozen=True)
class HeadStart:
    """The measuring process the head start started, as it was asked for, and when (the process's age, s)."""

    spec: MeasurerSpec
    worker: Worker
    started_at_s: float | None


class Launcher:
    """Starts every child a grade runs, and keeps those started ahead of it (the head start, the
    children started ahead) until a grade takes them or end_unused ends them. A plain Launcher()
    starts nothing ahead: each grade's children are started when it asks (a batch, a script, a test)."""

    def __init__(self, *, command: bool = False) -> None:
        """command: this is the `grader` command's own launcher (for_command): its first grade's phases
        say where the command's start went."""
        self._lock = threading.Lock()
        self._head: HeadStart | None = None
        self._ahead: LiveChildren | None = None
        self._command = command
        self._marks: dict[str, float] = {}

    @classmethod
    def for_command(cls, argv: list[str]) -> Launcher:
        """The command's launcher (grader/entry.py), with the measuring process started now where argv
        asks for one grade that will likely want it: `grader submit FILE` on a machine with an NVIDIA
        device, not asked for the emulator or for help. Started as a rubric with the default limits
        and no PyTorch baseline would start it, on the first visible GPU. Never fails: a process
        that cannot start is the grade's to start again, and report."""
        launcher = cls(command=True)
        backend = head_start_backend(argv, gpu_present=gpuinfo.device_file_present())
        if backend is None:
            return launcher
        processes.close_to_children()   # as children() does, before any child of this grade starts
        spec = MeasurerSpec(backend=backend, output_cap=OUTPUT_CAP_BYTES, cpu_limit_s=TIME_LIMIT_S,
                            device=lanes.default_device(), torch=False, cpu_threads=1)
        try:
            worker = spec.start()
        except Exception:  # noqa: BLE001 - a guess that failed: the grade starts its own, and says what failed
            return launcher
        launcher._head = HeadStart(spec, worker, processes.age_s())
        atexit.register(launcher.end_unused)    # a command that ends before its grade (a usage error) leaves none
        return launcher

    @property
    def head_started(self) -> bool:
        """A head start's process is held, not yet taken or ended."""
        return self._head is not None

    def mark(self, name: str) -> None:
        """The command's start reached name (cli_to_early_s, cli_to_grade_s) now: the process's age."""
        age = processes.age_s() if self._command else None
        if age is not None:
            self._marks[name] = round(age, 3)

    def command_start(self) -> CommandStart | None:
        """Where the command's start went, said once (by its first grade, asked as it starts: a later
        grade of --watch starts long after the process did); None for a launcher that is not the
        command's. cli_to_measurer_s where the children started ahead took the head start."""
        with self._lock:
            marks, self._marks, self._command = self._marks, {}, False
            head = self._ahead.head_started_at_s if self._ahead is not None else None
        if "cli_to_early_s" not in marks or "cli_to_grade_s" not in marks:
            return None
        return CommandStart(marks["cli_to_early_s"], marks["cli_to_grade_s"],
                            round(head, 3) if head is not None else None)

    def start_ahead(self, machine: Machine, *, rubric) -> None:
        """Start the first grade's children now (`grader submit`: their interpreter, imports and CUDA
        context overlap the CLI's imports and the build); never fails (a child that cannot start is
        the grade's to start again and report). Off a GPU nothing starts: the emulator's child starts in
        a tenth of a second and, started this early, only takes a core from the parent's imports."""
        if not machine.backend.on_gpu or not machine.has_gpu:
            self._take_head_start(None)     # no GPU grade: a head start's process is not wanted
            return
        try:
            ahead = self._start(rubric=rubric, backend=machine.backend, device=machine.device(0), emulator_threads=0)
        except OSError:
            return                          # the grade starts them again and says what the machine lacks
        with self._lock:
            self._ahead = ahead

    def children(self, *, rubric, backend: Backend, device: str | None, emulator_threads: int) -> LiveChildren:
        """A grade's children: those started ahead (taken once), else started now for backend (on a
        GPU, the caller has seen one). They load nothing of the student's until handed the job. On a
        GPU, two: the recorder, which runs the submission's host code (started without a GPU:
        run/child/recorder.py), and the measuring process, which runs none (run/child/replay.py)."""
        with self._lock:
            ahead, self._ahead = self._ahead, None
        if ahead is not None:
            return ahead
        return self._start(rubric=rubric, backend=backend, device=device, emulator_threads=emulator_threads)

    def _start(self, *, rubric, backend: Backend, device: str | None, emulator_threads: int) -> LiveChildren:
        limits = rubric.limits
        if backend.records_then_replays:
            processes.close_to_children()   # the recorder runs as this user: keep it out of /proc/<grader>
            device = device or lanes.default_device()
        # The measuring process first: its start (a CUDA context) is the longer, and a warm grade
        # waited on it; the recorder without a GPU is ready long before its job.
        spec = MeasurerSpec(backend=backend, output_cap=limits.output_cap_bytes, cpu_limit_s=limits.time_limit_s,
                            device=device if backend.on_gpu else None,
                            torch=backend.baseline and bool(rubric.timing.baseline),
                            cpu_threads=1 if backend.on_gpu else spread_threads(emulator_threads))
        taken = self._take_head_start(spec)
        worker = taken.worker if taken is not None else spec.start()
        recorder = None
        if backend.records_then_replays:
            try:
                recorder = self.recorder(rubric=rubric, backend=backend, device=device, gpu=False)
            except BaseException:
                worker.cancel()
                raise
        return LiveChildren(worker, recorder, device if backend.on_gpu else None,
                            head_started_at_s=taken.started_at_s if taken is not None else None)

    def recorder(self, *, rubric, backend: Backend, device: str, gpu: bool) -> Worker:
        """A recorder: without a GPU (the one a grade tries first: it runs outside the GPU's lane), or
        on the GPU (where the first could not record: replaying.needs_gpu)."""
        limits = rubric.limits
        return Worker(ChildSpec(backend=backend, output_cap=limits.output_cap_bytes, cpu_limit_s=limits.time_limit_s,
                                device=device, gpu=gpu, recorder=True))

    def _take_head_start(self, spec: MeasurerSpec | None) -> HeadStart | None:
        """The head start where its process was started as spec asks and still runs; otherwise it is
        ended (spec None: a grade that starts no measuring process) and None returned."""
        with self._lock:
            head, self._head = self._head, None
        if head is None:
            return None
        if spec is not None and head.spec == spec and head.worker.proc.poll() is None:
            return head
        head.worker.cancel()
        return None

    def end_unused(self) -> None:
        """End what was started ahead and no grade took (a grade that ended before its children's
        run, a command that ends before its grade); the Launcher still starts children after it."""
        with self._lock:
            ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.cancel()
        self._take_head_start(None)


def head_start_backend(argv: list[str], *, gpu_present: bool) -> Backend | None:
    """The backend a head start is for, where argv is `grader submit ...` that may grade on the
    GPU there is (not --help, and a --backend that resolves to one measured by replay); else None."""
    if not gpu_present or not argv or argv[0] != "submit":
        return None
    args = argv[1:]
    if any(a in ("-h", "--help") for a in args):
        return None
    requested = AUTO
    for i, a in enumerate(args):
        if a.startswith("--backend="):
            requested = a.partition("=")[2]
        elif a == "--backend" and i + 1 < len(args):
            requested = args[i + 1]

    # A guess, not the decision (grade/machine.decide makes that once): "auto" with a device file
    # present is the backend that records then replays, if any does.
    try:
        guessed = [named(requested)] if requested != AUTO else [b for b in BACKENDS.values() if b.on_gpu]
    except UsageError:
        return None                 # click says what --backend accepts
    return next((b for b in guessed if b.records_then_replays), None)
