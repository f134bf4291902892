"""A GPU grade's two children, in order: the recorder runs the submission's host code over
stand-ins and records its launches; once it has ended, the measuring process replays them from the
device code alone (run/child/replay.py says why). run_worker runs a job the way its backend does.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grader.core.backend import Api
from grader.core.contract import (
    FatalFrame,
    Job,
    OfflinePart,
    RecordedOp,
    Recording,
    RecordingFrame,
    RefusedFrame,
    ReplayPart,
    Role,
)
from grader.core.limits import spread_threads
from grader.run.child.replay import FORGED, STREAM_KINDS, malformed, stream_op_problem
from grader.run.protocol import NEEDS_GPU_EXIT
from grader.run.sandbox import ChildRun, ChildSpec, Worker
from grader.toolchain.build import device_code, device_variables, uses_device_heap
from grader.toolchain.outcome import demangle


@dataclass(frozen=True)
class DeviceCode:
    """What the build gives the measuring process and the recorder: the fatbinaries the measuring
    process loads, its static variables' device names, whether its device code calls malloc; for
    the recorder without a GPU, each kernel's parameter layout and the stand-in driver."""

    fatbins: list[str]
    variables: list[str] = field(default_factory=list)
    heap: bool = False
    kernel_params: dict[str, list[list[int]]] = field(default_factory=dict)
    driver_stand_in: Path | None = None


@dataclass(frozen=True)
class ReplayPlan:
    """What a recording's replay is given beside the job: the submission's device code, the
    launcher's name (None: the kernel alone; the recording's refusals read it), and each child's
    time limit."""

    code: DeviceCode
    launcher: str | None
    time_limit_s: float


@dataclass
class ReplayRun:
    """A GPU grade's two children: the recorder (the submission's host code, its launches recorded)
    and the measuring process (the recorded launches replayed from the device code alone)."""

    recorder: ChildRun
    measurer: ChildRun | None = None        # None: the recorder failed, or its recording was refused
    refusals: list[str] = field(default_factory=list)
    gate_wait_s: float = 0.0                # how long the measuring process waited for the recorder's end
    replay: Job | None = None               # the measuring process's job (the counters' pass replays it again)

    @property
    def judged(self) -> ChildRun:
        """The run whose frames the verdict reads: the measurer's, or the recorder's where it failed."""
        return self.measurer if self.measurer is not None else self.recorder


def for_recorder(job: Job) -> Job:
    """The recorder's job: the same calls, no input data (it runs no kernel, and a process that runs
    the submission's host code is never shown the inputs or told where they lie)."""
    def blank(cases):
        return [dataclasses.replace(cj, buffers=[dataclasses.replace(b, file="", offset=0) for b in cj.buffers])
                for cj in cases]
    return dataclasses.replace(job, role=Role.RECORD, cases=blank(job.cases), timed_cases=blank(job.timed_cases),
                               verify_cases=blank(job.verify_cases), baseline_cases=blank(job.baseline_cases))


THREADS_RAN_OUT = (
    "your launcher's host code could not start another thread (\"Resource temporarily unavailable\"), and "
    "the recorder stopped: the launcher starts a thread at each call and leaves it running, so they piled up "
    "past the grading process's limit. The grader replays only what the launcher itself does before it "
    "returns: call everything from the launcher, and start no threads.")


def threads_ran_out(record: ChildRun) -> bool:
    """The recorder died (a signal: std::thread's std::system_error ends in abort) saying a thread
    could not be started: EAGAIN at the process limit. What it printed is the student's (a claim),
    and believing it turns only a crash into a refusal: neither is graded."""
    return bool(record.signal_name) and "Resource temporarily unavailable" in record.stderr.text()


def record(recorder: Worker, job: Job, *, time_limit_s: float, offline: OfflinePart | None = None) -> ChildRun:
    """The recorder's run of job, killed with its group once its done frame is in (reaped in the
    background). A recorder without a GPU (Worker(gpu=False)) records offline: each kernel's
    parameters copied by offline.kernel_params (toolchain/build.py's kernel_parameters), with
    offline.driver_stand_in loaded where a launcher looks for the driver (build_driver_stand_in)."""
    recorder_job = for_recorder(job)
    if not recorder.gpu:
        recorder_job = dataclasses.replace(recorder_job, offline=offline or OfflinePart())
    run = recorder.run(recorder_job, time_limit_s=time_limit_s, leave_when_done=True)
    recorder.cancel()
    return run


def needs_gpu(record: ChildRun) -> str:
    """Why a recording made without a GPU is made again on the GPU ("" where it stands): the
    launcher called what only the GPU answers (the harness's exit), the wall stopped a call (the
    GPU's driver starting up opens its device files and names its threads: any stopped call is
    taken for it, since an attack is stopped by the GPU's recorder's wall the same way and judged
    there as before), or the recorder could not load, or died. Each is a claim of the student's
    process, and believing it costs only a second recording, in the lane. A launcher that never
    returns, or piles up threads, or a recorder the parent killed, ends the same on the GPU."""
    if record.timed_out or threads_ran_out(record):
        return ""
    if record.returncode == NEEDS_GPU_EXIT:
        said = [line for line in record.stderr.text().splitlines() if line.startswith("grader: the launcher called")]
        return said[-1].removeprefix("grader: ") if said else "the launcher called what only the GPU answers"
    if record.blocked:
        b = record.blocked[0]
        where = f" ({b.path})" if b.path else ""
        return f"the wall without a GPU stopped the system call {b.name}{where}, as the GPU's driver starting up does"
    fatal = next((f.data for f in record.frames if isinstance(f.data, FatalFrame)), None)
    if fatal is not None:
        return f"the recorder without a GPU stopped ({fatal.stage}: {fatal.error})"
    if record.signal_name and record.signal_name != "SIGKILL":        # SIGKILL: the parent's (a forged frame)
        return f"the recorder without a GPU ended on {record.signal_name}"
    return ""


def replay_recorded(record: ChildRun, measurer: Worker, job: Job, *, plan: ReplayPlan, gate: Callable[[], None],
                    on_sent: Callable[[], None] | None = None) -> ReplayRun:
    """What the recorder recorded, refused or replayed in the measuring process, which never loads
    the submission's library (grader/run/child/replay.py) and runs nothing of its job until
    gate() has returned (the recorder gone: Worker.run's gate)."""
    recording = next((f.data.recording for f in record.frames if isinstance(f.data, RecordingFrame)), None)
    out = ReplayRun(record)
    if recording is None and any(f.header.get("type") == "recording" for f in record.frames):
        out.refusals = [FORGED.format(what="a recording frame that does not read as one")]   # signed, but no recording
        return out
    if recording is None and not record.blocked and not record.timed_out and threads_ran_out(record):
        out.refusals = [THREADS_RAN_OUT]
    if recording is None or record.blocked or record.timed_out:
        return out
    code = plan.code
    forged = malformed(recording)               # a claim: held to the recorder's own form before anything reads it
    out.refusals = [forged] if forged else recording_refusals(recording, plan.launcher, job.limits.workspace_bytes,
                                                                          api=job.backend.api)
    if out.refusals:
        return out
    part = ReplayPart(recording, device_code=list(code.fatbins), device_globals=list(code.variables),
                      device_heap=code.heap, layout_seed=secrets.randbits(62) | 1)
    replay = dataclasses.replace(job, role=Role.REPLAY, library="", replay=part)

    def gone() -> None:
        waited = time.perf_counter()
        gate()
        out.gate_wait_s = time.perf_counter() - waited

    out.replay = replay
    out.measurer = measurer.run(replay, time_limit_s=plan.time_limit_s, on_sent=on_sent, leave_when_done=True,
                                gate=gone)
    out.refusals = [r for f in out.measurer.frames if isinstance(f.data, RefusedFrame) for r in f.data.reasons]
    return out


def record_then_replay(recorder: Worker, measurer: Worker, job: Job, *, plan: ReplayPlan,
                       on_sent: Callable[[], None] | None = None) -> ReplayRun:
    """Record the submission's launches in one child (the recorder on the GPU), then replay them in
    another that never loads its library (grader/run/child/replay.py). The recorder has ended, its
    whole process group killed and reaped, before the measuring process runs anything of its job
    (Worker.run's gate)."""
    # Left once its done frame is in: killed with its group, and reaped in the background while
    # the measuring process takes its job; that one runs nothing until the recorder is gone (its
    # CUDA context's teardown took 0.15 s of every grade).
    run = record(recorder, job, time_limit_s=plan.time_limit_s)
    return replay_recorded(run, measurer, job, plan=plan, gate=recorder.gone, on_sent=on_sent)


def run_worker(job: Job, *, time_limit_s: float, output_cap: int) -> ChildRun:
    """Start a child for job.backend, run job in it, and return what came back. A GPU job with a
    submission is recorded in one child and replayed in another (record_then_replay); the run
    returned is the one to judge."""
    backend = job.backend
    if backend.records_then_replays and job.library and job.role == Role.RUN:
        with Worker(ChildSpec(backend=backend, output_cap=output_cap, cpu_limit_s=time_limit_s, recorder=True)) as recorder, \
                Worker(ChildSpec(backend=backend, output_cap=output_cap, cpu_limit_s=time_limit_s,
                       torch=bool(job.timing and job.timing.baseline))) as measurer:
            obj = Path(job.library).with_name("main.o")
            code = DeviceCode([str(p) for p in device_code(Path(job.library))], device_variables(obj),
                              uses_device_heap(obj))
            return record_then_replay(recorder, measurer, job, plan=ReplayPlan(code, None, time_limit_s)).judged
    with Worker(ChildSpec(backend=backend, output_cap=output_cap, cpu_limit_s=time_limit_s,
                torch=bool(job.timing and job.timing.baseline),
                cpu_threads=1 if backend.on_gpu else spread_threads(job.emulator_threads))) as worker:
        return worker.run(job, time_limit_s=time_limit_s)


def _who(op: RecordedOp) -> str:
    return demangle(op.kernel) if op.kernel else "a kernel"


def _stream_op_refusals(op: RecordedOp, who: str, say: Callable[..., None], workspace_cap: int, api: Api) -> None:
    """What the parent refuses of a memset, copy, symbol copy, allocation or free before the
    measuring process starts: a thread's, one after the launcher returned, one on another stream,
    a copy to the host, an allocation past the cap (the addresses are the measuring process's to
    check, with the buffers' sizes)."""

    what = op.call or op.kind
    if op.thread == "outside":
        say(f"{who} called {what} after the launcher returned (from a thread of its own). The grader replays only "
            "what the launcher does before it returns: call everything from it, and start no threads.", "thread")
    elif op.thread == "other":
        say(f"{who} called {what} from a thread of its own. The grader replays only what the launcher itself does "
            "before it returns, on the stream it is given.", "thread")
    if op.stream == "other":
        say(f"{who} called {what} on a stream the grader did not give it. Use the stream your launcher is given (or "
            "the default stream, 0): that is the one the grader times.", "stream")
    problem = stream_op_problem(op, None, who=who, workspace_cap=workspace_cap, api=api)
    if problem:
        say(problem)


def recording_refusals(recording: Recording, launcher: str | None, workspace_cap: int = 256 << 20, *,
                       api: Api) -> list[str]:
    """What in a recording is refused before anything runs, said to the student: launches (and
    memsets, copies, allocations) from a thread of their own or after the launcher returned, on a
    stream the grader did not give, or whose kernel the recorder could not name; copies to the
    host; a workspace past limits.workspace_mib. One message per cause: a thread's launches are
    said once, whatever they were (the first one's words), and a launch from a thread that the
    recorder could not read (its context's error) is the thread's cause, not one more. api: the
    runtime the launcher called (the job's Backend.api), whose calls the messages name."""
    who = f"your launcher {launcher}" if launcher else "the launch"
    seen: set[str] = set()
    reasons: list[str] = []

    def say(text: str, cause: str | None = None) -> None:
        if (cause or text) not in seen:
            seen.add(cause or text)
            reasons.append(text)

    every = [op for ops in recording.ops for op in ops] + list(recording.late)
    for op in every:
        if op.kind in STREAM_KINDS:
            _stream_op_refusals(op, who, say, workspace_cap, api)
            continue
        if op.kind == "launch_attributes":
            say(f"{who} launched {_who(op)} with {api.launch_ex} and {op.value} launch "
                f"attribute{'s' if op.value != 1 else ''} (the first: {api.launch_attribute}ID {op.attribute}). An "
                "attribute (an L2 access policy, a cluster shape, a priority) would change the timed launch, and the "
                "grader replays plain launches: leave config.attrs empty (numAttrs 0), or launch with <<<...>>> on "
                "the stream you are given.", "attributes")
            continue
        if op.kind not in ("launch", "cooperative"):
            continue
        if op.thread == "outside":
            say(f"{who} started a thread that launched {_who(op)} after the launcher returned. The grader runs only "
                "the launches the launcher makes itself, before it returns: launch every kernel from it, on the "
                "stream it is given, and start no threads.", "thread")
        elif op.thread == "other":
            say(f"{who} launched {_who(op)} from a thread of its own. The grader runs only the launches the launcher "
                "makes itself, before it returns: launch every kernel from it, on the stream it is given, and "
                "start no threads.", "thread")
        if op.stream == "other":
            say(f"{who} launched {_who(op)} on a stream the grader did not give it. Launch on the stream your "
                "launcher is given (or on the default stream, 0): that is the one the grader times.", "stream")
        if op.error and op.thread == "caller":
            say(f"{who} launched {_who(op)}, and the grader could not read the launch ({op.error}): the recording "
                "process's GPU context had failed, as it does when something other than the launches the grader "
                "sees ran on the GPU (a kernel launched through the driver, say). Launch with <<<...>>> or "
                f"{api.launch} on the stream you are given.")
    return reasons
