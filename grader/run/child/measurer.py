"""The measuring child's backend: the recorded launches replayed from the submission's device code
alone (replay.py says why).

The submission's library is never loaded here: its fatbinaries (read by the parent from the build)
are loaded with the driver (cuModuleLoadData), every kernel looked up by the device name the
recorder saw, its parameter layout read from the module (cuFuncGetParamInfo), and each call's
launches run with cuLaunchKernel on the legacy default stream, the one the grader times, with
every stand-in address relocated to the grader's buffer; the launcher's memsets and copies run
there too, in their order (cuMemsetD8Async, cuMemcpy*Async), its workspace a grader's buffer
poisoned before every call (prepare_call). Everything else (allocation, copies,
events, the floor's copies, the checksums) is CudaBackend's.
"""

from __future__ import annotations

import ctypes

from grader.core.backend import Backend
from grader.core.contract import POISON_BITS, Call, LaunchRecord, RecordedOp, ReplayPart
from grader.run.child.backends import LaunchOutcome, Region
from grader.run.child.cuda import CudaBackend
from grader.run.child.replay import (
    STREAM_KINDS,
    Param,
    Refused,
    call_outputs,
    call_sizes,
    call_spans,
    malformed,
    recording_stand_ins,
    relocate,
    relocate_address,
    stream_op_problem,
    workspace_name,
    workspaces,
)

CUDA_ERROR_INVALID_VALUE = 1


class Driver:
    """The few driver entry points the replay needs, declared once."""

    def __init__(self, library: str) -> None:
        lib = self.lib = ctypes.CDLL(library)           # the backend's driver_library
        vp, u, i, sz = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t
        for name, args in (
                ("cuModuleLoadData", [ctypes.POINTER(vp), vp]),
                ("cuModuleGetFunction", [ctypes.POINTER(vp), vp, ctypes.c_char_p]),
                ("cuFuncGetParamInfo", [vp, sz, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
                ("cuLaunchKernel", [vp, u, u, u, u, u, u, u, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]),
                ("cuLaunchCooperativeKernel", [vp, u, u, u, u, u, u, u, vp, ctypes.POINTER(vp)]),
                ("cuFuncSetAttribute", [vp, i, i]),
                ("cuFuncSetCacheConfig", [vp, i]),
                ("cuGetErrorString", [i, ctypes.POINTER(ctypes.c_char_p)]),
                ("cuMemsetD8Async", [vp, ctypes.c_ubyte, sz, vp]),
                ("cuMemcpyDtoDAsync_v2", [vp, vp, sz, vp]),
                ("cuMemcpyHtoDAsync_v2", [vp, vp, sz, vp]),
                ("cuModuleGetGlobal_v2", [ctypes.POINTER(vp), ctypes.POINTER(sz), vp, ctypes.c_char_p]),
                ("cuOccupancyMaxActiveBlocksPerMultiprocessor", [ctypes.POINTER(i), vp, i, sz])):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, i

    def error(self, code: int) -> str:
        text = ctypes.c_char_p()
        if self.lib.cuGetErrorString(code, ctypes.byref(text)) == 0 and text.value:
            return text.value.decode(errors="replace")
        return f"CUDA error {code}"


class _Kernel:
    def __init__(self, name: str, handle: int, params: list[Param]):
        self.name, self.handle, self.params = name, handle, params
        self.bytes = max((p.offset + p.size for p in params), default=0)


class ReplayBackend(CudaBackend):
    @classmethod
    def from_job(cls, job):
        every = job.cases + job.timed_cases + job.verify_cases + job.baseline_cases
        return cls(job.reference_library, part=job.replay, sizes=call_sizes(every), outputs=call_outputs(every),
                   workspace_cap=job.limits.workspace_bytes, backend=job.backend)

    def __init__(self, reference_lib: str, *, part: ReplayPart, sizes: dict[str, dict[str, int]],
                 outputs: dict[str, set[str]] | None = None, workspace_cap: int = 256 << 20,
                 backend: Backend):
        """part: the recording and the device code (its fatbinaries' files are read now, before the
        wall; device_heap: its heap is poisoned and counted every call); sizes: for each call's key,
        the bytes of each tensor the call passes (what an address may point into); outputs: for each
        call's key, the tensors it may write; workspace_cap: the bytes the launcher may allocate;
        backend: the job's, whose driver's entry points the replay calls and whose api names the calls."""
        forged = malformed(part.recording)      # before anything here reads it (load_submission asks again)
        if forged:
            raise Refused(forged)
        super().__init__(reference_lib, part.layout_seed, api=backend.api)
        self.driver = Driver(backend.driver_library)
        self._images = []
        for path in part.device_code:
            with open(path, "rb") as f:
                self._images.append(ctypes.create_string_buffer(f.read()))
        recording = part.recording
        self.recording, self._sizes = recording, sizes
        self._outputs, self._workspace_cap = outputs or {}, workspace_cap
        every = [op for ops in recording.ops for op in ops]
        self._spaces = workspaces(every)                 # (stand-in address, bytes) of each cudaMalloc
        self._workspace: dict[str, Region] = {}          # its name -> the grader's buffer behind it
        self._globals: dict[str, tuple[int, int]] = {}   # a __device__ variable's name -> (address, bytes)
        self._variables = list(part.device_globals)      # the parent's list of them (from the build)
        self._kept: dict[int, tuple[int, int]] = {}      # a variable's address -> (its kept copy, bytes)
        self._heap = part.device_heap
        self._heap_scratch: Region | None = None
        self._heap_free: int | None = None               # what the heap gave before the first call
        self._heap_kept = 0
        self._modules: list[int] = []
        self._kernels: dict[str, _Kernel] = {}
        self._used: dict[str, int] = {}
        self._prepared: dict[tuple, list] = {}
        self._log: dict[tuple, LaunchRecord] = {}

    def load_submission(self, submission_lib: str) -> None:
        """The submission's device code, not its library (submission_lib is never opened); then the
        recording checked against it. Raises Refused for a recording that cannot be replayed."""
        problems = []
        for image in self._images:
            module = ctypes.c_void_p()
            code = self.driver.lib.cuModuleLoadData(ctypes.byref(module), image)
            if code:
                problems.append(self.driver.error(code))
            else:
                self._modules.append(module.value)
        if not self._modules:
            raise RuntimeError(f"the submission's device code did not load: {'; '.join(problems) or 'none found'}")
        total = sum(n for _, n in self._spaces)
        if total > self._workspace_cap:
            raise Refused(f"your launcher allocated {total / 2**20:.1f} MiB of workspace over its calls; this exercise "
                          f"allows {self._workspace_cap / 2**20:.1f} MiB (limits.workspace_mib): allocate once, and "
                          "no more than the shape needs.")
        forged = malformed(self.recording)      # a claim: held to the recorder's own form before anything reads it
        if forged:
            raise Refused(forged)
        self._check()
        for i, (_, nbytes) in enumerate(self._spaces):       # the grader's buffers behind the launcher's cudaMalloc
            self._workspace[workspace_name(i, nbytes)] = self.kept(-(-nbytes // 4) + 1)
        lib = self.driver.lib
        for name in self._variables:                         # each static variable as the module loaded it
            found = self._global(name)
            if found is None or not found[1] or found[0] in self._kept:
                continue
            copy = self.kept(-(-found[1] // 4))
            self._kept[found[0]] = (copy.ptr, found[1])
            lib.cuMemcpyDtoDAsync_v2(copy.ptr, found[0], found[1], None)
        self.synchronize()

    def prepare_call(self, again: bool = False) -> None:
        """Before every call, outside the timed events: the workspace poisoned, and every static
        __device__ and __constant__ variable put back to what the module loaded with and the
        launcher's replayed uploads wrote, so nothing a kernel leaves there, in either, reaches the
        next call (a memo of an earlier call's output cannot pay). again (a check's second run of the
        same call): the variables stay as the first run left them, as they do between two calls in
        use, so a __device__ workspace nothing resets shows (its sums carried into the second run)."""
        for region in self._workspace.values():
            self.fill(region, POISON_BITS)
        for live, (copy, nbytes) in ([] if again else self._kept.items()):
            self.driver.lib.cuMemcpyDtoDAsync_v2(live, copy, nbytes, None)
        if self._heap:
            self._poison_heap()

    # Fragments the heap's allocator leaves, which a poisoning pass may take one call and not the
    # next: a shortfall under this is not counted as memory a call kept.
    HEAP_SLACK = 64 << 10

    def _poison_heap(self) -> None:
        """The device heap's free memory poisoned, and what it gave compared with what it gave
        before the first call: a call that kept heap memory (malloc'd, not freed) shows as the
        shortfall. A block it freed comes back poisoned, one it kept is counted here."""
        if self._heap_scratch is None:
            self._heap_scratch = self.kept(self.heap_scratch_floats())
        taken = self.poison_heap(self._heap_scratch, POISON_BITS)
        if self._heap_free is None:
            self._heap_free = taken
        elif self._heap_free - taken > self.HEAP_SLACK:
            self._heap_kept = max(self._heap_kept, self._heap_free - taken)

    def heap_kept_bytes(self) -> int:
        if self._heap and self._heap_scratch is not None:
            self._poison_heap()                           # after the last call too
        return self._heap_kept

    def _stand_ins(self, given: dict, case: str) -> dict[str, tuple[int, int]]:
        """A call's stand-in buffers and the workspace, as relocate() takes them."""
        stand_ins = recording_stand_ins(given, self._sizes.get(case, {}))
        for i, (addr, nbytes) in enumerate(self._spaces):
            stand_ins[workspace_name(i, nbytes)] = (addr, nbytes)
        return stand_ins

    def _global(self, name: str) -> tuple[int, int] | None:
        """A __device__ or __constant__ variable of the submission's device code: (address, bytes)."""
        if name not in self._globals:
            found = None
            for module in self._modules:
                dptr, size = ctypes.c_void_p(), ctypes.c_size_t()
                if name and self.driver.lib.cuModuleGetGlobal_v2(ctypes.byref(dptr), ctypes.byref(size), module,
                                                                 name.encode()) == 0:
                    found = (dptr.value or 0, size.value)
                    break
            self._globals[name] = found
        return self._globals[name]

    def _kernel(self, name: str) -> _Kernel | None:
        if name in self._kernels:
            return self._kernels[name]
        found = None
        for module in self._modules:
            fn = ctypes.c_void_p()
            if name and self.driver.lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()) == 0:
                params, index = [], 0
                offset, size = ctypes.c_size_t(), ctypes.c_size_t()
                while self.driver.lib.cuFuncGetParamInfo(fn, index, ctypes.byref(offset), ctypes.byref(size)) == 0:
                    params.append(Param(offset.value, size.value))
                    index += 1
                found = _Kernel(name, fn.value, params)
                break
        self._kernels[name] = found
        return found

    def _check(self) -> None:
        """Every recorded call replayable: its kernels in the device code, each parameter buffer of
        its kernel's size, every address inside a buffer given to that call."""
        for key, rows in self.recording.calls.items():
            for ops_at, views_at, _error in rows:
                stand_ins = self._stand_ins(self.recording.views[views_at], key)
                # the call's outputs and the launcher's own workspace are what its stream work may write
                writable = self._outputs.get(key, set()) | {workspace_name(i, n) for i, (_, n) in enumerate(self._spaces)}
                spans = call_spans(stand_ins, writable, [])
                for op in self.recording.ops[ops_at]:
                    if op.kind in STREAM_KINDS:
                        self._check_stream_op(op, spans, key)
                        continue
                    kernel = self._kernel(op.kernel)
                    if kernel is None:
                        raise Refused(f"the recording names a kernel, {op.kernel or '(no name)'}, that the "
                                      "submission's device code does not hold.")
                    if op.kind in ("launch", "cooperative"):
                        args = bytes.fromhex(op.args)
                        if len(args) != kernel.bytes:
                            raise Refused(f"the recorded arguments of {op.kernel} are {len(args)} bytes; its "
                                          f"parameters take {kernel.bytes}.")
                        relocate(args, kernel.params, stand_ins, {n: 0 for n in stand_ins}, kernel=op.kernel, case=key)

    def _check_stream_op(self, op: RecordedOp, spans, case: str) -> None:
        problem = stream_op_problem(op, spans, who="your launcher", workspace_cap=self._workspace_cap,
                                    api=self.api)
        if problem:
            raise Refused(f"{problem} (in the call for {case})")
        if op.kind == "symbol":
            found = self._global(op.kernel)
            if found is None:
                raise Refused(f"your launcher called {op.call} on {op.kernel or 'a variable'}, which the submission's "
                              "device code does not hold.")
            if op.dst + op.nbytes > found[1]:
                raise Refused(f"your launcher's {op.call} writes {op.nbytes} bytes at offset {op.dst} of a variable of "
                              f"{found[1]} bytes: past its end.")

    # -- the replay -----------------------------------------------------------------
    def launch_submission(self, call: Call, views: dict[str, Region]) -> LaunchOutcome:
        rows = self.recording.calls.get(call.key, [])
        n = self._used.get(call.key, 0)
        if n >= len(rows):
            # The recorder calls the launcher once for each of the grader's calls, up to the most the
            # timing may make: a recording short of them was changed in the recording process itself
            # (the launcher's host code patching the grader's), and cannot be replayed.
            raise Refused(f"the recording of your launcher holds {len(rows)} call(s) for {call.key}, where the "
                          "grader made more: your host code changed what the grader's recording process sent. "
                          "A launcher that changes the grader's own process cannot be graded; launch your kernel "
                          "and return.")
        self._used[call.key] = n + 1
        ops_at, views_at, error = rows[n]
        given = self.recording.views[views_at]
        real = {name: views[name].ptr for name in given if name in views}
        key = (ops_at, views_at, tuple(sorted(real.items())))
        steps = self._prepared.get(key)
        if steps is None:
            steps = self._prepared[key] = self._prepare(self.recording.ops[ops_at], given, real, call.key)
        for step in steps:
            code = step()
            if code:
                return LaunchOutcome(False, error=f"launch failed: {self.driver.error(code)} (CUDA error {code})")
        if error:
            text = self.recording.errors.get(str(error), f"error {error}")
            return LaunchOutcome(False, error=text if text.startswith("launch failed") else f"launch failed: {text}")
        return LaunchOutcome(True)

    def _prepare(self, ops: list[RecordedOp], given: dict, real: dict[str, int], case: str) -> list:
        stand_ins = self._stand_ins(given, case)
        real = {**real, **{name: region.ptr for name, region in self._workspace.items()}}
        spans = call_spans(stand_ins, set(), [])
        lib, steps = self.driver.lib, []
        for op in ops:
            if op.kind in STREAM_KINDS:
                step = self._stream_step(op, spans, real)
                if step is not None:
                    steps.append(step)
                continue
            kernel = self._kernel(op.kernel)
            if op.kind == "attribute":
                steps.append(lambda k=kernel, op=op: lib.cuFuncSetAttribute(k.handle, op.attribute, op.value))
            elif op.kind == "cache_config":
                steps.append(lambda k=kernel, op=op: lib.cuFuncSetCacheConfig(k.handle, op.attribute))
            elif op.kind in ("launch", "cooperative"):
                args = relocate(bytes.fromhex(op.args), kernel.params, stand_ins, real, kernel=op.kernel, case=case)
                buf = ctypes.create_string_buffer(args, max(len(args), 1))
                base = ctypes.addressof(buf)
                params = (ctypes.c_void_p * max(len(kernel.params), 1))(*[base + p.offset for p in kernel.params])
                steps.append(self._launcher(kernel, op, buf, params))
        return steps

    def _stream_step(self, op: RecordedOp, spans, real: dict[str, int]):
        """A memset, copy or symbol copy on the grader's stream (the legacy default, as the launches),
        its addresses relocated; None for what needs no step (an allocation or a free: the
        workspace's buffers are the grader's, made when the recording was checked)."""
        lib, n = self.driver.lib, op.nbytes
        if op.kind == "memset":
            dst = relocate_address(op.dst, spans, real)
            return lambda: lib.cuMemsetD8Async(dst, op.value & 0xFF, n, None)
        if op.kind not in ("copy", "symbol"):
            return None
        base = self._global(op.kernel)[0] if op.kind == "symbol" else 0
        dst = base + op.dst if op.kind == "symbol" else relocate_address(op.dst, spans, real)
        if op.direction == "h2d":
            data = ctypes.create_string_buffer(bytes.fromhex(op.args), max(n, 1))
            copy = lambda: (data, lib.cuMemcpyHtoDAsync_v2(dst, data, n, None))[1]     # noqa: E731
        else:
            src = relocate_address(op.src, spans, real)
            copy = lambda: lib.cuMemcpyDtoDAsync_v2(dst, src, n, None)      # noqa: E731
        kept = self._kept.get(base) if op.kind == "symbol" else None
        if kept is None:
            return copy
        # what the launcher uploads stays, as on a GPU: the kept copy takes it too
        return lambda: copy() or lib.cuMemcpyDtoDAsync_v2(kept[0] + op.dst, dst, n, None)

    def _launcher(self, kernel: _Kernel, op: RecordedOp, buf, params):
        lib = self.driver.lib
        (gx, gy, gz), (bx, by, bz), shmem = op.grid, op.block, op.shared_bytes
        entry = self._log_entry(kernel, op)

        def launch() -> int:
            _keep = buf                                     # the parameter buffer lives as long as the step
            entry.launches += 1
            if op.kind == "cooperative":
                return lib.cuLaunchCooperativeKernel(kernel.handle, gx, gy, gz, bx, by, bz, shmem, None, params)
            return lib.cuLaunchKernel(kernel.handle, gx, gy, gz, bx, by, bz, shmem, None, params, None)
        return launch

    def _log_entry(self, kernel: _Kernel, op: RecordedOp) -> LaunchRecord:
        key = (kernel.name, tuple(op.grid), tuple(op.block), op.shared_bytes)
        entry = self._log.get(key)
        if entry is None:
            blocks = ctypes.c_int(-1)
            threads = op.block[0] * op.block[1] * op.block[2]
            if self.driver.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    ctypes.byref(blocks), kernel.handle, threads, op.shared_bytes) != 0:
                blocks.value = -1
            entry = self._log[key] = LaunchRecord(kernel.name, 0, list(op.grid), list(op.block), op.shared_bytes, 0,
                                                  blocks.value if blocks.value >= 0 else None)
        return entry

    def reset_launch_log(self) -> None:
        for entry in self._log.values():
            entry.launches = 0

    def launch_log(self) -> list[LaunchRecord]:
        return [LaunchRecord(e.kernel, e.offset, list(e.grid), list(e.block), e.shared_bytes, e.launches,
                             e.blocks_per_sm) for e in self._log.values() if e.launches]

    def _error_text(self, code: int, reference: bool) -> str:
        return self.error_string(code) if code > 0 else f"error {code}"
