"""Running a submission's GPU (or emulated) work in a child process.

The child gets a time limit, resource limits, a private working directory
and a scrubbed environment; results come back on a private pipe (never the
child's stdout, which student code can write to), and stdout and stderr
are captured with their head and tail kept. Whatever the child does, the
parent gets a ChildRun back: a faulting or hanging kernel is a status.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import os
import resource
import select
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from grader.run import protocol
from grader.core import processes
from grader.core.limits import lowered, set_clamped
from grader.core.processes import set_death_signal
from grader.run.child.guard import Blocked, forged_report, parse_reports
from grader.core.contract import Job


class CappedOutput:
    """Keeps the first and last `cap // 2` bytes of a stream and counts the rest."""

    def __init__(self, cap: int):
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        body = self.head.decode("utf-8", "replace")
        if self.dropped:
            body += f"\n[... {self.dropped} bytes dropped ...]\n"
        return body + self.tail.decode("utf-8", "replace")


@dataclass
class ChildRun:
    """Everything the parent learned from one child: its frames, how it ended, what the wall saw."""

    frames: list[protocol.Frame]
    returncode: int | None
    timed_out: bool
    seconds: float
    stdout: CappedOutput
    stderr: CappedOutput
    stream_problem: str | None = None
    signal_name: str | None = None
    blocked: list[Blocked] = field(default_factory=list)     # the guard's reports
    max_rss_kib: int = 0                                      # the child's peak resident memory
    extra: dict = field(default_factory=dict)
    shared: object = None                                     # the shared area the payloads may view


_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH", "PYTHONPATH",
             "NVIDIA_VISIBLE_DEVICES", "TMPDIR", "VIRTUAL_ENV", "OMP_NUM_THREADS")


CLONE_NEWNET = 0x40000000
# Resolved here, in the parent: between fork and exec (where _limits runs) the child may not
# import or dlopen anything, since another thread of the parent may have held those locks.
try:
    _UNSHARE = ctypes.CDLL(None, use_errno=True).unshare
except (OSError, AttributeError):
    _UNSHARE = None


def _limits(cpu_seconds: int, nproc: int) -> None:
    """Runs in the child between fork and exec: its own process group, resource limits, no network.
    Only system calls here: no imports, no allocation-heavy work."""
    os.setsid()                                    # its own process group: killing it kills its children too
    set_death_signal(signal.SIGKILL)               # and it dies with the grader, even a SIGKILLed one
    # Each clamped to the inherited hard limit (grader/core/limits.py): a lower one stands.
    set_clamped(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 5)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    set_clamped(resource.RLIMIT_FSIZE, CHILD_FILE_BYTES)
    set_clamped(resource.RLIMIT_NOFILE, CHILD_OPEN_FILES)
    if os.geteuid() != 0:
        try:
            set_clamped(resource.RLIMIT_NPROC, nproc)
        except (ValueError, OSError):
            pass
    elif _UNSHARE is not None:
        _UNSHARE(CLONE_NEWNET)                     # as root: a network namespace of its own, nothing in it


CHILD_FILE_BYTES = 256 * 1024 * 1024
CHILD_OPEN_FILES = 1024


def lowered_limits(cpu_seconds: int) -> dict:
    """The child's limits that an inherited hard limit lowers (limits.lowered), for result.json."""
    return lowered({resource.RLIMIT_CPU: cpu_seconds + 5, resource.RLIMIT_FSIZE: CHILD_FILE_BYTES,
                    resource.RLIMIT_NOFILE: CHILD_OPEN_FILES})


STARTED_GROUPS: set[int] = set()


def leftover_processes() -> list[int]:
    """Live processes in any process group a Worker of this process started (the child and
    anything it spawned); there should be none once its run is over (the children left when
    done are waited for first: they are being reaped)."""
    settle()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp in STARTED_GROUPS and state != "Z":
            found.append(int(entry))
    return found


def _process_limit() -> int:
    """Threads count as processes for RLIMIT_NPROC; torch and the CUDA driver start a few dozen."""
    try:
        return len(os.listdir("/proc/self/task")) + 256
    except OSError:
        return 512


class Worker:
    """A grading child, started early so that its imports and CUDA set-up overlap the build.

    The child loads nothing of the student's until run() hands it a job. The time
    limit counts from then; cancel() (or leaving a `with` block) kills it and its group.
    """

    def __init__(self, *, backend: str, output_cap: int, cpu_limit_s: float, device: str | None = None,
                 torch: bool = False, cpu_threads: int = 1):
        """device: the GPU the child may see (a CUDA_VISIBLE_DEVICES entry); the parent's choice when None.
        torch: the job will time a PyTorch baseline, so the child imports torch while it starts.
        cpu_threads: the OS threads the child may keep busy at once (an emulated launch spread over
        cores): its CPU-time limit, a backstop behind the wall-clock one, counts them all, so it is
        cpu_limit_s times this (else a slow, correct kernel on 16 cores would be killed at a
        sixteenth of the time limit, as a crash)."""
        self._read_fd, write_fd = os.pipe()
        self._guard_fd, guard_write_fd = os.pipe()
        self._ready_fd, ready_write_fd = os.pipe()     # one byte once its imports and CUDA set-up are done
        env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP}
        if device is not None:
            env["CUDA_VISIBLE_DEVICES"] = device
        env["PYTHONPATH"] = os.pathsep.join(p for p in [_package_parent(), _numpy_parent(), env.get("PYTHONPATH", "")]
                                            if p)
        env["PYTHONUNBUFFERED"] = "1"
        env["OPENBLAS_NUM_THREADS"] = "1"              # numpy's BLAS starts no pool of threads: the child uses none
        _sweep_stale_folders_once()
        base, self.adapted = child_folder_base()
        self._workdir = tempfile.mkdtemp(prefix="grader-run-", dir=base)
        if os.geteuid() == 0:                           # the child drops to nobody: let it read its files
            os.chmod(self._workdir, 0o755)
        env["TMPDIR"] = env["HOME"] = self._workdir
        cpu = int(cpu_limit_s * max(1, cpu_threads)) + 30      # + start-up (imports, CUDA context)
        self.lowered = lowered_limits(cpu)              # what an inherited hard limit lowers, for result.json
        nproc = _process_limit()
        self._shared_fd = protocol.shared_area()      # where the child puts large outputs
        self.proc = subprocess.Popen(
            # Without torch the child needs nothing of site-packages: -S spares it the site
            # module's start-up (an editable install's import hook among it); PYTHONPATH finds grader.
            [sys.executable, *([] if torch else ["-S"]), "-m", "grader.run.child.worker", str(write_fd),
             str(guard_write_fd), backend, str(ready_write_fd)] + (["torch"] if torch else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(write_fd, guard_write_fd, ready_write_fd) + ((self._shared_fd,) if self._shared_fd is not None else ()),
            cwd=self._workdir, env=env,
            preexec_fn=lambda: _limits(cpu, nproc),
        )
        os.close(write_fd)
        os.close(guard_write_fd)
        os.close(ready_write_fd)
        STARTED_GROUPS.add(self.proc.pid)           # its process group (setsid): for leftover checks
        processes.started(self.proc.pid)
        self.output_cap = output_cap
        self._done = False
        self._reaper: threading.Thread | None = None     # reaping the child in the background (left when done)
        self._max_rss_kib = 0

    def wait_ready(self, timeout_s: float) -> float:
        """Wait (at most timeout_s) until the child has imported what it needs and set up CUDA, or
        has died; the seconds waited. Taking a GPU's lane after this keeps start-up out of it."""
        start = time.perf_counter()
        if self._ready_fd is not None:
            readable, _, _ = select.select([self._ready_fd], [], [], timeout_s)
            if readable:
                os.read(self._ready_fd, 1)
            os.close(self._ready_fd)
            self._ready_fd = None
        return time.perf_counter() - start

    def run(self, job: Job, *, time_limit_s: float, on_sent: Callable[[], None] | None = None,
            leave_when_done: bool = False, gate: Callable[[], None] | None = None) -> ChildRun:
        """Hand the job over and collect frames until the child exits or the limit passes.
        on_sent is called once the child has closed its result channel (it has sent everything,
        and is exiting): the GPU's lane can be handed on then.

        leave_when_done: once the channel has closed after the done frame, what is left in the
        child's stdout and stderr is read and the child is killed and reaped in the background,
        instead of waiting for its exit: tearing down a CUDA context took 0.15 s of every GPU
        grade. For the measuring process, which runs no submission host code, and for the
        recorder, whose end the measuring process's gate waits for (gone()).

        gate: the child is handed its job at once (it parses it, puts up the wall and loads the
        device code) but runs nothing of it until gate() has returned: the measuring process
        starts while the recorder, killed once its done frame is in, is still being torn down
        (its CUDA context took about 0.1 s of every grade), and runs no kernel until it is gone.
        The time limit counts from the gate.

        The job's libraries are read by the child, which may no longer be root by then: the
        submission's is copied into the child's own directory first."""
        proc = self.proc
        assert proc.stdin and proc.stdout and proc.stderr
        start = time.perf_counter()
        secret = protocol.new_key()
        job = dataclasses.replace(job, key=secret.hex(), gated=gate is not None,
                                  library=self._private_copy(job.library) if job.library else "")
        shared_bytes = job.output_bytes()
        if self._shared_fd is not None and protocol.size_shared_area(self._shared_fd, shared_bytes):
            job = dataclasses.replace(job, shared_fd=self._shared_fd, shared_bytes=shared_bytes)
        try:
            proc.stdin.write(json.dumps(job.to_json()).encode() + b"\n")     # one line (worker.main)
            if gate is not None:
                proc.stdin.flush()
                gate()
                start = time.perf_counter()
                proc.stdin.write(protocol.GO)
            proc.stdin.close()
        except BrokenPipeError:
            pass                                        # it died before the job: reported below
        out, err = CappedOutput(self.output_cap), CappedOutput(self.output_cap)
        done = (lambda data: protocol.ends_with_done(data, secret)) if leave_when_done else None
        results, reports, timed_out, forged, left = self._collect(out, err, deadline=start + time_limit_s,
                                                                  on_sent=on_sent, check=protocol.StreamCheck(secret),
                                                                  done=done)
        shared_fd, self._shared_fd = self._shared_fd, None       # kept open past _finish for the payloads
        returncode = self._finish(kill=timed_out or forged, wait=not left)
        frames, problem = protocol.parse(results, secret)
        try:
            shared, shared_problem = protocol.resolve_shared(frames, shared_fd if job.shared_bytes else None,
                                                             job.shared_bytes)
        finally:
            if shared_fd is not None:
                os.close(shared_fd)           # the mapping, where there is one, keeps the memory
        problem = problem or shared_problem
        sig = None
        if returncode is not None and returncode < 0:
            try:
                sig = signal.Signals(-returncode).name
            except ValueError:
                sig = f"signal {-returncode}"
        return ChildRun(frames=frames, returncode=returncode, timed_out=timed_out,
                        seconds=time.perf_counter() - start, stdout=out, stderr=err,
                        stream_problem=problem, signal_name=sig, blocked=parse_reports(bytes(reports)),
                        max_rss_kib=self._max_rss_kib, shared=shared)

    def _collect(self, out: CappedOutput, err: CappedOutput, *, deadline: float,
                 on_sent: Callable[[], None] | None, check: protocol.StreamCheck,
                 done: Callable[[bytearray], bool] | None = None) -> tuple[bytearray, bytearray, bool, bool, bool]:
        """Read the result channel, the guard's reports, stdout and stderr until all four are closed
        (the child has exited) or the deadline passes: (results, reports, timed out, forged, left
        early).

        Stopping rule: every stream at its end, the deadline, or bytes no grader wrote on the result
        channel (a forged frame: check) or the guard's pipe (forged_report); after those the child
        is killed at once, and the verdict says the grader's descriptors were written to. Where
        done is given, also the result channel's end once done(results) says its last frame is the
        done frame: what the other streams hold by then is read, and collecting ends (left early).
        select wakes at least every 0.5 s."""
        proc = self.proc
        results, reports = bytearray(), bytearray()
        sel = selectors.DefaultSelector()
        sel.register(self._read_fd, selectors.EVENT_READ, results)
        sel.register(self._guard_fd, selectors.EVENT_READ, reports)
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        timed_out = False
        open_streams = 4
        try:
            while open_streams:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(timeout=min(remaining, 0.5)):
                    chunk = _read(key)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                        if key.data is results and on_sent is not None:
                            on_sent()
                        if key.data is results and done is not None and done(results):
                            _drain(sel, reports)
                            return results, reports, False, forged_report(reports), True
                        continue
                    if key.data is results:
                        results += chunk
                        if check.feed(results):
                            return results, reports, False, True, False
                    elif key.data is reports:
                        if len(reports) < 1 << 16:
                            reports += chunk
                            if forged_report(reports):
                                return results, reports, False, True, False
                    else:
                        key.data.feed(chunk)
        finally:
            sel.close()
        return results, reports, timed_out, False, False

    def _close_shared(self) -> None:
        if self._shared_fd is not None:
            os.close(self._shared_fd)
            self._shared_fd = None

    def _private_copy(self, library: str) -> str:
        target = os.path.join(self._workdir, "submission.so")
        shutil.copyfile(library, target)
        os.chmod(target, 0o644)
        return target

    def cancel(self) -> None:
        if not self._done:
            self._finish(kill=True)

    def _finish(self, *, kill: bool, wait: bool = True) -> int | None:
        """End the child: wait for its exit (killing it first where kill, or after 10 s), or where
        not wait (it sent its done frame and is exiting: Worker.run's leave_when_done) note its peak
        memory, kill it and reap it in the background; then close what the parent held."""
        proc = self.proc
        if not wait:
            returncode = self._reap(timeout=0)
            if returncode is None:
                self._max_rss_kib = _peak_rss_kib(proc.pid)
                _kill_group(proc)
                reaper = threading.Thread(target=self._reap_in_background, name=f"reap-{proc.pid}", daemon=True)
                reaper.start()
                self._reaper = reaper
                _REAPERS[:] = [r for r in _REAPERS if r.is_alive()] + [reaper]
                self._close_fds()
                self._done = True
                return 0                # it had sent its done frame: its exit status is no longer read
        elif kill:
            _kill_group(proc)
        returncode = self._reap(timeout=10)
        if returncode is None:
            _kill_group(proc)
            returncode = self._reap(timeout=None)
        _kill_group(proc)                               # anything it left behind in its group
        processes.ended(proc.pid)
        self._close_fds()
        if not self._done:
            _remove_tree(self._workdir)
        self._done = True
        return returncode

    def gone(self) -> None:
        """Return once the child has ended and been reaped (a child left when done is being reaped
        in the background; one never run is killed now): nothing of it runs any more."""
        if self._reaper is not None:
            self._reaper.join()
        elif not self._done:
            self._finish(kill=True)

    def _reap_in_background(self) -> None:
        proc = self.proc
        self._reap(timeout=None)
        _kill_group(proc)
        processes.ended(proc.pid)
        _remove_tree(self._workdir)

    def _close_fds(self) -> None:
        proc = self.proc
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass
        if not self._done:
            os.close(self._read_fd)
            os.close(self._guard_fd)
            self._close_shared()
            if self._ready_fd is not None:
                os.close(self._ready_fd)
                self._ready_fd = None

    def _reap(self, *, timeout: float | None) -> int | None:
        """Wait for the child with wait4, which also reports its peak memory; None on timeout."""
        proc = self.proc
        if proc.returncode is not None:
            return proc.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG if deadline else 0)
            except ChildProcessError:
                return proc.poll()
            if pid:
                self._max_rss_kib = usage.ru_maxrss
                proc.returncode = os.waitstatus_to_exitcode(status)
                return proc.returncode
            if deadline is not None and time.monotonic() > deadline:
                return None
            time.sleep(0.01)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


_FALLBACK_BASES = ("/tmp", "/var/tmp", "/dev/shm")
STALE_FOLDER_S = 6 * 3600.0     # a child's folder lives as long as its run (minutes): older ones were left


@functools.cache
def _sweep_stale_folders_once() -> None:
    _sweep_stale_folders(tempfile.gettempdir())


def _sweep_stale_folders(*bases: str) -> None:
    """Remove this user's children's folders that a killed grader left behind (a SIGKILL gives
    it no chance to): those older than STALE_FOLDER_S (Worker does it once a process)."""
    now = time.time()
    for base in bases + _FALLBACK_BASES:
        with contextlib.suppress(OSError):
            for entry in os.scandir(base):
                if not entry.name.startswith("grader-run-") or not entry.is_dir(follow_symlinks=False):
                    continue
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if st.st_uid == os.geteuid() and now - st.st_mtime > STALE_FOLDER_S:
                        _remove_tree(entry.path)


def _others_can_enter(folder: str) -> bool:
    """Whether a user who owns nothing on the way (nobody) can reach folder: every folder from
    the root down to it has the others' execute bit."""
    path = os.path.realpath(folder)
    while True:
        try:
            if not os.stat(path).st_mode & 0o001:
                return False
        except OSError:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


@functools.cache
def child_folder_base() -> tuple[str | None, list[str]]:
    """Where the children's own folders go, and what the grader changed to find it (for result.json).

    The temporary directory (TMPDIR), unless the grader runs as root and the child, which drops
    to nobody, could not enter it (a TMPDIR under a private folder, as `mktemp -d` makes): then
    the first of /tmp, /var/tmp and /dev/shm that it can enter, and the change is said. None of
    them: the temporary directory all the same (the child will report what it could not open)."""
    base = tempfile.gettempdir()
    if os.geteuid() != 0 or _others_can_enter(base):
        return None, []
    for fallback in _FALLBACK_BASES:
        if os.path.isdir(fallback) and _others_can_enter(fallback) and os.access(fallback, os.W_OK):
            return fallback, [f"the children's folders are under {fallback}: they run as nobody, who cannot "
                              f"enter the temporary directory {base} (a folder on its way lacks o+x)"]
    return None, [f"the children run as nobody, who cannot enter the temporary directory {base}, and none of "
                  f"{', '.join(_FALLBACK_BASES)} could be used instead: give TMPDIR a folder others can enter"]


_REAPERS: list[threading.Thread] = []       # the threads reaping children left when done


def settle(timeout_s: float = 10.0) -> None:
    """Wait (at most timeout_s) for the children left when done to be reaped."""
    deadline = time.monotonic() + timeout_s
    for reaper in list(_REAPERS):
        reaper.join(max(0.0, deadline - time.monotonic()))
        if not reaper.is_alive():
            with contextlib.suppress(ValueError):
                _REAPERS.remove(reaper)


def _peak_rss_kib(pid: int) -> int:
    """A live child's peak resident memory (VmHWM), 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _read(key: selectors.SelectorKey) -> bytes:
    """What one of a child's streams holds now (b"" at its end)."""
    return os.read(key.fd if isinstance(key.fileobj, int) else key.fileobj.fileno(), 1 << 20)


def _drain(sel: selectors.BaseSelector, reports: bytearray) -> None:
    """Read what the streams still registered (the guard's reports, stdout, stderr: the result
    channel has ended) hold now, without waiting for their end."""
    while ready := sel.select(timeout=0):
        for key, _ in ready:
            chunk = _read(key)
            if not chunk:
                sel.unregister(key.fileobj)
            elif key.data is reports:
                if len(reports) < 1 << 16:
                    reports += chunk
            else:
                key.data.feed(chunk)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


@functools.cache
def _numpy_parent() -> str:
    """The folder numpy is installed in: the child runs with -S (no site-packages: a faster start)
    and imports numpy for the stopping rule (core/stats.py)."""
    import importlib.util

    spec = importlib.util.find_spec("numpy")
    return os.path.dirname(os.path.dirname(spec.origin)) if spec and spec.origin else ""


def _package_parent() -> str:
    from grader.core.locations import PACKAGE_DIR

    return str(PACKAGE_DIR.parent)
