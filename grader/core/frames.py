"""What the child sends back: one small dataclass per kind of frame. On the wire a frame's header
is {"type": <kind>, **fields} (JSON) and its payload raw float32 bytes (run/protocol.py). The
recorder's recording travels in its frame and, inside the measuring process's job, in
core/contract.py's ReplayPart.

Imports only core/.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from grader.core.typed import from_data


@dataclass
class Fault:
    """Where the emulator caught a fault: the signal, the address, the buffer it lies in and the
    element of it the address falls on, and the thread that made the access (its block and thread,
    the launch's shape)."""

    signal: int = 0
    address: int = 0
    is_write: int = -1
    pc_offset: int = 0
    message: str = ""
    buffer: str | None = None        # None: outside every buffer (a wild pointer)
    where: str | None = None         # past | before
    element: int | None = None       # the float of buffer the address falls on (past its end: >= floats)
    floats: int = 0                  # buffer's length in floats
    shape: list[int] = field(default_factory=list)    # buffer's shape for the exercise
    block: list[int] | None = None   # the faulting thread's blockIdx (None: not in a kernel's thread)
    thread: list[int] | None = None  # its threadIdx
    block_dim: list[int] | None = None
    grid_dim: list[int] | None = None


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
    host_memory_how: str = ""                    # what counts it: a control group, RLIMIT_AS, or RLIMIT_DATA alone
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
        return {"type": _KINDS[RecordingFrame], "recording": recording_data(frame.recording)}
    return {"type": _KINDS[type(frame)], **dataclasses.asdict(frame)}


def recording_data(rec: Recording) -> dict:
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
