import json

import pytest
from click.testing import CliRunner

from grader import __version__
from grader.cli import cli
from conftest import HAS_GPU, SUBMISSIONS


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_version():
    r = invoke("--version")
    assert r.exit_code == 0 and r.output.strip() == f"grader {__version__}"


def test_every_command_has_help_text():
    assert cli.help
    for name, command in cli.commands.items():
        assert command.help, f"{name} has no help text"
        r = invoke(name, "--help")
        assert r.exit_code == 0 and "Usage" in r.output
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                assert param.help, f"{name} {param.name} has no help text"


def test_missing_file_is_a_usage_error(tmp_path):
    r = invoke("submit", str(tmp_path / "nope.cu"))
    assert r.exit_code == 2 and "no such file" in r.output


def test_bad_rubric_is_exit_2_naming_file_and_key(tmp_path):
    bad = tmp_path / "r.yaml"
    bad.write_text("exercise: e\ntitle: t\ntiers:\n  gold: lots\n")
    r = invoke("submit", str(SUBMISSIONS / "scalar_2d.cu"), "--rubric", str(bad))
    assert r.exit_code == 2 and str(bad) in r.output and "tiers.gold" in r.output


def test_compile_error_exit_3_names_line(tmp_path):
    r = invoke("submit", str(SUBMISSIONS / "compile_error.cu"), "-q")
    assert r.exit_code == 3
    assert "compile_error.cu:10" in r.output and "colls" in r.output


def test_rejected_exit_3():
    r = invoke("submit", str(SUBMISSIONS / "misnamed_kernel.cu"), "-q", "--format", "json")
    doc = json.loads(r.output)
    assert r.exit_code == 3 and doc["status"] == "rejected" and "biasGeluFuse" in doc["message"]


def test_json_document_and_report_dir(tmp_path):
    r = invoke("submit", str(SUBMISSIONS / "scalar_2d.cu"), "--backend", "emulator", "--format", "json", "-q",
               "--report-dir", str(tmp_path / "rep"))
    assert r.exit_code == 0
    doc = json.loads(r.output)
    for key in ("schema", "submission", "exercise", "status", "correct", "tier", "fraction", "fraction_ci", "gbps",
                "floor", "cases", "diagnosis", "flags", "device", "backend", "grader_version"):
        assert key in doc
    assert doc["schema"] == "grader.result/1" and doc["backend"] == "emulator"
    assert doc["correct"] is True and doc["tier"] is None
    assert len(doc["submission"]["sha256"]) == 64
    assert any(c["name"].startswith("lesson 101x97") and c["passed"] for c in doc["cases"])
    assert any(c["kind"] == "chain" and c["passed"] for c in doc["cases"])
    assert any(c["kind"] == "timed" and c["shape"] == [16384, 1024] and c["passed"] for c in doc["cases"])
    files = sorted(p.name for p in (tmp_path / "rep").iterdir())
    assert files == ["report.html", "report.md", "result.json"]
    assert json.loads((tmp_path / "rep" / "result.json").read_text())["status"] == "graded"
    assert "performance is graded only on a gpu" in (tmp_path / "rep" / "report.md").read_text().lower()


def test_incorrect_is_exit_1_with_diagnosis_in_text():
    r = invoke("submit", str(SUBMISSIONS / "missing_bias.cu"), "--backend", "emulator", "-q")
    assert r.exit_code == 1
    assert "INCORRECT" in r.output and "bias_missing" in r.output and "out[0][0] (rows 0, cols 0)" in r.output


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_cuda_backend_without_gpu_is_infrastructure_exit_4(tmp_path):
    r = invoke("submit", str(SUBMISSIONS / "scalar_2d.cu"), "--backend", "cuda", "-q")
    assert r.exit_code == 4 and "needs an NVIDIA GPU" in r.output
    r = invoke("submit", str(SUBMISSIONS / "scalar_2d.cu"), "--backend", "cuda", "-q", "--format", "json",
               "--report-dir", str(tmp_path))
    doc = json.loads(r.output)
    assert r.exit_code == 4 and doc["status"] == "infrastructure_error" and doc["backend"] == "cuda"
    assert doc["build"] == {} and "build_s" not in doc["phases"] and "nothing was compiled" in doc["message"]
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "infrastructure_error"


def test_rubric_keys_lists_documented_keys():
    r = invoke("rubric-keys")
    assert r.exit_code == 0 and "timing.budget_s" in r.output and "default: 3.0" in r.output


def test_out_of_bounds_read_names_the_buffer_and_source_line():
    r = invoke("submit", str(SUBMISSIONS / "missing_guard.cu"), "--backend", "emulator", "-q", "--format", "json")
    doc = json.loads(r.output)
    assert r.exit_code == 1
    (d,) = [d for d in doc["diagnosis"] if d["code"] == "reads_past_input"]
    assert d["message"] == "read past the end of bias at missing_guard.cu:9"


def test_an_internal_error_still_gives_a_valid_result(monkeypatch, tmp_path):
    import grader.grading

    def boom(*a, **k):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(grader.grading, "build_submission", boom)
    r = invoke("submit", str(SUBMISSIONS / "scalar_2d.cu"), "--backend", "emulator", "-q", "--format", "json",
               "--report-dir", str(tmp_path))
    doc = json.loads(r.output)
    assert r.exit_code == 4 and doc["status"] == "infrastructure_error" and "simulated bug" in doc["message"]
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "infrastructure_error"


def test_batch_grades_a_folder_with_reports_and_summary(tmp_path):
    import csv
    import shutil

    folder = tmp_path / "class"
    folder.mkdir()
    for name in ("scalar_2d.cu", "compile_error.cu", "missing_bias.cu"):
        shutil.copy(SUBMISSIONS / name, folder / name)
    out = tmp_path / "out"
    r = invoke("batch", str(folder), "--backend", "emulator", "--report-dir", str(out))
    assert r.exit_code == 0
    rows = {row["file"]: row for row in csv.DictReader((out / "summary.csv").open())}
    assert rows["scalar_2d.cu"]["status"] == "graded" and rows["scalar_2d.cu"]["correct"] == "true"
    assert rows["compile_error.cu"]["status"] == "compile_error" and "colls" in rows["compile_error.cu"]["message"]
    assert rows["missing_bias.cu"]["diagnosis"] == "bias_missing"
    assert sorted(p.name for p in (out / "missing_bias").iterdir()) == ["gradescope.json", "report.html", "report.md",
                                                                        "result.json"]
    assert (out / "junit.xml").is_file()


def test_batch_of_an_empty_folder_is_a_usage_error(tmp_path):
    r = invoke("batch", str(tmp_path))
    assert r.exit_code == 2 and "no .cu files and no student folders" in r.output
