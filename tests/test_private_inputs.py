"""A GPU run's private cases (exercises/data.py): drawn afresh into the run's own folder, which
nobody can list, their answers never written, the folder gone when the run ends."""

import os
import stat
import time

import numpy as np
import pytest

from grader.core.backend import CUDA
from grader.toolchain import cache
from grader.exercises import casefiles, data, load_exercise, load_reference, pool
from grader.exercises.plan import plan_cases


@pytest.fixture()
def bias():
    rubric = load_exercise("bias_gelu_fused")
    return rubric, load_reference(rubric)


def _small_random(rubric, secret):
    return next(c for c in plan_cases(rubric, secret=secret) if c.inputs == "random" and c.dims["rows"] == 7)


def test_a_private_case_lies_in_an_unlistable_folder_and_its_answers_stay_in_memory(bias, tmp_path):
    rubric, ref = bias
    store = pool.Store(tmp_path, secret=0x5EC2E7)
    case = _small_random(rubric, store.secret)
    folder = store.folder_for(case)
    assert folder.parent == tmp_path / cache.RUNS and len(folder.name) == len("run-") + 32
    assert stat.S_IMODE(os.stat(folder.parent).st_mode) == 0o711          # enter, never list
    assert stat.S_IMODE(os.stat(folder).st_mode) & 0o044 == 0               # the same for the run's own

    inputs = data.materialize(rubric, ref, case, folder)
    data.expected_for(case, rubric, ref, inputs, folder)            # its answers, made ready to check
    written = sorted(p.name for p in folder.rglob("*") if p.is_file())
    assert written == ["inputs.f32", "inputs.f32.seal"]                     # no answers.f64, no prepared
    assert not any(p.name.startswith("in-") for p in tmp_path.iterdir())   # nothing in the shared cache
    on_disk = np.fromfile(casefiles.input_file(rubric, ref, case, folder), dtype=np.float32)
    assert np.array_equal(on_disk[: inputs["x"].size], np.asarray(inputs["x"]).reshape(-1))

    assert [e.path.name for e in cache.entries(tmp_path)] == []             # runs/ is never pruned as a build
    store.close()
    assert not folder.exists() and store.private is None


def test_each_run_draws_new_inputs_and_a_public_case_is_cached_as_before(bias, tmp_path):
    rubric, ref = bias
    first, second = pool.Store(tmp_path, secret=1), pool.Store(tmp_path, secret=2)
    a = data.materialize(rubric, ref, _small_random(rubric, 1), first.private)
    b = data.materialize(rubric, ref, _small_random(rubric, 2), second.private)
    assert not np.array_equal(a["x"], b["x"])
    again = data.materialize(rubric, ref, _small_random(rubric, 1), second.private)
    assert np.array_equal(a["x"], again["x"])                              # the secret decides, not the folder
    public = _small_random(rubric, None)
    assert pool.Store(tmp_path).folder_for(public) == tmp_path
    with pytest.raises(ValueError, match="private"):
        pool.Store(tmp_path).folder_for(_small_random(rubric, 3))
    data.answers(rubric, ref, public, tmp_path, data.materialize(rubric, ref, public, tmp_path))
    assert casefiles.input_file(rubric, ref, public, tmp_path).with_name("answers.f64").is_file()


def test_a_run_folder_a_killed_grader_left_is_swept(tmp_path):
    from grader.exercises import pool

    old, ready = pool.new_folder(tmp_path), pool.new_folder(tmp_path, "ready-k-")
    os.utime(old, (1, 1))
    os.utime(ready, (time.time() - 7200,) * 2)          # a ready folder is kept longer than a run's
    new = pool.new_folder(tmp_path)
    assert new.exists() and not old.exists() and ready.exists()


def test_the_next_runs_cases_drawn_ahead_are_claimed_once_and_match_what_a_run_would_draw(bias, tmp_path):
    """pool.py: the detached process draws every private case of a run (inputs, answers, prepared)
    with a secret of its own into a ready folder; the next grade claims it (one grade only),
    reads the same inputs it would have drawn from that secret, and removes it when done."""
    from grader.exercises import pool
    from grader.exercises.plan import run_cases
    from grader.exercises.data import expected_for

    rubric, ref = bias
    rubric = _small_timing(rubric)
    ready = pool.draw_ahead(rubric, ref, tmp_path, depth=1)
    assert ready is not None and ready.name.startswith("ready-")
    assert pool.draw_ahead(rubric, ref, tmp_path, depth=1) is None        # one is ready: nothing more drawn
    cases_for = lambda s: run_cases(rubric, timed=True, secret=s)                   # noqa: E731
    store = pool.Store.for_gpu_run(tmp_path, rubric, ref, cases_for)
    assert store.drawn_ahead and store.private.name.startswith("run-") and not ready.exists()
    again = pool.Store.for_gpu_run(tmp_path, rubric, ref, cases_for)
    assert not again.drawn_ahead and again.secret != store.secret       # claimed once: the next draws its own
    for case in (c for c in cases_for(store.secret) if c.private):
        got = data.materialize(rubric, ref, case, store.private)
        assert isinstance(got["x"], np.memmap)                             # read, not drawn again
        fresh = data.draw(rubric, ref, case)
        assert all(np.array_equal(got[k], fresh[k]) for k in fresh), case.name
        assert expected_for(case, rubric, ref, got, store.private).want["out"].dtype == np.float64
    folder = store.private
    store.close()
    again.close()
    assert not folder.exists() and list((tmp_path / cache.RUNS).glob("run-*")) == []


def test_two_folders_are_kept_ready_so_two_grades_in_a_row_both_find_one(bias, tmp_path):
    """READY_DEPTH: the detached process tops the ready folders up to two, each with its own
    secret; two grades in a row claim one each, and the third draws its own."""
    from grader.exercises import pool
    from grader.exercises.plan import run_cases

    rubric, ref = bias
    rubric = _small_timing(rubric)
    assert pool.draw_ahead(rubric, ref, tmp_path) is not None
    assert len(list((tmp_path / cache.RUNS).glob("ready-*"))) == pool.READY_DEPTH == 2
    assert pool.draw_ahead(rubric, ref, tmp_path) is None                 # topped up already
    cases_for = lambda s: run_cases(rubric, timed=True, secret=s)                   # noqa: E731
    first, second, third = (pool.Store.for_gpu_run(tmp_path, rubric, ref, cases_for) for _ in range(3))
    assert first.drawn_ahead and second.drawn_ahead and not third.drawn_ahead
    assert first.secret != second.secret
    pool.Store.for_gpu_run(tmp_path, rubric, ref, cases_for).close()
    assert pool.draw_ahead(rubric, ref, tmp_path) is not None             # one claimed is drawn again
    assert len(list((tmp_path / cache.RUNS).glob("ready-*"))) == 2
    for store in (first, second, third):
        store.close()


def test_a_folder_drawn_for_other_cases_is_never_used(bias, tmp_path):
    from grader.exercises import pool
    from grader.exercises.plan import run_cases

    rubric, ref = bias
    small = _small_timing(rubric)
    pool.draw_ahead(small, ref, tmp_path)
    other = _small_timing(rubric, rows=48)
    store = pool.Store.for_gpu_run(tmp_path, other, ref, lambda s: run_cases(other, timed=True, secret=s))
    assert not store.drawn_ahead
    store.close()


def _small_timing(rubric, rows: int = 32):
    """The rubric with a small timed shape, so drawing ahead takes a moment here."""
    import dataclasses

    return dataclasses.replace(rubric, timing=dataclasses.replace(rubric.timing, dims={"rows": rows, "cols": 64}))


def test_the_emulator_grades_with_the_rubrics_public_seeds(tmp_path):
    """The emulator runs the student's host code beside the device code: nothing there could keep
    a seed from it, so it uses the rubric's (reproducible), and says nothing of private inputs."""
    from grader.exercises.plan import run_cases

    rubric = load_exercise("bias_gelu_fused")
    assert not any(c.private for c in run_cases(rubric, timed=False))
    assert all(c.private for c in run_cases(rubric, timed=True, secret=99) if c.inputs == "random")


def test_the_measurer_is_told_where_the_private_inputs_lie_and_the_recorder_is_told_nothing(bias, tmp_path):
    """The job for a GPU run: the measuring process maps each private case from the run's folder
    (drawn there, not in the shared cache); the recorder's job names no file at all."""
    from types import SimpleNamespace

    from tests.jobs import child_job
    from grader.run.replaying import for_recorder

    rubric, _ref = bias
    store = pool.Store(tmp_path, secret=0xC0FFEE)
    lib = SimpleNamespace(library=tmp_path / "lib.so")
    job, cases = child_job(rubric, backend=CUDA, build=lib, reference=lib, has_launcher=False, store=store)
    by_name = {c.name: c for c in cases}
    for cj in job.cases + job.timed_cases:
        files = {b.file for b in cj.buffers if b.role == "in"}
        where = store.private if by_name[cj.name].private else tmp_path
        assert files and all(f.startswith(str(where) + os.sep) for f in files), cj.name
    assert any(by_name[cj.name].private for cj in job.cases) and all(by_name[cj.name].private
                                                                    for cj in job.timed_cases)
    recorded = for_recorder(job)
    assert all(b.file == "" for cj in recorded.cases + recorded.timed_cases for b in cj.buffers)
    store.close()


def test_a_grade_starts_a_detached_process_that_draws_the_next_runs_cases(tmp_path, monkeypatch):
    """What `grader submit` starts after a GPU grade: a process of its own session, which leaves a
    ready folder for the next grade; GRADER_DRAW_AHEAD=0 starts none."""
    from grader.exercises import pool

    rubric_file = tmp_path / "small.yaml"
    text = open(load_exercise("bias_gelu_fused").path).read()
    rubric_file.write_text(text.replace("dims: {rows: 16384, cols: 1024}", "dims: {rows: 64, cols: 64}"))
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("GRADER_CACHE_DIR", str(cache_dir))
    monkeypatch.setenv("GRADER_DRAW_AHEAD", "0")
    pool.start_drawing_ahead(str(rubric_file))
    time.sleep(1.0)
    assert not (cache_dir / cache.RUNS).exists()
    monkeypatch.setenv("GRADER_DRAW_AHEAD", "1")
    pool.start_drawing_ahead(str(rubric_file))
    runs = cache_dir / cache.RUNS
    deadline = time.time() + 120          # it draws READY_DEPTH folders, one after another, then exits
    while time.time() < deadline and (len(list(runs.glob("ready-*"))) < pool.READY_DEPTH
                                      or list(runs.glob(".drawing-*"))):
        time.sleep(0.2)
    ready = list(runs.glob("ready-*"))
    assert len(ready) == pool.READY_DEPTH and not list(runs.glob(".drawing-*"))
    for folder in ready:
        assert (folder / pool.SECRET_FILE).is_file() and any(folder.rglob("answers.f64"))
    assert len({(folder / pool.SECRET_FILE).read_bytes() for folder in ready}) == pool.READY_DEPTH   # a secret each


def test_a_batch_draws_its_private_cases_once_and_every_grade_reads_them(bias, tmp_path):
    """Store.for_batch: one secret for the class, every private case (answers too) drawn before
    the first grade, so that no grade of the batch draws the timed sets again; closed, it is gone."""
    from grader.exercises.plan import run_cases

    rubric, ref = bias
    rubric = _small_timing(rubric)
    cases_for = lambda s: run_cases(rubric, timed=True, secret=s)                   # noqa: E731
    shared = pool.Store.shared(tmp_path, rubric, ref, cases_for)
    assert not (tmp_path / cache.RUNS).exists()                           # made by the first grade that asks
    store = shared.get()
    assert shared.get() is store and store.keep and not store.drawn_ahead
    private = [c for c in cases_for(store.secret) if c.private]
    answers = list(store.private.rglob("answers.f64"))
    assert len(answers) == len(private) and len(list(store.private.rglob("inputs.f32"))) == len(private)
    for case in private:
        assert isinstance(data.materialize(rubric, ref, case, store.private)["x"], np.memmap)
    folder = store.private
    shared.close()
    assert not folder.exists()


def test_the_drawing_process_lowers_its_own_priority_before_anything_else(monkeypatch, tmp_path):
    """It is started without a preexec_fn (no fork of the grader, whose memory holds the timed
    shape's answers by then), so it takes nice DRAW_AHEAD_NICE itself, first."""
    import subprocess

    from grader.exercises import pool

    order = []
    monkeypatch.setattr(pool.os, "nice", lambda n: order.append(("nice", n)))
    monkeypatch.setattr(pool, "draw_ahead", lambda *a: order.append(("draw",)))
    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "cache"))
    assert pool.main([str(load_exercise("bias_gelu_fused").path)]) == 0
    assert order == [("nice", pool.DRAW_AHEAD_NICE), ("draw",)]

    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **kw: started.append(kw))
    monkeypatch.setenv("GRADER_DRAW_AHEAD", "1")
    pool.start_drawing_ahead("rubric.yaml")
    assert started and "preexec_fn" not in started[0] and started[0]["start_new_session"]
