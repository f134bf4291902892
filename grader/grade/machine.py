"""The machine grades run on, decided once, at the edge (`grader submit`, `grader batch`, the
samples' check, the course server's worker): the backend ("auto" resolved by the GPU the probe
finds), the GPUs grades are given and the GPU's reading. A Machine is a plain value (frozen,
hashable, holding no process): the children started ahead of a grade are the Launcher's
(grade/launcher.py). A GradeRequest carries it; the pipeline never probes or resolves.

Each student's reading is its own GPU's (reading_of): on a machine with several GPUs, a student
timed on GPU 3 gets GPU 3's state beside its timing, never GPU 0's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from grader.core.backend import AUTO, Backend, named
from grader.run import lanes
from grader.toolchain import gpuinfo


@dataclass(frozen=True)
class Machine:
    """Where grades run, as decided once (decide()): every field is settled, "auto" included."""

    backend: Backend                        # the backend that runs every grade on this machine
    # the first GPU's reading when decided; None: no GPU seen (or none asked). Not hashed: a reading
    # is nvidia-smi's dict (two machines decided alike hash alike; equal ones still compare it).
    reading: dict | None = field(default=None, hash=False)
    devices: tuple[str, ...] = ()           # the GPUs grades are given, as CUDA_VISIBLE_DEVICES names them (); off a GPU
    # what the decision's probe took (result.phases.probe_s): a measurement, not part of the decision
    probe_s: float = field(default=0.0, compare=False)

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
    if devices and devices[0] != "0" and reading is not None:
        # nvidia-smi's probe read physical GPU 0; the first GPU grades are given is another
        reading = gpuinfo.reading(devices[0]) or reading
    return Machine(backend, reading, devices, probe_s)
