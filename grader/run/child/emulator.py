"""The CPU emulator's backend: the submission built with g++ against the shim, its buffers host
pages, each input ending at an inaccessible page so that a read past it faults, and every output
padded with guard words (the CUDA backend is cuda.CudaBackend; both share backends.ChildBackend).
"""

from __future__ import annotations

import ctypes
import mmap
import struct
import zlib
from dataclasses import dataclass

from grader.core.backend import Api
from grader.core.contract import POISON_BITS, Call, Fault, RecordedOp
from grader.core.limits import spread_threads
from grader.run.child.backends import ChildBackend, LaunchOutcome, Region, _FaultInfo, libc
from grader.run.child.replay import Refused, Span, stream_op_problem, workspace_name

_POISON_WORD = struct.pack("<I", POISON_BITS)
_KINDS = {5: "memset", 6: "copy", 7: "symbol", 8: "alloc", 9: "free"}
_DIRECTIONS = {1: "h2d", 2: "d2h", 3: "d2d"}


class _StreamOp(ctypes.Structure):
    """cuda_shim.h's grader::StreamOp."""

    _fields_ = [("kind", ctypes.c_int), ("direction", ctypes.c_int), ("refused", ctypes.c_int),
                ("value", ctypes.c_int), ("dst", ctypes.c_uint64), ("src", ctypes.c_uint64),
                ("nbytes", ctypes.c_uint64), ("call", ctypes.c_char * 36)]


class ThreadCountChanged(RuntimeError):
    """A call gave another result on another number of OS threads: the emulator's fault, never the
    student's (its verdict must not depend on the machine's cores; issue 71)."""


@dataclass(frozen=True)
class _Start:
    """A call's buffers as they were before it ran: each input's bytes, and each output's (guards included)."""

    inputs: dict[str, bytes]
    outputs: dict[str, bytes]


def _said(seen: tuple) -> str:
    ok, error, fault, sums = seen
    if fault is not None:
        return f"a fault (signal {fault[0]}, block {fault[2]}, thread {fault[3]}, in {fault[4]} {fault[5]} element {fault[6]})"
    return error if not ok else "outputs with " + ", ".join(
        f"{'some' if p else 'no'} words unwritten, guards {g:08x}" for p, g in sums)


def _transparent_huge_pages() -> bool:
    """Whether madvise(MADV_HUGEPAGE) can give an anonymous mapping huge pages here."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


class EmulatorBackend(ChildBackend):
    """Host buffers, each input ending at an inaccessible page so that a read past it faults."""

    PAGE = mmap.PAGESIZE
    HUGE_FROM = 4 << 20
    # Each buffer's inaccessible guards, before and after it: as long as the buffer (a page at least,
    # GUARD_MAX at most). A row-stride mistake reads a tile of rows past the end, a row apart; with a
    # page of guard its first read past the page landed in whatever the process had mapped beside
    # the buffer (an earlier case's buffer, a thread's stack), so the verdict (read past x, or a wild
    # pointer) depended on where the kernel's mappings fell, which a loaded machine moves.
    GUARD_MAX = 1 << 20

    @classmethod
    def from_job(cls, job):
        return cls(job.reference_library, threads=job.emulator_threads, api=job.backend.api,
                   thread_check=job.backend.thread_check)

    def __init__(self, reference_lib: str, threads: int = 0, *, api: Api | None = None, thread_check: bool = False):
        super().__init__(reference_lib, api=api)
        self.threads = spread_threads(threads)      # a large launch's OS threads, where the library allows
        self.thread_check = thread_check            # each call a thread count could change, run at two and compared
        self._huge_pages = _transparent_huge_pages()    # read now: after the wall no file can be opened
        self._keep: list = []
        self.regions: list[tuple[str, int, int, int, int]] = []    # name, alloc start, data start, data end, alloc end
        self._shapes: dict[int, tuple[int, ...]] = {}  # a tensor's shape, by its data start
        self._every: list[tuple[int, int]] = []        # every buffer ever made (data start, data end): no call's but its own
        self._writable: set[int] = set()               # the outputs' views (their start)
        self._full: dict[int, Region] = {}             # an output's view (its start): the view with its guards
        self.workspace_cap = 256 << 20

    def _guarded(self, nbytes: int, name: str) -> tuple[int, int]:
        """Memory for nbytes of data (256-byte aligned) that ends near its guard (GUARD_MAX): (data
        address, bytes from there to the guard)."""
        page = self.PAGE
        body = -(-(nbytes + 256) // page) * page
        guard = min(body, self.GUARD_MAX)
        # Faulting 64 MB in page by page costs more than the copy into it: a large buffer asks for
        # huge pages (filled in 2 MB at a time, about four times faster than populating 4 KiB
        # pages), a small one is populated at once.
        huge = body >= self.HUGE_FROM and self._huge_pages
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (0 if huge else getattr(mmap, "MAP_POPULATE", 0))
        mm = mmap.mmap(-1, body + 2 * guard, flags=flags)
        if huge:
            try:
                mm.madvise(mmap.MADV_HUGEPAGE)
            except OSError:
                pass                            # refused: faulted page by page
        base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        for at in (0, guard + body):
            libc().mprotect(base + at, guard, 0)
            if guard > page and not huge:       # populated with the body: given back
                mm.madvise(mmap.MADV_DONTNEED, at, guard)
        usable_end = base + guard + body
        start = (usable_end - nbytes) & ~255
        self._keep.append(mm)
        self.regions.append((name, base, start, start + nbytes, base + body + 2 * guard))
        self._every.append((start, start + nbytes))
        return start, usable_end - start

    def alloc(self, floats: int, name: str) -> Region:
        start, _ = self._guarded(4 * floats, name)
        return Region(start, floats)

    def input(self, host_ptr: int, floats: int, shape: tuple[int, ...], name: str) -> Region:
        start, room = self._guarded(4 * floats, name)
        self.fill(Region(start + 4 * floats, room // 4 - floats), 0x7FC00000)   # the slack before the guard page reads as NaN
        if floats:
            ctypes.memmove(start, host_ptr, 4 * floats)
        self._shapes[start] = shape
        return Region(start, floats, shape)

    def output(self, n: int, pad: int, name: str, init: str = "poison",
               shape: tuple[int, ...] = ()) -> tuple[Region, Region]:
        full, view = super().output(n, pad, name, init, shape)
        self._writable.add(view.ptr)
        self._full[view.ptr] = full
        # the region list records the output's own extent, not its guards
        name_, base, start, _, end = self.regions[-1]
        self.regions[-1] = (name_, base, start + pad * 4, start + (pad + n) * 4, end)
        self._shapes[view.ptr] = shape
        return full, view

    def fill(self, region: Region, bits: int) -> None:
        """The pattern written once, then copied onto itself in doubling steps (no buffer the size of
        the region is built: the timed shape's outputs are 64 MB)."""
        if region.floats <= 0:
            return
        word = bits & 0xFFFFFFFF
        if word == (word & 0xFF) * 0x01010101:          # one byte repeated: memset does it
            ctypes.memset(region.ptr, word & 0xFF, region.nbytes)
            return
        head = struct.pack("<I", word) * min(region.floats, 1024)
        ctypes.memmove(region.ptr, head, len(head))
        done = len(head)
        while done < region.nbytes:
            step = min(done, region.nbytes - done)
            ctypes.memmove(region.ptr + done, region.ptr, step)
            done += step

    def read(self, region: Region) -> bytes:
        return ctypes.string_at(region.ptr, region.nbytes)

    def read_into(self, region: Region, address: int) -> None:
        if region.floats:
            ctypes.memmove(address, region.ptr, region.nbytes)

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
        self.sub.grader_emu_set_threads.argtypes = [ctypes.c_int]
        self.sub.grader_emu_set_threads(self.threads)
        self.sub.grader_emu_set_spans.argtypes = [ctypes.POINTER(ctypes.c_uint64)] * 2 + [
            ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_size_t]
        self.sub.grader_emu_stream_ops.argtypes = [ctypes.POINTER(_StreamOp), ctypes.c_int]
        if self.sub.grader_emu_stream_op_size() != ctypes.sizeof(_StreamOp):
            raise RuntimeError("the shim's stream-op log and emulator.py disagree on its layout")

    def launch_submission(self, call: Call, views: dict[str, Region]) -> LaunchOutcome:
        """The launcher run at once, its memsets, copies and workspace checked as the GPU's replay
        checks them (replay.stream_op_problem): what the replay would refuse raises Refused. With the
        thread check (Backend.thread_check), a call whose launches the thread count could change
        runs again on the other count (one OS thread, or two), on fresh copies of its outputs as they
        started (every emulated buffer is new, as for the reverse run), and a difference one thread
        reproduces twice more raises ThreadCountChanged. The grade's own run comes first: the grade
        sees what it would see without the check."""
        if not self.thread_check:
            return self._launch_once(call, views)
        names = [a.tensor for a in call.args if a.tensor]
        outs = [n for n in names if views[n].ptr in self._writable]
        start = _Start({n: self.read(views[n]) for n in names if n not in outs},
                       {n: self.read(self._full.get(views[n].ptr, views[n])) for n in outs})
        outcome = self._launch_once(call, views)
        if self.sub.grader_emu_spreadable_launches() == 0:
            return outcome                  # no launch the thread count reaches
        mine = self._seen(outcome, [views[n] for n in outs])
        other = 2 if self.threads == 1 else 1
        seen = self._rerun(other, call, views, start)
        # A difference counts where one thread (which runs the blocks in order) gives its result twice
        # more: a launcher whose calls differ by themselves (every other call cheap, sums carried over)
        # is no thread's doing, while a race between OS threads need not repeat itself.
        serial = mine if self.threads == 1 else seen
        if seen != mine and all(self._rerun(1, call, views, start) == serial for _ in range(2)):
            raise ThreadCountChanged(f"{call.key}: on {other} OS thread(s) {_said(seen)}; on {self.threads}, "
                                     f"{_said(mine)}")
        return outcome

    def _rerun(self, threads: int, call: Call, views: dict[str, Region], start: "_Start") -> tuple:
        """What the call leaves (_seen) run again on threads OS threads, on fresh copies of its buffers
        as they started: a launcher that remembers a buffer it was given (stash_in_input.cu, pointer_cache.cu)
        meets new ones, as in the reverse run."""
        fresh = dict(views)
        for name, held in start.inputs.items():
            view = views[name]
            fresh[name] = self.input(ctypes.cast(ctypes.c_char_p(held), ctypes.c_void_p).value or 0, view.floats,
                                     view.shape, name)
        for name, blank in start.outputs.items():
            fresh[name], _ = self._fresh_output(views[name], blank, name)
        self.sub.grader_emu_set_threads(threads)
        try:
            return self._seen(self._launch_once(call, fresh), [fresh[n] for n in start.outputs])
        finally:
            self.sub.grader_emu_set_threads(self.threads)

    def _fresh_output(self, view: Region, blank: bytes, name: str) -> tuple[Region, Region]:
        """A new output like view (its guards included, holding blank), registered as output() does."""
        full = self._full.get(view.ptr, view)
        copy = self.alloc(full.floats, name)
        ctypes.memmove(copy.ptr, blank, len(blank))
        fresh = Region(copy.ptr + (view.ptr - full.ptr), view.floats, view.shape)
        self._writable.add(fresh.ptr)
        self._full[fresh.ptr] = copy
        self._shapes[fresh.ptr] = view.shape
        name_, base, _, _, end = self.regions[-1]
        self.regions[-1] = (name_, base, fresh.ptr, fresh.ptr + fresh.nbytes, end)
        return fresh, copy

    def _seen(self, outcome: LaunchOutcome, views: list[Region]) -> tuple:
        """What a call left that decides a verdict whatever the values: its error and its fault (where
        in which buffer, or the address where in none), or (where it ran to its end) whether each
        output still holds the poison, and its guard words. Not the written values:
        blocks that write the same element (rows laid blockDim.x apart, row_stride_blockdim.cu) race,
        and the last writer differs between one thread and two; such a grade is wrong either way. A
        failed call's outputs are never judged."""
        f = outcome.fault
        fault = (f.signal, f.is_write, f.block, f.thread, f.buffer, f.where, f.element, f.message,
                 f.address if f.buffer is None else 0) if f else None
        return outcome.ok, outcome.error, fault, tuple(self._written(v) for v in views) if outcome.ok else ()

    def _written(self, view: Region) -> tuple[bool, int]:
        """(whether any word is still the poison, a checksum of the guard words) of an output: how many
        differs with a launcher's thread that launches 30 ms late (thread_late_launch_30ms.cu), a grade
        wrong either way; a zero is no sign (a memo kept in __device__ memory, static_memo.cu, serves
        the rerun's same inputs and leaves a zero-started output's element as it started)."""
        full = self._full.get(view.ptr, view)
        data = self.read(full)
        at, end = view.ptr - full.ptr, view.ptr - full.ptr + view.nbytes
        body = data[at:end]
        return _POISON_WORD in body, zlib.crc32(data[:at] + data[end:])

    def _launch_once(self, call: Call, views: dict[str, Region]) -> LaunchOutcome:
        given = {a.tensor: views[a.tensor] for a in call.args if a.tensor}
        spans = [Span(name, r.ptr, r.ptr + r.nbytes, r.ptr in self._writable) for name, r in given.items()]
        mine = {(s.lo, s.hi) for s in spans}
        others = [(lo, hi) for lo, hi in self._every if (lo, hi) not in mine and hi > lo]
        every = [(s.lo, s.hi, 2 if s.writable else 1) for s in spans] + [(lo, hi, 0) for lo, hi in others]
        n = len(every)
        u64 = ctypes.c_uint64 * max(n, 1)
        self.sub.grader_emu_set_spans(u64(*[e[0] for e in every]), u64(*[e[1] for e in every]),
                                      (ctypes.c_int * max(n, 1))(*[e[2] for e in every]), n, self.workspace_cap)
        outcome = super().launch_submission(call, views)
        self._refuse_stream_ops(spans, call.key)
        return outcome

    def _refuse_stream_ops(self, spans: list[Span], case: str) -> None:
        ops = (_StreamOp * 256)()
        got = self.sub.grader_emu_stream_ops(ops, 256)
        spaces = [(o.dst, o.nbytes) for o in ops[:got] if o.kind == 8 and not o.refused]
        spans = spans + [Span(workspace_name(i, nb), a, a + nb, True) for i, (a, nb) in enumerate(spaces)]
        for o in ops[:got]:
            if not o.refused:
                continue
            op = RecordedOp(kind=_KINDS.get(o.kind, "copy"), dst=o.dst, src=o.src, nbytes=o.nbytes, value=o.value,
                            direction=_DIRECTIONS.get(o.direction, ""), call=o.call.decode(errors="replace"),
                            error="over_workspace" if o.refused == 2 else "")
            problem = stream_op_problem(op, spans, who="your launcher", workspace_cap=self.workspace_cap,
                                        api=self.api) or (
                f"your launcher's {op.call or op.kind} touched memory the grader did not give it")
            raise Refused(f"{problem} (in the call for {case})")

    def launch_threads(self) -> int:
        """The OS threads a large launch of the submission runs on (1 where its source shares state
        between threads: source.spreads_over_cores)."""
        return self.sub.grader_emu_spread_threads() if self.sub is not None else 1

    def set_reverse(self, reverse: bool) -> None:
        self.sub.grader_emu_set_reverse(1 if reverse else 0)

    def _outcome(self, code: int, reference: bool = False) -> LaunchOutcome:
        if code == -1 and not reference:
            info = self.sub.grader_emu_fault().contents
            return LaunchOutcome(False, error="fault", fault=self._describe_fault(info))
        return super()._outcome(code, reference)

    def _describe_fault(self, info: _FaultInfo) -> Fault:
        fault = Fault(info.signal, info.address, info.is_write, info.pc_offset, info.message.decode(errors="replace"))
        if info.in_kernel:
            fault.block, fault.thread = list(info.block), list(info.thread)
            fault.block_dim, fault.grid_dim = list(info.block_dim), list(info.grid_dim)
        if info.signal > 0:
            for name, lo, start, end, hi in self.regions:
                if lo <= info.address < hi:
                    fault.buffer, fault.where = name, "past" if info.address >= end else "before"
                    fault.element, fault.floats = (info.address - start) // 4, (end - start) // 4
                    fault.shape = list(self._shapes.get(start, ()))
                    break
        return fault

    def release_case(self) -> None:
        """Forget the buffers of a finished case for fault reports (their memory is reclaimed with the process)."""
        self.regions.clear()
        self._shapes.clear()
        self._full.clear()
