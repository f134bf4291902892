"""The recording child's backend: the submission's launcher called on stand-in buffers, every launch
and every piece of its stream-ordered work (memsets, copies, the workspace) recorded and none run
(replay.py says why).

The worker drives it with the same code as the measuring process (worker.run_case, timing.run_timing),
so the launcher is called for the same calls in the same order; nothing here is memory, and the
timing's loop runs to its largest number of rounds (the measuring process may stop sooner, never
later).

Two kinds (Job.offline says which). Without a GPU (OfflineRecordingBackend, the one a grade tries
first, outside the GPU's lane): no CUDA context, and a wall that lets no driver call through; the
harness answers what a launcher asks of the runtime from the device code and its registration,
and ends the process (run/protocol.py's NEEDS_GPU_EXIT) at anything it cannot answer so. On the GPU
(RecordingBackend, in the lane, where the first could not record): the context is real, and a
launcher may ask for the device's properties, its kernels' attributes and their occupancy.
"""

from __future__ import annotations

import ctypes
import time

from grader.core.backend import Api
from grader.core.contract import Call, RecordedOp, Recording
from grader.run.child.backends import LaunchOutcome, Region
from grader.run.child.cuda import CudaBackend
from grader.run.child.replay import StandIns, refused_from_a_thread

_KINDS = {1: "launch", 2: "cooperative", 3: "attribute", 4: "cache_config", 5: "memset", 6: "copy", 7: "symbol",
          8: "alloc", 9: "free", 10: "launch_attributes"}
_DIRECTIONS = {1: "h2d", 2: "d2h", 3: "d2d"}
_ERRORS = {-10: "too_much_data", -11: "over_workspace", -12: "unknown_address", -13: "unknown_symbol"}    # the harness's k*
_STREAMS = {0: "given", 1: "per_thread", 2: "other"}
_THREADS = {0: "caller", 1: "other", 2: "outside"}
MAX_RECORDED_BYTES = 4 << 20    # parameter and upload bytes of the calls that differ, in one recording (its frame's header
# is at most protocol.MAX_HEADER; hex doubles them)
LATE_WAIT_S = 0.02          # how long the recorder waits, after the last call, for launches of a thread left running
# (the corpus's latest comes 1 ms after the call; one later than this is never replayed, so its work is missing)


class _RecordedOp(ctypes.Structure):
    """recorder.cpp.j2's grader_record::Op."""

    _fields_ = [("kind", ctypes.c_int), ("stream", ctypes.c_int), ("thread", ctypes.c_int),
                ("attribute", ctypes.c_int), ("value", ctypes.c_int), ("error", ctypes.c_int),
                ("kernel", ctypes.c_char * 256), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_bytes", ctypes.c_uint64), ("arg_at", ctypes.c_uint64), ("arg_bytes", ctypes.c_uint64),
                ("dst", ctypes.c_uint64), ("src", ctypes.c_uint64), ("nbytes", ctypes.c_uint64),
                ("direction", ctypes.c_int), ("call", ctypes.c_char * 36),
                ("name_at", ctypes.c_uint64), ("name_bytes", ctypes.c_uint64)]


class _CallArrays:
    """One call's launcher arguments on one set of buffers (RecordingBackend._call_arrays), and the
    index of those buffers' addresses in the recording's views once known."""

    __slots__ = ("call", "views", "args", "views_at")

    def __init__(self, call: Call, views: dict, args: tuple):
        self.call, self.views, self.args, self.views_at = call, views, args, None


class RecordingBackend(CudaBackend):
    measures = False

    @classmethod
    def from_job(cls, job):
        if job.offline:
            return OfflineRecordingBackend(job.offline.kernel_params, api=job.backend.api)
        return cls(job.reference_library, api=job.backend.api)

    def __init__(self, reference_lib: str, *, api: Api | None = None):
        super().__init__(reference_lib, api=api)
        self._start_recording()

    def _start_recording(self) -> None:
        self._stand_ins = StandIns()
        self._settled = False          # a call from a thread of the launcher's own is recorded: refused whatever follows
        self.recording = Recording()
        self._ops_index: dict[tuple, int] = {}
        self._views_index: dict[tuple, int] = {}
        self._sizes = ctypes.c_longlong(), ctypes.c_longlong()
        self._held = (_RecordedOp * 16)(), ctypes.create_string_buffer(1 << 16)     # _take's buffers (_room)
        self._distinct_bytes, self._too_large = 0, False
        self._arrays_memo: dict[tuple[int, int], _CallArrays] = {}

    def load_submission(self, submission_lib: str) -> None:
        super().load_submission(submission_lib)
        lib = self.sub
        lib.grader_record_sizes.argtypes = [ctypes.POINTER(ctypes.c_longlong)] * 2
        lib.grader_record_sizes.restype = None
        lib.grader_record_take.argtypes = [ctypes.POINTER(_RecordedOp), ctypes.c_longlong, ctypes.c_void_p,
                                           ctypes.c_longlong]
        lib.grader_record_take.restype = ctypes.c_int
        if lib.grader_record_op_size() != ctypes.sizeof(_RecordedOp):
            raise RuntimeError("the harness's recorder and recorder.py disagree on the record's layout")
        self.recording.late.extend(self._decode(*self._take()))     # before any call: a static initialiser's

    # -- memory: stand-ins ----------------------------------------------------------
    def alloc(self, floats: int, name: str) -> Region:
        return Region(self._stand_ins.take(4 * floats), floats)

    def kept(self, floats: int) -> Region:
        return self.alloc(floats, "kept")

    def input(self, host_ptr: int, floats: int, shape: tuple[int, ...], name: str) -> Region:
        return Region(self.alloc(floats, name).ptr, floats, shape)

    def fill(self, region: Region, bits: int) -> None:
        pass

    def read(self, region: Region) -> bytes:
        return b""

    def read_into(self, region: Region, address: int) -> None:
        pass

    def checksums(self, regions: list[Region]) -> list[int]:
        return [0] * len(regions)

    def checksum_into(self, region: Region, slots: Region, index: int) -> None:
        pass

    def release_case(self) -> None:
        pass

    # -- what would run: nothing -----------------------------------------------------
    def synchronize(self) -> LaunchOutcome:
        return LaunchOutcome(True)

    def reference_call(self, call: Call, views: dict[str, Region]) -> LaunchOutcome:
        return LaunchOutcome(True)

    def copy(self, which: str, src: Region, dst: Region) -> LaunchOutcome:
        return LaunchOutcome(True)

    def reset_persisting_l2(self) -> None:
        pass

    def event(self) -> int:
        return 0

    def record(self, event: int) -> None:
        pass

    def elapsed_ms(self, start: int, end: int) -> float:
        return 0.0

    def baseline(self, expression: str):
        return lambda views: None

    def reset_launch_log(self) -> None:
        pass

    def launch_log(self) -> list:
        return []

    # -- the launcher, recorded -----------------------------------------------------
    def launch_submission(self, call: Call, views: dict[str, Region]) -> LaunchOutcome:
        if self._settled:
            # A thread of the launcher's own has launched or copied: the parent refuses the recording
            # whatever follows (replaying.py), so the launcher is not called again (a thread started
            # every call would otherwise pile up until the process limit aborts the recorder).
            return LaunchOutcome(True)
        arrays = self._call_arrays(call, views)
        outcome = self._outcome(self.sub.grader_submission_launch(*arrays.args))
        raw = self._take()
        ops_at = self._ops_index.get(raw)
        if ops_at is None and self._distinct_bytes + len(raw[1]) > MAX_RECORDED_BYTES:
            # a launcher whose calls all differ (new uploads every call): refused, the frame kept small
            if not self._too_large:
                self._too_large = True
                self.recording.late.append(RecordedOp(kind="copy", error="recording_too_large",
                                                      call="your launcher's calls"))
            ops_at = self._ops_index.setdefault(b"too large", len(self.recording.ops))
            if ops_at == len(self.recording.ops):
                self.recording.ops.append([])
        elif ops_at is None:                 # most calls repeat an earlier one byte for byte: decoded once
            self._distinct_bytes += len(raw[1])
            ops_at = self._ops_index[raw] = len(self.recording.ops)
            self.recording.ops.append(self._decode(*raw))
            self._settled = self._settled or any(refused_from_a_thread(op) for op in self.recording.ops[-1])
        error = 0 if outcome.ok else self._error_code(outcome)
        if arrays.views_at is None:
            given = {a.tensor: views[a.tensor].ptr for a in call.args if a.tensor}
            arrays.views_at = self._index(self._views_index, self.recording.views, tuple(sorted(given.items())), given)
        row = [ops_at, arrays.views_at, error]
        self.recording.calls.setdefault(call.key, []).append(row)
        if error:
            self.recording.errors[str(error)] = outcome.error
        return LaunchOutcome(True)

    def _call_arrays(self, call: Call, views: dict[str, Region]) -> "_CallArrays":
        """The launcher's ctypes arguments for call on views, built once for each call and views
        (the timing calls the launcher on the same few thousands of times). Kept with the two
        objects themselves, so that neither's identity can be taken by another."""
        key = (id(call), id(views))
        got = self._arrays_memo.get(key)
        if got is None or got.call is not call or got.views is not views:
            got = self._arrays_memo[key] = _CallArrays(call, views, self._launch_args(call, views))
        return got

    def finish(self) -> Recording:
        """The recording, with what a thread left running launched in the moments after the last call."""
        time.sleep(LATE_WAIT_S)
        self.recording.late.extend(self._decode(*self._take()))
        return self.recording

    def _error_code(self, outcome: LaunchOutcome) -> int:
        return self.api.code_in(outcome.error) if self.api is not None else -1

    @staticmethod
    def _index(index: dict, items: list, key: tuple, value) -> int:
        at = index.get(key)
        if at is None:
            at = index[key] = len(items)
            items.append(value)
        return at

    def _take(self) -> tuple[bytes, bytes]:
        """What the harness recorded since the last take, as raw bytes: its ops, their arguments."""
        n, nbytes = self._sizes
        for _ in range(8):                  # more may arrive between the two calls (a thread): ask again
            self.sub.grader_record_sizes(ctypes.byref(n), ctypes.byref(nbytes))
            ops, args = self._room(n.value + 8, nbytes.value + 4096)
            got = self.sub.grader_record_take(ops, n.value + 8, args, nbytes.value + 4096)
            if got == -2:                   # more than the harness holds: what it holds, and a refusal
                self.recording.late.append(RecordedOp(error="more launches in one call than the grader records"))
                got = n.value
            if got >= 0:
                break
        else:
            raise RuntimeError("the launcher's threads keep launching: the recording cannot be read")
        size = ctypes.sizeof(_RecordedOp)
        used = max((max(o.arg_at + o.arg_bytes, o.name_at + o.name_bytes) for o in ops[:got]), default=0)
        return ctypes.string_at(ops, size * got), ctypes.string_at(args, used)

    def _room(self, ops: int, arg_bytes: int):
        """Buffers for at least this many ops and argument bytes: the last ones when they are
        large enough (most calls record one launch), else larger ones, kept for the next take."""
        held_ops, held_args = self._held
        if len(held_ops) < ops or len(held_args) < arg_bytes:
            held_ops = (_RecordedOp * max(ops, 2 * len(held_ops)))()
            held_args = ctypes.create_string_buffer(max(arg_bytes, 2 * len(held_args)))
            self._held = held_ops, held_args
        return held_ops, held_args

    def _decode(self, raw_ops: bytes, raw: bytes) -> list[RecordedOp]:
        size = ctypes.sizeof(_RecordedOp)
        out = []
        for at in range(0, len(raw_ops), size):
            o = _RecordedOp.from_buffer_copy(raw_ops, at)
            out.append(RecordedOp(
                kind=_KINDS.get(o.kind, "launch"),
                kernel=(raw[o.name_at: o.name_at + o.name_bytes] if o.name_bytes else o.kernel).decode(errors="replace"),
                grid=list(o.grid),
                block=list(o.block), shared_bytes=o.shared_bytes, stream=_STREAMS.get(o.stream, "other"),
                thread=_THREADS.get(o.thread, "other"), attribute=o.attribute, value=o.value,
                args=raw[o.arg_at: o.arg_at + o.arg_bytes].hex(),
                error=_ERRORS.get(o.error, self._code_text(o.error)) if o.error else "",
                dst=o.dst, src=o.src, nbytes=o.nbytes, direction=_DIRECTIONS.get(o.direction, ""),
                call=o.call.decode(errors="replace")))
        return out



class OfflineRecordingBackend(RecordingBackend):
    """The recorder without a GPU: nothing in this process opens the device (no reference library,
    no runtime, no context; the wall's OFFLINE mode traps any driver call), so it may run beside
    another student's timing. The submission's library is told to answer from what it registered
    and from each kernel's parameter layout (kernel_params, read by the parent from the device
    code); a launcher that asks for more ends it with NEEDS_GPU_EXIT."""

    def __init__(self, kernel_params: dict[str, list[list[int]]], *, api: Api | None = None):
        self.api = api
        self.ref = None
        self.sub = None
        self._layout = None
        self._kernel_params = kernel_params
        self._start_recording()

    def memory(self) -> tuple[None, None]:
        return None, None

    def set_device_heap(self, nbytes: int) -> int:
        return 0                                    # no kernel runs here

    def device(self) -> dict:
        return {"name": "", "capability": "", "sms": 0, "l2_bytes": 0, "memory_bytes": 0, "cuda_runtime": ""}

    def _error_text(self, code: int, reference: bool) -> str:
        return f"error {code}"

    def load_submission(self, submission_lib: str) -> None:
        super().load_submission(submission_lib)
        lib = self.sub
        lib.grader_record_layout.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint),
                                             ctypes.POINTER(ctypes.c_uint)]
        lib.grader_record_layout.restype = ctypes.c_int
        for name, params in self._kernel_params.items():
            offsets = (ctypes.c_uint * max(len(params), 1))(*[o for o, _ in params])
            sizes = (ctypes.c_uint * max(len(params), 1))(*[n for _, n in params])
            lib.grader_record_layout(name.encode(), len(params), offsets, sizes)
        lib.grader_record_go_offline()
