"""The child process: loads the submission, runs the cases (and the timing), sends the outputs.

Started by sandbox.Worker as `python -m grader.run.child.worker RESULT_FD GUARD_FD BACKEND READY_FD [torch] [shared=FD]
[nogpu]`; it creates its CUDA context at once, through the driver (no torch, which took 2 to 3.5 s to
import; torch only where the job times a PyTorch baseline; no context at all with nogpu, the
recorder without a GPU), writes a byte on
READY_FD, then reads the job as one line of JSON on stdin. The order after that is the point of
this module:

1. load the grader's reference kernels and everything else the grader needs;
2. limits: the device heap, a host-memory cap measured from here, privileges dropped
   when running as root;
3. the walls: the file-system wall of fswall.py (Landlock: the class, the reports, the cache and the
   grader's package out of reach), then the seccomp filter of guard.c, on every thread;
4. only then the submission's library (its static initialisers run inside the wall), or, for the
   measuring process, the submission's device code;
5. a gated job (the measuring process's) then waits for protocol.GO on stdin: the parent sends it
   once the recorder is gone, so no kernel of this job runs while anything of the recorder does.

It computes no reference and judges nothing: it sends each output back on the
authenticated result channel and the parent decides.
"""

from __future__ import annotations

import ctypes
import fcntl
import importlib
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass

T0 = time.perf_counter()

from grader.core import stats  # noqa: E402 - imports numpy only where the stopping rule first runs
from grader.core.backend import Backend, named  # noqa: E402
from grader.core.contract import (  # noqa: E402
    CaseFrame,
    CaseJob,
    DoneFrame,
    FatalFrame,
    HelloFrame,
    Job,
    RecordingFrame,
    RefusedFrame,
    Role,
)
from grader.run import protocol  # noqa: E402
from grader.run.child.backends import count_differences  # noqa: E402
from grader.run.child.buffers import InputFiles, allocate, output_meta  # noqa: E402,F401 - the cases' buffers
from grader.run.child.floors import run_calibration  # noqa: E402
from grader.run.child.replay import Refused  # noqa: E402 - the measuring process refuses a recording
from grader.run.child.sending import NullSender, Sender, Unheard, map_ahead  # noqa: E402
from grader.run.child.timing import run_timing  # noqa: E402
from grader.run.child.walls import Unwalled, behind_the_wall, charge_before_the_cap  # noqa: E402


def run_case(backend, cj: CaseJob, job: Job, files: InputFiles, sender: Sender,
             reverse_check: bool) -> bool:
    """Run one case; send its outputs. Returns False when the process cannot go on."""
    pad = job.guard_floats
    views, fulls = allocate(backend, cj, pad, files)
    frame = CaseFrame(cj.name)
    # The grader's buffers the kernel is given but must not change (its inputs), checked after.
    kept = [b.name for b in cj.buffers if b.role == "in" and b.floats]
    kept_sums = backend.checksums([views[n] for n in kept])
    backend.reset_launch_log()
    backend.prepare_call()
    outcome = backend.launch_submission(cj.launch, views)
    if outcome.ok:
        outcome = backend.synchronize()
    frame.launches = backend.launch_log()
    if not outcome.ok:
        frame.error, frame.fault, frame.fatal = outcome.error, outcome.fault, outcome.fatal
        sender.channel.send(frame)
        # A sticky CUDA error, or a fault outside every buffer (a wild pointer), ends the run.
        return not outcome.fatal and not (outcome.fault and outcome.fault.buffer is None)
    frame.ok = True
    mine = [b for b in cj.buffers if b.role == "out" and not b.chain]
    repeat = backend.repeats_checks and not cj.timed
    second_fulls = _second_run(backend, _Launched(cj, views, fulls, mine, pad), frame, reverse_check) \
        if reverse_check or repeat else {}
    sent = {b.name: fulls[b.name] for b in mine}
    if cj.chain is not None:
        res = backend.reference_call(cj.chain, views)
        res = backend.synchronize() if res.ok else res
        if res.ok:
            sent.update({b.name: fulls[b.name] for b in cj.buffers if b.role == "out" and b.chain})
        else:
            frame.chain_error = res.error
    frame.clobbered = [n for n, a, b in zip(kept, kept_sums, backend.checksums([views[n] for n in kept]), strict=False) if a != b]
    frame.outputs = output_meta(sent, pad)
    regions = list(sent.values())
    if second_fulls and not job.order_exact:
        frame.second_outputs = output_meta(second_fulls, pad)
        regions += list(second_fulls.values())
    sender.send(backend, frame, regions)
    backend.release_case()
    return True


@dataclass(frozen=True)
class _Launched:
    """A case whose launch ran: its buffers (the views the kernel saw, the padded fulls around
    them), the outputs it wrote, and their guard's floats."""

    cj: CaseJob
    views: dict
    fulls: dict
    outputs: list
    pad: int


def _second_run(backend, ran: _Launched, frame: CaseFrame, reverse: bool) -> dict:
    """The same launch again on fresh outputs: on the CPU emulator with blocks and threads in
    reverse order, on a GPU as it comes; on both, after the first run, with whatever it left in the
    file's __device__ variables (a workspace nothing resets carries its sums into this run). Any
    difference, bit for bit, is a race or a missing barrier; where the exercise lets a sum's order
    vary, the parent compares the values within the tolerance instead. What it found goes into
    frame; returns the second run's outputs (none when it failed)."""
    second_fulls, views2 = {}, dict(ran.views)
    for b in ran.outputs:
        second_fulls[b.name], views2[b.name] = backend.output(b.floats, ran.pad, b.name, b.init)
    backend.set_reverse(reverse)
    backend.prepare_call(again=True)         # what the first run left in the file's variables stays, as in use
    second = backend.launch_submission(ran.cj.launch, views2)
    if second.ok:
        second = backend.synchronize()
    backend.set_reverse(False)
    frame.second_kind = "reverse" if reverse else "repeat"
    if not second.ok:
        frame.second_error, frame.second_fault = second.error, second.fault
        return {}
    differs = sum(count_differences(backend.read(ran.fulls[b.name]), backend.read(second_fulls[b.name]))
                  for b in ran.outputs)
    frame.second_differs, frame.second_diff_count = differs > 0, differs
    return second_fulls


def _import_quietly(*names: str) -> None:
    """Import modules in a thread; a failure shows where the module is first used, not here."""
    try:
        for name in names:
            importlib.import_module(name)
    except ImportError:
        pass


def preload(backend: Backend, with_torch: bool, gpu: bool = True, context: bool = True) -> None:
    """What every job needs, done before the job arrives (the parent is still building). gpu
    False: the recorder without a GPU, which never opens the device. context False: the recorder on
    the GPU, whose context is made behind its wall (walls.behind_the_wall)."""
    # numpy (the stopping rule's bootstrap, grader/core/stats.py) imported beside the driver's start:
    # ctypes lets go of the interpreter while the driver starts.
    # numpy.random by name: numpy imports it lazily, on first use, which inside the wall is a blocked openat
    # The recorder without a GPU runs no stopping rule (its rounds run to max_samples) and never
    # imports numpy: its start was the longer for it (0.13 to 0.26 s of a warm grade's wait for it).
    numpy_import = threading.Thread(target=_import_quietly, args=("numpy", "numpy.random"), daemon=True)
    if gpu:
        numpy_import.start()
    if backend.on_gpu and gpu and context:
        _child_class(backend.child.run).open_context(backend)     # CudaBackend's: the device's primary context
        if with_torch:
            import torch  # noqa: PLC0415 - only where a baseline is timed: its import takes 2 to 3.5 s

            torch.empty(1, device="cuda")
    # Everything the grader imports later is imported by now (this module's imports): after the wall
    # nothing may be written (no .pyc), and after privileges are dropped the package may be unreadable.
    if gpu:
        numpy_import.join()
        # The stopping rule run once on made-up rounds: whatever numpy loads on first use, it loads now.
        stats.fraction_interval([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], resamples=4)
    for module in backend.child.modules():      # the classes its roles run (the recorder's, the replay's)
        importlib.import_module(module)


def place_descriptors(fds: list[int]) -> dict[int, int]:
    """The grader's descriptors moved to 3, 4, 5, ... in the order given, whatever numbers the
    parent's table gave them (a batch grading a dozen at once holds dozens of pipes): the child's
    layout is the same in every grade, so a launcher writing blindly to the low descriptors meets
    the result channel, and is caught, inside a batch as in a lone grade. Done first, before the
    CUDA driver opens anything. Returns each moved descriptor's new number. One not open (which a
    wrapper such as Nsight Compute may not have passed on) stays where it was, and so does one whose
    slot holds a descriptor not the grader's (a wrapper's injected library may have opened it
    before this process's main): that one is never closed."""
    def held(fd: int) -> bool:
        try:
            fcntl.fcntl(fd, fcntl.F_GETFD)
            return True
        except OSError:
            return False

    first_free = 3 + len(fds)
    copies = []
    for fd in fds:
        try:
            copies.append(fcntl.fcntl(fd, fcntl.F_DUPFD, first_free))
        except OSError:
            copies.append(None)
    placed = {}
    for at, (fd, copy) in enumerate(zip(fds, copies, strict=False), start=3):
        if copy is None:
            continue
        if at not in fds and held(at):
            os.close(copy)
            continue
        os.dup2(copy, at)
        os.close(copy)
        placed[fd] = at
    for fd in placed:
        if fd >= first_free:            # below it, the slot now holds another of ours
            os.close(fd)
    return placed


def main() -> int:
    # RESULT_FD GUARD_FD BACKEND READY_FD [torch] [nogpu] [shared=FD]: the descriptors as the parent numbered them
    flags = sys.argv[5:]
    shared_at = next((int(f.partition("=")[2]) for f in flags if f.startswith("shared=")), None)
    given = [int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])] + ([shared_at] if shared_at is not None else [])
    placed = place_descriptors(given)
    result_fd, guard_fd, ready_fd = (placed.get(fd, fd) for fd in given[:3])
    late = "walledgpu" in flags               # the recorder on the GPU: no CUDA before its wall
    try:
        preload(named(sys.argv[3]), "torch" in flags, gpu="nogpu" not in flags, context=not late)
    except Exception:  # noqa: BLE001 - the job's own load reports the failure
        pass
    t_ready = time.perf_counter() - T0
    _say_ready(ready_fd)                    # tell the parent: ready (it takes the GPU's lane now)
    line = sys.stdin.buffer.readline()
    t_preloaded = None
    while line.startswith(PRELOAD):           # the grader's own libraries, before the job (Worker.preload)
        _preload(json.loads(line), placed.get(shared_at, shared_at) if shared_at is not None else None,
                 start=not late)
        t_preloaded = time.perf_counter() - T0
        line = sys.stdin.buffer.readline()
    job = Job.from_json(json.loads(line))
    channel = protocol.Channel(result_fd, bytes.fromhex(job.key))
    if job.role == Role.PROFILE:
        channel = Unheard(channel)
    t_job = time.perf_counter() - T0
    loaded = _load(job, channel, guard_fd, placed, (t_ready, t_job), late)
    if loaded is None:
        return 0
    backend, files, sender, sandbox = loaded
    t_loaded = time.perf_counter() - T0
    if job.gated and sys.stdin.buffer.read(len(protocol.GO)) != protocol.GO:
        return 0                            # the parent ended before the recorder did: nothing runs
    channel.send(HelloFrame(job.backend.name, os.getpid(), time.perf_counter() - T0, t_ready, t_job, sandbox,
                            loaded_t=t_loaded, preloaded_t=t_preloaded))
    done = _run_job(backend, job, files, sender, channel)
    if done is None:
        return 0
    if job.role == Role.RECORD:
        channel.send(RecordingFrame(backend.finish()))
    done.t = time.perf_counter() - T0
    channel.send(done)
    # Everything is sent: closing the channel now lets the parent hand the GPU's lane on while
    # this process exits (tearing down a CUDA context takes a moment).
    try:
        os.close(result_fd)
    except OSError:
        pass                                # the counters' process under ncu, which may not have passed it
    return 0


def _load(job: Job, channel, guard_fd: int, placed: dict[int, int], times: tuple[float, float], late: bool):
    """The job's backend, its input files and its sender, behind the wall (walls.behind_the_wall):
    (backend, files, sender, sandbox), or None once a frame saying why nothing was loaded is sent.
    times: when the child was ready and when the job arrived, for the hello frame of a refusal.
    late: the backend (and with it the CUDA context) is made behind the file-system wall."""
    shared_fd = placed.get(job.shared_fd, job.shared_fd)
    if shared_fd is not None and job.shared_bytes:
        charge_before_the_cap(shared_fd, job.shared_bytes)
    sender: Sender | NullSender = Sender(channel, _shared_room(shared_fd, job.shared_bytes))
    try:
        files = InputFiles(job.input_files() if job.role != Role.RECORD else [])
        if job.role in (Role.RECORD, Role.PROFILE):     # the profile's outputs are nobody's to judge
            sender = NullSender()
        backend, sandbox = behind_the_wall(lambda: _backend_for(job), job, guard_fd, late=late)
    except Refused as refused:
        channel.send(RefusedFrame([str(refused)]))
        return None
    except Unwalled as unwalled:            # said as the sandbox it had: the parent's verdict names the machine
        channel.send(HelloFrame(job.backend.name, os.getpid(), time.perf_counter() - T0, *times, unwalled.sandbox))
        channel.send(FatalFrame("load", f"not loaded: {unwalled} (limits.require_read_wall)"))
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to load is reported, not raised
        channel.send(FatalFrame("load", f"{type(exc).__name__}: {exc}"))
        return None
    if isinstance(sender, Sender):
        try:
            sender.prepare(job)
        except Exception:  # noqa: BLE001 - room not mapped ahead is mapped when the outputs are sent
            pass
    return backend, files, sender, sandbox


PRELOAD = b'{"preload"'
_PRELOADED: list[ctypes.CDLL] = []         # kept loaded: the job's backend opens the same files again


_AHEAD: list[protocol.SharedWriter] = []      # the shared area the preload mapped room in



def _shared_room(fd: int, nbytes: int) -> protocol.SharedWriter | None:
    """The job's shared area (none where it has none): the one the preload mapped room in where
    it is the same area, else a fresh one."""
    shared = _AHEAD.pop() if _AHEAD else None
    if shared is not None and shared.fd == fd and shared.size == nbytes:
        return shared
    return protocol.SharedWriter(fd, nbytes) if fd >= 0 and nbytes else None


def _preload(request: dict, shared_fd: int | None, start: bool = True) -> None:
    """Load the grader's libraries the parent named (the reference library: its CUDA runtime started
    on this process's context, grader_rt_init), before the job and its wall, as the job's backend
    would load them anyway; the backend's own dlopen of the same file then finds it loaded. A
    failure here is left to the job's own load to report. Where the parent sized the shared area
    (area) and named the timed outputs' sizes (room), that room is mapped and populated now too,
    while the recorder records: not on the way from the recording to the lane (Sender.prepare).
    start False (the recorder on the GPU): the libraries are loaded (mapped, so readable behind the
    wall), and their runtime started only behind it."""
    for path in request.get("preload", []):
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        except OSError:
            continue
        _PRELOADED.append(lib)
        init = getattr(lib, "grader_rt_init", None)
        if init is not None and start:
            init()
    area, room = request.get("area"), request.get("room") or []
    if shared_fd is None or not isinstance(area, int) or area <= 0 or not room:
        return
    shared = protocol.SharedWriter(shared_fd, area)
    try:
        map_ahead(shared, [n for n in room if isinstance(n, int)])
    except Exception:  # noqa: BLE001 - the job maps its room itself
        return
    _AHEAD[:] = [shared]


def _say_ready(ready_fd: int) -> None:
    try:
        os.write(ready_fd, b"1")
    except OSError:
        pass
    os.close(ready_fd)


def _child_class(path: str):
    """The class a Backend's ChildClasses names ("module:Class")."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _backend_for(job: Job):
    """The class the job's backend names for its role (core/backend.py's Backend.child), built from
    the job: the recorder's, the measuring process's, the grader's own kernels on a GPU
    (calibration), the CPU emulator's."""
    path = getattr(job.backend.child, job.role.value)
    if not path:
        raise ValueError(f"the {job.backend.name} backend has no child for the {job.role.value} role")
    return _child_class(path).from_job(job)



def _run_job(backend, job: Job, files: InputFiles, sender, channel: protocol.Channel) -> DoneFrame | None:
    """Every check case, then the timing (or the verification cases); the done frame to send, or
    None when a fatal frame was sent and the run ends here."""
    for cj in job.cases:
        try:
            go_on = run_case(backend, cj, job, files, sender, job.reverse_check)
        except Refused as refused:          # the emulator refuses a launcher's stream work as the replay does
            channel.send(RefusedFrame([str(refused)]))
            return None
        except Exception as exc:  # noqa: BLE001
            channel.send(FatalFrame(cj.name, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=4)))
            return None
        if not go_on:
            return None
    done = DoneFrame(checks_t=time.perf_counter() - T0)
    if job.timing is not None:
        try:
            sampled = (run_calibration if job.calibrate else run_timing)(backend, job, files, sender)
            done.sampled_t = sampled - T0 if sampled else None
        except Refused as refused:          # a recording short of the timing's calls (measurer.py)
            channel.send(RefusedFrame([str(refused)]))
            return None
        except Exception as exc:  # noqa: BLE001
            channel.send(FatalFrame("timing", f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=4)))
            return None
    else:
        for cj in job.verify_cases:
            try:
                if not run_case(backend, cj, job, files, sender, False):
                    return None
            except Refused as refused:
                channel.send(RefusedFrame([str(refused)]))
                return None
    return done


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)          # skip the interpreter's teardown (torch's, where loaded, takes about half a second)
