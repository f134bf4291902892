"""The one place that starts children (grade/launcher.Launcher), the Machine as a plain value, and
result.json's phases made from the typed record the steps fill (grade/phases.py)."""

import dataclasses
from pathlib import Path

import pytest

from grader.core.backend import CUDA, EMULATOR
from grader.exercises import load_exercise

ROOT = Path(__file__).resolve().parent.parent


class _StandWorker:
    """sandbox.Worker as the Launcher starts it, without a process: what it was asked for, and
    whether it was cancelled."""

    started: list = []

    def __init__(self, spec):
        self.kwargs = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}     # the ChildSpec's fields
        self.cancelled = False
        self.proc = self                        # proc.poll(): still running until cancelled
        _StandWorker.started.append(self)

    def poll(self):
        return 0 if self.cancelled else None

    def cancel(self):
        self.cancelled = True


@pytest.fixture
def stand_workers(monkeypatch):
    import grader.grade.launcher as launcher
    from grader.core import processes

    monkeypatch.setattr(launcher, "Worker", _StandWorker)
    monkeypatch.setattr(processes, "close_to_children", lambda: True)    # this test process keeps its /proc
    monkeypatch.setattr(_StandWorker, "started", [])
    return _StandWorker.started


def test_a_machine_is_a_plain_value_that_holds_no_process():
    """grade/machine.Machine: a decision (frozen, hashable, equal to one decided alike), with no
    children in it and nothing to cancel: what is started ahead is the Launcher's."""
    from grader.grade.machine import Machine, decide

    machine = decide("emulator")
    with pytest.raises(dataclasses.FrozenInstanceError):
        machine.reading = {}
    assert machine == decide("emulator") and hash(machine) == hash(decide("emulator"))
    assert len({machine, decide("emulator"), Machine(CUDA, {"name": "H100"}, ("0",))}) == 2
    assert hash(Machine(CUDA, {"name": "H100"}, ("0",))) == hash(Machine(CUDA, {"name": "H200"}, ("0",)))
    assert {f.name for f in dataclasses.fields(Machine)} == {"backend", "reading", "devices", "probe_s"}
    assert not [name for name in ("children", "take_children", "cancel") if hasattr(machine, name)]


def test_children_started_ahead_are_taken_once_by_the_next_grade_and_ended_when_none_takes_them(stand_workers):
    """`grader submit` on a GPU: start_ahead starts the measuring process and the recorder; the
    grade that asks takes those two, the next one gets its own; what no grade took is ended."""
    from grader.grade.launcher import Launcher
    from grader.grade.machine import Machine

    rubric = load_exercise("bias_gelu_fused")
    gpu = Machine(CUDA, {"name": "a GPU"}, ("0",))
    launcher = Launcher()
    launcher.start_ahead(gpu, rubric=rubric)
    assert [w.kwargs.get("recorder", False) for w in stand_workers] == [False, True]   # the measurer first
    taken = launcher.children(rubric=rubric, backend=CUDA, device="0", emulator_threads=0)
    assert [taken.worker, taken.recorder] == stand_workers and not any(w.cancelled for w in stand_workers)
    again = launcher.children(rubric=rubric, backend=CUDA, device="0", emulator_threads=0)
    assert again.worker is not taken.worker and len(stand_workers) == 4

    launcher.start_ahead(gpu, rubric=rubric)
    unused = stand_workers[4:]
    launcher.end_unused()
    assert len(unused) == 2 and all(w.cancelled for w in unused)
    assert not any(w.cancelled for w in stand_workers[:4])          # those taken are their grades' to end

    Launcher().start_ahead(Machine(EMULATOR), rubric=rubric)        # the emulator: nothing started ahead
    assert len(stand_workers) == 6


def test_the_commands_launcher_hands_its_head_start_to_the_grade_and_says_its_start_once(stand_workers, monkeypatch):
    """grader/entry.py's Launcher.for_command: `grader submit` on a machine with a GPU starts the
    measuring process before the CLI's imports; a grade with the default limits takes it, and the
    command's first grade says where its start went (cli_to_*), its second does not."""
    from grader.core import processes
    from grader.grade.launcher import Launcher
    from grader.grade.machine import Machine
    from grader.toolchain import gpuinfo

    monkeypatch.setattr(gpuinfo, "device_file_present", lambda: True)
    ages = iter([0.5, 1.25, 2.0, 3.0])
    monkeypatch.setattr(processes, "age_s", lambda: next(ages))
    launcher = Launcher.for_command(["submit", "k.cu"])                 # its head start at the age 0.5
    head, = stand_workers
    assert launcher.head_started and not head.kwargs.get("recorder", False)
    launcher.mark("cli_to_early_s")
    launcher.start_ahead(Machine(CUDA, {"name": "a GPU"}, (head.kwargs["device"],)),
                         rubric=load_exercise("bias_gelu_fused"))
    launcher.mark("cli_to_grade_s")
    assert len(stand_workers) == 2 and not launcher.head_started    # the head start taken, a recorder started
    said = launcher.command_start()
    assert (said.cli_to_early_s, said.cli_to_grade_s, said.cli_to_measurer_s) == (1.25, 2.0, 0.5)
    assert launcher.command_start() is None                          # said by the first grade only
    taken = launcher.children(rubric=load_exercise("bias_gelu_fused"), backend=CUDA, device="0", emulator_threads=0)
    assert taken.worker is head and not head.cancelled

    plain = Launcher()                                               # a batch's, a script's: nothing to say
    plain.mark("cli_to_early_s")
    plain.mark("cli_to_grade_s")
    assert plain.command_start() is None
    assert Launcher.for_command(["batch", "folder"]).head_started is False


def test_a_head_start_unlike_what_the_grade_wants_is_ended_not_used(stand_workers, monkeypatch):
    """The emulator's grade (no GPU grade: start_ahead), or a rubric with other limits: the head
    start's process is ended and the grade starts its own."""
    from grader.grade.launcher import Launcher
    from grader.grade.machine import Machine
    from grader.toolchain import gpuinfo

    monkeypatch.setattr(gpuinfo, "device_file_present", lambda: True)
    rubric = load_exercise("bias_gelu_fused")
    launcher = Launcher.for_command(["submit", "k.cu"])
    launcher.start_ahead(Machine(EMULATOR), rubric=rubric)
    assert stand_workers[0].cancelled and not launcher.head_started and len(stand_workers) == 1

    launcher = Launcher.for_command(["submit", "k.cu"])
    head = stand_workers[1]
    other = dataclasses.replace(rubric, limits=dataclasses.replace(rubric.limits, time_limit_s=10.0))
    own = launcher.children(rubric=other, backend=CUDA, device="0", emulator_threads=0)
    assert head.cancelled and own.worker is not head and not own.worker.cancelled


class _LendingLauncher:
    """A stand-in for grade/launcher.Launcher, as the pipeline uses one: the children it lends
    (started on the emulator, as `grader submit` starts them ahead on a GPU), what it was asked."""

    def __init__(self, rubric):
        from grader.grade.launcher import Launcher

        self.real = Launcher()
        self.lent = self.real.children(rubric=rubric, backend=EMULATOR, device=None, emulator_threads=0)
        self.asked, self.ended = [], 0

    def command_start(self):
        return None

    def children(self, **asked):
        self.asked.append(asked)
        lent, self.lent = self.lent, None
        return lent

    def recorder(self, **asked):
        raise AssertionError("the emulator's grade starts no recorder")

    def end_unused(self):
        self.ended += 1
        if self.lent is not None:
            self.lent.cancel()


def test_the_pipeline_runs_in_the_children_its_launcher_gives_and_its_phases_are_the_documented_keys():
    """grade(request, launcher=...): the grade asks the launcher it is handed for its children,
    once, runs its job in them (the child exited of itself: a cancelled one is killed), and has the
    launcher end what it did not take; its phases are Phases.as_dict()'s, under the keys
    docs/benchmarks.md names."""
    from grader.grade.machine import decide
    from grader.grade.pipeline import grade
    from grader.grade.request import GradeRequest

    rubric = load_exercise("bias_gelu_fused")
    launcher = _LendingLauncher(rubric)
    worker = launcher.lent.worker
    result = grade(GradeRequest(ROOT / "submissions/bias_gelu_fused/row_major_threads.cu", rubric,
                                decide("emulator")), launcher=launcher)
    assert result.status == "graded" and result.correct
    assert len(launcher.asked) == 1 and launcher.asked[0]["backend"] is EMULATOR and launcher.ended == 1
    assert worker.proc.wait(timeout=30) == 0
    measured = {"probe_s", "build_s", "inputs_wait_s", "child_start_wait_s", "lane_wait_s", "child_s",
                "answers_ready_t", "answers_wait_s", "check_s", "judge_s", "reading_wait_s"}
    assert measured <= set(result.phases), sorted(measured - set(result.phases))
    assert {k for k in result.phases if k.startswith("child_") and k.endswith("_t")} >= {"child_ready_t", "child_done_t"}
    assert not [k for k in result.phases if k.startswith(("cli_", "lane_taken", "record", "counters"))]
    assert all(isinstance(v, float) for v in result.phases.values()), result.phases


def test_children_lent_to_a_grade_that_stops_before_them_are_ended():
    """A compile error, a missing file, a GPU backend on a machine without a GPU: the children the
    launcher started ahead never outlive the call."""
    from grader.core.errors import UsageError
    from grader.grade.machine import Machine
    from grader.grade.pipeline import grade
    from grader.grade.request import GradeRequest

    rubric = load_exercise("bias_gelu_fused")
    for path, machine in ((ROOT / "submissions/bias_gelu_fused/compile_error.cu", Machine(EMULATOR)),
                          (ROOT / "submissions/bias_gelu_fused/missing.cu", Machine(EMULATOR)),
                          (ROOT / "submissions/bias_gelu_fused/row_major_threads.cu", Machine(CUDA))):
        launcher = _LendingLauncher(rubric)
        proc = launcher.lent.worker.proc
        if path.name == "missing.cu":
            with pytest.raises(UsageError):
                grade(GradeRequest(path, rubric, machine), launcher=launcher)
        else:
            result = grade(GradeRequest(path, rubric, machine), launcher=launcher)
            assert result.status in ("compile_error", "infrastructure_error"), (path.name, result.status)
        assert launcher.ended == 1 and proc.wait(timeout=10) is not None, path.name


def test_every_phase_the_typed_record_holds_is_a_documented_key():
    """grade/phases.Phases.as_dict: each step's record under result.json's keys, a value not
    measured (None) left out; every key is one docs/benchmarks.md or the child's clock names."""
    from grader.grade.launcher import CommandStart
    from grader.grade.phases import CheckClock, DrawClock, Phases, RunClock

    run = RunClock(**{f.name: 1.0 for f in dataclasses.fields(RunClock) if f.name != "recorder"},
                   recorder={"recorder_ready_t": 0.1})
    draws = DrawClock(started=0.0, reference_loaded_t=0.2, answers_ready_t=0.3)
    every = Phases(probe_s=0.01, command=CommandStart(0.4, 0.5, 0.45), build_s=0.6, draws=draws, run=run,
                   child={"child_ready_t": 0.7}, answers_wait_s=0.0, check=CheckClock(0.8, 0.5, 0.1), counters_s=2.0)
    keys = {"cli_to_early_s", "cli_to_grade_s", "cli_to_measurer_s", "probe_s", "build_s", "reference_loaded_t",
            "answers_ready_t", "inputs_wait_s", "child_start_wait_s", "offline_record_s", "gpu_recorder_wait_s",
            "record_s", "gate_wait_s", "lane_wait_s", "lane_taken_at", "lane_released_at", "lane_s", "child_s",
            "recorder_ready_t", "child_ready_t", "answers_wait_s", "check_s", "judge_s", "reading_wait_s",
            "counters_s"}
    assert set(every.as_dict()) == keys
    assert every.as_dict()["cli_to_measurer_s"] == 0.45 and every.as_dict()["answers_wait_s"] == 0.0
    documented = (ROOT / "docs" / "benchmarks.md").read_text()
    assert not [k for k in keys - {"recorder_ready_t", "child_ready_t"} if f"`{k}`" not in documented]

    stopped = Phases(probe_s=0.0, build_s=0.3)                          # a compile error: nothing ran
    assert stopped.as_dict() == {"probe_s": 0.0, "build_s": 0.3}
    clock = RunClock()
    clock.waited_for_children(0.25)
    clock.waited_for_children(0.5)
    assert clock.values() == {"child_start_wait_s": 0.75}
