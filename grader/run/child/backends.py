"""Where the kernels run: a CUDA GPU (CudaBackend, cuda.py), or the CPU emulator (emulator.py);
here, what both share (ChildBackend, Region, the launch log's and a fault's C structures).

Only the child process (worker.py) uses this module: it loads the
submission's library. Both backends give the same interface, so the
correctness code path is shared: allocate a padded output, copy inputs in,
launch the submission or a reference kernel, read the output back.

Nothing here imports torch (or numpy): memory is a Region, an address and a
size; the GPU is driven through the reference library's runtime helpers
(grader/run/child/runtime.cu), the emulator's memory is mapped pages.
"""

from __future__ import annotations

import ctypes
import functools
import random
import zlib
from dataclasses import dataclass

from grader.core.backend import Api, Backend
from grader.core.contract import GUARD_BITS, POISON_BITS, Call, Fault, LaunchRecord
from grader.run.child.baseline import torch_baseline


@dataclass
class LaunchOutcome:
    ok: bool
    error: str = ""
    fault: Fault | None = None     # the emulator: where it caught a fault
    fatal: bool = False            # the device or process cannot go on (a sticky CUDA error)


@dataclass(frozen=True)
class Region:
    """float32 memory a kernel sees: its address (on the device, or the host for the emulator),
    its length in floats and the shape it has for the exercise."""

    ptr: int
    floats: int
    shape: tuple[int, ...] = ()

    @property
    def nbytes(self) -> int:
        return 4 * self.floats

    def part(self, first: int, floats: int, shape: tuple[int, ...] = ()) -> "Region":
        return Region(self.ptr + 4 * first, floats, shape)


class _FaultInfo(ctypes.Structure):
    _fields_ = [("signal", ctypes.c_int), ("is_write", ctypes.c_int), ("address", ctypes.c_size_t),
                ("pc_offset", ctypes.c_size_t), ("message", ctypes.c_char * 256), ("in_kernel", ctypes.c_int),
                ("block", ctypes.c_uint * 3), ("thread", ctypes.c_uint * 3), ("block_dim", ctypes.c_uint * 3),
                ("grid_dim", ctypes.c_uint * 3), ("block_seq", ctypes.c_ulonglong)]


class _LaunchRecord(ctypes.Structure):
    """One entry of the submission library's launch log (the harness's Record, the shim's LaunchRecord)."""

    _fields_ = [("kernel", ctypes.c_char * 256), ("offset", ctypes.c_uint64), ("grid", ctypes.c_uint * 3),
                ("block", ctypes.c_uint * 3), ("shared_bytes", ctypes.c_uint64), ("launches", ctypes.c_int64),
                ("blocks_per_sm", ctypes.c_int)]


LAUNCH_LOG_SIZE = 32


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library, with the calls the child makes itself declared (mmap, mprotect): errno kept."""
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mmap.restype = ctypes.c_void_p
    lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    lib.mprotect.restype = ctypes.c_int
    lib.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return lib


def _declare(lib: ctypes.CDLL, reference: bool) -> None:
    vp, fp, sz, i = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    if reference:
        for name in ("grader_ref_copy_scalar", "grader_ref_copy_vec4", "grader_ref_memcpy"):
            getattr(lib, name).argtypes = [fp, fp, sz, vp]
            getattr(lib, name).restype = i
        lib.grader_ref_reset_persisting_l2.argtypes = []
        lib.grader_ref_reset_persisting_l2.restype = i
        lib.grader_ref_set_heap_limit.argtypes = [sz]
        lib.grader_ref_set_heap_limit.restype = i
    else:
        lib.grader_submission_launch.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong),
                                                 ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint), vp]
        lib.grader_submission_launch.restype = i
        lib.grader_error_string.argtypes = [i]
        lib.grader_error_string.restype = ctypes.c_char_p
        if hasattr(lib, "grader_launch_log"):         # the emulator's (the GPU's recorder keeps none)
            lib.grader_launch_log.argtypes = [ctypes.POINTER(_LaunchRecord), i]
            lib.grader_launch_log.restype = i
            lib.grader_launch_log_reset.argtypes = []
            lib.grader_launch_log_reset.restype = None


def count_differences(a: bytes, b: bytes) -> int:
    """How many 32-bit words differ between two equal-length buffers (bit for bit)."""
    if a == b:
        return 0
    step = 4096
    count = 0
    for at in range(0, len(a), step):
        x, y = a[at: at + step], b[at: at + step]
        if x != y:
            count += sum(1 for p, q in zip(memoryview(x).cast("I"), memoryview(y).cast("I"), strict=True) if p != q)
    return count


class ChildBackend:
    """What the child drives (core/backend.py's Backend.child names the class for each role): the
    grader's reference kernels are loaded at once; the submission's library only by
    load_submission(), which the worker calls once the guard is in place."""

    measures = True            # False for the recorder, whose buffers are stand-ins and whose kernels never run
    repeats_checks = False     # a check's second run repeats it in the same order (else: in reverse block order)
    api: Api | None = None     # the runtime the kernels' code speaks (the job's Backend.api, given to __init__)

    @classmethod
    def from_job(cls, job):
        """The instance for the job (core/contract.py's Job): what it is built from."""
        return cls(job.reference_library, api=job.backend.api)

    @classmethod
    def open_context(cls, backend: Backend) -> None:
        """The device's context, made before the job arrives (worker.preload) where the backend has
        a device; nothing here."""

    def memory(self) -> tuple[int | None, int | None]:
        """The device memory free and in all (None where there is no device)."""
        return None, None

    def launch_threads(self) -> int | None:
        """The OS threads an emulated launch runs on (None where the kernels run on a device)."""
        return None

    def __init__(self, reference_lib: str, *, api: Api | None = None):
        """api: the runtime the kernels' code speaks (the job's Backend.api): the words of its errors."""
        self.api = api
        self.ref = ctypes.CDLL(reference_lib, mode=ctypes.RTLD_LOCAL)
        _declare(self.ref, reference=True)
        self.sub: ctypes.CDLL | None = None

    def load_submission(self, submission_lib: str) -> None:
        """Load the student's library: its static initialisers run now, inside the wall."""
        self.sub = ctypes.CDLL(submission_lib, mode=ctypes.RTLD_LOCAL)
        _declare(self.sub, reference=False)

    # -- memory -------------------------------------------------------------
    def input(self, host_ptr: int, floats: int, shape: tuple[int, ...], name: str) -> Region:
        """A copy of floats float32s at host_ptr, where the kernels can read them."""
        raise NotImplementedError

    def alloc(self, floats: int, name: str) -> Region:
        raise NotImplementedError

    def hold(self) -> bool:
        """Hold the device's stream: what is enqueued until release() starts when it is released;
        False where it is not held (nothing to hold where the kernels run in the caller)."""
        return False

    def release(self) -> int:
        """Release the held stream; how many holds so far ended by their timeout instead."""
        return 0

    def fill(self, region: Region, bits: int) -> None:
        """Every 32-bit word of region set to bits."""
        raise NotImplementedError

    def read(self, region: Region) -> bytes:
        """region's bytes, on the host (what the child sends back)."""
        raise NotImplementedError

    def read_into(self, region: Region, address: int) -> None:
        """region's bytes copied to host memory at address."""
        raise NotImplementedError

    def pin_host(self, address: int, nbytes: int) -> bool:
        """Make nbytes of host memory at address quicker to read_into (page-locked, on a GPU);
        whether it was. Nothing else changes: unpinned memory is read into all the same."""
        return False

    def output(self, n: int, pad: int, name: str, init: str = "poison",
               shape: tuple[int, ...] = ()) -> tuple[Region, Region]:
        """(full, view): full = [pad guard][n poisoned or zeroed][pad guard]."""
        full = self.alloc(n + 2 * pad, name)
        view = full.part(pad, n, shape)
        self.fill(full.part(0, pad), GUARD_BITS)
        self.fill(full.part(pad + n, pad), GUARD_BITS)
        self.reinit(view, init)
        return full, view

    def reinit(self, view: Region, init: str) -> None:
        """An output back to how it starts, before a launch."""
        self.fill(view, POISON_BITS if init == "poison" else 0)

    def checksums(self, regions: list[Region]) -> list[int]:
        """A checksum of each region's words (the emulator: their bytes hashed on the host, in place:
        a copy of the timed shape's 64 MB input took twice as long as its checksum)."""
        return [zlib.crc32((ctypes.c_char * r.nbytes).from_address(r.ptr)) if r.nbytes else 0 for r in regions]

    def chooser(self) -> random.Random | None:
        """Where the measurement draws what a submission must not predict (which timed rounds are
        checked); None where nothing is measured."""
        return None

    def baseline(self, expression: str):
        """The rubric's PyTorch baseline as a function of a case's views (timing._baseline)."""
        return torch_baseline(expression)

    def set_reverse(self, reverse: bool) -> None:
        """Run blocks and threads in reverse order (only the CPU emulator can)."""
        if reverse:
            raise NotImplementedError(f"the {self.name} backend cannot reverse the order of blocks")

    def release_case(self) -> None:
        """Free (or forget) the buffers of a finished case."""

    def synchronize(self) -> LaunchOutcome:
        return LaunchOutcome(True)

    # -- launches -------------------------------------------------------------
    @staticmethod
    def _arrays(call: Call, views: dict[str, Region]):
        n = max(len(call.args), 1)
        ptrs = (ctypes.c_void_p * n)(*[views[a.tensor].ptr if a.tensor else None for a in call.args])
        vals = (ctypes.c_longlong * n)(*[0 if a.tensor else a.value for a in call.args])
        return ptrs, vals

    def prepare_call(self, again: bool = False) -> None:
        """Before every call of the submission, outside any timed events: the measuring process
        poisons the launcher's workspace here (measurer.py); nothing to do elsewhere. again: the
        check's second run of the same call, which sees what the first left in the file's variables."""

    def heap_kept_bytes(self) -> int:
        """The most device-heap memory a call kept for the next (malloc'd, never freed), where the
        measuring process counts it (measurer.py); 0 elsewhere."""
        return 0

    def launch_submission(self, call: Call, views: dict[str, Region]) -> LaunchOutcome:
        """The submission's launch: its launcher, or the kernel with the call's grid and block."""
        return self._outcome(self.sub.grader_submission_launch(*self._launch_args(call, views)))

    def _launch_args(self, call: Call, views: dict[str, Region]) -> tuple:
        """grader_submission_launch's arguments for call on views."""
        ptrs, vals = self._arrays(call, views)
        return ptrs, vals, (ctypes.c_uint * 3)(*call.grid), (ctypes.c_uint * 3)(*call.block), None

    def reference_call(self, call: Call, views: dict[str, Region]) -> LaunchOutcome:
        """One of the exercise's reference kernels (grader_ref_<kernel>(ptrs, vals, stream))."""
        fn = getattr(self.ref, f"grader_ref_{call.kernel}")
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong), ctypes.c_void_p]
        fn.restype = ctypes.c_int
        ptrs, vals = self._arrays(call, views)
        return self._outcome(fn(ptrs, vals, None), reference=True)

    def reset_launch_log(self) -> None:
        self.sub.grader_launch_log_reset()

    def launch_log(self) -> list[LaunchRecord]:
        """The kernel launches since the last reset, one entry per kernel and configuration:
        what the parent turns into results.Launch (it names a kernel known only by its offset)."""
        records = (_LaunchRecord * LAUNCH_LOG_SIZE)()
        n = self.sub.grader_launch_log(records, LAUNCH_LOG_SIZE)
        return [LaunchRecord(r.kernel.decode(errors="replace"), r.offset, list(r.grid), list(r.block), r.shared_bytes,
                             r.launches, r.blocks_per_sm if r.blocks_per_sm >= 0 else None)
                for r in records[: max(0, min(n, LAUNCH_LOG_SIZE))]]

    def copy(self, which: str, src: Region, dst: Region) -> LaunchOutcome:
        """One of the grader's copies (grader_ref_copy_scalar, _vec4, _memcpy) of src to dst."""
        code = getattr(self.ref, f"grader_ref_{which}")(src.ptr, dst.ptr, min(src.floats, dst.floats), None)
        return self._outcome(code, reference=True)

    def set_device_heap(self, nbytes: int) -> int:
        """Cap the heap in-kernel malloc draws from; the runtime's error code (0 on success)."""
        return self.ref.grader_ref_set_heap_limit(nbytes)

    def reset_persisting_l2(self) -> None:
        code = self.ref.grader_ref_reset_persisting_l2()
        if code:
            raise RuntimeError(f"resetting the persisting L2 lines failed {self._coded(code)}")

    def _error_text(self, code: int, reference: bool) -> str:
        lib = self.sub if not reference else None
        return lib.grader_error_string(code).decode() if lib is not None and code > 0 else f"error {code}"

    def _outcome(self, code: int, reference: bool = False) -> LaunchOutcome:
        if code == 0:
            return LaunchOutcome(True)
        return LaunchOutcome(False, error=f"launch failed: {self._error_text(code, reference)} {self._coded(code)}")

    def _code_text(self, code: int) -> str:
        """An error code as a message names it: "cudaError 9" (the api's words; "error 9" without one)."""
        return self.api.code_text(code) if self.api is not None else f"error {code}"

    def _coded(self, code: int) -> str:
        """An error code as a message ends with it: "(cudaError 9)"."""
        return f"({self._code_text(code)})"
