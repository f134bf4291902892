"""Where a submission runs, as an object: every step asks the backend what it does, none compares
its name.

Two backends: CUDA (the submission's kernels on a GPU, checked and timed, in two children: the
recorder and the measuring process) and EMULATOR (kernel and host code compiled with g++ against
the CPU shim and run in one child: a correctness verdict, no timing). "auto" is resolved once, by
toolchain.gpuinfo.resolve_backend, where the GPU can be probed; everything after it is handed the
Backend. The name is what result.json and the child's job say.
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.core.errors import UsageError

AUTO = "auto"


@dataclass(frozen=True)
class Backend:
    name: str
    on_gpu: bool            # the kernels run on a GPU: timed in its lane, from a run's private cases
    compiler: str           # the tool that builds the submission's library
    about: str              # one line for --help and docs

    @property
    def times(self) -> bool:
        """It measures speed (the emulator never does: its verdict is correctness alone)."""
        return self.on_gpu

    @property
    def private_cases(self) -> bool:
        """Its random cases come from a secret chosen per run (exercises/plan.py). The emulator runs the
        student's host code beside the device code, so there the rubric's public seeds are used."""
        return self.on_gpu

    @property
    def records_then_replays(self) -> bool:
        """The submission's host code runs in a recorder and its launches are replayed by a process that
        never loads its library (run/child/replay.py)."""
        return self.on_gpu

    def target(self, arch: str) -> str:
        """What a build is for: the GPU's architecture, or the CPU."""
        return arch if self.on_gpu else "cpu"

    def __str__(self) -> str:
        return self.name


CUDA = Backend("cuda", on_gpu=True, compiler="nvcc",
               about="on the GPU: checked against float64 and timed against the copy floor")
EMULATOR = Backend("emulator", on_gpu=False, compiler="g++",
                   about="on the CPU, through the CUDA shim: checked, never timed")
BACKENDS = {b.name: b for b in (CUDA, EMULATOR)}
CHOICES = (AUTO, *BACKENDS)             # what --backend accepts


def named(name: "str | Backend") -> Backend:
    """The backend called name ('cuda' or 'emulator'; not 'auto', which only resolve_backend decides)."""
    if isinstance(name, Backend):
        return name
    try:
        return BACKENDS[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r}: use one of {', '.join(CHOICES)}") from None
