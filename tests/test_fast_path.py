"""The fast feedback path: a warm submission imports neither torch in the child nor in the parent,
and a case's answers are computed once, then read back (also when several graders write at once)."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from grader.core.backend import EMULATOR
from grader.exercises import load_exercise, load_reference
from grader.exercises.data import answers, materialize
from grader.exercises.plan import plan_cases

ROOT = Path(__file__).resolve().parent.parent


def test_the_child_imports_neither_torch_nor_numpy():
    code = ("import sys, grader.run.child.worker, grader.run.child.timing, grader.run.child.backends, grader.core.stats; "
            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_a_grade_that_writes_no_report_imports_no_jinja2(tmp_path):
    """`grader submit --no-report --format json` renders no template: jinja2's import (250 ms on the
    H100 host) is not on its way. Importing the report module, or building from the cache, does
    not import it; rendering a template does."""
    code = ("import sys, grader.report.files, grader.toolchain.build, grader.grade.pipeline, grader.platforms.documents; "
            "print('jinja2' in sys.modules); from grader.toolchain.render import render; "
            "render('build.ninja.j2', version='v', compile='c', link='l', description='d', compiles=[], objects=[], "
            "included=[]); print('jinja2' in sys.modules)")
    env = dict(__import__("os").environ, GRADER_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True, env=env)
    assert out.stdout.split() == ["False", "True"]


def test_answers_are_computed_once_then_read_back_by_concurrent_graders(tmp_path):
    rubric = load_exercise("bias_gelu_fused")
    ref = load_reference(rubric)
    case = plan_cases(rubric)[0]
    inputs = materialize(rubric, ref, case, tmp_path)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: answers(rubric, ref, case, tmp_path, inputs), range(8)))
    for a in got[1:]:
        assert np.array_equal(a["out"], got[0]["out"])
    assert got[0]["out"].dtype == np.float64 and got[0]["out"].shape == (case.dims["rows"], case.dims["cols"])
    files = sorted(p.name for p in (tmp_path).glob("in-*/*"))
    assert files == ["answers.f64", "answers.f64.seal", "inputs.f32", "inputs.f32.seal"]   # each sealed; no temporary left

    class Unused:                                           # a hit must not run the reference again
        def __getattr__(self, name):
            raise AssertionError(f"the reference was used ({name}) although its answers are cached")
    saved = ref._module
    ref._module = Unused()
    try:
        again = answers(rubric, ref, case, tmp_path, inputs)
    finally:
        ref._module = saved
    assert np.array_equal(again["out"], got[0]["out"])


def test_the_fast_checks_limits_are_prepared_once_per_tolerance(tmp_path, monkeypatch):
    import grader.core.checking
    from grader.verdict import expected_for

    rubric = load_exercise("bias_gelu_fused")
    ref = load_reference(rubric)
    case = plan_cases(rubric)[0]
    inputs = materialize(rubric, ref, case, tmp_path)
    first = expected_for(case, rubric, ref, inputs, tmp_path)
    assert len(list(tmp_path.glob("in-*/prepared-*.f32"))) == 1

    def refuse(*_a, **_k):
        raise AssertionError("prepared again although it is cached")
    monkeypatch.setattr(grader.core.checking, "prepare", refuse)
    again = expected_for(case, rubric, ref, inputs, tmp_path)
    assert np.array_equal(again.prepared["out"].limit32, first.prepared["out"].limit32)
    assert np.array_equal(again.prepared["out"].want32, first.want["out"].astype(np.float32))


def test_no_grade_of_a_shipped_exercise_imports_torch_in_the_grading_process(tmp_path):
    """The shipped references are written with numpy (ARRAYS = "numpy"): the first grade, which
    draws its cases and computes their answers, the warm one, which reads them from the cache,
    and an incorrect one, whose mistake is named by the reference's models, all grade without
    torch (its import made a first grade on the H200 wait 4 to 6 s)."""
    env = dict(os.environ, GRADER_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    code = ("import json, sys\n"
            "from grader.exercises import load_exercise\n"
            "from grader.grade.pipeline import grade_submission\n"
            "r = grade_submission(sys.argv[1], rubric=load_exercise('bias_gelu_fused'), backend='emulator')\n"
            "print(json.dumps({'status': r.status, 'correct': r.correct, 'torch': 'torch' in sys.modules,\n"
            "                  'diagnosis': sorted({d.code for d in r.diagnosis})}))\n")
    samples = ROOT / "submissions" / "bias_gelu_fused"

    def grade(name: str) -> dict:
        done = subprocess.run([sys.executable, "-c", code, str(samples / name)], capture_output=True, text=True,
                              env=env, cwd=ROOT, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, warm = grade("float4_launcher.cu"), grade("float4_launcher.cu")
    assert first == warm == {"status": "graded", "correct": True, "torch": False, "diagnosis": []}
    wrong = grade("bias_by_row.cu")
    assert wrong["correct"] is False and "bias_by_row" in wrong["diagnosis"] and wrong["torch"] is False


def test_a_reference_written_with_torch_is_given_tensors(tmp_path):
    """ARRAYS left out: expected() is given torch tensors (what a course's own reference.py may be
    written with), and what it returns is turned into float64 numpy arrays."""
    from grader.exercises import _LOADED

    rubric = load_exercise("bias_gelu_fused")
    folder = tmp_path / "reference" / "bias_gelu_fused"
    folder.mkdir(parents=True)
    (folder / "reference.py").write_text(
        "import torch\n"
        "def expected(t, dims):\n"
        "    assert isinstance(t['x'], torch.Tensor)\n"
        "    return {'out': t['x'] * 2}\n")
    from grader.exercises import Reference

    ref = Reference(rubric, folder, "", "test")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = ref.answers_for({"x": x, "bias": np.zeros(3, np.float32)}, {"rows": 2, "cols": 3})
    assert ref.arrays == "torch" and got["out"].dtype == np.float64 and got["out"].tolist() == (2.0 * x).tolist()
    _LOADED.clear()


def test_the_timed_shape_spreads_over_the_childs_cores_unless_the_file_shares_state():
    from grader.exercises import load_exercise
    from grader.grade.pipeline import grade_submission

    rubric = load_exercise("bias_gelu_fused")                   # the run's warm cache: the samples' builds are its
    samples = ROOT / "submissions" / "bias_gelu_fused"
    cores = len(os.sched_getaffinity(0))
    every = grade_submission(samples / "float4_launcher.cu", rubric=rubric, backend="emulator")
    assert every.correct and every.sandbox.emulator_threads == cores
    one = grade_submission(samples / "float4_launcher.cu", rubric=rubric, backend="emulator", emulator_threads=1)
    assert one.correct and one.sandbox.emulator_threads == 1
    atomics = grade_submission(ROOT / "submissions" / "gelu_sum" / "atomic_add.cu", rubric=load_exercise("gelu_sum"),
                               backend="emulator")
    assert atomics.correct and atomics.sandbox.emulator_threads == 1
    skipping = grade_submission(samples / "skipped_rows.cu", rubric=rubric, backend="emulator")
    assert skipping.correct is False and skipping.sandbox.emulator_threads == cores


def test_start_ahead_starts_no_child_on_the_emulator_and_the_machine_probes_only_for_a_gpu(monkeypatch):
    """On the emulator the child's start is short and would take a core from the parent's
    imports: nothing is started ahead, and no GPU is probed for."""
    from grader.grade.launcher import Launcher
    from grader.grade.machine import decide
    from grader.toolchain import gpuinfo

    probes = []
    monkeypatch.setattr(gpuinfo, "probe", lambda: probes.append(1) or None)
    rubric = load_exercise("bias_gelu_fused")
    launcher, machine = Launcher(), decide("emulator")
    launcher.start_ahead(machine, rubric=rubric)
    assert launcher._ahead is None and machine.reading is None and probes == []
    assert decide("auto").backend.name == "emulator" and probes == [1]      # "auto": probed, once


def test_the_head_start_is_asked_for_by_a_submit_that_may_grade_on_a_gpu_only():
    """grade/launcher.head_start_backend: the command's arguments as a student types them."""
    from grader.grade.launcher import head_start_backend

    yes = [["submit", "k.cu"], ["submit", "k.cu", "--backend", "cuda"], ["submit", "--backend=auto", "k.cu"],
           ["submit", "k.cu", "--watch", "-q"], ["submit", "k.cu", "--format", "json", "--exercise", "rope_half_split"]]
    no = [["submit", "k.cu", "--backend", "emulator"], ["submit", "--backend=emulator", "k.cu"],
          ["submit", "--help"], ["submit", "k.cu", "-h"], ["batch", "class/"], ["explain", "k.cu"], [],
          ["--version"], ["submit", "k.cu", "--backend", "nope"]]
    assert [a for a in yes if head_start_backend(a, gpu_present=True) is None] == []
    assert [a for a in yes if not head_start_backend(a, gpu_present=True).records_then_replays] == []
    assert [a for a in no if head_start_backend(a, gpu_present=True) is not None] == []
    assert head_start_backend(["submit", "k.cu"], gpu_present=False) is None


def _head_started(monkeypatch):
    """Launcher.for_command as `grader submit k.cu` calls it on a machine with a GPU (this one has
    none: the measuring process starts, finds no driver, and waits for its job all the same)."""
    from grader.core import processes
    from grader.grade.launcher import Launcher

    closed = []
    # the grader closes its /proc files to the children before the first starts (this test process
    # stays dumpable: test_interrupt.py checks that a closed process's children are not)
    monkeypatch.setattr(processes, "close_to_children", lambda: closed.append(True) or True)
    from grader.toolchain import gpuinfo

    monkeypatch.setattr(gpuinfo, "device_file_present", lambda: True)
    launcher = Launcher.for_command(["submit", "k.cu"])
    assert launcher.head_started and closed == [True]
    return launcher, launcher._head.spec, launcher._head.worker


def test_a_head_start_is_taken_by_the_grade_that_asks_for_the_same_process(monkeypatch):
    """The measuring process started before the rubric is read is the grade's where the rubric
    wants the one it started (the default limits, no PyTorch baseline); it is taken once."""
    from grader.grade.launcher import MeasurerSpec

    launcher, spec, worker = _head_started(monkeypatch)
    try:
        rubric = load_exercise("bias_gelu_fused")       # the default limits, no baseline
        assert spec.backend.records_then_replays and spec.backend.on_gpu     # the GPU's, recorded then replayed
        wanted = MeasurerSpec(backend=spec.backend, output_cap=rubric.limits.output_cap_bytes,
                              cpu_limit_s=rubric.limits.time_limit_s, device=spec.device, torch=False, cpu_threads=1)
        assert launcher._take_head_start(wanted).worker is worker and worker.proc.poll() is None
        assert launcher._take_head_start(wanted) is None            # taken: a second grade starts its own
    finally:
        worker.cancel()


def test_a_head_start_unlike_what_the_grade_wants_is_ended_not_used(monkeypatch):
    """A rubric with a PyTorch baseline (the child imports torch), other limits, another GPU, the
    emulator, no GPU at all: the head start's process is ended, and the grade starts its own."""
    import dataclasses

    for change in ({"torch": True}, {"cpu_limit_s": 10.0}, {"output_cap": 1}, {"device": "1"}, {"backend": EMULATOR}):
        launcher, spec, worker = _head_started(monkeypatch)
        assert launcher._take_head_start(dataclasses.replace(spec, **change)) is None, change
        assert worker.proc.wait(timeout=10) is not None and not launcher.head_started
    launcher, spec, worker = _head_started(monkeypatch)
    rubric = load_exercise("bias_gelu_fused")
    from grader.grade.machine import decide

    launcher.start_ahead(decide("emulator"), rubric=rubric)          # the emulator: no GPU grade
    assert worker.proc.wait(timeout=10) is not None and not launcher.head_started
    launcher, spec, worker = _head_started(monkeypatch)
    children = launcher.children(rubric=rubric, backend=EMULATOR, device=None, emulator_threads=0)
    try:
        assert children.worker is not worker and worker.proc.wait(timeout=10) is not None
    finally:
        children.cancel()


def test_a_command_that_ends_before_its_grade_leaves_no_head_start(monkeypatch):
    """`grader submit` of a missing file, or with a bad option, exits before any grade takes the
    head start: the exit handler ends it."""
    launcher, spec, worker = _head_started(monkeypatch)
    launcher.end_unused()                   # what the exit handler (atexit) calls
    assert worker.proc.wait(timeout=10) is not None and not launcher.head_started
