"""What the parent tells the grading child to do: small typed objects, sent as JSON.

The child knows buffers, arguments and launches, nothing of any exercise: the parent
resolves the exercise's tensors and dimensions into a Job, and the child allocates,
launches and sends back what each output holds.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from dataclasses import dataclass, field

from grader.core.backend import Backend
from grader.core.typed import from_data

# Before every run an output is filled with POISON (a NaN with a payload no arithmetic produces)
# and the guard regions on both sides of it with GUARD, so the parent can tell an unwritten
# element and an out-of-bounds write from a wrong value, bit for bit.
POISON_BITS = 0x7FC0DEAD      # a quiet NaN with a payload
GUARD_BITS = 0x5A5A5A5A       # about 1.5e16, a finite value no GELU of these inputs produces


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
                          "recording": _recording_data(part.recording)}
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Job":
        return from_data(cls, data)

    def input_files(self) -> list[str]:
        every = self.cases + self.timed_cases + self.verify_cases + self.baseline_cases
        return sorted({b.file for c in every for b in c.buffers if b.file})


# ---------------------------------------------------------------------------
# What the child sends back: one small dataclass per kind of frame. On the wire a frame's header
# is {"type": <kind>, **fields} (JSON) and its payload raw float32 bytes (protocol.py).
# ---------------------------------------------------------------------------


@dataclass
class Fault:
    """Where the emulator caught a fault: the signal, the address, and the buffer it lies in."""

    signal: int = 0
    address: int = 0
    is_write: int = -1
    pc_offset: int = 0
    message: str = ""
    buffer: str | None = None        # None: outside every buffer (a wild pointer)
    where: str | None = None         # past | before


@dataclass
class LaunchRecord:
    """One kernel's launches in one configuration, as the submission's library logged them."""

    kernel: str = ""                 # the runtime's (mangled) name; "" on the emulator
    offset: int = 0                  # the emulator: the kernel's address in the library
    grid: list[int] = field(default_factory=lambda: [1, 1, 1])
    block: list[int] = field(default_factory=lambda: [1, 1, 1])
    shared_bytes: int = 0
    launches: int = 0
    blocks_per_sm: int | None = None


@dataclass
class Output:
    """One output in a case frame's payload: floats of data with pad guard floats on each side."""

    name: str
    floats: int
    pad: int


@dataclass
class ChildSandbox:
    """What took effect inside a child, as the child reports it (claimed, like every byte from a
    process that may run student code; the parent measures the child's peak memory itself)."""

    seccomp: bool = False                        # the system-call filter is installed on every thread
    seccomp_detail: str = ""                     # how, or why not
    filter_instructions: int = 0
    filter_install_ms: float = 0.0
    reads_confined: bool = False                 # the file-system wall (Landlock) is in force: run/child/fswall.py
    reads_detail: str = ""                       # how ("Landlock ABI 7"), or why not
    read_wall_ms: float = 0.0
    privileges: str = ""                         # "unprivileged uid 1000", "dropped from root to uid 65534"
    device_heap_bytes: int | None = None         # the device malloc heap it set (None: could not)
    host_memory_mib: int | None = None           # its host-memory allowance over what it held (RLIMIT_DATA)
    host_memory_base_mib: int | None = None      # what it held when the cap was set
    host_memory_lowered_to_mib: int | None = None   # an inherited hard limit left less than the allowance
    host_memory_problem: str = ""
    gpu_memory_free_bytes: int | None = None
    gpu_memory_total_bytes: int | None = None
    rss_at_load_mib: int | None = None           # resident before the submission's library was loaded
    submission_load_ms: float | None = None
    emulator_threads: int | None = None          # the OS threads an emulated launch runs on


@dataclass
class HelloFrame:
    backend: str = ""
    pid: int = 0
    t: float = 0.0
    ready_t: float = 0.0
    job_t: float = 0.0
    sandbox: ChildSandbox = field(default_factory=ChildSandbox)
    loaded_t: float | None = None       # when it had loaded (a gated job then waits for the go byte)
    preloaded_t: float | None = None    # when it had loaded the libraries sent before its job (Worker.preload)


@dataclass
class CaseFrame:
    """A case's outputs (payload: each output's full buffer, then the second run's), or why not."""

    case: str
    ok: bool = False
    outputs: list[Output] = field(default_factory=list)
    launches: list[LaunchRecord] = field(default_factory=list)
    error: str = ""
    fault: Fault | None = None
    fatal: bool = False
    second_kind: str = ""            # reverse (the emulator) | repeat (a GPU)
    second_differs: bool = False
    second_diff_count: int = 0
    second_error: str = ""
    second_fault: Fault | None = None
    second_outputs: list[Output] = field(default_factory=list)
    chain_error: str = ""
    clobbered: list[str] = field(default_factory=list)  # grader buffers (inputs) the launch changed


@dataclass
class TimingFrame:
    samples_ms: dict = field(default_factory=dict)      # variant -> milliseconds, one per round
    stop_reason: str = ""
    seconds: float = 0.0
    device: dict = field(default_factory=dict)
    launches: list[LaunchRecord] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    baseline_max_abs_diff: float | None = None
    clobbered: list[str] = field(default_factory=list)   # grader buffers changed during the timing
    # each timed set's output checksum after every timed launch of it (replay: bit-exact exercises)
    output_checksums: dict = field(default_factory=dict)
    heap_kept_bytes: int = 0     # the most device-heap memory a call kept for the next (malloc, no free)
    holds_timed_out: int = 0     # batches of rounds whose hold ended by its timeout, not by the release


@dataclass
class BaselineTimingFrame:
    case: str = ""
    samples_ms: dict = field(default_factory=dict)


@dataclass
class CalibrationFrame:
    samples_ms: dict = field(default_factory=dict)
    device: dict = field(default_factory=dict)


@dataclass
class RecordedOp:
    """One thing a launcher did to a kernel during a call, as the recorder saw it (claimed data:
    the replay checks it against the device code before running any of it)."""

    kind: str = "launch"             # launch | cooperative | attribute | cache_config | memset | copy | symbol
                                     # | alloc | free (the stream-ordered work of replay.py's list)
    kernel: str = ""                 # the kernel's (mangled) device name
    grid: list[int] = field(default_factory=lambda: [1, 1, 1])
    block: list[int] = field(default_factory=lambda: [1, 1, 1])
    shared_bytes: int = 0
    stream: str = "given"            # given (or the legacy default) | per_thread | other
    thread: str = "caller"           # caller | other (another thread, during the call) | outside (no call open)
    attribute: int = 0               # attribute, cache_config: the cudaFuncAttribute or cudaFuncCache
    value: int = 0
    args: str = ""                   # the kernel's parameter buffer, hex; a host-to-device copy's bytes
    error: str = ""                  # what the recorder could not read of the launch
    dst: int = 0                     # memset, copy: the destination address; symbol: the offset; alloc, free: the address
    src: int = 0                     # copy, symbol: the source address (device to device)
    nbytes: int = 0                  # memset, copy, symbol, alloc: how many bytes
    direction: str = ""              # copy, symbol: h2d | d2h | d2d; symbol: the kernel field holds its name
    call: str = ""                   # the runtime call as the student wrote it (cudaMemsetAsync)


@dataclass
class Recording:
    """Every call the recorder made, by the call's key: for each call, the index of its list of ops
    in `ops`, the index of the stand-in buffers it was given in `views` (tensor -> address), and the
    cudaError_t the launcher left. `late` holds launches made while no call was open."""

    calls: dict = field(default_factory=dict)          # key -> [[ops index, views index, error], ...]
    ops: list[list[RecordedOp]] = field(default_factory=list)
    views: list[dict] = field(default_factory=list)
    late: list[RecordedOp] = field(default_factory=list)
    errors: dict = field(default_factory=dict)         # cudaError_t -> its text, for the errors in calls


@dataclass
class RecordingFrame:
    recording: Recording = field(default_factory=Recording)


@dataclass
class RefusedFrame:
    """The replay refused the recording before running it (a pointer into no buffer, say)."""

    reasons: list[str] = field(default_factory=list)


@dataclass
class FatalFrame:
    stage: str = ""
    error: str = ""
    trace: str = ""


@dataclass
class DoneFrame:
    t: float = 0.0
    checks_t: float | None = None       # when the checks were done (seconds since the child started)
    sampled_t: float | None = None      # when the timing's sampling was done (before the timed sets' outputs)


def clock_phases(frame: HelloFrame | DoneFrame, child: str) -> dict[str, float]:
    """The times a child's hello or done frame carries (seconds since it started, on its own
    clock), as phases named `<child>_<moment>_t`: the parent's account of where a child's run went."""
    if isinstance(frame, HelloFrame):
        moments = {"ready": frame.ready_t, "preloaded": frame.preloaded_t, "job": frame.job_t, "loaded": frame.loaded_t,
                   "hello": frame.t}
    else:
        moments = {"done": frame.t, "checks": frame.checks_t, "sampled": frame.sampled_t}
    return {f"{child}_{k}_t": round(v, 3) for k, v in moments.items() if v is not None}


FRAME_TYPES = {"hello": HelloFrame, "case": CaseFrame, "timing": TimingFrame, "baseline_timing": BaselineTimingFrame,
               "calibration": CalibrationFrame, "fatal": FatalFrame, "done": DoneFrame, "recording": RecordingFrame,
               "refused": RefusedFrame}
_KINDS = {cls: kind for kind, cls in FRAME_TYPES.items()}


def encode(frame) -> dict:
    """A frame's JSON header."""
    if isinstance(frame, RecordingFrame):
        return {"type": _KINDS[RecordingFrame], "recording": _recording_data(frame.recording)}
    return {"type": _KINDS[type(frame)], **dataclasses.asdict(frame)}


def _recording_data(rec: Recording) -> dict:
    """A recording's asdict() form, its calls' rows (thousands of [ops, views, error] lists of ints)
    and views (addresses by name) as they are: asdict copied each of them, 18 ms of a recorder's
    send against the 2 ms of its JSON."""
    return {"calls": rec.calls, "ops": [[dataclasses.asdict(op) for op in ops] for ops in rec.ops],
            "views": rec.views, "late": [dataclasses.asdict(op) for op in rec.late], "errors": rec.errors}


def decode(header: dict):
    """The frame a header holds, or None for an unknown kind or a malformed one."""
    cls = FRAME_TYPES.get(header.get("type")) if isinstance(header, dict) else None
    if cls is None:
        return None
    try:
        return from_data(cls, {k: v for k, v in header.items() if k != "type"})
    except (TypeError, ValueError, AttributeError):
        return None
