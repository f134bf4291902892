"""The child's CUDA GPU (CudaBackend): the reference library's runtime helpers
(grader/run/child/runtime.cu) drive the device, its memory and its events. The recorder
(recorder.py) and the measuring process (measurer.py) are CudaBackends too.

Imports only core/ and run/ (the ChildBackend every child backend is, backends.py).
"""

from __future__ import annotations

import ctypes
import random

from grader.core.backend import Api, Backend
from grader.run.child.backends import ChildBackend, LaunchOutcome, Region


class _DeviceInfo(ctypes.Structure):
    """runtime.cu's GraderDeviceInfo."""

    _fields_ = [("name", ctypes.c_char * 256), ("major", ctypes.c_int), ("minor", ctypes.c_int), ("sms", ctypes.c_int),
                ("runtime_version", ctypes.c_int), ("driver_version", ctypes.c_int), ("l2_bytes", ctypes.c_size_t),
                ("memory_bytes", ctypes.c_size_t)]


class CudaBackend(ChildBackend):
    repeats_checks = True      # a GPU's blocks run in an order of their own: a second run in the same order

    @classmethod
    def from_job(cls, job):
        if job.library:
            raise ValueError("a GPU job with a submission is recorded, then replayed (role record, then replay): "
                             "its library's launches record and never run")
        return cls(job.reference_library, api=job.backend.api)

    @classmethod
    def open_context(cls, backend: Backend) -> None:
        """The device's primary context, created now rather than at the first check: the reference
        library's runtime (and torch, where loaded) use this same context. The driver starts its own
        threads here (one runs host callbacks): a process that runs submission host code makes it
        behind its wall."""
        driver = ctypes.CDLL(backend.driver_library)
        ctx, dev = ctypes.c_void_p(), ctypes.c_int()
        if driver.cuInit(0) == 0 and driver.cuDeviceGet(ctypes.byref(dev), 0) == 0:
            driver.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)

    def __init__(self, reference_lib: str, layout_seed: int = 0, *, api: Api | None = None):
        """layout_seed: where this run's buffers lie. Not 0: a random amount of device memory is
        held first, and every buffer starts a random multiple of 256 bytes into its allocation, so
        that a kernel cannot find a buffer of an earlier run (or a stash of its own) where it was."""
        super().__init__(reference_lib, api=api)
        rt = self.ref
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for fn, args in (("init", []), ("malloc", [ctypes.POINTER(vp), sz]), ("free", [vp]),
                         ("copy_in", [vp, vp, sz]), ("copy_out", [vp, vp, sz]),
                         ("fill32", [vp, ctypes.c_uint, sz]), ("synchronize", []), ("last_error", []),
                         ("event_create", [ctypes.POINTER(vp)]), ("event_record", [vp]),
                         ("event_elapsed", [vp, vp, ctypes.POINTER(ctypes.c_float)]),
                         ("memory", [ctypes.POINTER(sz), ctypes.POINTER(sz)]),
                         ("device_info", [ctypes.POINTER(_DeviceInfo)])):
            f = getattr(rt, f"grader_rt_{fn}")
            f.argtypes, f.restype = args, ctypes.c_int
        rt.grader_rt_error_string.argtypes, rt.grader_rt_error_string.restype = [ctypes.c_int], ctypes.c_char_p
        rt.grader_rt_checksum32.argtypes, rt.grader_rt_checksum32.restype = [vp, sz, vp], ctypes.c_int
        rt.grader_rt_poison_heap.argtypes = [vp, ctypes.c_uint, ctypes.POINTER(ctypes.c_ulonglong)]
        rt.grader_rt_poison_heap.restype = ctypes.c_int
        rt.grader_rt_heap_scratch_bytes.argtypes, rt.grader_rt_heap_scratch_bytes.restype = [], sz
        rt.grader_rt_hold.argtypes, rt.grader_rt_hold.restype = [ctypes.c_ulonglong], ctypes.c_int
        rt.grader_rt_release.argtypes, rt.grader_rt_release.restype = [], ctypes.c_int
        self._call("init")
        self._allocated: list[int] = []
        self._slots: Region | None = None
        self._layout = random.Random(layout_seed) if layout_seed else None
        if self._layout is not None:
            held = ctypes.c_void_p()
            self._call("malloc", ctypes.byref(held), (1 + self._layout.randrange(32)) << 21)

    def poison_heap(self, scratch: Region, bits: int) -> int:
        """The device heap's free memory set to bits (runtime.cu's heapTake/Fill/Give, through
        scratch: heap_scratch_floats() floats); the bytes it could take. Synchronises."""
        taken = ctypes.c_ulonglong()
        self._call("poison_heap", scratch.ptr, bits & 0xFFFFFFFF, ctypes.byref(taken))
        return taken.value

    def heap_scratch_floats(self) -> int:
        return -(-self.ref.grader_rt_heap_scratch_bytes() // 4)

    def _call(self, fn: str, *args) -> None:
        code = getattr(self.ref, f"grader_rt_{fn}")(*args)
        if code:
            raise RuntimeError(f"CUDA {fn} failed: {self.error_string(code)} {self._coded(code)}")

    def error_string(self, code: int) -> str:
        return self.ref.grader_rt_error_string(code).decode(errors="replace")

    def alloc(self, floats: int, name: str) -> Region:
        shift = 256 * self._layout.randrange(16) if self._layout is not None else 0
        p = ctypes.c_void_p()
        self._call("malloc", ctypes.byref(p), max(4 * floats, 4) + shift)
        self._allocated.append(p.value)
        return Region((p.value or 0) + shift, floats)

    def chooser(self) -> random.Random | None:
        return random.Random(self._layout.getrandbits(64)) if self._layout is not None else None

    def checksums(self, regions: list[Region]) -> list[int]:
        """Each region's checksum, taken on the GPU (runtime.cu's checksum32)."""
        if not regions:
            return []
        if self._slots is None or self._slots.floats < 2 * len(regions):
            self._slots = self.kept(max(2 * len(regions), 512))
        for i, r in enumerate(regions):
            self.checksum_into(r, self._slots, i)
        out = (ctypes.c_uint64 * len(regions))()
        self._call("copy_out", out, self._slots.ptr, 8 * len(regions))
        return list(out)

    def kept(self, floats: int) -> Region:
        """Device memory of the grader's own that outlives the case (release_case leaves it)."""
        p = ctypes.c_void_p()
        self._call("malloc", ctypes.byref(p), max(4 * floats, 4))
        return Region(p.value or 0, floats)

    def checksum_into(self, region: Region, slots: Region, index: int) -> None:
        """region's checksum into the index-th 64-bit word of slots, asynchronously."""
        self._call("checksum32", region.ptr, region.floats, slots.ptr + 8 * index)

    def input(self, host_ptr: int, floats: int, shape: tuple[int, ...], name: str) -> Region:
        region = Region(self.alloc(floats, name).ptr, floats, shape)
        if floats:
            self._call("copy_in", region.ptr, host_ptr, 4 * floats)
        return region

    def fill(self, region: Region, bits: int) -> None:
        self._call("fill32", region.ptr, bits & 0xFFFFFFFF, region.floats)

    def read(self, region: Region) -> bytes:
        host = ctypes.create_string_buffer(region.nbytes)
        if region.floats:
            self._call("copy_out", host, region.ptr, region.nbytes)
        return host.raw

    def read_into(self, region: Region, address: int) -> None:
        if region.floats:
            self._call("copy_out", address, region.ptr, region.nbytes)

    def pin_host(self, address: int, nbytes: int) -> bool:
        register = getattr(self.ref, "grader_rt_host_register", None)
        if register is None or nbytes <= 0:
            return False
        register.argtypes, register.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int
        return register(address, nbytes) == 0

    def release_case(self) -> None:
        for ptr in self._allocated:
            self.ref.grader_rt_free(ptr)
        self._allocated.clear()

    def synchronize(self) -> LaunchOutcome:
        code = self.ref.grader_rt_synchronize()
        if code:                              # an illegal address or a trap: the context is gone
            return LaunchOutcome(False, error=f"CUDA error: {self.error_string(code)}", fatal=True)
        return LaunchOutcome(True)

    def _error_text(self, code: int, reference: bool) -> str:
        return self.error_string(code) if code > 0 else f"error {code}"

    # -- timing -------------------------------------------------------------
    # A hold outlasting this ends by itself (the host may block on a full launch queue before it
    # releases, and must never wait on the hold): a batch of rounds enqueues in a few milliseconds.
    HOLD_TIMEOUT_NS = 50_000_000

    def hold(self) -> bool:
        # A hold that could not start (its mapped flag not allocated, say) is no fault of the
        # submission's: the error is cleared and the rounds run unheld, as before holds.
        if self.ref.grader_rt_hold(self.HOLD_TIMEOUT_NS):
            self.ref.grader_rt_last_error()
            return False
        return True

    def release(self) -> int:
        return self.ref.grader_rt_release()

    def event(self) -> int:
        e = ctypes.c_void_p()
        self._call("event_create", ctypes.byref(e))
        return e.value

    def record(self, event: int) -> None:
        """Record event on the legacy default stream, which waits for work on every blocking stream."""
        self._call("event_record", event)

    def elapsed_ms(self, start: int, end: int) -> float:
        ms = ctypes.c_float()
        self._call("event_elapsed", start, end, ctypes.byref(ms))
        return ms.value

    def memory(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._call("memory", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def device(self) -> dict:
        """What the timing records of the GPU it ran on."""
        info = _DeviceInfo()
        self._call("device_info", ctypes.byref(info))
        rt = info.runtime_version
        return {"name": info.name.decode(errors="replace"), "capability": f"{info.major}.{info.minor}",
                "sms": info.sms, "l2_bytes": info.l2_bytes, "memory_bytes": info.memory_bytes,
                "cuda_runtime": f"{rt // 1000}.{rt % 1000 // 10}"}
