"""Record, then replay: how the GPU's measurements stay out of reach of the submission's host code.

A submission is kernels plus an optional launcher that only decides launch configurations. On
the GPU it runs in two processes:

1. The recorder loads the submission's library (inside the wall) and calls the launcher for every
   call the measuring process will make, in the same order (the same worker code drives it, over
   a backend whose buffers are stand-ins: addresses in STAND_IN_WINDOW that hold nothing). The
   harness's launch entry points record each launch (kernel, grid, block, shared memory, the
   parameter buffer, the stream, the thread) and run nothing. What comes back is a Recording:
   claimed data.
2. The measuring process never loads the submission's library. It loads the library's device code
   (its fatbinaries, read by the parent) with the driver, checks the recording against it
   (check_recording: every kernel exists, every parameter buffer has the kernel's size, every
   address points into a buffer given to that call), and replays each call's launches on the
   grader's stream, with each stand-in address relocated to the grader's own buffer.

Whatever the recorder missed or was made to forge (a launch through a driver function found at
run time, a thread, a rewritten frame) either never runs or runs in the open: the replay's
outputs are then wrong, or its time honest. This module is the part of that both children share:
the stand-in addresses and the relocation. What refuses a recording before anything is replayed
is the parent's (grader/run/replaying.py).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from grader.core.backend import Api

# Stand-in buffers live here: far above any integer a launcher passes, below where the CUDA driver
# maps device memory on Linux x86-64, each in a slot of its own, 2 MiB aligned (as cudaMalloc's
# buffers are at least 256-byte aligned: a launcher that checks alignment decides the same way).
STAND_IN_BASE = 0x7E00_0000_0000
STAND_IN_SPAN = 1 << 40
STAND_IN_SLOT = 256 << 20
# The upper half of the window is the workspace's: the harness's cudaMalloc gives its addresses
# from there (WORKSPACE_BASE), the call's buffers come from the lower half.
WORKSPACE_BASE = STAND_IN_BASE + (STAND_IN_SPAN >> 1)
# An address this close to a buffer (before it, or past its end) still belongs to it: a launcher
# may pass `out - 1` or `x + rows * cols` with a kernel that only reads what it should.
SLACK = 64 << 10


def in_stand_in_window(value: int) -> bool:
    return STAND_IN_BASE <= value < STAND_IN_BASE + STAND_IN_SPAN


def window_gaps(maps: str) -> list[tuple[int, int]]:
    """The stretches of the stand-in window nothing is mapped in, from /proc/self/maps' text."""
    gaps, at, end = [], STAND_IN_BASE, STAND_IN_BASE + STAND_IN_SPAN
    taken = sorted((int(lo, 16), int(hi, 16)) for lo, _, hi in
                   (line.split(" ", 1)[0].partition("-") for line in maps.splitlines() if line))
    for lo, hi in taken:
        if hi <= at or lo >= end:
            continue
        if lo > at:
            gaps.append((at, lo))
        at = max(at, hi)
    if at < end:
        gaps.append((at, end))
    return gaps


def reserve_window(libc) -> list[tuple[int, int]]:
    """Map every free stretch of the stand-in window to nothing (PROT_NONE, no memory behind it),
    in the recorder, before the submission's library loads: from then on no mapping the launcher
    makes or is given (its library's statics, its heap, a file it maps) can lie in the window, so
    an address there is a stand-in, never host memory. Without this, where the system's address
    randomisation put the libraries low enough, a launcher's host array inside the window was
    taken for device memory, and its copy refused (seen on an H200 host). libc: backends.libc().
    Returns what was mapped inside the window before (the grader's own mappings; empty as a rule),
    for the caller to judge; a reservation the system refuses (an address-space limit) is left out."""
    with open("/proc/self/maps") as f:
        maps = f.read()
    before = []
    for line in maps.splitlines():
        lo, _, hi = line.split(" ", 1)[0].partition("-")
        if lo and hi and int(hi, 16) > STAND_IN_BASE and int(lo, 16) < STAND_IN_BASE + STAND_IN_SPAN:
            before.append((int(lo, 16), int(hi, 16)))
    flags = 0x02 | 0x20 | 0x4000 | 0x100000       # MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE
    for lo, hi in window_gaps(maps):
        got = libc.mmap(lo, hi - lo, 0, flags, -1, 0)      # PROT_NONE
        if got is not None and got != lo and got != ctypes.c_void_p(-1).value:
            libc.munmap(ctypes.c_void_p(got), ctypes.c_size_t(hi - lo))   # an old kernel took it for a hint
    return before


class StandIns:
    """The recorder's allocator: an address for every buffer, none of it memory."""

    def __init__(self) -> None:
        self._next = STAND_IN_BASE

    def take(self, nbytes: int) -> int:
        at = self._next
        slots = max(1, -(-(nbytes + 2 * SLACK) // STAND_IN_SLOT))
        self._next += slots * STAND_IN_SLOT
        if self._next >= WORKSPACE_BASE:        # a job never needs 2048 slots; wrap all the same
            self._next = STAND_IN_BASE
        return at + SLACK


class Refused(Exception):
    """A recording the replay will not run; the message is in the student's terms."""


@dataclass(frozen=True)
class Param:
    offset: int
    size: int


def relocate(args: bytes, params: list[Param], stand_ins: dict[str, tuple[int, int]],
             real: dict[str, int], *, kernel: str, case: str) -> bytes:
    """args (a parameter buffer the recorder saw) with every address of a stand-in buffer replaced
    by the same place in the grader's buffer of that tensor.

    stand_ins maps a tensor to (stand-in address, bytes) as the launcher was given it, real to the
    grader's address of the same tensor. Every 8-byte-aligned word of every parameter is looked at
    (a pointer may sit inside a struct); a word in the stand-in window that lies in none of the
    call's buffers is refused: it is a pointer kept from another call, or made up."""
    out = bytearray(args)
    spans = sorted((addr, addr + nbytes, name) for name, (addr, nbytes) in stand_ins.items())
    for index, p in enumerate(params):
        first = p.offset + (-p.offset % 8)
        for at in range(first, p.offset + p.size - 7, 8):
            word = int.from_bytes(out[at: at + 8], "little")
            if not in_stand_in_window(word):
                continue
            owner = next(((lo, name) for lo, hi, name in spans if lo - SLACK <= word <= hi + SLACK), None)
            if owner is None:
                raise Refused(
                    f"argument {index + 1} of {kernel} (in the call for {case}) holds an address that lies in none "
                    f"of the buffers the grader passed to that call ({', '.join(sorted(stand_ins))}). Pass the "
                    "pointers your launcher is given, or pointers into them; a pointer kept from an earlier call "
                    "is not valid in the next one.")
            lo, name = owner
            if name not in real:
                raise Refused(f"argument {index + 1} of {kernel} (in the call for {case}) points into {name}, "
                              "which the grader did not pass to that call.")
            out[at: at + 8] = (real[name] + (word - lo)).to_bytes(8, "little", signed=False)
    return bytes(out)


def recording_stand_ins(given: dict, sizes: dict[str, int]) -> dict[str, tuple[int, int]]:
    """A call's stand-in buffers as relocate() takes them: tensor -> (address, bytes), the bytes
    the measuring process's own (a recording names addresses only)."""
    return {name: (int(address), int(sizes.get(name, 0))) for name, address in given.items()}


def call_sizes(cases) -> dict[str, dict[str, int]]:
    """For each case job's call key, the bytes of each tensor it passes."""
    return {cj.launch.key: {b.name: 4 * b.floats for b in cj.buffers} for cj in cases}


# ---------------------------------------------------------------------------
# The launcher's stream-ordered work beside its launches: memsets, copies, copies to symbols, and
# the workspace it allocates. The recorder records each (the harness's wrappers), the measuring
# process checks and replays it on the grader's stream in the order it was issued, and the CPU
# emulator runs it at once with the same checks (grader/shim/cuda_shim.h): the refusals below are
# the same words on both. Synchronisation and events cost nothing here: one stream is in order.
# ---------------------------------------------------------------------------

STREAM_KINDS = ("memset", "copy", "symbol", "alloc", "free")
# What a thread of the launcher's own may not do (run/replaying.recording_refusals refuses the
# recording for it): launch, or do stream-ordered work. An attribute or a cache preference set from
# one changes nothing the replay runs, and is not refused.
REFUSED_FROM_A_THREAD = ("launch", "cooperative", *STREAM_KINDS)


def refused_from_a_thread(op) -> bool:
    """Whether op (a RecordedOp) makes the recording refused because a thread of the launcher's own
    did it: the recorder stops calling the launcher once one is recorded (RecordingBackend._settled)."""
    return op.thread != "caller" and op.kind in REFUSED_FROM_A_THREAD
HOST_BYTES_PER_CALL = 1 << 20           # recorder.cpp.j2's kHostBytesPerCall


# ---------------------------------------------------------------------------
# A recording's form. The recorder runs the student's host code, which owns that process whole and
# can write any bytes into the frame the parent reads: a recording is a claim. Before anything of
# it is screened or replayed (replaying.replay_recorded in the parent, ReplayBackend.load_submission
# in the measuring process), every field is held to the type and range the recorder writes; one that
# is not is a forged recording, refused in the student's terms, never an exception of the grader's.
# ---------------------------------------------------------------------------

OP_KINDS = ("launch", "cooperative", "attribute", "cache_config", "memset", "copy", "symbol", "alloc", "free",
            "launch_attributes")
_STREAMS = ("given", "per_thread", "other")
_THREADS = ("caller", "other", "outside")
_DIRECTIONS = ("h2d", "d2h", "d2d")
MAX_NAME = 16384                        # a kernel's or a variable's mangled name (templates make them long)
_U32, _U64 = 1 << 32, 1 << 64
FORGED = ("your host code changed what the grader's recording process sent (the recording is not one the "
          "grader's recorder writes: {what}). A launcher that changes the grader's own process cannot be graded; "
          "launch your kernel and return.")


def _int(value, lo: int, hi: int) -> bool:
    return type(value) is int and lo <= value < hi


def _op_problem(op) -> str:
    """What in one recorded op the recorder never writes, or ""."""
    if type(op).__name__ != "RecordedOp":
        return "an operation that is not one"
    checks = (
        (op.kind in OP_KINDS, "an operation of no known kind"),
        (isinstance(op.kernel, str) and len(op.kernel) <= MAX_NAME, "a name that is not one"),
        (isinstance(op.grid, list) and len(op.grid) == 3 and all(_int(v, 0, _U32) for v in op.grid), "a grid"),
        (isinstance(op.block, list) and len(op.block) == 3 and all(_int(v, 0, _U32) for v in op.block), "a block"),
        (_int(op.shared_bytes, 0, _U64), "a shared-memory size"),
        (op.stream in _STREAMS and op.thread in _THREADS, "a stream or a thread"),
        (_int(op.attribute, -(1 << 31), 1 << 31) and _int(op.value, -(1 << 31), 1 << 31), "an attribute"),
        (isinstance(op.args, str) and len(op.args) % 2 == 0 and _hex(op.args), "argument bytes"),
        (isinstance(op.error, str) and isinstance(op.call, str), "a call's name or error"),
        (_int(op.dst, 0, _U64) and _int(op.src, 0, _U64) and _int(op.nbytes, 0, _U64), "an address or a size"),
        (op.direction in ("", *_DIRECTIONS), "a copy's direction"),
    )
    for ok, what in checks:
        if not ok:
            return what
    if op.kind in ("copy", "symbol") and not op.error:
        if op.direction not in _DIRECTIONS:
            return "a copy's direction"
        if op.direction == "h2d" and len(op.args) != 2 * op.nbytes:
            return "an upload whose bytes are not its size"
    return ""


def _hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def malformed(recording) -> str:
    """What in a recording the grader's recorder never writes (FORGED's words, for a Refused), or ""."""
    what = _form_problem(recording)
    return FORGED.format(what=what) if what else ""


def _form_problem(rec) -> str:
    if type(rec).__name__ != "Recording":
        return "no recording"
    if not isinstance(rec.ops, list) or not all(isinstance(ops, list) for ops in rec.ops):
        return "its operations"
    if not isinstance(rec.views, list) or not all(
            isinstance(v, dict) and all(isinstance(k, str) and _int(a, 0, _U64) for k, a in v.items())
            for v in rec.views):
        return "the buffers of a call"
    if not isinstance(rec.late, list) or not isinstance(rec.errors, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in rec.errors.items()):
        return "its late operations or its errors"
    if not isinstance(rec.calls, dict):
        return "its calls"
    for key, rows in rec.calls.items():
        if not isinstance(key, str) or not isinstance(rows, list):
            return "its calls"
        for row in rows:
            if not (isinstance(row, list) and len(row) == 3 and _int(row[0], 0, len(rec.ops))
                    and _int(row[1], 0, len(rec.views)) and _int(row[2], -(1 << 31), 1 << 31)):
                return f"a row of the calls for {key[:80]}"
    for op in [op for ops in rec.ops for op in ops] + list(rec.late):
        what = _op_problem(op)
        if what:
            return what
    return ""


@dataclass(frozen=True)
class Span:
    """A buffer a call's stream work may touch: one of its tensors, or the launcher's workspace."""

    name: str
    lo: int
    hi: int
    writable: bool


def workspaces(ops) -> list[tuple[int, int]]:
    """The workspace allocations among these ops (address, bytes), each address once, in order,
    with the most bytes it was asked for (the harness gives a freed address again)."""
    seen: dict[int, int] = {}
    for op in ops:
        if op.kind == "alloc" and not op.error and op.dst:
            seen[op.dst] = max(seen.get(op.dst, 0), op.nbytes)     # a freed address given again, maybe larger
    return list(seen.items())


def workspace_name(index: int, nbytes: int) -> str:
    return f"your workspace {index + 1} ({nbytes} bytes)"


def call_spans(stand_ins: dict[str, tuple[int, int]], outputs: set[str],
               spaces: list[tuple[int, int]]) -> list[Span]:
    """A call's tensors (outputs writable) and every workspace, as Spans."""
    spans = [Span(name, addr, addr + nbytes, name in outputs) for name, (addr, nbytes) in stand_ins.items()]
    return spans + [Span(workspace_name(i, n), a, a + n, True) for i, (a, n) in enumerate(spaces)]


def _inside(spans: list[Span], address: int, nbytes: int) -> Span | None:
    return next((s for s in spans if s.lo <= address and address + nbytes <= s.hi), None)


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def stream_op_problem(op, spans: list[Span] | None, *, who: str, workspace_cap: int, api: Api) -> str | None:
    """Why the replay will not reproduce this memset, copy, symbol copy, allocation or free, in
    the student's terms, or None. op: a RecordedOp; spans: the call's (None: judge only what
    needs no addresses, as the parent does before the measuring process starts); api: the runtime
    the launcher called (its Backend's), whose allocation a message names."""
    forged = _op_problem(op)                # a claim: held to the recorder's own form first
    if forged:
        return FORGED.format(what=forged)
    if op.kind == "alloc":
        if op.error == "over_workspace":
            return (f"{who} asked {op.call or op.kind} for {_mib(op.nbytes)} more than the {_mib(workspace_cap)} of "
                    "workspace this exercise allows over all calls (limits.workspace_mib): allocate once, and no more "
                    "than the shape needs.")
        return None
    problem = _recorded_problem(op, who, api)
    if problem or spans is None:
        return problem
    if op.kind == "free":
        if _inside([s for s in spans if s.name.startswith("your workspace")], op.dst, 0) is None:
            return (f"{who} called {op.call or op.kind} on memory it did not allocate (a buffer the grader owns, or "
                    f"none): free only what your launcher allocated with {api.allocate}.")
        return None
    return _address_problem(op, spans, who)


def _recorded_problem(op, who: str, api: Api) -> str | None:
    """What the recorder already found wrong with a memset, copy or free (its error), or a copy to
    the host: refused whatever the call's buffers are."""
    call = op.call or op.kind
    if op.error == "unknown_address":
        return (f"{who} gave {call} device memory that is neither a buffer the grader passed nor one your launcher "
                f"allocated with {api.allocate}: use only those.")
    if op.error == "unknown_symbol":
        return f"{who} called {call} on a variable that is not a __device__ or __constant__ variable of your file."
    if op.error == "recording_too_large":
        return (f"{who}'s calls differ from one another by more than {_mib(4 << 20)} of parameters and uploads "
                "(new data uploaded from the host on every call, say): the grader cannot record them. Upload "
                "constants once, and keep each call's work the same but for the buffers it is given.")
    if op.error == "too_much_data":
        return (f"{who} uploaded more than {_mib(HOST_BYTES_PER_CALL)} from the host in one call ({call}): the "
                "launcher never sees the inputs, so what it uploads is constants; compute larger tables in a kernel.")
    if op.kind in ("copy", "symbol") and op.direction == "d2h":
        return (f"{who} copied device memory to the host ({call}, {op.nbytes} bytes). The grader replays your "
                "launcher's work from a recording, made before any data exists, so nothing read back to the host "
                "can be used: compute on the device (a thrust call that returns a value, such as thrust::reduce, "
                "copies it to the host; reduce into the output with cub::DeviceReduce instead).")
    return None


def _address_problem(op, spans: list[Span], who: str) -> str | None:
    """A memset's or copy's destination, or a copy's source, outside the call's buffers (or an input
    written), in the student's terms; None where every address lies where it may."""
    call = op.call or op.kind
    outs = ", ".join(s.name for s in spans if s.writable and not s.name.startswith("your workspace"))
    if op.kind in ("memset", "copy"):
        target = _inside(spans, op.dst, op.nbytes)
        if target is None:
            return (f"{who} called {call} on {op.nbytes} bytes that lie outside every buffer the grader passed to "
                    "this call and your workspace: a pointer kept from an earlier call, or past a buffer's end, "
                    f"is not valid. Write only your outputs ({outs}) and the memory your launcher allocated.")
        if not target.writable:
            return (f"{who} called {call} on the input {target.name}: the inputs are the grader's and must not "
                    f"change. Write only your outputs ({outs}) and the memory your launcher allocated.")
    if op.kind in ("copy", "symbol") and op.direction != "h2d" and _inside(spans, op.src, op.nbytes) is None:
        return (f"{who} called {call} with a source that lies outside every buffer the grader passed to this call "
                "and your workspace: a pointer kept from an earlier call (its output, say) is not valid in the next.")
    return None


def relocate_address(address: int, spans: list[Span], real: dict[str, int]) -> int:
    """address, inside one of spans, as the same place in the grader's buffer of that name."""
    if not _int(address, 0, _U64):
        raise Refused(FORGED.format(what="an address that is not one"))
    span = _inside(spans, address, 0)
    if span is None or span.name not in real:
        raise Refused(f"an address of the recording lies in no buffer of its call ({address:#x})")
    return real[span.name] + (address - span.lo)


def call_outputs(cases) -> dict[str, set[str]]:
    """For each case job's call key, the tensors it may write (its outputs)."""
    return {cj.launch.key: {b.name for b in cj.buffers if b.role == "out"} for cj in cases}
