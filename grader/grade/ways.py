"""The ways a grade runs a submission's children, one object each: the recording made without a GPU
then replayed on it, the recording made on the GPU then replayed, and the emulator's one child.
GradeRun.run_children chooses one (way_for) and runs it in two steps: before the GPU's lane
(nothing, or the recording without a GPU) and inside it (the replay and the timing, or the
emulator's run). Each way measures its run in its RunClock (grade/phases.py: result.json's
`phases`, docs/benchmarks.md), which the ChildRuns it returns carries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from grader.core.contract import ChildSandbox, DoneFrame, HelloFrame, Job, OfflinePart, RefusedFrame, clock_phases
from grader.grade.phases import RunClock
from grader.run.replaying import DeviceCode, ReplayPlan, needs_gpu, record, record_then_replay, replay_recorded
from grader.run.sandbox import ChildRun, Worker

if TYPE_CHECKING:
    from concurrent.futures import Future



@dataclass
class ChildRuns:
    """What the children's runs gave back: the run judged, every run (for their output), the
    recorder's refusals and sandbox, the GPU's state after them, and the run's clock."""

    judged: ChildRun
    runs: list[ChildRun]
    refusals: list[str] = field(default_factory=list)
    recorder_sandbox: ChildSandbox | None = None
    reading: Future | None = None       # nvidia-smi's reading after them, taken while the verdict is judged
    replay: Job | None = None           # the measuring process's job, for the counters' pass
    clock: RunClock = field(default_factory=RunClock)   # where the run's time went (result.json's phases)

    @property
    def after(self) -> dict | None:
        return None if self.reading is None else self.reading.result()


def recorder_times(run: ChildRun) -> dict[str, float]:
    """When the recorder was ready, was handed its job, loaded the library, ended the checks' calls
    and the timing's, and sent everything (its own clock): where record_s goes."""
    out: dict[str, float] = {}
    for f in run.frames:
        if isinstance(f.data, (HelloFrame, DoneFrame)):
            out.update(clock_phases(f.data, "recorder"))
    return out



@dataclass
class Way:
    """What every way shares: the job, the time limit, the launcher's name (None: the kernel alone),
    and the clock it measures its run by."""

    job: Job
    time_limit_s: float
    launcher: str | None
    clock: RunClock = field(default_factory=RunClock)
    inputs: Callable[[], None] = lambda: None   # waits until the cases' inputs are on disk

    def before_lane(self) -> "Way":
        """The work done outside the GPU's lane, the children's start waited for; returns the way
        that runs inside it (this one, or another where this one found it cannot)."""
        self.inputs_on_disk()
        self.wait_ready(*self.children())
        return self

    def inputs_on_disk(self) -> None:
        """Wait for the inputs, before any child that reads them is told to start (inputs_wait_s)."""
        waited = time.perf_counter()
        self.inputs()
        self.clock.inputs_wait_s = round(time.perf_counter() - waited, 3)

    def children(self) -> list[Worker]:
        """The children this way runs, as started."""
        raise NotImplementedError

    def wait_ready(self, *workers: Worker) -> None:
        """Wait until workers have started (imports, CUDA context), booking child_start_wait_s."""
        waited = max((w.wait_ready(timeout_s=self.time_limit_s) for w in workers), default=0.0)
        self.clock.waited_for_children(waited)

    def in_lane(self, take: Callable[[], None], handed_on: Callable[[], None] | None) -> ChildRuns:
        """The run whose GPU work needs the lane: take() takes it (waiting for it) as late as this
        way can, handed_on() is called once the child has sent everything (the lane handed on)."""
        raise NotImplementedError


@dataclass
class Emulated(Way):
    """The emulator: one child runs the submission's host code and kernels on the CPU."""

    worker: Worker | None = None

    def children(self):
        return [self.worker]

    def in_lane(self, take, handed_on):
        take()
        run = self.worker.run(self.job, time_limit_s=self.time_limit_s, on_sent=handed_on)
        return ChildRuns(run, [run], [r for f in run.frames if isinstance(f.data, RefusedFrame) for r in f.data.reasons],
                         clock=self.clock)


@dataclass
class RecordedOnGpu(Way):
    """The recorder on the GPU runs the launcher, then the measuring process replays its recording:
    both inside the lane."""

    recorder: Worker | None = None
    measurer: Worker | None = None
    code: "Future[DeviceCode] | None" = None

    def children(self):
        return [self.recorder, self.measurer]

    def in_lane(self, take, handed_on):
        code = self.code.result()
        take()                      # the recorder runs the launcher on the GPU: in the lane
        both = record_then_replay(self.recorder, self.measurer, self.job,
                                  plan=ReplayPlan(code, self.launcher, self.time_limit_s), on_sent=handed_on)
        self.clock.record_s = round(both.recorder.seconds, 3)
        self.clock.recorder.update(recorder_times(both.recorder))
        return _replayed(both, self.clock)


@dataclass
class RecordedOffline(Way):
    """The recorder without a GPU runs the launcher outside the lane (a batch records the next
    students while one is timed); inside it the measuring process replays the recording. Where the
    launcher needs the GPU, the way becomes RecordedOnGpu, with a recorder started on the GPU."""

    recorder: Worker | None = None
    measurer: Worker | None = None
    code: "Future[DeviceCode] | None" = None
    on_gpu_recorder: Callable[[], Worker] | None = None      # starts the recorder on the GPU
    say: Callable[[str], None] = print
    recorded: ChildRun | None = None

    def children(self):
        return [self.recorder, self.measurer]

    def before_lane(self) -> Way:
        # The recording needs no GPU: it runs as soon as the recorder has started, while the
        # measuring process still creates its CUDA context (the longest start of a warm grade).
        # It reads no input (a process that runs the student's host code is never shown them): the
        # inputs are waited for after it, their drawing (and numpy's import) beside the recording.
        self.wait_ready(self.recorder)
        code = self.code.result()
        self.recorded = record(self.recorder, self.job, time_limit_s=self.time_limit_s,
                               offline=OfflinePart(code.kernel_params, str(code.driver_stand_in or "")))
        self.clock.offline_record_s = round(self.recorded.seconds, 3)
        self.clock.recorder.update(recorder_times(self.recorded))
        why = needs_gpu(self.recorded)
        self.inputs_on_disk()
        if not why:
            self.wait_ready(self.measurer)
            return self
        self.say(f"recording on the GPU: {why}")
        recorder = self.on_gpu_recorder()
        self.clock.gpu_recorder_wait_s = round(recorder.wait_ready(timeout_s=self.time_limit_s), 3)
        self.wait_ready(self.measurer)
        return RecordedOnGpu(self.job, self.time_limit_s, self.launcher, self.clock, self.inputs, recorder,
                             self.measurer, self.code)

    def in_lane(self, take, handed_on):
        code = self.code.result()
        gone: list[float] = []

        def gate() -> None:
            # The measuring process has its job, and loads it (its wall, the device code) before
            # the lane: the lane holds only what runs on the GPU, the checks and the sampling.
            clock = time.perf_counter()
            self.recorder.gone()
            gone.append(time.perf_counter() - clock)
            take()

        both = replay_recorded(self.recorded, self.measurer, self.job,
                               plan=ReplayPlan(code, self.launcher, self.time_limit_s), on_sent=handed_on, gate=gate)
        out = _replayed(both, self.clock)
        if gone:
            self.clock.gate_wait_s = round(gone[0], 3)      # the recorder's end, the lane's wait apart
        return out


def _replayed(both, clock: RunClock) -> ChildRuns:
    clock.gate_wait_s = round(both.gate_wait_s, 3)
    return ChildRuns(both.judged, [both.recorder] + ([both.measurer] if both.measurer else []), both.refusals,
                     _hello_sandbox(both.recorder) if both.measurer else None,
                     replay=both.replay if both.measurer else None, clock=clock)


def _hello_sandbox(run: ChildRun) -> ChildSandbox | None:
    """What a child (the recorder) said was in force."""
    said = next((f.data.sandbox for f in run.frames if isinstance(f.data, HelloFrame)), None)
    return said if isinstance(said, ChildSandbox) else None


def clocked_lane(way: Way, lane, then: Callable[[], None] | None = None,
                 timing: Callable[[], None] | None = None) -> ChildRuns:
    """way's run (lane: the GPU's, not yet taken, or None on the emulator): the way takes the lane
    when its GPU work is ready to run (lane_wait_s), lane_s runs from then until the child has sent
    everything and the lane is handed on (then then() is called: the GPU's reading after the
    timing; timing() is called as the lane is taken), and child_s is the run's time less the lane's wait."""
    clock = time.perf_counter()
    taken: list[float] = []

    def take() -> None:
        if lane is not None:
            lane.__enter__()
            way.clock.lane_wait_s = round(lane.waited, 3)
            # on the wall clock, shared by a batch's grades: the gaps between one grade's release
            # and the next one's take are the lane's idle time (scripts/benchmark.py --batch)
            way.clock.lane_taken_at = round(time.time(), 4)
            if timing is not None:
                timing()
        taken.append(time.perf_counter())

    def handed_on() -> None:
        lane.release()
        way.clock.lane_released_at = round(time.time(), 4)
        way.clock.lane_s = round(time.perf_counter() - (taken[0] if taken else clock), 3)
        if then is not None:
            then()

    try:
        out = way.in_lane(take, handed_on if lane is not None else None)
    finally:
        if lane is not None:
            lane.release()
    if way.clock.lane_wait_s is None:
        way.clock.lane_wait_s = 0.0
    way.clock.child_s = round(time.perf_counter() - clock - way.clock.lane_wait_s, 3)
    return out
