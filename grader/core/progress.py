"""What a grade says as it goes: a line for the person waiting (Progress), and, on the lines that
start a phase, which phase (Phase), for a watcher that shows where a grade is (the course server's
live page) rather than the line."""

from __future__ import annotations

import enum
from typing import Callable

Progress = Callable[[str], None]


class Phase(enum.Enum):
    BUILDING = "building"           # the compiles (the check as CUDA, then the build that runs)
    CHECKING = "checking"           # the children: the checks, and on the emulator all of the run
    TIMING = "timing"               # the GPU's lane taken: the timed replay
    COUNTERS = "counters"           # the hardware counters' pass (--counters)


class Said(str):
    """A progress line that starts a phase: a str (every Progress prints it as it is) with .phase."""

    phase: Phase

    def __new__(cls, text: str, phase: Phase) -> "Said":
        out = super().__new__(cls, text)
        out.phase = phase
        return out


def phase_of(line: str) -> Phase | None:
    """The phase a progress line starts, or None for a line that starts none."""
    return line.phase if isinstance(line, Said) else None
