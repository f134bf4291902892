"""Attempts remembered (grader/report/history.py): what changed since the last grade of a file, the bound
on what is kept, clearing, and the CLI's line and `grader history`."""

import shutil

from click.testing import CliRunner

from grader.report import history
from grader.cli import cli
from grader.core.results import DiagnosisEntry, FindingEntry, Result
from conftest import SUBMISSIONS


def _result(status="graded", correct=True, fraction=None, tier=None, diagnoses=(), findings=(), sha="a"):
    r = Result(exercise="e", submission={"sha256": sha}, backend="cuda", status=status, grader_version="0",
               correct=correct, fraction=fraction, tier=tier)
    r.diagnosis = [DiagnosisEntry(c, "", "", "") for c in diagnoses]
    r.findings = [FindingEntry(c, "", "", "") for c in findings]
    return r


def test_the_change_since_the_last_attempt_is_said_in_one_line(tmp_path):
    store, f = tmp_path / "a.jsonl", tmp_path / "k.cu"
    first, _ = history.record(_result(correct=False, diagnoses=["bias_missing"], findings=["scalar_loads"]), f,
                              path=store, when=0)
    assert first is None
    prev, now = history.record(_result(fraction=0.59, tier="below", findings=["scalar_loads"], sha="e"), f, path=store,
                               when=60)
    assert history.change(prev, now).endswith(": incorrect -> correct, no tier -> below; bias_missing fixed")
    prev, now = history.record(_result(fraction=0.94, tier="gold"), f, path=store, when=120)
    assert history.change(prev, now).endswith(": 0.59 -> 0.94 of the floor, below -> gold; scalar_loads fixed")
    prev, now = history.record(_result(fraction=0.941, tier="gold"), f, path=store, when=180)
    assert history.change(prev, now).endswith(": no change (the same file)")
    prev, now = history.record(_result(status="compile_error", correct=None, sha="b"), f, path=store, when=240)
    assert "correct -> compile_error" in history.change(prev, now)
    assert [a.outcome for a in history.attempts(f, path=store)] == ["incorrect", "correct", "correct", "correct",
                                                                    "compile_error"]


def test_attempts_are_bounded_per_file_and_in_all_and_can_be_cleared(tmp_path, monkeypatch):
    store = tmp_path / "a.jsonl"
    monkeypatch.setattr(history, "MAX_PER_FILE", 3)
    monkeypatch.setattr(history, "MAX_ATTEMPTS", 5)
    for i in range(6):
        history.record(_result(fraction=i / 10), tmp_path / "one.cu", path=store, when=i)
    assert [a.fraction for a in history.attempts(tmp_path / "one.cu", path=store)] == [0.3, 0.4, 0.5]
    for i in range(4):
        history.record(_result(fraction=i / 10), tmp_path / f"f{i}.cu", path=store, when=10 + i)
    assert len(history._read(store)) == 5
    assert history.attempts(tmp_path / "one.cu", path=store)[-1].fraction == 0.5
    assert history.clear(tmp_path / "f3.cu", path=store) == 1 and not history.attempts(tmp_path / "f3.cu", path=store)
    assert history.clear(path=store) == 4 and history._read(store) == []


def test_submit_says_what_changed_and_history_lists_the_attempts(tmp_path):
    mine = tmp_path / "kernel.cu"
    shutil.copy(SUBMISSIONS / "missing_bias.cu", mine)
    runner = CliRunner()
    first = runner.invoke(cli, ["submit", str(mine), "--backend", "emulator"])
    assert "since " not in first.output
    shutil.copy(SUBMISSIONS / "scalar_2d.cu", mine)
    second = runner.invoke(cli, ["submit", str(mine), "--backend", "emulator"])
    assert second.exit_code == 0 and "incorrect -> correct; bias_missing fixed" in second.output
    listed = runner.invoke(cli, ["history", str(mine)])
    assert listed.exit_code == 0 and "incorrect" in listed.output and "bias_missing" in listed.output
    assert "forgot 2 attempt(s)" in runner.invoke(cli, ["history", str(mine), "--clear"]).output
    assert "no attempts" in runner.invoke(cli, ["history", str(mine)]).output


def test_a_refused_attempt_keeps_why_and_history_shows_it(tmp_path, monkeypatch):
    store, f = tmp_path / "a.jsonl", tmp_path / "k.cu"
    f.write_text("// k\n")
    refused = _result(status="rejected", correct=None)
    refused.message = "Stopped by the grader's sandbox: your code tried to start a program\nsecond line"
    history.record(refused, f, path=store, when=0)
    (a,) = history.attempts(f, path=store)
    assert a.reason == "Stopped by the grader's sandbox: your code tried to start a program"
    monkeypatch.setattr(history, "store_path", lambda: store)
    out = CliRunner().invoke(cli, ["history", str(f)], env={"COLUMNS": "200"}).output
    assert "Stopped by the grader's sandbox" in out and "named" in out
