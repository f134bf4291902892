"""What the parent tells the grading child to do: small typed objects, sent as JSON.

The child knows buffers, arguments and launches, nothing of any exercise: the parent
resolves the exercise's tensors and dimensions into a Job, and the child allocates,
launches and sends back what each output holds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum

from grader.core.backend import Backend

# The frames the child sends back (core/frames.py), importable from here too, beside the job they answer.
from grader.core.frames import (  # noqa: F401 - re-exported
    FRAME_TYPES,
    BaselineTimingFrame,
    CalibrationFrame,
    CaseFrame,
    ChildSandbox,
    DoneFrame,
    FatalFrame,
    Fault,
    HelloFrame,
    LaunchRecord,
    Output,
    RecordedOp,
    Recording,
    RecordingFrame,
    RefusedFrame,
    TimingFrame,
    clock_phases,
    decode,
    encode,
    recording_data,
)
from grader.core.typed import from_data

# Before every run an output is filled with POISON (a NaN with a payload no arithmetic produces)
# and the guard regions on both sides of it with GUARD, so the parent can tell an unwritten
# element and an out-of-bounds write from a wrong value, bit for bit.
POISON_BITS = 0x7FC0DEAD      # a quiet NaN with a payload
GUARD_BITS = 0x5A5A5A5A       # about 1.5e16, a finite value no GELU of these inputs produces
# The emulator fills every block's shared memory with SHARED_POISON before the block runs (cuda_shim.h's
# kSharedPoisonBits): a value read from shared memory no thread wrote carries its payload to the output.
SHARED_POISON_BITS = 0x7FD5A4ED


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
    key: str = ""               # the submission's: the case it launches for (the recording's key)


@dataclass
class CaseJob:
    name: str
    buffers: list[Buffer]
    launch: Call                # the submission: its launcher's arguments, or the kernel's and the default launch
    chain: Call | None = None   # a reference kernel run after it
    timed: bool = False

    def buffer(self, name: str) -> Buffer:
        return next(b for b in self.buffers if b.name == name)


class FloorPlacement(str, Enum):
    """Where the floor's copies read and write (the rubric's timing.floor_placement): OWN, pairs of
    buffers of their own (floor_buffers of them); SUBMISSION, each timed set's largest input and
    output, the device memory the submission's own launches read and write, so that where those
    buffers lie moves the floor and the submission alike and their ratio keeps still."""

    OWN = "own"
    SUBMISSION = "submission"


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
    floor_buffers: int = 1      # buffer pairs each copy rotates over (FloorPlacement.OWN)
    floor_placement: FloorPlacement = FloorPlacement.OWN     # where the copies read and write
    tier_lines: list[float] = field(default_factory=list)   # the tiers' thresholds and the floor (1.0)
    tier_half_width: float = 0.0                            # the looser width that stops sampling clear of them
    hold_rounds: bool = True    # each batch of rounds enqueued behind a held stream, then released (timing.py)


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
    workspace_bytes: int = 256 << 20       # what a launcher may cudaMalloc, over all its calls
    require_read_wall: bool = False        # no file-system wall: the submission is never loaded (limits.require_read_wall)


class GuardMode(str, Enum):
    """How the child's seccomp filter treats a system call outside its list: refuse it (every
    grade), allow and report it (scripts/audit-syscalls.py, to see what a child calls), or, for the
    counters' process under Nsight Compute (which runs none of the submission's host code), refuse
    it except for ncu's socket and files (guard.c's kProfile)."""

    ENFORCE = "enforce"
    AUDIT = "audit"
    PROFILE = "profile"


class Role(str, Enum):
    """How the child runs the submission (run/child/replay.py): RUN, its library loaded and its
    launches made in this process (the emulator; or no submission, the grader's own kernels);
    RECORD, its library loaded and its launcher called on stand-in buffers, every launch recorded
    and none run; REPLAY, the recorded launches run from its device code alone, its library never
    loaded. Backend.child names the class the child runs for each."""

    RUN = "run"
    RECORD = "record"
    REPLAY = "replay"
    PROFILE = "profile"     # the replay's timed call once, under Nsight Compute (run/profiling.py): no timing


@dataclass
class ReplayPart:
    """What a replay (and the counters' run of it) is given beside the job: the recording, and the
    submission's device code read from its build, never its library."""

    recording: "Recording"
    device_code: list[str] = field(default_factory=list)      # the fatbinaries of the submission's library
    device_globals: list[str] = field(default_factory=list)   # its __device__/__constant__ variables' names
    device_heap: bool = False                                 # its device code calls malloc
    layout_seed: int = 0                                      # where the buffers lie in device memory this run


@dataclass
class OfflinePart:
    """What the recorder without a GPU is given (no CUDA context, no driver call through the wall)."""

    kernel_params: dict[str, list[list[int]]] = field(default_factory=dict)   # each kernel's parameters as
    # [offset, size], by device name, read from the device code (toolchain/build.py)
    driver_stand_in: str = ""           # the libcuda.so.1 whose every entry point ends it


@dataclass
class Job:
    """What a child is told: the libraries, the wall, the cases; what only one role needs travels in
    that role's part (replay, offline), absent from every other job."""

    backend: Backend                    # the whole object: the child instantiates backend.child's class for role
    library: str
    reference_library: str
    guard_library: str | None
    guard_mode: GuardMode
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
    shared_fd: int = -1                 # the memory file large outputs are copied into (protocol.py)
    shared_bytes: int = 0
    emulator_threads: int = 0           # OS threads a large emulated launch may use; 0: every core the child has
    role: Role = Role.RUN
    replay: ReplayPart | None = None    # REPLAY and PROFILE: the recording and the device code
    offline: OfflinePart | None = None  # RECORD without a GPU; None: the recorder has the GPU
    gated: bool = False                 # run nothing until protocol.GO arrives on stdin (the recorder gone)

    def output_bytes(self) -> int:
        """Room for every output the child may send back (each case's, and a second run's)."""
        every = self.cases + self.timed_cases + self.verify_cases
        per_case = (sum(4 * (b.floats + 2 * self.guard_floats) for b in c.buffers if b.role == "out")
                    for c in every)
        return sum(2 * n + (1 << 16) for n in per_case)       # each piece starts on a page of its own

    def timed_output_bytes(self) -> list[int]:
        """What each timed set's outputs take as the child sends them after the timing (guards
        included, one after another): the room a measuring process may map ahead."""
        return [sum(4 * (b.floats + 2 * self.guard_floats) for b in c.buffers if b.role == "out" and not b.chain)
                for c in self.timed_cases] if self.timing is not None else []

    def to_json(self) -> dict:
        """asdict(self), the replay's recording (thousands of rows) not copied on the way."""
        if self.replay is None:
            return dataclasses.asdict(self)
        data = dataclasses.asdict(dataclasses.replace(self, replay=None))
        part = self.replay
        data["replay"] = {**dataclasses.asdict(dataclasses.replace(part, recording=Recording())),
                          "recording": recording_data(part.recording)}
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Job":
        return from_data(cls, data)

    def input_files(self) -> list[str]:
        every = self.cases + self.timed_cases + self.verify_cases + self.baseline_cases
        return sorted({b.file for c in every for b in c.buffers if b.file})
