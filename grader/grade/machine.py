"""The machine grades run on, decided once, at the edge (`grader submit`, `grader batch`, the
samples' check, the course server's worker): the backend ("auto" resolved by the GPU the probe
finds), the GPUs grades are given, the GPU's reading, and, for `grader submit`, the children
started ahead of the grade. A GradeRequest carries it; the pipeline never probes or resolves.

Each student's reading is its own GPU's (reading_of): on a machine with several GPUs, a student
timed on GPU 3 gets GPU 3's state beside its timing, never GPU 0's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from grader.core.backend import AUTO, Backend, named
from grader.grade.early import Children, start_children, take_head_start
from grader.run import lanes
from grader.toolchain import gpuinfo


@dataclass(eq=False)
class Machine:
    """Where grades run, as decided once (decide()): every field is settled, "auto" included."""

    backend: Backend                        # the backend that runs every grade on this machine
    reading: dict | None = None             # the first GPU's reading when decided; None: no GPU seen (or none asked)
    devices: tuple[str, ...] = ()           # the GPUs grades are given, as CUDA_VISIBLE_DEVICES names them (); off a GPU
    probe_s: float = 0.0                    # what the decision's probe took (result.phases.probe_s)
    children: Children | None = None        # started ahead for the first grade (`grader submit`), taken once

    @property
    def has_gpu(self) -> bool:
        return self.reading is not None

    def device(self, index: int = 0) -> str | None:
        """The GPU of a machine's index-th grade in flight (round robin over devices), None off a GPU."""
        return self.devices[index % len(self.devices)] if self.devices else None

    def reading_of(self, device: str | None) -> dict | None:
        """The state of the GPU a grade runs on, read now, before its run (NVML: no probe, no
        nvidia-smi; the decision's reading where NVML answers nothing); None off a GPU. A batch's
        grades each read their own GPU so; `grader submit`'s one grade takes the decision's reading,
        made a moment before."""
        if not self.backend.on_gpu or self.reading is None:
            return None
        return gpuinfo.reading(device if device is not None else self.device(0)) or self.reading

    def take_children(self) -> Children | None:
        """The children started ahead (once: the first grade takes them)."""
        children, self.children = self.children, None
        return children

    def cancel(self) -> None:
        """End the children started ahead that no grade took (a command that ends before its grade)."""
        children = self.take_children()
        if children is not None:
            children.cancel()


def needs_probe(requested: str | Backend) -> bool:
    return requested == AUTO or named(requested).on_gpu


def decide(requested: str | Backend = AUTO, *, every_gpu: bool = False) -> Machine:
    """The machine as requested ("auto", a backend's name, or a Backend): the GPU probed once where
    the request may run on one (nvidia-smi, no CUDA context), the backend resolved once, the GPUs
    listed once: every one a batch may use (every_gpu: the visible-devices variable, else
    nvidia-smi's indices), or for one grade the first visible one (the variable only: listing every
    GPU asked nvidia-smi again, 0.2 s before a warm submit's children started on the H100 host).
    Never fails for a missing GPU: a grade on a GPU backend without one is the machine's
    infrastructure_error, said by the grade."""
    requested = requested if requested == AUTO else named(requested)
    clock = time.perf_counter()
    reading = gpuinfo.probe() if needs_probe(requested) else None
    probe_s = time.perf_counter() - clock
    backend = gpuinfo.resolve_backend(requested, has_gpu=reading is not None)
    devices = (() if not backend.on_gpu else tuple(lanes.visible_devices(backend)) if every_gpu
               else (lanes.default_device(backend),))
    machine = Machine(backend, reading, devices, probe_s)
    if devices and devices[0] != "0" and reading is not None:
        # nvidia-smi's probe read physical GPU 0; the first GPU grades are given is another
        machine.reading = gpuinfo.reading(devices[0]) or reading
    return machine


def start_ahead(machine: Machine, *, rubric) -> Machine:
    """Start the first grade's children now (`grader submit`: their interpreter, imports and CUDA
    context overlap the CLI's imports and the build); never fails (a child that cannot start is
    the grade's to start again and report). Off a GPU nothing starts: the emulator's child starts in
    a tenth of a second and, started this early, only takes a core from the parent's imports."""
    if not machine.backend.on_gpu or not machine.has_gpu:
        take_head_start(None)       # no GPU grade: a head start's process is not wanted
        return machine
    try:
        machine.children = start_children(rubric=rubric, backend=machine.backend, device=machine.device(0),
                                          emulator_threads=0)
    except OSError:
        pass                        # the grade starts them again and says what the machine lacks
    return machine
