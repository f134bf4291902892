"""Running a submission's GPU (or emulated) work in a child process: Worker, and the ChildRun it
returns.

The child gets a time limit, resource limits, a private working directory
and a scrubbed environment; results come back on a private pipe (never the
child's stdout, which student code can write to), and stdout and stderr
are captured with their head and tail kept. Whatever the child does, the
parent gets a ChildRun back: a faulting or hanging kernel is a status.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from grader.core import folders, processes
from grader.core.backend import Backend
from grader.core.environment import contract_environment
from grader.core.view import View
from grader.run import groups, protocol, spawn, streams
from grader.run.child.guard import Blocked, parse_reports
from grader.run.streams import CappedOutput
from grader.toolchain import hostlibs

if TYPE_CHECKING:          # the job's classes: imported after the children start (grade/launcher.py)
    from grader.core.contract import Job


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
    memory_killed: bool = False                               # killed by its control group's memory limit
    extra: dict = field(default_factory=dict)
    shared: object = None                                     # the shared area the payloads may view


def _planned_view(backend: Backend, workdir: str, *, wrapper: bool, torch: bool):
    """(the child's view, the pipe its entry says how it went on, the launcher that enters it), or
    (None, None, ""): a root of its own on the CPU emulator (spawn.child_view); not for a GPU's
    children, whose drivers need more than it holds, nor under a wrapper or with torch, nor where
    no C compiler builds the launcher (toolchain/hostlibs.build_launcher)."""
    launcher = None if backend.on_gpu or wrapper or torch else hostlibs.build_launcher()
    if launcher is None:
        return None, None, ""
    return spawn.child_view(workdir), os.pipe(), str(launcher)


def _view_said(said: tuple[int, int]) -> tuple[str, str]:
    """What the child's entry into its view said (the launcher: spawn.in_view), in result.json's
    words: (its root, its process numbers)."""
    os.close(said[1])
    with os.fdopen(said[0], "rb") as f:
        text = f.read(500).decode(errors="replace")
    root, pids = View.said(text)
    failed = View.failed(text)                 # the child never started: its death says the rest
    return (f"{root}; then the launcher could not go on ({failed})" if failed else root), pids


def _child_environment(backend: Backend, device: str | None, *, home: str, torch: bool) -> dict[str, str]:
    """The child's whole environment (core/environment.py): its backend's own variables, the GPU it
    may see, where its packages are (spawn.python_path), home its own folder; nothing else of the
    grader's (a class folder, a token, the grader's PYTHONPATH)."""
    extra = {"PYTHONPATH": spawn.python_path(torch=torch), "PYTHONUNBUFFERED": "1",
             "OPENBLAS_NUM_THREADS": "1"}        # numpy's BLAS starts no pool of threads: the child uses none
    if device is not None and backend.visible_devices:
        extra[backend.visible_devices] = device
    return contract_environment(home=home, keep=backend.environment, extra=extra)


@dataclass(frozen=True)
class ChildSpec:
    """What a grading child is started as: Worker's one argument."""

    backend: Backend
    output_cap: int                 # bytes of its stdout and of its stderr kept (head and tail)
    cpu_limit_s: float              # its time limit, from which its CPU-time backstop is set (below)
    # the GPU the child may see (an entry of the backend's visible_devices variable,
    # CUDA_VISIBLE_DEVICES); the parent's choice when None
    device: str | None = None
    torch: bool = False             # the job will time a PyTorch baseline: the child imports torch while it starts
    # the OS threads the child may keep busy at once (an emulated launch spread over cores): its
    # CPU-time limit, a backstop behind the wall-clock one, counts them all, so it is cpu_limit_s
    # times this (else a slow, correct kernel on 16 cores would be killed at a sixteenth of the time
    # limit, as a crash)
    cpu_threads: int = 1
    # a command the child runs under (Nsight Compute's, run/profiling.py): it is the process started
    # and the child its child; whether ncu passes the child's descriptors on is not relied on (the
    # counters come back in ncu's log, and worker.py drops a frame it cannot send); its folder is
    # open to the child's user, which ncu's injected library writes into
    wrapper: tuple[str, ...] | None = None
    # False: a child of a GPU backend that never opens the device (the recorder without a GPU,
    # run/child/recorder.py): no CUDA context at its start, and its job says offline
    gpu: bool = True
    # a child that will run the submission's host code on the GPU (the recorder there): its CUDA
    # context is made behind its file-system wall, not at its start, so that the driver's own
    # threads (where a host callback runs) start behind the wall too (run/child/walls.py)
    recorder: bool = False


class Worker:
    """A grading child, started early so that its imports and CUDA set-up overlap the build.

    The child loads nothing of the student's until run() hands it a job. The time
    limit counts from then; cancel() (or leaving a `with` block) kills it and its group.
    """

    def __init__(self, spec: ChildSpec):
        """The child started as spec says (ChildSpec: its backend, its caps and limits, what it
        runs under and which part of a grade it plays)."""
        backend, device, torch, wrapper, recorder = spec.backend, spec.device, spec.torch, spec.wrapper, spec.recorder
        gpu, output_cap = spec.gpu, spec.output_cap
        self.gpu = gpu and backend.on_gpu
        self._read_fd, write_fd = os.pipe()
        self._guard_fd, guard_write_fd = os.pipe()
        self._ready_fd, ready_write_fd = os.pipe()     # one byte once its imports and CUDA set-up are done
        folders.sweep_stale_folders_once()
        base, self.adapted = folders.child_folder_base()
        self._workdir = tempfile.mkdtemp(prefix="grader-run-", dir=base)
        if os.geteuid() == 0:                           # the child drops to nobody: let it read its files
            os.chmod(self._workdir, 0o1777 if wrapper else 0o755)
        env = _child_environment(backend, device, home=self._workdir, torch=torch)
        self.environment = sorted(env)                  # its variables' names, for result.json's sandbox
        view, said, launcher = _planned_view(backend, self._workdir, wrapper=bool(wrapper), torch=torch)
        cpu = int(spec.cpu_limit_s * max(1, spec.cpu_threads)) + 30      # + start-up (imports, CUDA context)
        self.lowered = spawn.lowered_limits(cpu)              # what an inherited hard limit lowers, for result.json
        self.group, nproc, self.held = spawn.child_limits(cpu)   # memory counted whole, processes bounded; how
        self._shared_fd = protocol.shared_area()      # where the child puts large outputs
        args, view_fds = spawn.in_view(view, said[1] if said else None, [
            # Without torch the child needs nothing of site-packages: -S spares it the site
            # module's start-up (an editable install's import hook among it); PYTHONPATH finds grader.
            *(wrapper or []), sys.executable, *([] if torch else ["-S"]), "-m", "grader.run.child.worker", str(write_fd),
            str(guard_write_fd), backend.name, str(ready_write_fd)] + (["torch"] if torch else [])
            + (["nogpu"] if backend.on_gpu and not gpu else [])
            + (["walledgpu"] if self.gpu and recorder else [])
            + ([f"shared={self._shared_fd}"] if self._shared_fd is not None else []), launcher=launcher)
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(write_fd, guard_write_fd, ready_write_fd, *view_fds)
            + ((self._shared_fd,) if self._shared_fd is not None else ()),
            cwd=self._workdir, env=env,
            preexec_fn=lambda: spawn.limits_in_child(cpu, nproc, 0 if self.gpu or not backend.on_gpu
                                                     else spawn.BESIDE_THE_LANE_NICE, self.group),
        )
        self.root, self.pids = _view_said(said) if said is not None else ("", "")
        os.close(write_fd)
        os.close(guard_write_fd)
        os.close(ready_write_fd)
        groups.started(self.proc.pid)                      # its process group (setsid): for leftover checks
        processes.started(self.proc.pid)
        self.output_cap = output_cap
        self._done = False
        self._reaper: threading.Thread | None = None     # reaping the child in the background (left when done)
        self._max_rss_kib, self._memory_killed = 0, False     # its peak; whether its group's memory limit killed it

    def wait_ready(self, timeout_s: float) -> float:
        """Wait (at most timeout_s) until the child has imported what it needs and set up CUDA, or
        has died; the seconds waited. Taking a GPU's lane after this keeps start-up out of it, but
        for the recorder on a GPU (recorder=True), which makes its context behind its wall, once its
        job has come: in the lane (it is the fallback where the recorder without a GPU could not record)."""
        start = time.perf_counter()
        if self._ready_fd is not None:
            poll = select.poll()            # not select(): a batch's children pass descriptor 1024
            poll.register(self._ready_fd, select.POLLIN)
            if poll.poll(max(0, int(timeout_s * 1000))):
                os.read(self._ready_fd, 1)
            os.close(self._ready_fd)
            self._ready_fd = None
        return time.perf_counter() - start

    def preload(self, libraries: list[str], job: Job | None = None) -> None:
        """Have the child load these libraries of the grader's own (never the submission's) now,
        before its job: a measuring process then starts the CUDA runtime of the reference library
        while the recorder records, not in the GPU's lane. With the job it will be handed, the
        shared area is sized for it now, and the child maps and populates the room of the timed
        outputs meanwhile too (page-locked when they are sent, in the lane). A line on stdin
        before the job's (worker.main); a child that has died is left for run() to report."""
        proc = self.proc
        request: dict = {"preload": [str(p) for p in libraries]}
        if job is not None and self._shared_fd is not None and job.timed_output_bytes():
            area = job.output_bytes()
            if protocol.size_shared_area(self._shared_fd, area):
                request.update(area=area, room=job.timed_output_bytes())
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

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
        secret = protocol.new_key()
        job, start = self._hand_over(job, secret, gate)
        out, err = CappedOutput(self.output_cap), CappedOutput(self.output_cap)
        done = (lambda data: protocol.ends_with_done(data, secret)) if leave_when_done else None
        got = streams.ChildStreams(self.proc, self._read_fd, self._guard_fd, out, err).collect(
            deadline=start + time_limit_s, on_sent=on_sent, check=protocol.StreamCheck(secret), done=done)
        shared_fd, self._shared_fd = self._shared_fd, None       # kept open past _finish for the payloads
        returncode = self._finish(kill=got.timed_out or got.forged, wait=not got.left_early)
        frames, problem = protocol.parse(got.results, secret)
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
        return ChildRun(frames=frames, returncode=returncode, timed_out=got.timed_out,
                        seconds=time.perf_counter() - start, stdout=out, stderr=err,
                        stream_problem=problem, signal_name=sig, blocked=parse_reports(bytes(got.reports)),
                        max_rss_kib=self._max_rss_kib, shared=shared, memory_killed=self._memory_killed)

    def _hand_over(self, job: Job, secret: bytes, gate: Callable[[], None] | None) -> tuple[Job, float]:
        """Write the job (signed with secret, the library copied into the child's folder, the
        shared area sized for its outputs) as one line, then, where gated, the go byte once gate()
        has returned: the job as sent, and when the child's time started."""
        proc = self.proc
        assert proc.stdin and proc.stdout and proc.stderr
        start = time.perf_counter()
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
        return job, start

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
                self._max_rss_kib = max(groups.peak_rss_kib(proc.pid), self._group_peak_kib())
                groups.kill_group(proc)
                reaper = threading.Thread(target=self._reap_in_background, name=f"reap-{proc.pid}", daemon=True)
                reaper.start()
                self._reaper = reaper
                groups.keep_reaper(reaper)
                self._close_fds()
                self._done = True
                return 0                # it had sent its done frame: its exit status is no longer read
        elif kill:
            groups.kill_group(proc)
        returncode = self._reap(timeout=10)
        if returncode is None:
            groups.kill_group(proc)
            returncode = self._reap(timeout=None)
        groups.kill_group(proc)                               # anything it left behind in its group
        processes.ended(proc.pid)
        groups.forget_if_empty(proc.pid)
        self._close_fds()
        if not self._done:
            self._max_rss_kib = max(self._max_rss_kib, self._group_peak_kib())
            self._remove_group()
            folders.remove_tree(self._workdir)
            spawn.remove_view(self._workdir)
        self._done = True
        return returncode

    def _group_peak_kib(self) -> int:
        """The peak of the child's control group (every page it touched, shared ones too), KiB."""
        if self.group is None:
            return 0
        self._memory_killed = self._memory_killed or self.group.memory_kills() > 0
        return (self.group.memory_peak_bytes() or 0) // 1024

    def _remove_group(self) -> None:
        """The child's control group, once it has ended (whatever it left there is ended too)."""
        group, self.group = self.group, None
        if group is not None:
            group.remove()

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
        groups.kill_group(proc)
        processes.ended(proc.pid)
        groups.forget_if_empty(proc.pid)
        self._remove_group()
        folders.remove_tree(self._workdir)
        spawn.remove_view(self._workdir)

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
