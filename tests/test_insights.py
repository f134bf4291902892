"""What made the slow kernels slow (batch/insights.py): the class's findings against fractions, the
hardware's spread, the mistakes linked; recounted from results.jsonl; shown at the end of `grader
batch`, in class.html and in the GitHub job summary; `--counters` reaches every grade of a batch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import grader.grade.pipeline
from grader.grade.machine import Machine
from grader.batch.insights import gather, markdown, terminal_lines
from grader.cli import cli
from grader.core.results import (CountersSummary, DiagnosisEntry, FindingEntry, KernelCounters, Result,
                                 result_from_json)

ROOT = Path(__file__).resolve().parent.parent


def result(correct=True, fraction=None, findings=(), diagnosis=(), counters=None, status="graded"):
    r = Result(exercise="e", submission={"path": "k.cu", "sha256": "0" * 64}, backend="cuda", status="graded",
               grader_version="t", correct=correct, fraction=fraction, findings=list(findings),
               diagnosis=list(diagnosis), counters=counters)
    if status != "graded":
        r.stop(status, "why")
    return r


def finding(code, source="code", message="`k` divides 64-bit integers", evidence=("line 9: IMAD.WIDE",)):
    return FindingEntry(code, "k", message, "advice", list(evidence), source)


def kernel(name, us, gbps, load=4.0, store=4.0):
    return KernelCounters(name, name, [1, 1, 1], [256, 1, 1], us, gbps / 40, gbps, 1 << 20, load, store)


def test_a_finding_is_counted_once_a_student_with_the_median_fractions_with_and_without_it():
    rows = [
        ("ann", result(fraction=0.96), ""),
        ("bo", result(fraction=0.58, findings=[finding("div64"), finding("div64"), finding("scalar_loads")]),
         "bo/report.html"),
        ("cy", result(fraction=0.62, findings=[finding("div64")]), ""),
        ("dee", result(correct=False, fraction=0.2, findings=[finding("div64")]), ""),    # incorrect: no fraction
        ("eve", result(correct=True, fraction=None, findings=[finding("div64")]), ""),    # the emulator: untimed
        ("fay", result(status="compile_error"), ""),
        ("gus", None, ""),                                                                # no submission
    ]
    ins = gather(rows)
    assert ins.students == 7 and ins.correct_timed == 3 and ins.with_counters == 0
    div = next(f for f in ins.findings if f.code == "div64")
    assert div.students == ["bo", "cy"] and div.timed == 2      # dee incorrect, eve untimed: not slow kernels
    assert div.median_with == 0.6 and div.median_without == 0.96
    assert div.example.student == "bo" and div.example.fraction == 0.58 and div.example.report == "bo/report.html"
    assert div.example.line == "`k` divides 64-bit integers (line 9: IMAD.WIDE)"
    scalar = next(f for f in ins.findings if f.code == "scalar_loads")
    assert scalar.students == ["bo"] and scalar.median_with == 0.58 and scalar.median_without == 0.79
    assert [f.code for f in ins.findings] == ["div64", "scalar_loads"]          # most students first


def test_the_counters_spread_is_over_correct_timed_kernels_each_by_its_longest_kernel():
    two = CountersSummary(kernels=[kernel("pre", 1.0, 100.0, load=1.0), kernel("main", 9.0, 3000.0, load=8.0)])
    rows = [("ann", result(fraction=0.96, counters=two), ""),
            ("bo", result(fraction=0.5, counters=CountersSummary(kernels=[kernel("k", 5.0, 1500.0, store=None)])), ""),
            ("cy", result(fraction=0.7, counters=CountersSummary(problem="ncu was not found")), ""),
            ("dee", result(correct=False, fraction=0.9, counters=CountersSummary(kernels=[kernel("k", 1, 9999.0)])), "")]
    ins = gather(rows)
    assert ins.with_counters == 2
    spread = {s.metric: s for s in ins.spreads}
    assert spread["dram_gbps"].values == {"ann": 3000.0, "bo": 1500.0}
    assert (spread["dram_gbps"].low, spread["dram_gbps"].median, spread["dram_gbps"].high) == (1500.0, 2250.0, 3000.0)
    assert spread["load_sectors_per_request"].values == {"ann": 8.0, "bo": 4.0}
    assert spread["store_sectors_per_request"].values == {"ann": 4.0}          # bo's kernel stores nothing


def test_each_mistake_names_its_students_with_their_reports():
    rows = [("ann", result(correct=False, diagnosis=[DiagnosisEntry("tanh_gelu", "m", "a"),
                                                     DiagnosisEntry("tanh_gelu", "m2", "a")]), "ann/report.html"),
            ("bo", result(correct=False, diagnosis=[DiagnosisEntry("tanh_gelu", "m", "a"),
                                                    DiagnosisEntry("bias_missing", "m", "a")]), "")]
    ins = gather(rows)
    assert [(m.code, m.students) for m in ins.mistakes] == [("tanh_gelu", ["ann", "bo"]), ("bias_missing", ["bo"])]
    assert ins.mistakes[0].reports == {"ann": "ann/report.html", "bo": ""}


def test_the_terminal_lines_fit_80_columns_and_the_markdown_keeps_its_table():
    rows = [(f"student_{i:03d}", result(fraction=0.5 + i / 100, findings=[finding(c, message="x | y " * 30)
                                                                         for c in ("div64", "f64", "local", "barrier",
                                                                                   "small_blocks", "scalar_loads")]),
             "") for i in range(12)]
    rows.append(("zed", result(fraction=0.99), ""))
    ins = gather(rows)
    lines = terminal_lines(ins)
    assert lines[0].startswith("What made the slow kernels slow (13 correct kernels timed)")
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert any(line.startswith("    e.g. student_000: x | y") and line.endswith("...") for line in lines)
    assert any(line.startswith("  and 1 more finding(s)") for line in lines)
    md = markdown(ins)
    assert "x \\| y" in md and md.count("\n| div64 (code) |") == 1


def test_nothing_to_say_prints_nothing():
    assert terminal_lines(gather([("ann", result(fraction=0.9), "")])) == []


SAMPLES = ROOT / "submissions" / "bias_gelu_fused"


def test_a_batch_writes_insights_that_recount_from_results_jsonl(tmp_path):
    """On the emulator: the compiled code's findings and the named mistakes of a small class, in
    insights.json, class.html and the end of the command's output, equal what each student's result
    (results.jsonl) says; in GitHub Actions they reach the job summary."""
    folder = tmp_path / "class"
    folder.mkdir()
    for name in ("flat_index_mod.cu", "scalar_2d.cu", "tanh_gelu.cu", "missing_bias.cu", "float4_launcher.cu"):
        (folder / name).write_bytes((SAMPLES / name).read_bytes())
    out, summary = tmp_path / "out", tmp_path / "summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "COLUMNS": "80"}
    import os

    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--backend", "emulator",
                           "--report-dir", str(out), "-j", "2"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **env}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ins = json.loads((out / "insights.json").read_text())
    results = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        doc = json.loads(line)
        results[doc["student"]] = result_from_json(doc["result"])
    assert len(results) == 5 and ins["students"] == 5
    # the compiled code's findings are in the students' results, but no kernel was timed on the
    # emulator: "What made the slow kernels slow" counts correct, timed kernels only
    assert any(r.findings for r in results.values()) and ins["correct_timed"] == 0 and ins["findings"] == []
    for m in ins["mistakes"]:
        assert m["students"] == sorted(s for s, r in results.items() if any(d.code == m["code"] for d in r.diagnosis))
        assert all(link == f"{s}/report.html" for s, link in m["reports"].items())
    assert {m["code"] for m in ins["mistakes"]} >= {"tanh_gelu", "bias_missing"}
    page = (out / "class.html").read_text()
    assert "Most common diagnoses" in page and 'href="tanh_gelu/report.html"' in page
    assert "What made the slow kernels slow" not in page and "What made the slow kernels slow" not in proc.stderr
    told = summary.read_text()
    assert "0 correct kernels timed" in told and "| tanh_gelu |" in told


def test_batch_counters_reach_every_grade_and_a_kept_result_without_them_is_graded_again(tmp_path, monkeypatch,
                                                                                          rubric):
    from grader.batch.request import ClassRequest
    from grader.batch.grading import grade_entries
    from grader.batch.inputs import find_submissions
    from grader.core.backend import CUDA

    asked = []

    def fake(request, *, inputs=None, progress=None):
        asked.append((request.path.name, request.options.counters))
        return result(fraction=0.9)

    monkeypatch.setattr(grader.grade.pipeline, "grade", fake)
    folder = tmp_path / "class"
    folder.mkdir()
    for i in range(3):
        (folder / f"s{i}.cu").write_text(f"// {i}\n")
    entries = find_submissions(folder)
    grade_entries(entries, ClassRequest(tmp_path, rubric, CUDA, report_dir=tmp_path / "out", jobs=1), machine=Machine(CUDA, {}, ("0",)))
    assert sorted(asked) == [("s0.cu", False), ("s1.cu", False), ("s2.cu", False)]
    asked.clear()
    grade_entries(entries, ClassRequest(tmp_path, rubric, CUDA, report_dir=tmp_path / "out", jobs=1), machine=Machine(CUDA, {}, ("0",)))
    assert asked == []                                     # unchanged: kept
    grade_entries(entries, ClassRequest(tmp_path, rubric, CUDA, report_dir=tmp_path / "out", jobs=1, counters=True),
                  machine=Machine(CUDA, {}, ("0",)))
    assert sorted(asked) == [("s0.cu", True), ("s1.cu", True), ("s2.cu", True)]


def test_batch_and_explain_offer_counters():
    runner = CliRunner()
    assert "--counters" in runner.invoke(cli, ["batch", "--help"]).output
    assert "--counters" in runner.invoke(cli, ["explain", "--help"]).output


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v nvidia-smi"], capture_output=True).returncode == 0,
                    reason="a GPU is visible: explain --counters runs there (tests/test_gpu.py)")
def test_explain_counters_without_a_gpu_says_so_and_exits_4():
    r = CliRunner().invoke(cli, ["explain", "--counters", str(SAMPLES / "scalar_2d.cu")])     # in process: the words
    assert r.exit_code == 4
    assert "--counters reads an NVIDIA GPU's counters and none is visible here" in r.stderr
