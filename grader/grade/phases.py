"""Where a grade's time went, typed: each step's clock as a record, and result.json's `phases` made
from them in one place (Phases.as_dict; the keys are docs/benchmarks.md's and docs/result-json.md's).

The records, by the step that measures them: the command's own start (CommandStart: the Launcher,
grade/launcher.py), the GPU's probe (the Machine), the build (the pipeline), the cases' draws beside
it (DrawClock: children.GradeRun), the children's run (RunClock: the way that ran them,
grade/ways.py), the child's own clock and the answers' wait (the Verdict), the parent's checks
(CheckClock) and the counters' pass. A value absent from a record (None) was not measured in this
grade (a compile error has no run; the emulator no lane) and has no key.

Imports only the standard library: grader/entry.py's head start imports the launcher, which imports this.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields


def _present(record) -> dict[str, float]:
    """A record's measured values by field name (a None field was not measured: no key)."""
    return {f.name: getattr(record, f.name) for f in fields(record)
            if isinstance(getattr(record, f.name), (int, float)) and not isinstance(getattr(record, f.name), bool)}


@dataclass(frozen=True)
class CommandStart:
    """Where the `grader` command's own start went, in seconds from its process's start: to the
    machine's decision and the children's start, to the grade, and to the measuring process's head
    start where the grade ran in it (grader/entry.py)."""

    cli_to_early_s: float
    cli_to_grade_s: float
    cli_to_measurer_s: float | None = None


@dataclass
class DrawClock:
    """When, in seconds since the grade started, reference.py was loaded and the last case's answers
    were ready (the draws beside the build: grade/children.GradeRun)."""

    started: float = field(default_factory=time.perf_counter, repr=False)
    reference_loaded_t: float | None = None
    answers_ready_t: float | None = None

    def reference_loaded(self) -> None:
        self.reference_loaded_t = self._since_start()

    def answers_ready(self) -> None:
        """A case's answers are ready (the last call's time stays: when all were)."""
        self.answers_ready_t = self._since_start()

    def _since_start(self) -> float:
        return round(time.perf_counter() - self.started, 3)

    def values(self) -> dict[str, float]:
        return {k: v for k, v in _present(self).items() if k != "started"}


@dataclass
class RunClock:
    """The children's run as the way that ran them measured it (grade/ways.py; docs/benchmarks.md
    says where each goes), filled as the way runs: the waits before the lane, the recording, the
    lane, and the recorder's own clock (contract.clock_phases: recorder_<moment>_t)."""

    inputs_wait_s: float | None = None          # the cases' inputs on disk, waited for
    child_start_wait_s: float | None = None     # the children's start (imports, CUDA context), waited for
    offline_record_s: float | None = None       # the recorder without a GPU's run, before the lane
    gpu_recorder_wait_s: float | None = None    # a recorder started on the GPU (the launcher needed it)
    record_s: float | None = None               # the recorder on the GPU's run, in the lane
    gate_wait_s: float | None = None            # the recorder's end, before the measuring process runs
    lane_wait_s: float | None = None            # the GPU's lane, waited for
    lane_taken_at: float | None = None          # the lane taken and released, on the wall clock
    lane_released_at: float | None = None
    lane_s: float | None = None                 # the lane held
    child_s: float | None = None                # the run, less the lane's wait
    recorder: dict[str, float] = field(default_factory=dict)     # the recorder's own clock

    def waited_for_children(self, seconds: float) -> None:
        """Another wait for the children's start, added to child_start_wait_s."""
        self.child_start_wait_s = round((self.child_start_wait_s or 0.0) + seconds, 3)

    def values(self) -> dict[str, float]:
        return {**_present(self), **self.recorder}


@dataclass(frozen=True)
class CheckClock:
    """The parent's checks after the run: all of it, the verdict's part, and the GPU's reading waited for."""

    check_s: float
    judge_s: float
    reading_wait_s: float


@dataclass
class Phases:
    """A grade's phases as the pipeline gathers them from its steps' values (each None until the
    step ran); as_dict() is result.json's `phases`."""

    probe_s: float = 0.0
    command: CommandStart | None = None
    build_s: float | None = None
    draws: DrawClock | None = None
    run: RunClock | None = None
    child: dict[str, float] = field(default_factory=dict)    # the judged child's own clock (the Verdict's)
    answers_wait_s: float | None = None                       # the answers not ready while judging (the Verdict's)
    check: CheckClock | None = None
    counters_s: float | None = None

    def as_dict(self) -> dict[str, float]:
        """result.json's `phases`: every measured value under its documented key."""
        out: dict[str, float] = _present(self.command) if self.command is not None else {}
        out["probe_s"] = self.probe_s
        if self.build_s is not None:
            out["build_s"] = self.build_s
        for part in (self.run, self.draws):
            if part is not None:
                out.update(part.values())
        out.update(self.child)
        if self.answers_wait_s is not None:
            out["answers_wait_s"] = self.answers_wait_s
        if self.check is not None:
            out.update(_present(self.check))
        if self.counters_s is not None:
            out["counters_s"] = self.counters_s
        return out
