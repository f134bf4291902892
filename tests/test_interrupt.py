"""Interruptions from outside (SIGINT from Ctrl-C, SIGTERM from Slurm, CI or `timeout`, SIGKILL):
nothing unfinished is kept, a rerun grades exactly what is missing, and no build or child outlives
the grader."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SUBMISSIONS

CLASS = {"ana": "scalar_2d.cu", "ben": "float4_launcher.cu", "cy": "int_cols.cu", "dee": "tanh_gelu.cu",
         "eve": "missing_bias.cu", "fay": "device_helper.cu"}


def _class(tmp_path: Path) -> Path:
    folder = tmp_path / "class"
    for student, sample in CLASS.items():
        (folder / student).mkdir(parents=True)
        shutil.copy(SUBMISSIONS / sample, folder / student / "kernel.cu")
    return folder


def _batch(folder: Path, out: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grader", "batch", str(folder), "--report-dir", str(out),
                             "--backend", "emulator", "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _stored(out: Path) -> dict:
    path = out / "results.jsonl"
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["student"]: r["result"]["status"] for r in rows}


def _ours(marker: str) -> list[int]:
    """Live processes whose command line or working directory names marker (a test's own folder)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    continue
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{entry}/cwd")
            # a build's compilers run in a room of their own, not beneath the test's folder: they carry the
            # grader's environment (GRADER_CACHE_DIR names the test's folder)
            env = Path(f"/proc/{entry}/environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmd or marker in cwd or marker in env:
            found.append(int(entry))
    return found


def _tree(root: int) -> set[int]:
    """The live processes descending from root (a build's compilers carry none of the grader's
    environment, core/environment.py, and run in a room of their own: their ancestry finds them)."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[-1].split()
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> list[int]:
    left = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[-1].split()[0] != "Z":
                    left.append(pid)
        except OSError:
            pass
    return left


def _none_left(marker: str, within_s: float = 60.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while (left := _ours(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (the emulator)")
@pytest.mark.parametrize("sig,after_s", [(signal.SIGINT, 1.0), (signal.SIGTERM, 4.0), (signal.SIGINT, 9.0)],
                         ids=["int-during-builds", "term-while-grading", "int-late"])
def test_an_interrupted_batch_keeps_only_what_finished_and_the_rerun_grades_the_rest(tmp_path, sig, after_s):
    folder, out = _class(tmp_path), tmp_path / "out"
    # the grace after the signal (20 s; the grace's own test is below) outlasts any stop here, however loaded the
    # machine: this test is about what is kept, and its messages name the signal
    env = {**os.environ, "GRADER_CACHE_DIR": str(tmp_path / "cache"), "GRADER_STOP_GRACE_S": "600"}
    first = _batch(folder, out, env)
    time.sleep(after_s)
    first.send_signal(sig)
    _, err = first.communicate(timeout=900)                          # a hang's guard
    kept = _stored(out)
    assert first.returncode in (0, 130), err
    assert "infrastructure_error" not in kept.values() and "internal error" not in err, err
    if first.returncode == 130:
        assert f"interrupted by {sig.name}" in err, err          # the signal named: Slurm's, CI's or `timeout`'s
        if not kept:                                             # it names only the files it wrote
            assert "results.jsonl" not in err and "no student was graded in this run" in err, err
            rows = (out / "summary.csv").read_text()             # the whole class, each row saying why
            assert all(student in rows for student in CLASS) and "not_graded" in rows
    assert _none_left(str(tmp_path)) == []

    second = _batch(folder, out, env)
    _, err2 = second.communicate(timeout=600)
    assert second.returncode == 0, err2
    assert err2.count("(kept from the last run)") == len(kept)
    final = _stored(out)
    assert set(final) == set(CLASS) and set(final.values()) == {"graded"}
    summary = (out / "summary.csv").read_text()
    assert all(student in summary for student in CLASS) and "infrastructure_error" not in summary


def test_a_stored_infrastructure_error_is_graded_again(tmp_path):
    from grader.batch.store import ResultStore
    from grader.core.results import Result

    store = ResultStore(tmp_path / "results.jsonl")
    broken = Result(exercise="e", submission={}, backend="emulator", status="infrastructure_error", grader_version="0")
    fine = Result(exercise="e", submission={}, backend="emulator", status="graded", grader_version="0")
    store.add("bob", tmp_path / "b.cu", "k1", broken)
    store.add("ann", tmp_path / "a.cu", "k2", fine)
    again = ResultStore(tmp_path / "results.jsonl")
    assert again.reusable("bob", "k1") is None and again.reusable("ann", "k2").status == "graded"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (a build long enough to kill)")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_grader_killed_mid_build_leaves_no_compiler_running(tmp_path, sig):
    env = {**os.environ, "GRADER_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "grader", "submit", str(SUBMISSIONS / "unrolled_build_bomb.cu"),
                             "--backend", "emulator", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env)
    deadline = time.monotonic() + 60

    def compiling() -> set[int]:
        tree = _tree(proc.pid)
        names = {p: Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace") for p in tree
                 if Path(f"/proc/{p}").exists()}
        return tree if any("cicc" in n or "cc1plus" in n for n in names.values()) else set()

    while not (tree := compiling()):
        assert time.monotonic() < deadline and proc.poll() is None, "the build never started"
        time.sleep(0.2)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    left = _none_left(str(tmp_path))
    end = time.monotonic() + 60                    # a hang's guard: returns as soon as none is left
    while (left := left + _alive(tree)) and time.monotonic() < end:
        time.sleep(0.2)
        left = _none_left(str(tmp_path), within_s=0)
    assert left == [], [Path(f'/proc/{p}/cmdline').read_bytes()[:150] for p in left]


def test_the_grader_can_close_its_proc_files_to_a_child_of_the_same_user():
    """processes.close_to_children (what a GPU grade does before its recorder starts): this process
    becomes undumpable, so /proc/<grader>/mem and maps are root's; a child it starts is dumpable
    again (exec resets it) and runs as before."""
    import ctypes
    import subprocess
    import sys

    from grader.core import processes

    code = ("import ctypes, subprocess, sys\n"
            "from grader.core import processes\n"
            "assert processes.close_to_children()\n"
            "prctl = ctypes.CDLL(None).prctl\n"
            "assert prctl(3, 0, 0, 0, 0) == 0\n"
            "out = subprocess.run([sys.executable, '-c', 'import ctypes; print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))'],"
            " capture_output=True, text=True).stdout.strip()\n"
            "print('child', out)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "child 1"
    assert processes._PRCTL is not None and ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 1    # this one untouched


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_that_cannot_finish_ends_the_grader_after_its_grace(sig):
    """A KeyboardInterrupt raised at an arbitrary point can leave a lock held: a grader once hung,
    after a SIGTERM mid-build, with a thread of its own waiting for logging's lock inside torch's
    import. Here a thread that never ends stands in for it: without the deadline the interpreter
    waits for it at exit forever; with it the grader ends, says so and exits 130."""
    code = """
import sys, threading, time
from grader import cli
held = threading.Lock(); held.acquire()
threading.Thread(target=held.acquire).start()          # never ends, and is not a daemon
@cli.cli.command("hang")
def hang():
    print("ready", flush=True)
    time.sleep(60)
sys.argv = ["grader", "hang"]
cli.main()
"""
    env = {**os.environ, "GRADER_STOP_GRACE_S": "2"}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)          # a hang's guard: without the grace it never ends
    assert proc.returncode == 130
    assert f"interrupted by {signal.Signals(sig).name}" in err and "nothing unfinished was kept" in err, err
    ended = next((line for line in err.splitlines() if "still stopping 2 s after the signal" in line), "")
    assert f"interrupted by {signal.Signals(sig).name}" in ended, err      # the line that ends it names the signal
