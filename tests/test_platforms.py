"""What the grader says to GitHub Actions, Classroom, Gradescope, PrairieLearn and JUnit consumers."""

import base64
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from junitparser import Error, Failure, JUnitXml, Skipped

from grader.cli import cli
from grader.platforms import classroom, github, gradescope, junit, prairielearn
from grader.platforms.scoring import score
from grader.core.results import CaseResult, CopyTiming, DiagnosisEntry, Result, SandboxSummary, SourceNote, TimingResult
from conftest import ROOT, SUBMISSIONS


def _timing(fraction: float) -> TimingResult:
    return TimingResult(shape=[16384, 1024], kernel="biasGeluFused", byte_model="2 floats per element", bytes_moved=134217728, samples=120,
                        stop_reason="converged", seconds=1.0, submission_ms=0.036 / fraction,
                        submission_gbps=3700 * fraction, floor_kind="memcpy", floor_gbps=3700.0,
                        copies=[CopyTiming("memcpy", 0.036, 3700.0)], fraction=fraction,
                        fraction_ci=[fraction - 0.002, fraction + 0.002], informational_kind="copy_scalar",
                        informational_fraction=fraction * 1.5, chain_ms=None, chain_gbps=None,
                        chain_bytes=335544320, chain_title="biasGeluFused + addResidual")


def make(kind: str) -> Result:
    base = dict(exercise="bias_gelu_fused", submission={"path": "kernel.cu", "sha256": "ab" * 32},
                grader_version="0.1.0", seconds=4.2)
    passing = [CaseResult(f"random 7x4099 seed {s}", [7, 4099], "random", s, True, 0, 28693, 0) for s in (1, 2, 3)]
    if kind in ("gold", "silver", "below"):
        f = {"gold": 0.963, "silver": 0.81, "below": 0.58}[kind]
        t = _timing(f)
        return Result(**base, backend="cuda", status="graded", correct=True, tier=kind, fraction=f,
                      fraction_ci=t.fraction_ci, gbps=t.submission_gbps, timing=t, cases=passing,
                      feedback=f"{kind} feedback")
    if kind == "emulator":
        return Result(**base, backend="emulator", status="graded", correct=True, cases=passing)
    if kind == "incorrect":
        bad = CaseResult("lesson 101x97", [101, 97], "lesson", 0, False, 9797, 9797, 0,
                         {"at": "out[3][7] (rows 3, cols 7)", "got": 0.5, "want": 0.75}, 0.25, 0.33)
        return Result(**base, backend="emulator", status="graded", correct=False, cases=[bad] + passing,
                      diagnosis=[DiagnosisEntry("bias_missing", "matches gelu(x) without the bias",
                                                "Add bias[col] to x before the GELU.", "lesson 101x97")])
    if kind == "compile_error":
        r = Result(**base, backend="cuda", status="graded")
        r.stop("compile_error", 'kernel.cu:10: error: identifier "colls" is undefined')
        r.notes.append(SourceNote("kernel.cu", 10, "compile error", 'identifier "colls" is undefined'))
        return r
    if kind == "rejected":
        r = Result(**base, backend="cuda", status="graded")
        r.stop("rejected", "kernel.cu was not run\n  - kernel.cu:19: cudaStreamCreate() creates a stream")
        r.notes.append(SourceNote("kernel.cu", 19, "not accepted for grading", "cudaStreamCreate() creates a stream"))
        return r
    if kind == "crashed":
        r = Result(**base, backend="cuda", status="graded")
        r.stop("crashed", "an illegal memory access was encountered")
        return r
    raise ValueError(kind)


def reporter_points(line: str) -> tuple[float, float, str, list[dict]]:
    """What classroom-resources/autograding-grading-reporter does with <ID>_RESULTS: base64 ->
    JSON; the points are the tests' scores added up, out of max_score."""
    assert line.startswith("result=") and "\n" not in line.strip()
    doc = json.loads(base64.b64decode(line.strip()[len("result="):]).decode("utf-8"))
    assert doc["version"] == 1 and doc["status"] in ("pass", "fail", "error")
    for t in doc["tests"]:
        assert {"name", "status", "score", "message"} <= set(t)
    return sum(t["score"] for t in doc["tests"]), doc["max_score"], doc["status"], doc["tests"]


@pytest.mark.parametrize("kind, points, status", [
    ("gold", 100, "pass"), ("silver", 85, "fail"), ("below", 70, "fail"), ("emulator", 60, "fail"),
    ("incorrect", 0, "fail"), ("compile_error", 0, "error"), ("rejected", 0, "error"), ("crashed", 0, "error"),
])
def test_classroom_points_add_up_as_the_reporter_counts_them(kind, points, status, rubric):
    result = make(kind)
    total, maximum, got_status, tests = reporter_points(classroom.output_line(result, score(result, rubric)))
    assert (total, maximum, got_status) == (points, 100, status)
    assert [t["name"] for t in tests] == ["correctness", "performance tier"]


def test_a_rubric_without_tier_points_scores_correctness_alone(rubric):
    no_tiers = dataclasses.replace(rubric, points=dataclasses.replace(rubric.points, tiers={}))
    total, maximum, status, tests = reporter_points(classroom.output_line(make("emulator"), score(make("emulator"), no_tiers)))
    assert (total, maximum, status, len(tests)) == (60, 60, "pass", 1)


def test_classroom_writes_its_line_to_github_output(tmp_path, monkeypatch):
    target = tmp_path / "out"
    monkeypatch.setenv("GITHUB_OUTPUT", str(target))
    assert classroom.write_output("result=abc")
    monkeypatch.delenv("GITHUB_OUTPUT")
    assert not classroom.write_output("result=abc")
    assert target.read_text() == "result=abc\n"


def test_workflow_commands_escape_data_and_properties():
    assert github.escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert github.escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    assert github.command("error", "x\ny", file="dir/k.cu", line=3, title="t: 1, 2") == \
        "::error file=dir/k.cu,line=3,title=t%3A 1%2C 2::x%0Ay"


def test_annotations_point_at_the_students_lines(monkeypatch):
    monkeypatch.setenv("GITHUB_WORKSPACE", "/home/runner/work/repo")
    r = make("compile_error")
    r.notes[0].file = "/home/runner/work/repo/src/kernel.cu"
    (line,) = github.annotations(r)
    assert line.startswith("::error file=src/kernel.cu,line=10,title=compile error::")
    many = make("rejected")
    many.notes = [SourceNote("kernel.cu", i, "refused", f"call {i}") for i in range(1, 16)]
    assert len([a for a in github.annotations(many) if a.startswith("::error")]) == 10


def test_verdict_annotations_for_graded_results():
    (gold,) = github.annotations(make("gold"))
    assert gold.startswith("::notice title=correct%2C tier gold::0.963 of the copy floor")
    (emu,) = github.annotations(make("emulator"))
    assert "tiers are graded only on a GPU" in emu
    (bad,) = github.annotations(make("incorrect"))
    assert bad.startswith("::error file=kernel.cu,title=incorrect::") and "bias_missing" in bad
    unguarded = make("gold")
    unguarded.sandbox = SandboxSummary(seccomp=False, seccomp_detail="seccomp is unavailable here")
    assert any(a.startswith("::warning title=sandbox::") for a in github.annotations(unguarded))


def test_step_summary_trims_the_checks_table_never_the_verdict():
    head = "# Title\n\n| status | **graded** |\n\n## What this means\n\nCorrect and gold.\n\n## Checks\n\n"
    rows = "| check | shape | result | note |\n| --- | --- | --- | --- |\n" + "".join(
        f"| random {i} | 1 x 1 | pass | max abs error 1e-7 |\n" for i in range(40000))
    text = head + rows + "\n## Build\n\n- kernel: 15 registers\n"
    assert len(text.encode()) > github.SUMMARY_LIMIT
    out = github.step_summary(text)
    assert len(out.encode()) <= github.SUMMARY_LIMIT
    assert "Correct and gold." in out and "## Build" in out and "rows trimmed" in out
    assert github.step_summary("short") == "short"


def test_publish_appends_the_summary(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    lines = github.publish(make("gold"), "# report\n")
    assert summary.read_text() == "earlier step\n# report\n\n" and lines


def test_gradescope_results_have_the_documented_fields(rubric):
    doc = gradescope.results(make("silver"), score(make("silver"), rubric), "# report")
    assert doc["score"] == 85 and doc["output_format"] == "md" and doc["output"] == "# report"
    assert isinstance(doc["execution_time"], int)
    for t in doc["tests"]:
        assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(t)
        assert t["status"] in ("passed", "failed")
    assert sum(t["score"] for t in doc["tests"]) == doc["score"]
    assert doc["leaderboard"][0] == {"name": "fraction of the copy floor", "value": 0.81, "order": "desc"}
    assert "leaderboard" not in gradescope.results(make("incorrect"), score(make("incorrect"), rubric), "")


def test_prairielearn_results(rubric):
    refused = prairielearn.results(make("rejected"), score(make("rejected"), rubric))
    assert refused["gradable"] is False and refused["format_errors"] and "cudaStreamCreate" in refused["message"]
    assert prairielearn.results(make("compile_error"), score(make("compile_error"), rubric))["gradable"] is False
    silver = prairielearn.results(make("silver"), score(make("silver"), rubric))
    assert silver["gradable"] is True and silver["score"] == pytest.approx(0.85)
    for t in silver["tests"]:
        assert {"name", "points", "max_points", "message", "output"} <= set(t)
    crashed = prairielearn.results(make("crashed"), score(make("crashed"), rubric))
    assert crashed["gradable"] is True and crashed["score"] == 0.0


def test_junit_parses_with_a_junit_library():
    xml = junit.document([junit.testsuite(make("incorrect"), name="alice"), junit.testsuite(make("silver"), name="bob"),
                          junit.testsuite(make("compile_error"), name="carol")])
    suites = {s.name: s for s in JUnitXml.fromstring(xml.decode())}
    alice = suites["alice"]
    assert alice.tests == 5 and alice.failures == 1 and alice.skipped == 1
    (failed,) = [c for c in alice if any(isinstance(x, Failure) for x in c.result)]
    assert failed.name == "lesson 101x97"
    assert failed.result[0].message.startswith("first bad element out[3][7] (rows 3, cols 7): got 0.5, want 0.75")
    props = {p.name: p.value for p in suites["bob"].properties()}
    assert props["tier"] == "silver" and props["fraction"] == "0.81" and float(props["gbps"]) > 0
    (tier,) = [c for c in suites["bob"] if c.name == "tier"]
    assert isinstance(tier.result[0], Failure) and "silver" in tier.result[0].message
    (build,) = list(suites["carol"])
    assert isinstance(build.result[0], Error) and "colls" in build.result[0].message
    emu = JUnitXml.fromstring(junit.document([junit.testsuite(make("emulator"))]).decode())
    (tier,) = [c for s in emu for c in s if c.name == "tier"]
    assert isinstance(tier.result[0], Skipped)


def test_submit_speaks_junit_and_github_from_the_command_line(tmp_path, monkeypatch):
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    runner = CliRunner()
    out = tmp_path / "junit.xml"
    r = runner.invoke(cli, ["submit", str(SUBMISSIONS / "compile_error.cu"), "-q", "--format", "junit",
                            "--output", str(out)])
    assert r.exit_code == 3
    assert "::error file=" in r.output and ",line=10,title=compile error::" in r.output
    assert "did not compile" in summary.read_text()
    (suite,) = JUnitXml.fromfile(str(out))
    assert suite.errors == 1
    r = runner.invoke(cli, ["submit", str(SUBMISSIONS / "misnamed_kernel.cu"), "-q", "--format", "classroom"])
    assert r.exit_code == 3 and r.output.strip().splitlines()[-1].startswith("result=")
    total, maximum, status, _ = reporter_points(outputs.read_text().strip())
    assert (total, maximum, status) == (0, 100, "error")


def test_batch_writes_junit_and_a_gradescope_export_per_student(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    for name in ("compile_error.cu", "misnamed_kernel.cu"):
        (folder / name).write_text((SUBMISSIONS / name).read_text())
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(out), "--backend", "emulator"])
    assert r.exit_code == 0, r.output
    suites = {s.name for s in JUnitXml.fromfile(str(out / "junit.xml"))}
    assert suites == {"compile_error", "misnamed_kernel"}
    doc = json.loads((out / "misnamed_kernel" / "gradescope.json").read_text())
    assert doc["score"] == 0 and doc["tests"][0]["status"] == "failed"


# ---------------------------------------------------------------------------
# The shipped action, workflows and Gradescope scripts
# ---------------------------------------------------------------------------
WORKFLOWS = sorted((ROOT / "scripts" / "workflows").glob("*.yml"))


def _check_jsonschema(schema: str, *files: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, *map(str, files)],
                          capture_output=True, text=True)


def test_workflows_and_the_action_validate_against_githubs_schemas(tmp_path):
    assert len(WORKFLOWS) >= 3
    r = _check_jsonschema("vendor.github-workflows", *WORKFLOWS)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _check_jsonschema("vendor.github-actions", ROOT / "action.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    runs-on: x\n    steps:\n      - uses: a/b@v1\n        wiht: {}\n")
    assert _check_jsonschema("vendor.github-workflows", broken).returncode != 0     # the check can fail


def test_the_actions_outputs_and_steps_fit_together():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    ids = {s["id"] for s in steps if "id" in s}
    for name, out in action["outputs"].items():
        assert out["description"]
        step = out["value"].split("steps.", 1)[1].split(".", 1)[0]
        assert step in ids, f"output {name} reads a step that does not exist"
    for s in steps:
        assert "uses" in s or s.get("shell") == "bash", f"composite run steps need a shell: {s.get('name')}"
    for name, spec in action["inputs"].items():
        assert spec["description"], name
    assert {"file", "exercise", "rubric", "backend"} <= set(action["inputs"])
    assert {"status", "correct", "tier", "fraction", "result"} <= set(action["outputs"])
    exercise_default = action["inputs"]["exercise"]["default"]
    assert (ROOT / "rubrics" / f"{exercise_default}.yaml").is_file()


def test_the_classroom_workflow_hands_the_result_to_the_reporter():
    wf = yaml.safe_load((ROOT / "scripts" / "workflows" / "classroom.yml").read_text())
    steps = wf["jobs"]["autograding"]["steps"]
    reporter = next(s for s in steps if "autograding-grading-reporter" in s.get("uses", ""))
    for runner_id in reporter["with"]["runners"].split(","):
        assert runner_id.isalnum(), "the reporter accepts only letters and digits in runner ids"
        step = next(s for s in steps if s.get("id") == runner_id)
        assert reporter["env"][f"{runner_id.upper()}_RESULTS"] == f"${{{{ steps.{step['id']}.outputs.result }}}}"


@pytest.mark.parametrize("script", ["setup.sh", "run_autograder"])
def test_gradescope_scripts_are_valid_bash(script):
    path = ROOT / "scripts" / "gradescope" / script
    assert os.access(path, os.X_OK)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_the_formats_the_command_line_offers_are_the_documents_the_writers_make():
    from grader.platforms.documents import FORMATS
    from grader.platforms.writers import WRITERS

    assert FORMATS[0] == "text" and list(FORMATS[1:]) == list(WRITERS)
