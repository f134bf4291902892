"""What the parent tells the grading child to do: small typed objects, sent as JSON.

The child knows buffers, arguments and launches, nothing of any exercise: the parent
resolves the exercise's tensors and dimensions into a Job, and the child allocates,
launches and sends back what each output holds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from grader.typed import from_data


@dataclass
class Buffer:
    """One tensor of a case: an input read from a file of float32 data, or an output."""

    name: str
    floats: int
    role: str = "in"            # in | out
    shape: list[int] = field(default_factory=list)
    init: str = "poison"        # outputs: poison | zero
    file: str = ""              # inputs: the file holding the data
    offset: int = 0             # inputs: its byte offset there
    chain: bool = False         # written by the chain, not by the submission


@dataclass
class Arg:
    """One argument of a call: a buffer's pointer (tensor) or an integer (value)."""

    tensor: str = ""
    value: int = 0


@dataclass
class Call:
    args: list[Arg]
    grid: list[int] = field(default_factory=lambda: [1, 1, 1])
    block: list[int] = field(default_factory=lambda: [1, 1, 1])
    kernel: str = ""            # a reference kernel's name; "" for the submission


@dataclass
class CaseJob:
    name: str
    buffers: list[Buffer]
    launch: Call                # the submission: its launcher's arguments, or the kernel's and the default launch
    chain: Call | None = None   # a reference kernel run after it
    timed: bool = False

    def buffer(self, name: str) -> Buffer:
        return next(b for b in self.buffers if b.name == name)


@dataclass
class TimingJob:
    floor: list[str]
    informational_floor: str
    copy_floats: int
    warmup: int
    min_samples: int
    max_samples: int
    target_half_width: float
    budget_s: float
    hard_budget_s: float
    slow_launch_s: float
    chain: bool
    baseline: str = ""          # a PyTorch expression of the inputs, timed against the submission
    baseline_rounds: int = 0


@dataclass
class CalibrationRun:
    """One row of `grader calibrate`: reference kernels launched in order as one timed sample."""

    name: str
    steps: list[Call]


@dataclass
class Limits:
    host_memory_mib: int
    device_heap_bytes: int
    drop_privileges: bool


@dataclass
class Job:
    backend: str
    library: str
    reference_library: str
    guard_library: str | None
    guard_mode: str
    limits: Limits
    cases: list[CaseJob]
    guard_floats: int
    reverse_check: bool = False
    order_exact: bool = True            # the reverse run must give the same bits (else: sent back to compare)
    timing: TimingJob | None = None
    timed_cases: list[CaseJob] = field(default_factory=list)
    verify_cases: list[CaseJob] = field(default_factory=list)
    baseline_cases: list[CaseJob] = field(default_factory=list)     # more shapes, submission against baseline
    calibrate: list[CalibrationRun] = field(default_factory=list)   # with timing and timed_cases[0]: no submission
    calibration_rounds: int = 0
    key: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Job":
        return from_data(cls, data)

    def input_files(self) -> list[str]:
        every = self.cases + self.timed_cases + self.verify_cases + self.baseline_cases
        return sorted({b.file for c in every for b in c.buffers if b.file})
