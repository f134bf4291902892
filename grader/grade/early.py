"""A grade's first moves, made before the rest of the grader is imported: the GPU's probe and its
children's start on a GPU (their interpreter, imports and CUDA context: about 0.45 s on an H200
host, the longest wait of a warm grade).

`grader submit` decides its machine (grade/machine.py) as soon as it knows the rubric and starts the
children there (machine.start_ahead), so that they start while the CLI imports the pipeline, numpy
and the verdict; pipeline.grade takes what was started (the machine's children) instead of
starting them again. Everything here
imports only what a child's start needs. The children load nothing of the student's until their
job arrives; a grade that ends before that (a compile error) cancels them.

Sooner still, `grader submit` on a machine with a GPU (the command's entry, grader/entry.py, before
click, the rubrics and the probe are imported) starts the measuring process as a rubric with the
default limits would (head_start): start_children takes it where its grade asks for exactly that
process, and ends it otherwise. On an H100 host the CLI had spent 0.14 s before its children
started, and the grade then waited 0.13 to 0.19 s for the measuring process's CUDA context.
"""

from __future__ import annotations

import atexit
from dataclasses import dataclass

from grader.core.backend import AUTO, BACKENDS, Backend, named
from grader.core.errors import UsageError
from grader.core import processes
from grader.core.limits import OUTPUT_CAP_BYTES, TIME_LIMIT_S, spread_threads
from grader.run.sandbox import ChildSpec, Worker
from grader.run import lanes
from grader.toolchain import gpuinfo


@dataclass
class Children:
    """A grade's children as started: the recorder (None unless the backend records then replays)
    and the process that runs (or replays) the job, and the GPU they may see."""

    worker: Worker
    recorder: Worker | None
    device: str | None
    head_started_at_s: float | None = None      # the measuring process is the head start's, started then (process age)

    def cancel(self) -> None:
        for child in (self.recorder, self.worker):
            if child is not None:
                child.cancel()


def start_children(*, rubric, backend: Backend, device: str | None, emulator_threads: int) -> Children:
    """Start a grade's children for backend (on a GPU, the caller has seen one). It loads nothing
    of the student's until it is handed the job. On a GPU, two: the recorder, which runs the
    submission's host code (started without a GPU: run/child/recorder.py), and the measuring
    process, which runs none (run/child/replay.py)."""
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
    taken = take_head_start(spec)
    worker = taken.worker if taken is not None else spec.start()
    recorder = None
    if backend.records_then_replays:
        try:
            recorder = start_recorder(rubric=rubric, backend=backend, device=device, gpu=False)
        except BaseException:
            worker.cancel()
            raise
    return Children(worker, recorder, device if backend.on_gpu else None,
                    head_started_at_s=taken.started_at_s if taken is not None else None)


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


@dataclass
class HeadStart:
    """The measuring process head_start started, as it was asked for, and when (the process's age, s)."""

    spec: MeasurerSpec
    worker: Worker
    started_at_s: float | None


_HEAD_START: list[HeadStart] = []     # at most one: started by head_start, not yet taken


def head_start(argv: list[str]) -> bool:
    """Start the measuring process now where argv (the command's arguments) asks for one grade
    that will likely want it: `grader submit FILE` on a machine with an NVIDIA device, not asked
    for the emulator or for help. Started as a rubric with the default limits and no PyTorch
    baseline would start it, on the first visible GPU; whether it was started. Never fails: a
    process that cannot start is the grade's to start again, and report."""
    backend = head_start_backend(argv, gpu_present=gpuinfo.device_file_present())
    if backend is None:
        return False

    processes.close_to_children()   # as start_children does, before any child of this grade starts
    spec = MeasurerSpec(backend=backend, output_cap=OUTPUT_CAP_BYTES, cpu_limit_s=TIME_LIMIT_S,
                        device=lanes.default_device(), torch=False, cpu_threads=1)
    try:
        worker = spec.start()
    except Exception:  # noqa: BLE001 - a guess that failed: the grade starts its own, and says what failed
        return False
    _HEAD_START.append(HeadStart(spec, worker, processes.age_s()))
    atexit.register(_end_head_start)     # a command that ends before its grade (a usage error) leaves none
    return True


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


def take_head_start(spec: MeasurerSpec | None) -> HeadStart | None:
    """The head start where its process was started as spec asks and still runs; otherwise it is
    ended (spec None: a grade that starts no measuring process) and None returned."""
    if not _HEAD_START:
        return None
    head = _HEAD_START.pop()
    if spec is not None and head.spec == spec and head.worker.proc.poll() is None:
        return head
    head.worker.cancel()
    return None


def _end_head_start() -> None:
    take_head_start(None)


def start_recorder(*, rubric, backend: Backend, device: str, gpu: bool) -> Worker:
    """A recorder: without a GPU (the one a grade tries first: it runs outside the GPU's lane), or
    on the GPU (where the first could not record: replaying.needs_gpu)."""
    limits = rubric.limits
    return Worker(ChildSpec(backend=backend, output_cap=limits.output_cap_bytes, cpu_limit_s=limits.time_limit_s,
                  device=device, gpu=gpu, recorder=True))
