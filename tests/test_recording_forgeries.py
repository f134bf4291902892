"""Forged recordings: "bytes from student processes are claims".

The recorder runs the student's host code, which owns that process whole: it can write any bytes
into the recording frame the parent reads. Whatever it forges, the replay must never write or read
outside the grader's buffers, read host memory, run a kernel that is not in the device code, pass a
stand-in address unrelocated, go past the workspace cap, copy to the host, use another stream, or
crash a process with an exception of its own: a forged recording is refused in the student's
terms (the grader's Refused, or the parent's refusal list), or it runs inside the grader's buffers.

Every check that runs without a GPU is driven here: the frame's parse (protocol.parse, frames.decode),
the parent's screen (replaying.recording_refusals, replay_recorded), the shared helpers
(replay.relocate, relocate_address, stream_op_problem, StandIns, Span) and the measuring process's
ReplayBackend (load_submission's checks, launch_submission, _prepare, _stream_step), the latter over
a stand-in driver that converts every argument as ctypes would and logs what the GPU would be told,
so each forged memset, copy and launch can be held against the grader's real buffers.

Each forgery's test asserts the secure behaviour: a test that fails here is a hole, not a test to
relax. What failed when this file was written (grader at 344dd3e):
- replays outside the grader's buffers (measurer._check_stream_op / replay.stream_op_problem):
  a negative nbytes on a memset or copy (ctypes passes it as 2**64 less it: a controlled overrun
  past the output, a host over-read for an upload), a copy or symbol copy whose direction is not
  exactly "d2d" (its source is measured at 0 bytes, then nbytes are read), a symbol copy at a
  negative offset (written before the variable and its kept copy);
- raw exceptions in the parent (replaying.recording_refusals, protocol.parse): null ops or late
  lists or ops, a non-string or 5000-digit mangled kernel name in a refused launch, an over-workspace
  size that is not a number or is past a float, a JSON header nested 100,000 deep;
- raw exceptions in the measuring process (a FatalFrame: at load, an INFRASTRUCTURE_ERROR verdict)
  for malformed calls rows, views, errors, args, grids, sizes and symbol names;
- an honest memset into the launcher's own workspace is refused by the measuring process as a write
  into an input (its _check builds the workspace's spans not writable).
All of these are mended by the recording's form check (run/child/replay.malformed, in the parent
and in the measuring process; stream_op_problem and relocate_address hold their own inputs to it),
the source of every copy that is not an upload measured, a symbol copied to the host refused, a
nested header a tampered stream, and the workspace writable in the measuring process's check.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import json
import struct
from types import SimpleNamespace

import pytest

from grader.core.backend import CUDA
from grader.core.contract import Job, RecordedOp, Recording, RecordingFrame, Role
from grader.core.frames import decode, encode, recording_data
from grader.run import protocol
from grader.run.child import replay
from grader.run.child.backends import Region
from grader.run.child.replay import (SLACK, STAND_IN_BASE, STAND_IN_SPAN, WORKSPACE_BASE, Param, Refused, Span,
                                     StandIns, call_spans, relocate, relocate_address, stream_op_problem)
from grader.run.replaying import DeviceCode, ReplayPlan, recording_refusals, replay_recorded

CAP = 256 << 20
U64 = (1 << 64) - 1


# -- the call the forgeries are made against: bias_gelu_fused's, as the grader plans it ------------

@functools.cache
def _job() -> Job:
    from pathlib import Path

    from grader.exercises import load_exercise
    from grader.toolchain.outcome import BuildResult
    from tests.jobs import child_job

    built = BuildResult(True, Path("lib.so"), None, False, 0.0, "")
    job, _ = child_job(load_exercise("bias_gelu_fused"), backend=CUDA, build=built, reference=built, has_launcher=True)
    return job


@functools.cache
def _case():
    """The largest check case that passes x, bias and out (the grader's call the recording answers)."""
    cases = [cj for cj in _job().cases if [b.name for b in cj.buffers] == ["x", "bias", "out"]]
    return max(cases, key=lambda cj: sum(b.floats for b in cj.buffers))


def _key() -> str:
    return _case().launch.key


def _sizes() -> dict[str, int]:
    return {b.name: 4 * b.floats for b in _case().buffers}


STAND = StandIns()
# the stand-in addresses the recorder gave the launcher (large enough for any case's buffers)
GIVEN = {"x": STAND.take(1 << 20), "bias": STAND.take(1 << 20), "out": STAND.take(1 << 20)}
X, BIAS, OUT = GIVEN["x"], GIVEN["bias"], GIVEN["out"]
# the grader's own device buffers of the same tensors in the measuring process
REAL = {"x": 0x7F10_0000_0000, "bias": 0x7F10_0100_0000, "out": 0x7F10_0200_0000}
WS = WORKSPACE_BASE + SLACK                      # the address the harness's cudaMalloc gave
WS_BYTES = 1 << 20

KERNEL = "_Z13biasGeluFusedPKfS0_Pfm"          # biasGeluFused(const float*, const float*, float*, size_t)
KERNEL_PARAMS = [(0, 8), (8, 8), (16, 8), (24, 8)]
SYMBOL, SYMBOL_AT, SYMBOL_BYTES = "table", 0x7F30_0000_0000, 256


def _args(*words: int) -> str:
    return struct.pack("<4Q", *(w & U64 for w in words)).hex()


def _launch(**kw) -> RecordedOp:
    n = _sizes()["out"] // 4
    return RecordedOp(**{"kind": "launch", "kernel": KERNEL, "grid": [1, 1, 1], "block": [256, 1, 1],
                         "args": _args(X, BIAS, OUT, n), "call": "cudaLaunchKernel", **kw})


def _honest_ops() -> list[RecordedOp]:
    """A launcher's honest call: its workspace allocated (and only read here: see
    test_control_an_honest_writable_workspace_memset_is_replayed), the output cleared, uploaded to,
    copied into from the input, a constant uploaded, the kernel launched, the workspace freed."""
    out_bytes = _sizes()["out"]
    return [RecordedOp(kind="alloc", call="cudaMalloc", dst=WS, nbytes=WS_BYTES),
            RecordedOp(kind="memset", call="cudaMemsetAsync", dst=OUT, nbytes=out_bytes),
            RecordedOp(kind="copy", call="cudaMemcpyAsync", direction="h2d", dst=OUT, nbytes=64, args="ab" * 64),
            RecordedOp(kind="copy", call="cudaMemcpyAsync", direction="d2d", dst=OUT, src=X, nbytes=out_bytes),
            RecordedOp(kind="symbol", call="cudaMemcpyToSymbol", direction="h2d", kernel=SYMBOL, dst=8, nbytes=8,
                       args="01" * 8),
            _launch(),
            RecordedOp(kind="free", call="cudaFree", dst=WS)]


def _recording(ops: list[RecordedOp] | None = None, *, views: dict | None = None, late=None, calls=None,
               errors=None) -> Recording:
    return Recording(calls={_key(): [[0, 0, 0]]} if calls is None else calls,
                     ops=[_honest_ops() if ops is None else ops], views=[dict(GIVEN) if views is None else views],
                     late=[] if late is None else late, errors={} if errors is None else errors)


# -- a driver that does nothing but convert its arguments as ctypes does, and log them -------------

_vp, _u, _i, _sz = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t
_ARGTYPES = {           # measurer.Driver's declarations
    "cuModuleLoadData": [ctypes.POINTER(_vp), _vp],
    "cuModuleGetFunction": [ctypes.POINTER(_vp), _vp, ctypes.c_char_p],
    "cuFuncGetParamInfo": [_vp, _sz, ctypes.POINTER(_sz), ctypes.POINTER(_sz)],
    "cuLaunchKernel": [_vp, _u, _u, _u, _u, _u, _u, _u, _vp, ctypes.POINTER(_vp), ctypes.POINTER(_vp)],
    "cuLaunchCooperativeKernel": [_vp, _u, _u, _u, _u, _u, _u, _u, _vp, ctypes.POINTER(_vp)],
    "cuFuncSetAttribute": [_vp, _i, _i],
    "cuFuncSetCacheConfig": [_vp, _i],
    "cuGetErrorString": [_i, ctypes.POINTER(ctypes.c_char_p)],
    "cuMemsetD8Async": [_vp, ctypes.c_ubyte, _sz, _vp],
    "cuMemcpyDtoDAsync_v2": [_vp, _vp, _sz, _vp],
    "cuMemcpyHtoDAsync_v2": [_vp, _vp, _sz, _vp],
    "cuModuleGetGlobal_v2": [ctypes.POINTER(_vp), ctypes.POINTER(_sz), _vp, ctypes.c_char_p],
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": [ctypes.POINTER(_i), _vp, _i, _sz],
}
MODULE = 0x4000
KERNEL_HANDLE = 0x5000


class _Driver:
    """The submission's device code as the driver would show it: one kernel, one __device__ variable."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name):
        if name not in _ARGTYPES:
            raise AttributeError(name)
        types = _ARGTYPES[name]

        def call(*args):
            assert len(args) == len(types), (name, args)
            for i, (t, a) in enumerate(zip(types, args)):
                try:
                    t.from_param(a)
                except TypeError as exc:    # what ctypes raises for an argument it cannot convert
                    raise ctypes.ArgumentError(f"argument {i + 1}: TypeError: {exc}") from None
            self.calls.append((name, args))
            special = getattr(type(self), "_" + name, None)
            return special(*args) if special is not None else 0
        return call

    @staticmethod
    def _cuModuleLoadData(module, image):
        module._obj.value = MODULE
        return 0

    @staticmethod
    def _cuModuleGetFunction(fn, module, name):
        if name.split(b"\0")[0] != KERNEL.encode():      # a char* ends at its first NUL
            return 500                      # CUDA_ERROR_NOT_FOUND
        fn._obj.value = KERNEL_HANDLE
        return 0

    @staticmethod
    def _cuFuncGetParamInfo(fn, index, offset, size):
        if getattr(fn, "value", fn) != KERNEL_HANDLE or index >= len(KERNEL_PARAMS):
            return 1
        offset._obj.value, size._obj.value = KERNEL_PARAMS[index]
        return 0

    @staticmethod
    def _cuModuleGetGlobal_v2(dptr, size, module, name):
        if name.split(b"\0")[0] != SYMBOL.encode():
            return 500
        dptr._obj.value, size._obj.value = SYMBOL_AT, SYMBOL_BYTES
        return 0


def _backend(recording: Recording, *, sizes=None, outputs=None, cap: int = CAP):
    """A ReplayBackend as ReplayBackend.__init__ makes one, without a GPU: the stand-in driver, the
    grader's own allocations (kept) at known addresses; (backend, the grader's buffers)."""
    from grader.run.child.measurer import ReplayBackend

    b = ReplayBackend.__new__(ReplayBackend)
    b.driver = SimpleNamespace(lib=_Driver(), error=lambda code: f"CUDA error {code}")
    b._images = [ctypes.create_string_buffer(b"a fatbinary")]
    b.recording, b._sizes = recording, {_key(): _sizes()} if sizes is None else sizes
    b._outputs, b._workspace_cap = {_key(): {"out"}} if outputs is None else outputs, cap
    b._spaces = replay.workspaces([op for ops in recording.ops for op in ops])
    b._workspace, b._globals, b._variables, b._kept = {}, {}, [SYMBOL], {}
    b._heap, b._heap_scratch, b._heap_free, b._heap_kept = False, None, None, 0
    b._modules, b._kernels, b._used, b._prepared, b._log = [], {}, {}, {}, {}
    buffers = {name: (REAL[name], nbytes) for name, nbytes in _sizes().items()}
    buffers[SYMBOL] = (SYMBOL_AT, SYMBOL_BYTES)
    at = [0x7F40_0000_0000]

    def kept(floats: int) -> Region:
        region = Region(at[0], floats)
        buffers[f"kept {len(buffers)}"] = (at[0], 4 * floats)
        at[0] += (4 * floats + 0xFFFFF) & ~0xFFFFF
        return region
    b.kept = kept
    b.synchronize = lambda: None
    return b, buffers


def _views() -> dict[str, Region]:
    return {name: Region(REAL[name], nbytes // 4) for name, nbytes in _sizes().items()}


def _run_measurer(recording: Recording, **kw):
    """What the measuring process does with the recording on a GPU: load_submission's checks, then
    the grader's call replayed once. Returns (the driver's calls, the grader's buffers); raises
    Refused where the replay refuses it (anything else raised is a crash of the measuring process)."""
    b, buffers = _backend(recording, **kw)
    b.load_submission("never opened")
    outcome = b.launch_submission(SimpleNamespace(key=_key()), _views())
    _ALIVE.append(b)            # its parameter buffers, which the logged launches point into
    return b.driver.lib.calls, buffers, outcome


_ALIVE: list = []


def _inside(buffers, address: int, nbytes: int) -> bool:
    return any(lo <= address and address + nbytes <= lo + n for lo, n in buffers.values())


def _escapes(calls, buffers) -> list[str]:
    """Every memory access of the driver's calls that lies outside the grader's buffers (sizes as
    the driver gets them: ctypes wraps a negative size_t to 2**64 less it), every launch's unrelocated
    stand-in, and every stream but the grader's."""
    bad = []
    for name, args in calls:
        if name == "cuMemsetD8Async":
            dst, _, n, stream = args
            if not _inside(buffers, dst, n & U64):
                bad.append(f"memset writes {n & U64:#x} bytes at {dst:#x}")
        elif name == "cuMemcpyDtoDAsync_v2":
            dst, src, n, stream = args
            if not _inside(buffers, dst, n & U64):
                bad.append(f"copy writes {n & U64:#x} bytes at {dst:#x}")
            if not _inside(buffers, src, n & U64):
                bad.append(f"copy reads {n & U64:#x} bytes at {src:#x}")
        elif name == "cuMemcpyHtoDAsync_v2":
            dst, data, n, stream = args
            if not _inside(buffers, dst, n & U64):
                bad.append(f"upload writes {n & U64:#x} bytes at {dst:#x}")
            if (n & U64) > ctypes.sizeof(data):
                bad.append(f"upload reads {n & U64:#x} bytes of host memory from a buffer of {ctypes.sizeof(data)}")
        elif name in ("cuLaunchKernel", "cuLaunchCooperativeKernel"):
            handle, stream, params = args[0], args[8], args[9]
            if handle != KERNEL_HANDLE:
                bad.append(f"launches {handle:#x}, no kernel of the device code")
            for i, (offset, size) in enumerate(KERNEL_PARAMS):
                word = int.from_bytes(ctypes.string_at(params[i], size), "little")
                if replay.in_stand_in_window(word):
                    bad.append(f"argument {i + 1} is the stand-in {word:#x}, not relocated")
        else:
            continue
        stream = args[8] if name.startswith("cuLaunch") else args[3]
        if stream is not None:
            bad.append(f"{name} on stream {stream!r}, not the grader's")
    return bad


def _refused_or_contained(recording: Recording, **kw) -> str:
    """The measuring process's verdict on a recording: 'refused: <why>' or 'ran' (its every access
    inside the grader's buffers, asserted). Any other exception escapes: a crash."""
    try:
        calls, buffers, outcome = _run_measurer(recording, **kw)
    except Refused as refused:
        assert str(refused).strip(), "a refusal says why"
        return f"refused: {refused}"
    escapes = _escapes(calls, buffers)
    assert not escapes, f"the forged recording was replayed outside the grader's buffers: {escapes}"
    return "ran" if outcome.ok else f"failed: {outcome.error}"


# -- controls: an honest recording passes every check, and runs inside the grader's buffers --------

def test_control_an_honest_recording_passes_the_parent_and_replays_inside_the_graders_buffers():
    rec = _recording()
    assert recording_refusals(rec, "launchBiasGeluFused", CAP, api=CUDA.api) == []
    calls, buffers, outcome = _run_measurer(rec)
    assert outcome.ok
    names = [name for name, _ in calls]
    for expected in ("cuMemsetD8Async", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoDAsync_v2", "cuLaunchKernel"):
        assert expected in names
    assert _escapes(calls, buffers) == []
    launch = next(args for name, args in calls if name == "cuLaunchKernel")
    words = [int.from_bytes(ctypes.string_at(launch[9][i], 8), "little") for i in range(4)]
    assert words == [REAL["x"], REAL["bias"], REAL["out"], _sizes()["out"] // 4]


def test_control_an_honest_recording_crosses_the_wire_and_the_measurers_job_unchanged():
    rec = _recording()
    header = json.loads(json.dumps(encode(RecordingFrame(rec))))
    frame = decode(header)
    assert isinstance(frame, RecordingFrame) and frame.recording == rec
    job = dataclasses.replace(_job(), role=Role.REPLAY, replay=replay_part(rec))
    back = Job.from_json(json.loads(json.dumps(job.to_json())))
    assert back.replay.recording == rec


def replay_part(rec):
    from grader.core.contract import ReplayPart
    return ReplayPart(rec, device_code=["a.fatbin"], device_globals=[SYMBOL], layout_seed=3)


def test_control_an_honest_writable_workspace_memset_is_replayed():
    """The launcher memsets its own workspace (what test_replay.py's stream_op_problem accepts with
    the workspace writable): the measuring process's own check must accept it too."""
    ops = [RecordedOp(kind="alloc", call="cudaMalloc", dst=WS, nbytes=WS_BYTES),
           RecordedOp(kind="memset", call="cudaMemsetAsync", dst=WS, nbytes=WS_BYTES), _launch()]
    assert _refused_or_contained(_recording(ops)) == "ran"


# -- the parent: the frame's bytes as it parses them --------------------------------------------

class _Measurer:
    """The measuring process's Worker: notes the job it was handed (nothing runs)."""

    def __init__(self):
        self.jobs = []

    def run(self, job, **kw):
        from grader.run.sandbox import CappedOutput, ChildRun

        self.jobs.append(job)
        return ChildRun(frames=[], returncode=0, timed_out=False, seconds=0.0,
                        stdout=CappedOutput(1 << 10), stderr=CappedOutput(1 << 10))


def _parent(header: dict):
    """replay_recorded on a recorder whose only frame is header (its MAC is the student's to make):
    (the ReplayRun, the job handed to the measuring process or None)."""
    record = SimpleNamespace(frames=[protocol.Frame(header, b"")], blocked=[], timed_out=False, signal_name="",
                             stderr=SimpleNamespace(text=lambda: ""), returncode=0)
    measurer = _Measurer()
    out = replay_recorded(record, measurer, _job(), plan=ReplayPlan(DeviceCode(["a.fatbin"]), "launchBiasGeluFused", 5),
                          gate=lambda: None)
    return out, (measurer.jobs[0] if measurer.jobs else None)


def _end_to_end(header: dict) -> str:
    """A forged frame's header through the parent and (where handed on) the measuring process:
    'refused by the parent', 'not a recording' (nothing replayed), or the measurer's verdict."""
    out, job = _parent(json.loads(json.dumps(header)))
    if out.refusals:
        assert all(isinstance(r, str) and r for r in out.refusals)
        assert job is None
        return "refused by the parent: " + out.refusals[0]
    if job is None:
        return "not a recording"
    back = Job.from_json(json.loads(json.dumps(job.to_json())))       # the measuring process's job, as it reads it
    return _refused_or_contained(back.replay.recording)


def _header(**recording) -> dict:
    honest = recording_data(_recording())
    return {"type": "recording", "recording": {**honest, **recording}}


def _op(**fields) -> dict:
    return {**dataclasses.asdict(_launch()), **fields}


def test_control_an_honest_header_is_handed_to_the_measuring_process_and_runs():
    assert _end_to_end(_header()) == "ran"


FORGED_HEADERS = {          # name -> the header (made when the test runs: the honest parts need the job)
    # the recording itself
    "recording null": lambda: {"type": "recording", "recording": None},
    "recording a list": lambda: {"type": "recording", "recording": ["calls", "ops"]},
    "recording a string": lambda: {"type": "recording", "recording": "calls"},
    "recording missing": lambda: {"type": "recording"},
    # its lists and maps
    "ops null": lambda: _header(ops=None),
    "ops a string": lambda: _header(ops="kind"),
    "ops an int": lambda: _header(ops=7),
    "ops [[null]]": lambda: _header(ops=[[None]]),
    "ops [[5]]": lambda: _header(ops=[[5]]),
    "ops [null]": lambda: _header(ops=[None]),
    "late null": lambda: _header(late=None),
    "late [null]": lambda: _header(late=[None]),
    "late a dict": lambda: _header(late={"kind": "launch"}),
    "views null": lambda: _header(views=None),
    "views [null]": lambda: _header(views=[None]),
    "calls a list": lambda: _header(calls=[[0, 0, 0]]),
    "calls null": lambda: _header(calls=None),
    "errors a list": lambda: _header(calls={_key(): [[0, 0, 5]]}, errors=["launch failed"]),
}


def test_extra_keys_in_a_recording_frame_and_its_ops_are_dropped():
    """Keys the grader does not know, at any level, are left out by the parse (sanitised)."""
    header = _header(ops=[[{**_op(), "host_pointer": 4096, "kernel_path": "/etc/passwd"}]])
    header = {**header, "shared": [0, 1 << 40], "payload": "junk"}
    header["recording"]["unknown"] = {"nested": [[[]]]}
    assert _end_to_end(header) == "ran"


@pytest.mark.parametrize("name", list(FORGED_HEADERS))
def test_a_malformed_recording_frame_is_refused_or_ignored_never_a_crash(name):
    verdict = _end_to_end(FORGED_HEADERS[name]())
    assert verdict.startswith(("refused", "not a recording")), verdict


def _one_op_header(**fields) -> dict:
    return _header(ops=[[_op(**fields)]])


FORGED_OPS = {
    "kernel an int": dict(kernel=5),
    "kernel a list": dict(kernel=["_Z3foov"]),
    "kernel null": dict(kernel=None),
    "kernel a path": dict(kernel="../../lib/libc.so.6"),
    "kernel with a NUL": dict(kernel=KERNEL + "\x00x"),
    "kernel not in the device code": dict(kernel="_Z6stolenPf"),
    "kernel an empty name": dict(kernel=""),
    "kernel a 5000-digit mangled length (thread other)": dict(kernel="_Z" + "9" * 5000, thread="other"),
    "kernel a 5000-digit mangled length (stream other)": dict(kernel="_Z" + "9" * 5000, stream="other"),
    "args not hex": dict(args="zz" * 32),
    "args odd length": dict(args="0" * 63),
    "args too short": dict(args="00" * 8),
    "args too long": dict(args="00" * 4096),
    "args an int": dict(args=12),
    "args null": dict(args=None),
    "args a made-up stand-in": dict(args=_args(X, BIAS, STAND_IN_BASE + (1 << 39), 1)),
    "args a workspace address never allocated": dict(args=_args(X, BIAS, WORKSPACE_BASE + (1 << 30), 1)),
    "grid two numbers": dict(grid=[1, 1]),
    "grid strings": dict(grid="abc"),
    "grid floats": dict(grid=[1.5, 1, 1]),
    "grid NaN": dict(grid=[float("nan"), 1, 1]),
    "grid nested": dict(grid=[[1], [1], [1]]),
    "block null": dict(block=None),
    "block four numbers": dict(block=[1, 1, 1, 1]),
    "shared_bytes a string": dict(shared_bytes="lots"),
    "kind a list": dict(kind=["launch"]),
    "kind unknown": dict(kind="graph"),
    "kind launch_attributes with junk value": dict(kind="launch_attributes", value="x", attribute=[1]),
    "thread other": dict(thread="other"),
    "stream other": dict(stream="other"),
    "error set": dict(error="cudaErrorIllegalAddress"),
    "attribute with an out-of-range value": dict(kind="attribute", attribute=8, value=1 << 40),
    "cache_config with a string": dict(kind="cache_config", attribute="prefer shared"),
}


@pytest.mark.parametrize("name", list(FORGED_OPS))
def test_a_forged_launch_is_refused_or_runs_only_the_device_codes_kernel_in_the_graders_buffers(name):
    """A forged op: the parent refuses it, or the measuring process refuses it with Refused, or it
    runs the device code's own kernel on the grader's buffers. Never a TypeError, ValueError,
    AttributeError, OverflowError or IndexError from either process."""
    verdict = _end_to_end(_one_op_header(**FORGED_OPS[name]))
    assert verdict.startswith(("refused", "ran", "failed: launch failed")), verdict


FORGED_CALLS = {
    "a row of two": {"calls": lambda k: {k: [[0, 0]]}},
    "a row of strings": {"calls": lambda k: {k: [["0", "0", "0"]]}},
    "a row past the ops": {"calls": lambda k: {k: [[7, 0, 0]]}},
    "a row past the views": {"calls": lambda k: {k: [[0, 9, 0]]}},
    "a row with floats": {"calls": lambda k: {k: [[0.0, 0, 0]]}},
    "a row a dict": {"calls": lambda k: {k: [{"ops": 0}]}},
    "rows null": {"calls": lambda k: {k: None}},
    "an error code and no text": {"calls": lambda k: {k: [[0, 0, 3]]}, "errors": {}},
    "an error code whose text is a number": {"calls": lambda k: {k: [[0, 0, 3]]}, "errors": {"3": 3}},
    "an error code that is a list": {"calls": lambda k: {k: [[0, 0, [1]]]}},
}


@pytest.mark.parametrize("name", list(FORGED_CALLS))
def test_a_forged_call_row_is_refused_never_a_crash(name):
    forged = {k: (v(_key()) if callable(v) else v) for k, v in FORGED_CALLS[name].items()}
    verdict = _end_to_end(_header(**forged))
    assert verdict.startswith(("refused", "not a recording", "failed: launch failed")), verdict


FORGED_VIEWS = {
    "an address a string": {"x": "0x7e", "bias": BIAS, "out": OUT},
    "an address NaN": {"x": float("nan"), "bias": BIAS, "out": OUT},
    "an address a list": {"x": [X], "bias": BIAS, "out": OUT},
    "an address null": {"x": None, "bias": BIAS, "out": OUT},
    "an address negative": {"x": -X, "bias": BIAS, "out": OUT},
    "an address past 64 bits": {"x": 1 << 80, "bias": BIAS, "out": OUT},
    "a tensor the grader did not pass": {"x": X, "bias": BIAS, "out": OUT, "secret": STAND_IN_BASE + (1 << 38)},
    "the input and the output at one address": {"x": OUT, "bias": BIAS, "out": OUT},
}


@pytest.mark.parametrize("name", list(FORGED_VIEWS))
def test_forged_stand_in_addresses_are_refused_or_relocated_into_the_graders_buffers(name):
    views = FORGED_VIEWS[name]
    args = _args(views["x"] if isinstance(views["x"], int) else X, BIAS, OUT, 1)
    if name == "a tensor the grader did not pass":
        args = _args(X, BIAS, views["secret"], 1)
    verdict = _end_to_end(_header(views=[views], ops=[[_op(args=args)]]))
    assert verdict.startswith(("refused", "ran")), verdict


def test_a_deeply_nested_header_is_a_tampered_stream_not_a_crash_of_the_parent():
    """protocol.parse reads each authentic frame's JSON with json.loads, catching ValueError; the
    student's host code has the key (it owns the recorder) and can sign a header 16 MiB long."""
    key = protocol.new_key()
    head = ("{\"type\": \"recording\", \"recording\": {\"calls\": " + "[" * 100_000 + "]" * 100_000 + "}}").encode()
    prefix = protocol._PREFIX.pack(len(head), 0, protocol._mac(key, 0, head, 0))
    frames, problem = protocol.parse(prefix + head, key)
    assert frames == [] and problem == protocol.TAMPERED


@pytest.mark.parametrize("nbytes", [float("nan"), float("inf"), float("-inf"), 10 ** 400, -(10 ** 400)],
                         ids=["NaN", "Infinity", "-Infinity", "10**400", "-10**400"])
def test_non_finite_and_enormous_numbers_in_a_recorded_size_are_refused(nbytes):
    """JSON numbers Python reads beside the standard's (NaN, Infinity, integers of any length) in
    the size of an allocation the recorder says went over the workspace."""
    verdict = _end_to_end(_one_op_header(kind="alloc", call="cudaMalloc", dst=WS, error="over_workspace",
                                         nbytes=nbytes))
    assert verdict.startswith("refused"), verdict


def test_an_enormous_recording_is_refused_or_replayed_never_a_crash():
    many = [_op() for _ in range(20_000)]
    verdict = _end_to_end(_header(ops=[many], late=[_op(thread="outside")] * 5_000))
    assert verdict.startswith("refused by the parent"), verdict


# -- the stream work: memsets, copies, symbols, allocations and frees --------------------------

OUT_FIRST = {"out": OUT, "x": X, "bias": BIAS}       # the views' order is the recorder's claim too


def _stream(*ops: RecordedOp, **kw) -> str:
    """The ops in a call after the workspace's allocation, before the launch, the output's view
    listed first (where spans overlap a forged size, the first that holds it is taken)."""
    rec = _recording([RecordedOp(kind="alloc", call="cudaMalloc", dst=WS, nbytes=WS_BYTES), *ops, _launch()],
                     views=dict(OUT_FIRST))
    parent = recording_refusals(rec, "launchBiasGeluFused", CAP, api=CUDA.api)
    if parent:
        return "refused by the parent: " + parent[0]
    return _refused_or_contained(rec, **kw)


FORGED_STREAM = {
    # sizes a recorder's size_t never holds: negative, which ctypes wraps to 2**64 less it
    "memset of -1 bytes into the output": RecordedOp(kind="memset", call="cudaMemsetAsync", dst=OUT, nbytes=-1),
    "memset into the output overrunning it by 16 MiB": RecordedOp(
        kind="memset", call="cudaMemsetAsync", dst=OUT, nbytes=-(1 << 64) + (16 << 20)),
    "d2d copy of -1 bytes from the input to the output": RecordedOp(
        kind="copy", call="cudaMemcpyAsync", direction="d2d", dst=OUT, src=X, nbytes=-1),
    "h2d copy of -4096 bytes into the output": RecordedOp(
        kind="copy", call="cudaMemcpyAsync", direction="h2d", dst=OUT, nbytes=-4096),
    # a direction the recorder never writes: the copy's source is then never measured
    "copy with no direction reading the output's size from the input's last float": RecordedOp(
        kind="copy", call="cudaMemcpyAsync", direction="", dst=OUT, src=-1, nbytes=-1),
    "copy with direction 'D2D' reading the output's size from the input's last float": RecordedOp(
        kind="copy", call="cudaMemcpyAsync", direction="D2D", dst=OUT, src=-1, nbytes=-1),
    "copy with direction 'h2h'": RecordedOp(kind="copy", call="cudaMemcpyAsync", direction="h2h", dst=OUT,
                                            src=0x1000, nbytes=64),
    # the symbol's offset and size
    "symbol upload at offset -4096": RecordedOp(kind="symbol", call="cudaMemcpyToSymbol", direction="h2d",
                                                kernel=SYMBOL, dst=-4096, nbytes=64, args="ff" * 64),
    "symbol upload of -1 bytes": RecordedOp(kind="symbol", call="cudaMemcpyToSymbol", direction="h2d",
                                           kernel=SYMBOL, dst=0, nbytes=-1, args=""),
    "symbol copy with direction 'd2h' from the input's last float": RecordedOp(
        kind="symbol", call="cudaMemcpyToSymbol", direction="d2h", kernel=SYMBOL, dst=0, src=-1,
        nbytes=SYMBOL_BYTES),
    "symbol copy with no direction from the input's last float": RecordedOp(
        kind="symbol", call="cudaMemcpyToSymbol", direction="", kernel=SYMBOL, dst=0, src=-1,
        nbytes=SYMBOL_BYTES),
    "symbol with a name not in the device code": RecordedOp(kind="symbol", call="cudaMemcpyToSymbol",
                                                           direction="h2d", kernel="_ZN5other6secretE", nbytes=4,
                                                           args="00" * 4),
    "symbol named with a path": RecordedOp(kind="symbol", call="cudaMemcpyToSymbol", direction="h2d",
                                          kernel="/proc/self/mem", nbytes=4, args="00" * 4),
    "symbol name an int": RecordedOp(kind="symbol", call="cudaMemcpyToSymbol", direction="h2d", kernel=7, nbytes=4,
                                    args="00" * 4),
    # uploads whose bytes are not what they say
    "h2d upload whose bytes are not hex": RecordedOp(kind="copy", call="cudaMemcpyAsync", direction="h2d", dst=OUT,
                                                     nbytes=4, args="zzzzzzzz"),
    "h2d upload of more bytes than its size": RecordedOp(kind="copy", call="cudaMemcpyAsync", direction="h2d",
                                                         dst=OUT, nbytes=4, args="00" * 64),
    "symbol upload of more bytes than its size": RecordedOp(kind="symbol", call="cudaMemcpyToSymbol",
                                                            direction="h2d", kernel=SYMBOL, nbytes=4, args="00" * 64),
    "h2d upload of 64 bytes with no bytes given": RecordedOp(
        kind="copy", call="cudaMemcpyAsync", direction="h2d", dst=OUT, nbytes=64, args=""),
    # the things the parent itself refuses, in forged forms
    "d2h copy spelled 'D2H'": RecordedOp(kind="copy", call="cudaMemcpy", direction="D2H", dst=0x1000, src=OUT,
                                         nbytes=4),
    "memset on stream 'Other'": RecordedOp(kind="memset", call="cudaMemsetAsync", dst=OUT, nbytes=4, stream="Other"),
    "memset with a value past a byte": RecordedOp(kind="memset", call="cudaMemsetAsync", dst=OUT, nbytes=4,
                                                  value=1 << 70),
    "memset of a float size": RecordedOp(kind="memset", call="cudaMemsetAsync", dst=OUT, nbytes=4.5),
    "memset of a string size": RecordedOp(kind="memset", call="cudaMemsetAsync", dst=OUT, nbytes="4"),
    "memset at a string address": RecordedOp(kind="memset", call="cudaMemsetAsync", dst=str(OUT), nbytes=4),
    "memset at address NaN": RecordedOp(kind="memset", call="cudaMemsetAsync", dst=float("nan"), nbytes=4),
    "free of a string": RecordedOp(kind="free", call="cudaFree", dst="ws"),
    "alloc at a string address": RecordedOp(kind="alloc", call="cudaMalloc", dst="ws", nbytes=64),
}


def _at_the_input_s_end(op: RecordedOp) -> RecordedOp:
    """src=-1: the input's last float; nbytes=-1 with it: the output's size (read past x's end)."""
    if op.src != -1:
        return op
    x_end = X + _sizes()["x"] - 4
    return dataclasses.replace(op, src=x_end, nbytes=_sizes()["out"] if op.nbytes == -1 else op.nbytes)


@pytest.mark.parametrize("name", list(FORGED_STREAM))
def test_forged_stream_work_is_refused_or_stays_inside_the_graders_buffers(name):
    verdict = _stream(_at_the_input_s_end(FORGED_STREAM[name]))
    assert verdict.startswith(("refused", "ran")), verdict


def test_a_workspace_past_the_cap_claimed_in_pieces_is_refused():
    """Each allocation under the cap, the sum over it, and the recorder's error cleared."""
    ops = [RecordedOp(kind="alloc", call="cudaMalloc", dst=WORKSPACE_BASE + SLACK + i * (1 << 30), nbytes=CAP // 2 + 1)
           for i in range(3)]
    assert _stream(*ops).startswith("refused: your launcher allocated")


def test_a_negative_allocation_does_not_buy_room_under_the_cap():
    ops = [RecordedOp(kind="alloc", call="cudaMalloc", dst=WORKSPACE_BASE + SLACK, nbytes=CAP),
           RecordedOp(kind="alloc", call="cudaMalloc", dst=WORKSPACE_BASE + SLACK + (1 << 30), nbytes=-CAP),
           RecordedOp(kind="alloc", call="cudaMalloc", dst=WORKSPACE_BASE + SLACK + (2 << 30), nbytes=CAP)]
    verdict = _stream(*ops)                 # a negative size is no size the recorder writes: forged
    assert verdict.startswith("refused") and "changed what the grader's recording process sent" in verdict, verdict


def test_an_allocation_claimed_over_the_graders_own_stand_in_does_not_make_an_input_writable():
    """The launcher claims cudaMalloc gave it the input's stand-in address: a memset there must not
    reach the grader's input."""
    ops = [RecordedOp(kind="alloc", call="cudaMalloc", dst=X, nbytes=_sizes()["x"]),
           RecordedOp(kind="memset", call="cudaMemsetAsync", dst=X, nbytes=_sizes()["x"], value=0xFF)]
    verdict = _stream(*ops)
    if verdict == "ran":            # then the memset went to the workspace the grader made for it, not to x
        calls, _, _ = _run_measurer(_recording([*ops, _launch()]))
        assert all(args[0] != REAL["x"] for name, args in calls if name == "cuMemsetD8Async")
    else:
        assert verdict.startswith("refused"), verdict


# -- the shared helpers, one forged input at a time ---------------------------------------------

@pytest.mark.parametrize("nbytes", [-1, -(1 << 63), -(1 << 64) + 4096])
def test_stream_op_problem_refuses_a_negative_size(nbytes):
    spans = call_spans({"out": (OUT, 4096), "x": (X, 4096)}, {"out"}, [(WS, WS_BYTES)])
    for op in (RecordedOp(kind="memset", call="cudaMemsetAsync", dst=OUT, nbytes=nbytes),
               RecordedOp(kind="copy", call="cudaMemcpyAsync", direction="d2d", dst=OUT, src=X, nbytes=nbytes)):
        problem = stream_op_problem(op, spans, who="your launcher", workspace_cap=CAP, api=CUDA.api)
        assert problem, f"{op.kind} of {nbytes} bytes accepted"


@pytest.mark.parametrize("direction", ["", "D2D", "d2d ", "h2h", "x"])
def test_stream_op_problem_measures_the_source_of_a_copy_whatever_its_direction(direction):
    """A copy that is not an upload reads its source: its source must lie inside a buffer for all
    its bytes, whatever the recorder's direction string says (the replay copies d2d for any but h2d)."""
    spans = call_spans({"out": (OUT, 1 << 20), "x": (X, 4096)}, {"out"}, [])
    op = RecordedOp(kind="copy", call="cudaMemcpyAsync", direction=direction, dst=OUT, src=X + 4092, nbytes=1 << 20)
    assert stream_op_problem(op, spans, who="your launcher", workspace_cap=CAP, api=CUDA.api), direction


def test_stream_op_problem_without_spans_passes_only_what_the_measurer_checks_after():
    assert stream_op_problem(RecordedOp(kind="memset", dst=OUT, nbytes=4), None, who="w", workspace_cap=CAP,
                             api=CUDA.api) is None
    assert "copied device memory to the host" in stream_op_problem(
        RecordedOp(kind="copy", direction="d2h", nbytes=4), None, who="w", workspace_cap=CAP, api=CUDA.api)


@pytest.mark.parametrize("nbytes", ["lots", None, [1], 10 ** 400, float("nan"), float("inf")])
def test_stream_op_problem_words_an_over_workspace_claim_whatever_its_size(nbytes):
    op = RecordedOp(kind="alloc", call="cudaMalloc", nbytes=nbytes, error="over_workspace")
    problem = stream_op_problem(op, None, who="your launcher", workspace_cap=CAP, api=CUDA.api)
    # no size the recorder writes: refused as a forged recording, in the student's terms
    assert problem and "changed what the grader's recording process sent" in problem, problem


def test_relocate_address_refuses_an_address_in_no_span_and_a_span_not_real():
    spans = [Span("x", X, X + 4096, False), Span("out", OUT, OUT + 4096, True)]
    assert relocate_address(OUT + 8, spans, {"out": REAL["out"]}) == REAL["out"] + 8
    for bad in (OUT + 4097, X - 1, -1, 1 << 70, 0):
        with pytest.raises(Refused):
            relocate_address(bad, spans, {"x": REAL["x"], "out": REAL["out"]})
    with pytest.raises(Refused):
        relocate_address(X, spans, {"out": REAL["out"]})


@pytest.mark.parametrize("address", ["0x10", None, float("nan"), [1]])
def test_relocate_address_refuses_what_is_not_an_address(address):
    spans = [Span("out", OUT, OUT + 4096, True)]
    with pytest.raises(Refused):
        relocate_address(address, spans, {"out": REAL["out"]})


PARAMS = [Param(0, 8), Param(8, 8), Param(16, 8), Param(24, 8)]
STANDS = {"x": (X, 4096), "bias": (BIAS, 256), "out": (OUT, 4096)}


def test_relocate_leaves_no_stand_in_in_the_window_and_refuses_the_rest():
    for word in (STAND_IN_BASE + (1 << 39), STAND_IN_BASE + STAND_IN_SPAN - 1, WORKSPACE_BASE,
                 OUT + 4096 + SLACK + 8, BIAS - SLACK - 8):
        with pytest.raises(Refused, match="lies in none of the buffers"):
            relocate(bytes.fromhex(_args(X, BIAS, word, 1)), PARAMS, STANDS, REAL, kernel="k", case="c")
    out = relocate(bytes.fromhex(_args(X, BIAS, OUT + 12, 1)), PARAMS, STANDS, REAL, kernel="k", case="c")
    assert struct.unpack("<4Q", out) == (REAL["x"], REAL["bias"], REAL["out"] + 12, 1)


def test_relocate_refuses_a_pointer_into_a_tensor_it_has_no_real_buffer_for():
    with pytest.raises(Refused, match="did not pass to that call"):
        relocate(bytes.fromhex(_args(X, BIAS, OUT, 1)), PARAMS, STANDS, {"x": 1, "bias": 2}, kernel="k", case="c")


def test_relocate_of_a_buffer_shorter_than_its_parameters_never_leaves_a_stand_in():
    """relocate's caller checks the length first (_check; the layout is the driver's, not the
    recording's); relocate alone still passes no stand-in through where a parameter runs past the
    buffer's end."""
    params = [Param(0, 8), Param(8, 8), Param(16, 8), Param(24, 64)]
    args = bytes.fromhex(_args(X, BIAS, OUT, X))
    try:
        out = relocate(args, params, STANDS, REAL, kernel="k", case="c")
    except Refused:
        return
    words = [int.from_bytes(out[i:i + 8], "little") for i in range(0, len(out) - 7, 8)]
    assert not any(replay.in_stand_in_window(w) for w in words[:3]), [hex(w) for w in words]


def test_relocate_of_a_stand_in_at_an_odd_offset_inside_a_struct_parameter():
    """Only 8-byte-aligned words are looked at: a stand-in packed at offset 4 of a 16-byte struct
    reaches the kernel unrelocated. It holds no device memory (the window is the recorder's), so a
    kernel that uses it faults in the open; the replay is not the place that could tell."""
    params = [Param(0, 16)]
    args = b"\0" * 4 + X.to_bytes(8, "little") + b"\0" * 4
    out = relocate(args, params, STANDS, REAL, kernel="k", case="c")
    assert out == args          # documented: unaligned words pass as they are (no device memory behind them)


@pytest.mark.parametrize("nbytes", [-1, -(1 << 40), 0, 1 << 50])
def test_stand_ins_stay_in_the_lower_half_whatever_size_is_asked(nbytes):
    s = StandIns()
    for _ in range(5):
        at = s.take(nbytes)
        assert STAND_IN_BASE <= at - SLACK and at < WORKSPACE_BASE
