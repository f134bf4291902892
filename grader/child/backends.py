"""Where the kernels run: a CUDA GPU, or the CPU emulator.

Only the child process (worker.py) uses this module: it loads the
submission's library. Both backends give the same interface, so the
correctness code path is shared: allocate a padded output, copy inputs in,
launch the submission or a reference kernel, read the output back.
"""

from __future__ import annotations

import ctypes
import mmap
from dataclasses import dataclass

import torch

from grader.checking import GUARD_BITS, POISON_BITS
from grader.contract import Call, Fault, LaunchRecord


@dataclass
class LaunchOutcome:
    ok: bool
    error: str = ""
    fault: Fault | None = None     # the emulator: where it caught a fault
    fatal: bool = False            # the device or process cannot go on (a sticky CUDA error)


def tensor_bytes(t: torch.Tensor) -> bytes:
    """A tensor's raw bytes, wherever it lives (no numpy needed): what the child sends back."""
    cpu = t.detach().to("cpu").contiguous()
    return ctypes.string_at(cpu.data_ptr(), cpu.numel() * cpu.element_size())


class _FaultInfo(ctypes.Structure):
    _fields_ = [("signal", ctypes.c_int), ("is_write", ctypes.c_int), ("address", ctypes.c_size_t),
                ("pc_offset", ctypes.c_size_t), ("message", ctypes.c_char * 256)]


class _LaunchRecord(ctypes.Structure):
    """One entry of the submission library's launch log (the harness's Record, the shim's LaunchRecord)."""

    _fields_ = [("kernel", ctypes.c_char * 256), ("offset", ctypes.c_uint64), ("grid", ctypes.c_uint * 3),
                ("block", ctypes.c_uint * 3), ("shared_bytes", ctypes.c_uint64), ("launches", ctypes.c_int64),
                ("blocks_per_sm", ctypes.c_int)]


LAUNCH_LOG_SIZE = 32


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
        lib.grader_launch_log.argtypes = [ctypes.POINTER(_LaunchRecord), i]
        lib.grader_launch_log.restype = i
        lib.grader_launch_log_reset.argtypes = []
        lib.grader_launch_log_reset.restype = None


class Backend:
    """The grader's reference kernels are loaded at once; the submission's library only by
    load_submission(), which the worker calls once the guard is in place."""

    name = "base"

    def __init__(self, reference_lib: str):
        self.ref = ctypes.CDLL(reference_lib, mode=ctypes.RTLD_LOCAL)
        _declare(self.ref, reference=True)
        self.sub: ctypes.CDLL | None = None

    def load_submission(self, submission_lib: str) -> None:
        """Load the student's library: its static initialisers run now, inside the wall."""
        self.sub = ctypes.CDLL(submission_lib, mode=ctypes.RTLD_LOCAL)
        _declare(self.sub, reference=False)

    # -- memory -------------------------------------------------------------
    def input(self, t: torch.Tensor, name: str) -> torch.Tensor:
        raise NotImplementedError

    def output(self, n: int, pad: int, name: str, init: str = "poison") -> tuple[torch.Tensor, torch.Tensor]:
        """(full, view): full = [pad guard][n poisoned or zeroed][pad guard]."""
        raise NotImplementedError

    def stream(self) -> int | None:
        return None

    def set_reverse(self, reverse: bool) -> None:
        """Run blocks and threads in reverse order (only the CPU emulator can)."""
        if reverse:
            raise NotImplementedError(f"the {self.name} backend cannot reverse the order of blocks")

    def release_inputs(self) -> None:
        """Forget the buffers of a finished case."""

    def synchronize(self) -> LaunchOutcome:
        return LaunchOutcome(True)

    @staticmethod
    def fill_guard(full: torch.Tensor, pad: int, n: int, init: str = "poison") -> None:
        raw = full.view(torch.int32)
        raw[:pad] = GUARD_BITS
        raw[pad + n :] = GUARD_BITS
        raw[pad : pad + n] = POISON_BITS if init == "poison" else 0

    @staticmethod
    def reinit(view: torch.Tensor, init: str) -> None:
        """An output back to how it starts, before a timed launch."""
        view.view(torch.int32).fill_(POISON_BITS if init == "poison" else 0)

    # -- launches -------------------------------------------------------------
    @staticmethod
    def _arrays(call: Call, views: dict[str, torch.Tensor]):
        n = max(len(call.args), 1)
        ptrs = (ctypes.c_void_p * n)(*[views[a.tensor].data_ptr() if a.tensor else None for a in call.args])
        vals = (ctypes.c_longlong * n)(*[0 if a.tensor else a.value for a in call.args])
        return ptrs, vals

    def launch_submission(self, call: Call, views: dict[str, torch.Tensor]) -> LaunchOutcome:
        """The submission's launch: its launcher, or the kernel with the call's grid and block."""
        ptrs, vals = self._arrays(call, views)
        code = self.sub.grader_submission_launch(ptrs, vals, (ctypes.c_uint * 3)(*call.grid),
                                                 (ctypes.c_uint * 3)(*call.block), self.stream())
        return self._outcome(code)

    def reference_call(self, call: Call, views: dict[str, torch.Tensor]) -> LaunchOutcome:
        """One of the exercise's reference kernels (grader_ref_<kernel>(ptrs, vals, stream))."""
        fn = getattr(self.ref, f"grader_ref_{call.kernel}")
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong), ctypes.c_void_p]
        fn.restype = ctypes.c_int
        ptrs, vals = self._arrays(call, views)
        return self._outcome(fn(ptrs, vals, self.stream()), reference=True)

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

    def reference(self, which: str, *tensors: torch.Tensor, n: int) -> LaunchOutcome:
        fn = getattr(self.ref, f"grader_ref_{which}")
        code = fn(*[t.data_ptr() for t in tensors], n, self.stream())
        return self._outcome(code, reference=True)

    def set_device_heap(self, nbytes: int) -> int:
        """Cap the heap in-kernel malloc draws from; the cudaError_t (0 on success)."""
        return self.ref.grader_ref_set_heap_limit(nbytes)

    def reset_persisting_l2(self) -> None:
        code = self.ref.grader_ref_reset_persisting_l2()
        if code:
            raise RuntimeError(f"cudaCtxResetPersistingL2Cache failed (cudaError {code})")

    def _outcome(self, code: int, reference: bool = False) -> LaunchOutcome:
        if code == 0:
            return LaunchOutcome(True)
        lib = self.sub if not reference else None
        text = lib.grader_error_string(code).decode() if lib is not None and code > 0 else f"error {code}"
        return LaunchOutcome(False, error=f"launch failed: {text} (cudaError {code})")


class CudaBackend(Backend):
    name = "cuda"

    def __init__(self, reference_lib: str):
        torch.cuda.init()
        super().__init__(reference_lib)
        self.device = torch.device("cuda", torch.cuda.current_device())

    def input(self, t: torch.Tensor, name: str) -> torch.Tensor:
        return t.to(self.device).contiguous()

    def output(self, n: int, pad: int, name: str, init: str = "poison") -> tuple[torch.Tensor, torch.Tensor]:
        full = torch.empty(n + 2 * pad, dtype=torch.float32, device=self.device)
        self.fill_guard(full, pad, n, init)
        return full, full[pad : pad + n]

    def stream(self) -> int:
        return torch.cuda.current_stream().cuda_stream

    def synchronize(self) -> LaunchOutcome:
        try:
            torch.cuda.synchronize()
        except RuntimeError as exc:           # an illegal address or a trap: the context is gone
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            return LaunchOutcome(False, error=first, fatal=True)
        return LaunchOutcome(True)


class EmulatorBackend(Backend):
    """Host buffers, each input ending at an inaccessible page so that a read past it faults."""

    name = "emulator"
    PAGE = mmap.PAGESIZE

    def __init__(self, reference_lib: str):
        super().__init__(reference_lib)
        self._libc = ctypes.CDLL(None)
        self._keep: list = []
        self.regions: list[tuple[str, int, int, int, int]] = []    # name, alloc start, data start, data end, alloc end

    def _guarded(self, nbytes: int, before: int, name: str) -> tuple[memoryview, int]:
        """Memory whose data (nbytes, 256-byte aligned) has `before` bytes ahead and ends near a guard page."""
        page = self.PAGE
        body = -(-(before + nbytes + 256) // page) * page
        mm = mmap.mmap(-1, body + 2 * page)
        base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        self._libc.mprotect(ctypes.c_void_p(base), page, 0)
        self._libc.mprotect(ctypes.c_void_p(base + page + body), page, 0)
        usable_end = base + page + body
        start = (usable_end - nbytes) & ~255
        if start - before < base + page:
            start = base + page + before
        self._keep.append(mm)
        self.regions.append((name, base, start, start + nbytes, base + body + 2 * page))
        return memoryview(mm), start - base

    def input(self, t: torch.Tensor, name: str) -> torch.Tensor:
        t = t.contiguous()
        nbytes = t.numel() * 4
        mv, offset = self._guarded(nbytes, 0, name)
        slack_end = (len(mv) - self.PAGE) - offset
        view = torch.frombuffer(mv, dtype=torch.float32, offset=offset, count=slack_end // 4)
        view.fill_(float("nan"))                      # the slack before the guard page reads as NaN
        view[: t.numel()].copy_(t.flatten())
        return view[: t.numel()].view(t.shape)

    def output(self, n: int, pad: int, name: str, init: str = "poison") -> tuple[torch.Tensor, torch.Tensor]:
        nbytes = (n + 2 * pad) * 4
        mv, offset = self._guarded(nbytes, 0, name)
        full = torch.frombuffer(mv, dtype=torch.float32, offset=offset, count=n + 2 * pad)
        # the region list records the output's own extent, not its guards
        name_, base, start, _, end = self.regions[-1]
        self.regions[-1] = (name_, base, start + pad * 4, start + (pad + n) * 4, end)
        self.fill_guard(full, pad, n, init)
        return full, full[pad : pad + n]

    heap_bytes = 8 << 20

    def set_device_heap(self, nbytes: int) -> int:
        self.heap_bytes = nbytes                # the heap lives in the submission's library (the shim)
        return 0

    def load_submission(self, submission_lib: str) -> None:
        super().load_submission(submission_lib)
        self.sub.grader_emu_set_reverse.argtypes = [ctypes.c_int]
        self.sub.grader_emu_fault.restype = ctypes.POINTER(_FaultInfo)
        self.sub.grader_emu_set_heap.argtypes = [ctypes.c_size_t]
        self.sub.grader_emu_set_heap(self.heap_bytes)

    def set_reverse(self, reverse: bool) -> None:
        self.sub.grader_emu_set_reverse(1 if reverse else 0)

    def _outcome(self, code: int, reference: bool = False) -> LaunchOutcome:
        if code == -1 and not reference:
            info = self.sub.grader_emu_fault().contents
            return LaunchOutcome(False, error="fault", fault=self._describe_fault(info))
        return super()._outcome(code, reference)

    def _describe_fault(self, info: _FaultInfo) -> Fault:
        fault = Fault(info.signal, info.address, info.is_write, info.pc_offset, info.message.decode(errors="replace"))
        if info.signal > 0:
            for name, lo, start, end, hi in self.regions:
                if lo <= info.address < hi:
                    fault.buffer, fault.where = name, "past" if info.address >= end else "before"
                    break
        return fault

    def release_inputs(self) -> None:
        """Forget the buffers of a finished case for fault reports (their memory is reclaimed with the process)."""
        self.regions.clear()
