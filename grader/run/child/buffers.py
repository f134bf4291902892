"""A case's buffers in a child: its input files mapped, and its tensors allocated on the backend.

Shared by the worker (the checks) and the timing (the timed sets), below both of them.
"""

from __future__ import annotations

import ctypes
import mmap
import os

from grader.core.contract import Buffer, CaseJob, Output
from grader.run.child.backends import Region, libc


class InputFiles:
    """The cases' input files, mapped before the wall (reading them is the job's, not the student's).

    Read-only and populated at once: page by page, the faults cost more than the copy of the timed
    shape's 64 MB to the GPU; and a writable private mapping, populated, would copy every page.
    Mapped through libc, since Python's mmap object offers no address for a read-only mapping."""

    def __init__(self, paths: list[str]):
        self._maps: dict[str, tuple[int, int]] = {}           # path: (address, bytes)
        for path in paths:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if not size:
                    continue
                address = libc().mmap(None, size, mmap.PROT_READ, mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0),
                                    f.fileno(), 0)
                if address in (None, ctypes.c_void_p(-1).value):
                    err = ctypes.get_errno()
                    raise OSError(err, f"could not map {path}: {os.strerror(err)}")
                self._maps[path] = (address, size)

    def address(self, buf: Buffer) -> int:
        """Where buf's data lies in this process (0 for an empty tensor)."""
        address, size = self._maps.get(buf.file, (0, 0))
        if buf.floats == 0 or not address:
            return 0
        if buf.offset + 4 * buf.floats > size:
            raise ValueError(f"{buf.file} holds {size} bytes; {buf.name} needs {4 * buf.floats} at {buf.offset}")
        return address + buf.offset


def allocate(backend, cj: CaseJob, pad: int, files: InputFiles) -> tuple[dict[str, Region], dict[str, Region]]:
    """The case's buffers on the backend: every tensor's data view, and each output's full
    (guarded) buffer."""
    views, fulls = {}, {}
    for b in cj.buffers:
        if b.role == "in":
            views[b.name] = backend.input(files.address(b), b.floats, tuple(b.shape), b.name)
        else:
            fulls[b.name], views[b.name] = backend.output(b.floats, pad, b.name, b.init, tuple(b.shape))
    return views, fulls


def output_meta(fulls: dict[str, Region], pad: int) -> list[Output]:
    return [Output(name, full.floats - 2 * pad, pad) for name, full in fulls.items()]
