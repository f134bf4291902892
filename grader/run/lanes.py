"""One lane per GPU: what runs on a GPU while a submission is timed runs alone.

Every grader that runs a child on a GPU (a lone `grader submit`, each submission of a batch,
other graders on the same machine) first takes that GPU's lane: an exclusive lock on a file
named for the GPU, so two timings never share a GPU, whichever process started them. The GPU is
named as the child's visible-devices variable names it (the backend's visible_devices,
CUDA_VISIBLE_DEVICES for CUDA: its first entry; "0" when unset). Without a backend, the GPU backend
`--backend auto` picks (toolchain/gpuinfo.py's GPU).
Compiles, child start-up and the parent's checks happen outside the lane.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import time
from pathlib import Path

from grader.core.backend import Backend
from grader.toolchain import gpuinfo


def lock_dir() -> Path:
    """GRADER_LOCK_DIR, else a folder in the system's temporary directory shared by every user."""
    d = Path(os.environ.get("GRADER_LOCK_DIR") or Path(tempfile.gettempdir()) / "grader-gpu-locks")
    d.mkdir(parents=True, exist_ok=True)
    try:
        os.chmod(d, 0o1777)          # any user's grader may take a lane (sticky, like /tmp)
    except OSError:
        pass
    return d


def default_device(backend: Backend | None = None) -> str:
    """The GPU a child uses when nothing is chosen: the first visible one."""
    visible = os.environ.get((backend or gpuinfo.GPU).visible_devices, "").split(",")[0].strip()
    return visible or "0"


def visible_devices(backend: Backend | None = None) -> list[str]:
    """The GPUs this process may use, as the backend's visible-devices variable names them (the
    probe's indices when it is unset); one lane each."""
    env = os.environ.get((backend or gpuinfo.GPU).visible_devices)
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    return gpuinfo.indices() or ["0"]


class Lane:
    """A GPU's lane, held from `with` until release() or the end of the block."""

    def __init__(self, device: str):
        self.device = device
        self.waited = 0.0                 # seconds spent waiting for it
        self._fd: int | None = None

    def __enter__(self) -> "Lane":
        path = lock_dir() / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', self.device)}.lock"
        start = time.perf_counter()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.waited = time.perf_counter() - start
        return self

    def release(self) -> None:
        """Hand the lane on now (the GPU work that needed it alone is done)."""
        if self._fd is not None:
            os.close(self._fd)            # closing drops the lock
            self._fd = None

    def __exit__(self, *exc) -> None:
        self.release()


def gpu_lane(device: str) -> Lane:
    """device's lane, to hold in a `with` block (`as lane`: lane.waited, lane.release())."""
    return Lane(device)
