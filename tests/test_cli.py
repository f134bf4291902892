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
    assert f"grader: report: {html}" in r.output


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
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = []

    def wait_for(text, timeout=240):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
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
