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
    from grader.cli import WHERE, all_commands

    commands = all_commands()
    assert sorted(commands) == sorted(WHERE) and len(commands) == 11
    for name, command in commands.items():
        assert command.help, f"{name} has no help text"
        r = invoke(name, "--help")
        assert r.exit_code == 0 and "Usage" in r.output
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                assert param.help, f"{name} {param.name} has no help text"


def test_missing_file_is_a_usage_error(tmp_path):
    r = invoke("submit", str(tmp_path / "nope.cu"))
    assert r.exit_code == 2 and "no such file" in r.output


def test_a_folder_given_as_file_is_answered_like_a_missing_file(tmp_path):
    r = invoke("submit", str(tmp_path))
    assert r.exit_code == 2 and r.output.strip() == (f"grader: {tmp_path}: a folder, not a .cu file (`grader batch "
                                                     f"{tmp_path}` grades a folder of submissions)")


def test_a_missing_rubric_is_named_as_such(tmp_path):
    r = invoke("submit", str(SUBMISSIONS / "scalar_2d.cu"), "--rubric", str(tmp_path / "no_such.yaml"))
    assert r.exit_code == 2 and r.output.strip() == f"grader: rubric file not found: {tmp_path / 'no_such.yaml'}"


def test_progress_counts_the_checks_the_verdict_counts():
    import re
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "grader", "submit", str(SUBMISSIONS / "scalar_2d.cu"),
                           "--backend", "emulator"], capture_output=True, text=True, timeout=300)
    running = re.search(r"running (\d+) checks", proc.stderr)
    passed = re.search(r"(\d+) of (\d+) checks passed", proc.stdout)
    assert running and passed and running.group(1) == passed.group(2), (proc.stderr, proc.stdout)


def test_stderr_is_not_hard_wrapped_when_it_is_not_a_terminal(tmp_path):
    import shutil
    import subprocess
    import sys

    (tmp_path / "class" / "ann").mkdir(parents=True)
    shutil.copy(SUBMISSIONS / "scalar_2d.cu", tmp_path / "class" / "ann" / "k.cu")
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(tmp_path / "class"), "--backend", "emulator"],
                          capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "COLUMNS": ""})
    line = next(x for x in proc.stderr.splitlines() if "grading against" in x)
    assert len(line) > 80 and line.endswith("--exercise names another)"), proc.stderr


def test_submit_writes_its_report_beside_the_file_by_default_and_says_where(tmp_path, monkeypatch):
    import shutil

    monkeypatch.delenv("GRADER_REPORTS_ROOT", raising=False)
    mine = tmp_path / "my_kernel.cu"
    shutil.copy(SUBMISSIONS / "scalar_2d.cu", mine)
    r = CliRunner().invoke(cli, ["submit", str(mine), "--backend", "emulator"])
    assert r.exit_code == 0, r.output
    html = tmp_path / "my_kernel-report" / "report.html"
    assert html.is_file() and (html.parent / "result.json").is_file()
    assert r.output.rstrip().endswith(f"report: {html}")                    # the summary's last line


def test_no_report_writes_nothing_and_an_unwritable_folder_does_not_fail_the_grade(tmp_path, monkeypatch):
    import shutil

    monkeypatch.delenv("GRADER_REPORTS_ROOT", raising=False)
    mine = tmp_path / "k.cu"
    shutil.copy(SUBMISSIONS / "scalar_2d.cu", mine)
    r = CliRunner().invoke(cli, ["submit", str(mine), "--backend", "emulator", "--no-report"])
    assert r.exit_code == 0 and not (tmp_path / "k-report").exists() and "report:" not in r.output
    blocked = tmp_path / "a-file"                 # a folder that cannot be made, whoever runs it (root too)
    blocked.write_text("")
    r = CliRunner().invoke(cli, ["submit", str(mine), "--backend", "emulator", "--report-dir", str(blocked / "out")])
    assert r.exit_code == 0 and "could not write the report" in r.output and "--report-dir" in r.output


def test_watch_grades_again_on_each_save_and_ctrl_c_ends_it_with_exit_0(tmp_path):
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    mine = tmp_path / "kernel.cu"
    shutil.copy(SUBMISSIONS / "missing_bias.cu", mine)
    proc = subprocess.Popen([sys.executable, "-m", "grader", "submit", str(mine), "--watch", "--backend", "emulator",
                             "--no-report"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            # a run started in the background (`cmd &`) inherits SIGINT ignored, and the
                            # grader keeps an ignored SIGINT ignored: this Ctrl-C is a terminal's
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    import queue
    import threading

    lines, seen = queue.Queue(), []
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()

    def wait_for(text, timeout=240):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            seen.append(line)
            if text in line:
                return
        raise AssertionError(f"never printed {text!r}: {''.join(seen)[-2000:]}")

    try:
        wait_for("watching")
        shutil.copy(SUBMISSIONS / "scalar_2d.cu", tmp_path / "new.cu")
        os.replace(tmp_path / "new.cu", mine)                  # as an editor saves: a new file renamed over it
        wait_for("CORRECT  18 of 18")
        wait_for("watching")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    assert sum("INCORRECT" in line for line in seen) == 1


def test_bad_rubric_is_exit_2_naming_file_and_key(tmp_path):
    bad = tmp_path / "r.yaml"
    bad.write_text("exercise: e\ntitle: t\ntiers:\n  gold: lots\n")
    r = invoke("submit", str(SUBMISSIONS / "scalar_2d.cu"), "--rubric", str(bad))
    assert r.exit_code == 2 and str(bad) in r.output and "tiers.gold" in r.output


def test_compile_error_exit_3_names_line(tmp_path):
    r = invoke("submit", str(SUBMISSIONS / "compile_error.cu"), "-q")
    assert r.exit_code == 3
    assert "compile_error.cu(10): error" in r.output and "colls" in r.output      # as nvcc prints it


def test_rejected_exit_3():
    r = invoke("submit", str(SUBMISSIONS / "misnamed_kernel.cu"), "-q", "--format", "json")
    doc = json.loads(r.output)
    assert r.exit_code == 3 and doc["status"] == "rejected" and "biasGeluFuse" in doc["message"]


def test_json_document_and_report_dir(tmp_path, monkeypatch):
    from grader.toolchain import gpuinfo

    probes = []
    real_probe = gpuinfo.probe
    monkeypatch.setattr(gpuinfo, "probe", lambda *a, **k: probes.append(1) or real_probe(*a, **k))
    r = invoke("submit", str(SUBMISSIONS / "scalar_2d.cu"), "--backend", "emulator", "--format", "json", "-q",
               "--report-dir", str(tmp_path / "rep"))
    assert r.exit_code == 0
    doc = json.loads(r.output)
    for key in ("schema", "submission", "exercise", "status", "correct", "tier", "fraction", "fraction_ci", "gbps",
                "floor", "cases", "diagnosis", "flags", "device", "backend", "grader_version"):
        assert key in doc
    assert doc["schema"] == "grader.result/2" and doc["backend"] == "emulator"
    assert doc["correct"] is True and doc["tier"] is None
    # the phases a grade is timed by, from the GPU's probe (none asked for here) to the verdict
    assert "probe_s" in doc["phases"] and probes == []                 # no GPU probe for the emulator, asked by name
    assert doc["phases"]["build_s"] > 0 and "check_s" in doc["phases"]
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
    assert "INCORRECT" in r.output and "bias_missing" in r.output and "out[row 0][col 0]" in r.output


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_cuda_backend_without_gpu_is_infrastructure_exit_4(tmp_path):
    r = invoke("submit", str(SUBMISSIONS / "scalar_2d.cu"), "--backend", "cuda", "-q")
    assert r.exit_code == 4 and "needs an NVIDIA GPU" in r.output
    r = invoke("submit", str(SUBMISSIONS / "scalar_2d.cu"), "--backend", "cuda", "-q", "--format", "json",
               "--report-dir", str(tmp_path))
    doc = json.loads(r.output)
    assert r.exit_code == 4 and doc["status"] == "infrastructure_error" and doc["backend"] == "cuda"
    assert doc["build"] is None and "build_s" not in doc["phases"] and "nothing was compiled" in doc["message"]
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "infrastructure_error"


def test_rubric_keys_lists_documented_keys():
    r = invoke("rubric-keys")
    assert r.exit_code == 0 and "timing.budget_s" in r.output and "default: 3.0" in r.output


def test_out_of_bounds_read_names_the_buffer_and_source_line():
    r = invoke("submit", str(SUBMISSIONS / "missing_guard.cu"), "--backend", "emulator", "-q", "--format", "json")
    doc = json.loads(r.output)
    assert r.exit_code == 1
    (d,) = [d for d in doc["diagnosis"] if d["code"] == "reads_past_input"]
    # the access's line, and why it reaches past (no guard compares the index: verdict/causes.py)
    assert d["message"].startswith("line 9: `const float v = x[i] + bias[col];`")
    # the buffer read past, at its line, by which thread, and the guard the file lacks (verdict/bounds.py)
    assert "line 9: `const float v = x[i] + bias[col];` read past the end of bias: thread 128 of block 0" in d["message"]
    assert d["message"].endswith("The missing guard is col < cols: write `col < cols`)")


def test_an_internal_error_still_gives_a_valid_result(monkeypatch, tmp_path):
    import grader.grade.steps

    def boom(*a, **k):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(grader.grade.steps, "build_submission", boom)
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
    names = sorted(p.name for p in (out / "missing_bias").iterdir())
    maps = [n for n in names if n.startswith("map-")]        # a picture of each failed check, for report.md
    assert [n for n in names if n not in maps] == ["gradescope.json", "report.html", "report.md", "result.json"]
    assert len(maps) == len(json.loads((out / "missing_bias" / "result.json").read_text())["maps"]) > 0
    assert (out / "junit.xml").is_file()


def test_batch_of_an_empty_folder_is_a_usage_error(tmp_path):
    r = invoke("batch", str(tmp_path))
    assert r.exit_code == 2 and "no .cu files and no student folders" in r.output


def test_every_exit_code_comes_from_the_one_table():
    """grader.core.errors.Exit is the only table of exit codes: the command line never exits with a bare
    number (results.Result.exit_code and every error's exit_code are its members too)."""
    import ast
    import importlib
    import inspect
    import pkgutil

    import grader.cli
    from grader.core.errors import Exit, GraderError, InfrastructureError, UsageError

    modules = [grader.cli] + [importlib.import_module(f"grader.cli.{m.name}") for m in pkgutil.iter_modules(grader.cli.__path__)]
    assert len(modules) >= 4
    bare = [(m.__name__, node.lineno) for m in modules for node in ast.walk(ast.parse(inspect.getsource(m)))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "exit"
            and any(isinstance(a, ast.Constant) for a in node.args)]
    assert bare == []
    assert [UsageError.exit_code, InfrastructureError.exit_code, GraderError.exit_code] == [Exit.USAGE] + [Exit.INFRASTRUCTURE] * 2
    assert [e.value for e in Exit] == [0, 1, 2, 3, 4, 130]


_LEAVE = """
import atexit, sys, threading, time
from pathlib import Path
from grader import cli
out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
if sys.argv[2] == "thread":
    def late():
        time.sleep(3 * cli.LEAVE_WAIT_S)
        (out / "thread").write_text("done")
    threading.Thread(target=late).start()
print("printed before the exit", end="")
cli._leave(5)
"""


@pytest.mark.parametrize("with_thread", [False, True])
def test_the_quick_exit_keeps_the_code_the_exit_handlers_the_output_and_a_thread_still_writing(tmp_path, with_thread):
    """cli._leave skips the interpreter's teardown (torch's took 0.4 s) only once the grader's own
    threads have ended; a thread still writing a file gets the ordinary exit, which waits for it."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _LEAVE, str(tmp_path), "thread" if with_thread else "none"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout == "printed before the exit"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").exists() == with_thread


def test_the_command_line_exits_with_the_grade_s_code_through_main(tmp_path):
    import os
    import subprocess
    import sys

    missing = subprocess.run([sys.executable, "-m", "grader", "submit", str(tmp_path / "nope.cu")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    bad = subprocess.run([sys.executable, "-m", "grader", "submit", str(SUBMISSIONS / "bias_by_row.cu"),
                          "--backend", "emulator", "--no-report", "--format", "json", "-q"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "GRADER_CACHE_DIR": str(tmp_path / "c")})
    assert bad.returncode == 1 and json.loads(bad.stdout)["correct"] is False


def test_the_commands_own_start_is_in_its_first_grades_phases(tmp_path):
    """grader submit says where its start went (result.phases cli_to_*: seconds from the process's
    start to the children's early start and to the grade), inside the command's wall time; a grade
    run in another process (a test's CliRunner, a batch) says nothing of it."""
    import json
    import subprocess
    import sys
    import time

    from click.testing import CliRunner

    from grader.cli import cli

    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "grader", "submit", str(SUBMISSIONS / "scalar_2d.cu"), "--backend",
                           "emulator", "--format", "json", "-q", "--no-report"], capture_output=True, text=True,
                          timeout=300)
    wall = time.monotonic() - began
    doc = json.loads(proc.stdout)
    early, grade = doc["phases"]["cli_to_early_s"], doc["phases"]["cli_to_grade_s"]
    assert 0 < early <= grade and grade + doc["seconds"] <= wall + 0.02, (early, grade, doc["seconds"], wall)
    here = CliRunner().invoke(cli, ["submit", str(SUBMISSIONS / "scalar_2d.cu"), "--backend", "emulator",
                                    "--format", "json", "-q", "--no-report"])
    assert "cli_to_grade_s" not in json.loads(here.stdout)["phases"]


def test_every_command_fits_an_80_column_terminal(tmp_path, monkeypatch):
    """COLUMNS=80: `grader exercises` (213 columns wide before), `grader explain` (193), `grader batch`'s
    table (96) and `grader history` fit; piped without COLUMNS, lines are left whole."""
    import shutil as sh

    from conftest import SUBMISSIONS

    monkeypatch.setenv("COLUMNS", "80")
    runner = CliRunner()
    cls = tmp_path / "class"
    cls.mkdir()
    for who in ("alice", "bob"):
        sh.copy(SUBMISSIONS / "scalar_2d.cu", cls / f"{who}_with_a_long_student_name.cu")
    outputs = {                         # stdout: the progress lines on stderr are soft-wrapped by the terminal
        "exercises": runner.invoke(cli, ["exercises"]).stdout,
        "explain": runner.invoke(cli, ["explain", str(SUBMISSIONS / "scalar_2d.cu")]).stdout,
        "batch": runner.invoke(cli, ["batch", str(cls), "--backend", "emulator", "--report-dir",
                                     str(tmp_path / "out")]).stdout,
    }
    for name, text in outputs.items():
        assert text.strip(), name
        wide = [line for line in text.splitlines() if len(line) > 80]
        assert not wide, f"{name}: {wide[:3]}"
    monkeypatch.delenv("COLUMNS")
    whole = runner.invoke(cli, ["exercises"]).stdout
    assert max(len(line) for line in whole.splitlines()) > 80        # a pipe gets the lines whole


def test_a_wrapped_line_never_splits_an_index():
    from rich.markup import escape

    from grader.cli.screen import fitted

    line = ("  x chain 101x97 (biasGeluFused + addResidual): first bad element chain[row 0][col 2]: got -0.750015259, "
            "want -0.750000399; 8766 of 9797 wrong")
    for width in range(40, 120, 3):
        pieces = [p.plain for p in fitted(escape(line), width)]     # escaped, as the summary's template does
        assert any("chain[row 0][col 2]:" in p for p in pieces), (width, pieces)
        assert " ".join(p.strip() for p in pieces) == line.strip()


def test_a_quiet_submit_imports_no_rich_on_the_way_to_its_grade(tmp_path):
    """rich's import (25 to 60 ms) is made at the first message on stderr: `grader submit -q`
    prints none before its grade, and a message still comes out whole."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import grader.grade.pipeline as p\n"
        "def stop(*a, **k):\n"
        "    print('rich' in sys.modules, file=sys.stderr)\n"
        "    raise SystemExit(0)\n"
        "p.grade = stop\n"
        "from grader.cli.common import LazyErrConsole\n"
        "from grader.entry import main\n"
        "sys.argv = ['grader', 'submit', sys.argv[1], '--backend', 'emulator', '-q', '--format', 'json']\n"
        "main()\n")
    import os

    from conftest import ROOT as root

    assert (SUBMISSIONS / "scalar_2d.cu").is_file()
    proc = subprocess.run([sys.executable, "-c", script, str(SUBMISSIONS / "scalar_2d.cu")],
                          capture_output=True, text=True, cwd=root, env={**os.environ, "GRADER_CACHE_DIR": str(tmp_path)})
    assert proc.stderr.strip().splitlines()[-1] == "False", proc.stderr
    said = subprocess.run([sys.executable, "-c", "from grader.cli.common import LazyErrConsole\n"
                           "import sys\nassert 'rich' not in sys.modules\nLazyErrConsole().print('grader: hello')"],
                          capture_output=True, text=True, cwd=root)
    assert said.returncode == 0 and "grader: hello" in said.stderr
