"""A grade's first moves, made before the rest of the grader is imported: the GPU's probe and its
children's start on a GPU (their interpreter, imports and CUDA context: about 0.45 s on an H200
host, the longest wait of a warm grade).

`grader submit` calls start_early() as soon as it knows the rubric and the backend, so that the
children start while the CLI imports the pipeline, numpy and the verdict; pipeline.grade takes
what was started (its `early`) instead of probing and starting them again. Everything here
imports only what a child's start needs. The children load nothing of the student's until their
job arrives; a grade that ends before that (a compile error) cancels them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from grader.core.backend import AUTO, Backend, named
from grader.core.limits import spread_threads
from grader.run.sandbox import Worker


@dataclass
class Children:
    """A grade's children as started: the recorder (None unless the backend records then replays)
    and the process that runs (or replays) the job, and the GPU they may see."""

    worker: Worker
    recorder: Worker | None
    device: str | None

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
        from grader.core.processes import close_to_children
        from grader.run import lanes

        close_to_children()         # the recorder runs as this user: keep it out of /proc/<grader>
        device = device or lanes.default_device()
    # The measuring process first: its start (a CUDA context) is the longer, and a warm grade
    # waited on it; the recorder without a GPU is ready long before its job.
    worker = Worker(backend=backend, output_cap=limits.output_cap_bytes, cpu_limit_s=limits.time_limit_s,
                    device=device if backend.on_gpu else None,
                    torch=backend.baseline and bool(rubric.timing.baseline),
                    cpu_threads=1 if backend.on_gpu else spread_threads(emulator_threads))
    recorder = None
    if backend.records_then_replays:
        try:
            recorder = start_recorder(rubric=rubric, backend=backend, device=device, gpu=False)
        except BaseException:
            worker.cancel()
            raise
    return Children(worker, recorder, device if backend.on_gpu else None)


def start_recorder(*, rubric, backend: Backend, device: str, gpu: bool) -> Worker:
    """A recorder: without a GPU (the one a grade tries first: it runs outside the GPU's lane), or
    on the GPU (where the first could not record: replaying.needs_gpu)."""
    limits = rubric.limits
    return Worker(backend=backend, output_cap=limits.output_cap_bytes, cpu_limit_s=limits.time_limit_s,
                  device=device, gpu=gpu)


@dataclass
class Early:
    """What start_early did: the backend asked for, the GPU's probe (nvidia-smi's reading, None
    for no GPU) and how long it took, and the children where they could start."""

    requested: str | Backend
    reading: dict | None
    probe_s: float
    children: Children | None = None

    def cancel(self) -> None:
        if self.children is not None:
            self.children.cancel()


def needs_probe(requested: str | Backend) -> bool:
    return requested == AUTO or named(requested).on_gpu


def start_early(*, rubric, backend: str | Backend = AUTO, device: str | None = None) -> Early:
    """Probe the GPU and start the grade's children now; never fails (a child that cannot start,
    or a machine without the GPU asked for, is the grade's to report: its children are then
    started, or refused, by the grade itself)."""
    from grader.toolchain import gpuinfo

    requested = backend if backend == AUTO else named(backend)
    clock = time.perf_counter()
    reading = gpuinfo.probe() if needs_probe(requested) else None
    early = Early(requested, reading, time.perf_counter() - clock)
    chosen = gpuinfo.resolve_backend(requested, has_gpu=reading is not None)
    if not chosen.on_gpu or reading is None:
        # The emulator's child starts in a tenth of a second (no CUDA context) and, started this
        # early, only takes a core from the parent's imports (measured on 2 cores: 0.1 s slower).
        return early
    try:
        early.children = start_children(rubric=rubric, backend=chosen, device=device, emulator_threads=0)
    except OSError:
        pass                        # the grade starts them again and says what the machine lacks
    return early

