"""What each of a grade's processes imports: only what its step needs (issue 74: a process start that
imports only what its step needs). Nothing here is timed: each process is started as the grader
starts it, and the modules it loaded are read (python -X importtime's list, or sys.modules);
scripts/start-time.py measures what the starts cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What no grade's child needs: the command line, the terminal, templates, the server, YAML, PyTorch
# (the child imports torch only for a PyTorch baseline, which the command line names: `torch`).
NOT_IN_A_CHILD = {"click", "rich", "jinja2", "markupsafe", "yaml", "starlette", "uvicorn", "multipart", "torch",
                  "pygments", "sqlite3"}
# The layers above the run layer: the child runs a job, it judges nothing and draws nothing.
NOT_IN_A_CHILD_LAYERS = ("grader.cli", "grader.grade", "grader.verdict", "grader.report", "grader.platforms",
                         "grader.batch", "grader.serve", "grader.analysis", "grader.exercises", "grader.toolchain")


def _child_imports(*args: str) -> list[str]:
    """The modules a child imports, started as run/sandbox.Worker starts it (`python -S -m
    grader.run.child.worker RESULT_FD GUARD_FD BACKEND READY_FD [...]`), up to its job (none comes:
    its stdin is closed, and it ends). Without a GPU the measuring process stops at its CUDA context,
    after its imports."""
    backend, *rest = args
    pipes = [os.pipe() for _ in range(3)]
    ends = [w for _, w in pipes]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-S", "-X", "importtime", "-m", "grader.run.child.worker", str(ends[0]),
                           str(ends[1]), backend, str(ends[2]), *rest], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, pass_fds=ends, env=env, cwd="/tmp", timeout=120)
    for r, w in pipes:
        os.close(r)
        os.close(w)
    return [line.split("|")[2].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:") and "|" in line and "cumulative" not in line]


def _tops(modules) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("args", [("emulator",), ("cuda",), ("cuda", "nogpu")],
                         ids=["emulator child", "measuring process", "recorder without a GPU"])
def test_a_child_imports_only_the_run_and_core_layers(args):
    modules = _child_imports(*args)
    # the worker itself runs as __main__: what it imported at its top is listed
    assert {"grader.run.protocol", "grader.run.child.timing", "grader.run.child.walls"} <= set(modules), modules[-20:]
    assert not _tops(modules) & NOT_IN_A_CHILD, sorted(_tops(modules) & NOT_IN_A_CHILD)
    above = sorted(m for m in modules if m.startswith(NOT_IN_A_CHILD_LAYERS))
    assert not above, above
    # nothing from site-packages but numpy (the stopping rule's bootstrap): -S keeps site out
    assert _tops(modules) - set(sys.stdlib_module_names) <= {"grader", "numpy", "org"}, sorted(_tops(modules))


def _loaded_by(code: str) -> set[str]:
    """sys.modules after code, in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    got = subprocess.run([sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, env=env, cwd="/tmp", timeout=120, check=True)
    return set(json.loads(got.stdout.splitlines()[-1]))


def test_the_commands_head_start_imports_neither_the_command_line_nor_the_rubrics():
    """grader/entry.py starts the measuring process before click, the rubrics (YAML) and the pipeline
    are imported (grade/launcher.Launcher.for_command): what it imports is on every grade's way to its children."""
    loaded = _loaded_by("import grader.entry")
    assert not _tops(loaded) & (NOT_IN_A_CHILD | {"numpy"}), sorted(_tops(loaded) & (NOT_IN_A_CHILD | {"numpy"}))
    assert not sorted(m for m in loaded if m.startswith(("grader.cli", "grader.exercises", "grader.verdict",
                                                         "grader.report", "grader.platforms", "grader.analysis")))


def test_the_grading_process_imports_no_child_module_no_server_and_no_template_engine():
    """`grader submit`'s own process, as far as its grade and its delivery: the child's modules are the
    child's (the recorder, its CUDA and emulator backends: only the guard's reports and the
    replay's checks of a recording are read on this side), the server is `grader serve`'s, jinja2 is
    imported when a report is rendered, torch never (the reference is numpy's float64)."""
    loaded = _loaded_by("import grader.entry, grader.cli, grader.cli.student, grader.grade.pipeline, "
                        "grader.grade.ways, grader.verdict, grader.platforms.delivery")
    child = sorted(m for m in loaded if m.startswith("grader.run.child."))
    assert set(child) <= {"grader.run.child.guard", "grader.run.child.replay"}, child
    assert not _tops(loaded) & {"starlette", "uvicorn", "multipart", "jinja2", "torch"}
    assert not sorted(m for m in loaded if m.startswith(("grader.serve", "grader.batch")))


def test_the_drawing_ahead_process_imports_no_command_line_and_no_judging():
    """`python -m grader.exercises.pool` draws the next run's private cases beside a student's reading:
    the rubric (YAML), the reference and numpy, no more."""
    loaded = _loaded_by("import grader.exercises.pool")
    assert not _tops(loaded) & {"click", "rich", "jinja2", "torch", "starlette", "uvicorn"}
    assert not sorted(m for m in loaded if m.startswith(("grader.cli", "grader.verdict", "grader.report",
                                                         "grader.platforms", "grader.grade", "grader.run.child")))
