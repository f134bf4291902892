"""`grader batch --slurm`: a job array through submitit, one shard a task, merged when done. Driven
by submitit's local executor (the tasks run as processes of this machine), by a fake executor for
what is asked of Slurm, and by a real one-node Slurm on localhost (tests/slurm_cluster.py), all on
the emulator."""

import csv
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import run_grader
from grader.cli import cli

submitit = pytest.importorskip("submitit", reason="the test extra installs submitit")
ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "submissions" / "bias_gelu_fused"


def _class(root: Path) -> Path:
    for student, sample in (("ann", "float4_launcher.cu"), ("bob", "tanh_gelu.cu"), ("cat", "scalar_2d.cu")):
        (root / student).mkdir(parents=True)
        shutil.copy(SAMPLES / sample, root / student / "kernel.cu")
    return root


def test_a_class_graded_as_a_local_job_array_is_merged_into_one_report(tmp_path):
    folder, out = _class(tmp_path / "class"), tmp_path / "out"
    r = CliRunner().invoke(cli, ["batch", str(folder), "--backend", "emulator", "--report-dir", str(out),
                                 "--slurm", "--slurm-tasks", "2", "--slurm-cluster", "local"])
    assert r.exit_code == 0, r.output
    rows = {row["student"]: row for row in csv.DictReader((out / "summary.csv").open(newline=""))}
    assert {s: (rows[s]["status"], rows[s]["correct"]) for s in rows} == {
        "ann": ("graded", "true"), "bob": ("graded", "false"), "cat": ("graded", "true")}
    assert "tanh_gelu" in rows["bob"]["diagnosis"]
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["1-of-2", "2-of-2"]
    assert (out / "class.html").is_file() and (out / "gradebook.csv").is_file()


class _Job:
    def __init__(self, k, fail):
        self.job_id, self.fail = f"100_{k}", fail
        self.paths = type("P", (), {"stderr": Path(f"/logs/100_{k}.err")})()

    def done(self):
        return True

    def result(self):
        if self.fail:
            raise RuntimeError("Job failed: node lost")
        return 0


def test_the_array_asks_slurm_for_what_the_options_say_and_a_failed_task_exits_4(tmp_path, monkeypatch):
    asked = {}

    class FakeExecutor:
        def __init__(self, folder, cluster):
            asked["cluster"] = cluster

        def update_parameters(self, **params):
            asked["params"] = params

        def map_array(self, fn, tasks):
            asked["tasks"] = tasks
            return [_Job(k, fail=k == 2) for k in range(len(tasks))]

    monkeypatch.setattr(submitit, "AutoExecutor", FakeExecutor)
    folder, out = _class(tmp_path / "class"), tmp_path / "out"
    r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(out), "--slurm", "--slurm-tasks", "3",
                                 "--partition", "gpu-h200", "--time-limit", "30", "--array-parallelism", "2"])
    assert asked["cluster"] == "slurm"
    grader_root = str(ROOT.resolve())
    assert asked["params"] == {"name": "grader-bias_gelu_fused", "timeout_min": 30, "cpus_per_task": 8,
                               "slurm_partition": "gpu-h200", "slurm_array_parallelism": 2, "slurm_gres": "gpu:1",
                               # each task starts in its log folder and runs this grader, wherever it was run from
                               "slurm_setup": [f'export PYTHONPATH="{grader_root}${{PYTHONPATH:+:$PYTHONPATH}}"'],
                               "slurm_additional_parameters": {"chdir": str((out / "slurm").resolve())}}
    assert [t.shard for t in asked["tasks"]] == [(1, 3), (2, 3), (3, 3)]
    assert {t.backend for t in asked["tasks"]} == {"cuda"}            # the nodes have the GPUs, not this machine
    assert r.exit_code == 4, r.output
    assert "shard 3/3 (job 100_2): Job failed: node lost (log: /logs/100_2.err)" in r.output


def test_slurm_needs_a_report_folder_and_cuts_the_shards_itself(tmp_path):
    folder = _class(tmp_path / "class")
    r = CliRunner().invoke(cli, ["batch", str(folder), "--slurm"])
    assert r.exit_code == 2 and "--slurm needs --report-dir" in r.output
    r = CliRunner().invoke(cli, ["batch", str(folder), "--slurm", "--report-dir", str(tmp_path / "o"),
                                 "--shard", "1/2"])
    assert r.exit_code == 2 and "leave out --shard" in r.output


# ---------------------------------------------------------------------------
# A real Slurm: a one-node cluster on localhost (tests/slurm_cluster.py), started for this module
# and stopped by process id. CI installs slurm-wlm and munge; elsewhere these skip with the reason.

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import os

    from slurm_cluster import OneNodeCluster, missing_tools

    missing = missing_tools()
    if missing:
        pytest.skip(f"needs Slurm and munge ({', '.join(missing)} missing): apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("the test cluster runs its daemons as root (as CI does)")
    with OneNodeCluster(tmp_path_factory.mktemp("slurm"), cpus=2, memory_mib=4096) as c:
        yield c


def _queue(fmt: str = "%i %T") -> str:
    import subprocess

    return subprocess.run(["squeue", "-h", "-o", fmt], capture_output=True, text=True).stdout.strip()


def _summary(out: Path) -> dict:
    return {row["student"]: (row["status"], row["correct"], row["diagnosis"])
            for row in csv.DictReader((out / "summary.csv").open(newline=""))}


def test_a_class_graded_on_a_real_slurm_matches_a_local_batch(cluster, tmp_path):
    folder = _class(tmp_path / "class")
    on_slurm = run_grader("batch", str(folder), "--backend", "emulator", "--report-dir", str(tmp_path / "slurm"),
                          "--slurm", "--slurm-tasks", "2", "--gres", "")
    assert on_slurm.returncode == 0, on_slurm.stderr + cluster.logs()
    local = run_grader("batch", str(folder), "--backend", "emulator", "--report-dir", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    assert _summary(tmp_path / "slurm") == _summary(tmp_path / "local")
    assert sorted(_summary(tmp_path / "slurm")) == ["ann", "bob", "cat"]
    assert " pending, " in on_slurm.stderr and "2 done" in on_slurm.stderr         # progress while it waited
    assert "sacct" not in on_slurm.stderr and "accounting" not in on_slurm.stderr  # no warning spam
    assert _queue() == ""


def test_a_job_that_can_never_start_fails_at_once_with_slurms_reason(cluster, tmp_path):

    folder = _class(tmp_path / "class")
    r = run_grader("batch", str(folder), "--backend", "emulator", "--report-dir", str(tmp_path / "out"), "--slurm",
                   "--slurm-tasks", "2", "--gres", "", "--cpus-per-task", "64", timeout=600)   # the timeout: a hang's guard
    assert r.returncode == 4, r.stderr
    assert "Reason=PartitionConfig" in r.stderr and "--cpus-per-task" in r.stderr
    assert "nothing has progressed" not in r.stderr        # refused on Slurm's reason, not after the stall deadline
    assert not (tmp_path / "out" / "summary.csv").exists()                       # no task ran
    assert _queue() == ""                                                       # the array was cancelled


def test_ctrl_c_cancels_the_array_and_keeps_what_finished(cluster, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    folder = _class(tmp_path / "class")
    deadline = time.monotonic() + 60
    while _queue() and time.monotonic() < deadline:              # an earlier test's jobs leaving the queue
        time.sleep(0.5)
    proc = subprocess.Popen([sys.executable, "-m", "grader", "batch", str(folder), "--backend", "emulator",
                             "--report-dir", str(tmp_path / "out"), "--slurm", "--slurm-tasks", "3", "--gres", "",
                             "--time-limit", "10"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # as from a terminal
    deadline = time.monotonic() + 60
    while "grader-bias_gelu_fused" not in _queue("%j") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "grader-bias_gelu_fused" in _queue("%j"), "the array never reached the queue"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "grader: submitted 3 task(s)" in err and "interrupted by SIGINT (Ctrl-C); the array was cancelled" in err, err
    deadline = time.monotonic() + 30
    while _queue() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _queue() == ""


def test_a_controller_that_does_not_answer_ends_the_wait_without_saying_cancelled(tmp_path, monkeypatch):
    """squeue failing as it does with slurmctld stopped ("Unable to contact slurm controller"): the
    wait ends after the stall deadline with the check to make, and says the tasks were not
    cancelled (before: "Slurm accounting storage is disabled" for 300 s)."""
    import itertools
    import os
    import stat

    from grader.batch.slurm import SlurmOptions, Stalled, _wait

    asked = tmp_path / "asked"
    stub = tmp_path / "bin" / "squeue"
    stub.parent.mkdir()
    stub.write_text(f"#!/bin/sh\necho . >> {asked}\n"
                    "echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{stub.parent}{os.pathsep}{os.environ['PATH']}")
    # the wait's own clock, one second a look: the stall deadline (0.05 min, 3 s) is counted in looks
    # at the queue, not in the machine's seconds
    clock = itertools.count().__next__
    with pytest.raises(Stalled) as stalled:
        _wait([], ["77_0", "77_1"], SlurmOptions(stall_min=0.05, poll_s=0), None, clock=clock)
    assert len(asked.read_text().split()) == 4    # asked at 1, 2, 3 and 4 s, and given up at 4 s: past the 3 s deadline
    text = str(stalled.value)
    assert "Unable to contact slurm controller" in text and "scontrol ping" in text
    assert "not cancelled" in text


def test_auto_on_a_cluster_follows_the_gres_and_cuda_without_a_gpu_is_refused_in_words(tmp_path):
    from grader.batch.request import ClassRequest
    from grader.batch.slurm import SlurmOptions, grade_on_slurm
    from grader.core.errors import UsageError
    from grader.exercises.rubric import load_rubric

    folder = _class(tmp_path / "class")
    with pytest.raises(UsageError, match="--gres gpu:1"):
        grade_on_slurm(ClassRequest(folder, load_rubric(), "cuda", report_dir=tmp_path / "out"),
                       options=SlurmOptions(gres=None))


def _stalled_batch(tmp_path):
    """A class of two on the cluster with a stall deadline of 0.2 min: what came back. The wait ends
    on the stall deadline (its message says so) or never: the 600 s timeout is only a hang's guard."""
    folder = _class(tmp_path / "class")
    return run_grader("batch", str(folder), "--backend", "emulator", "--report-dir", str(tmp_path / "out"), "--slurm",
                      "--slurm-tasks", "2", "--gres", "", "--slurm-stall-min", "0.2", timeout=600)


def test_a_task_runs_the_grader_it_was_started_from_whatever_folder_it_is_run_in(cluster, tmp_path):
    """Run from a folder that holds a folder named grader (a checkout's name): every task failed with
    ImportError (`python -m` puts the task's folder first on sys.path). The tasks now start in their
    log folder with this grader first on PYTHONPATH."""
    import subprocess
    import sys

    work = tmp_path / "work"
    (work / "grader").mkdir(parents=True)
    (work / "grader" / "__init__.py").write_text("# not the grader: a folder of the same name\n")
    _class(work / "class")
    command = shutil.which("grader") or str(Path(sys.executable).parent / "grader")
    r = subprocess.run([command, "batch", "class", "--backend", "emulator", "--report-dir", "out", "--slurm",
                        "--slurm-tasks", "2", "--gres", ""], cwd=work, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {k: v[0] for k, v in _summary(work / "out").items()} == {"ann": "graded", "bob": "graded", "cat": "graded"}


def test_a_failed_tasks_summary_quotes_its_error_line(tmp_path):
    from grader.batch.slurm import _error_line

    log = tmp_path / "task.err"
    log.write_text("submitit WARNING something\nTraceback (most recent call last):\n  File \"x\", line 1\n"
                   "ImportError: cannot import name '__version__' from 'grader' (unknown location)\n")
    assert _error_line(log) == "ImportError: cannot import name '__version__' from 'grader' (unknown location)"
    assert _error_line(tmp_path / "missing.err") == ""


def test_a_slurmd_stopped_while_the_array_runs_ends_the_wait_and_keeps_what_finished(cluster, tmp_path):
    """The real fault of the issue: slurmd killed (by its process id) while a task runs. The running
    task is left COMPLETING and the others pending on a node Slurm cannot reach, for ever; the wait was
    bounded by states (COMPLETING counts as running) and never ended. Now by progress: exit 4 within
    the stall deadline, naming the tasks with their states, and what finished is merged."""
    import subprocess
    import sys
    import time

    folder, out = _class(tmp_path / "class"), tmp_path / "out"
    node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()[0]
    slurmd = next(p for p in cluster._procs if "slurmd" in str(p.args[0]))
    batch = subprocess.Popen([sys.executable, "-m", "grader", "batch", str(folder), "--backend", "emulator",
                              "--report-dir", str(out), "--slurm", "--slurm-tasks", "3", "--array-parallelism", "1",
                              "--gres", "", "--slurm-stall-min", "0.25"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while "RUNNING" not in _queue() and time.monotonic() < deadline and batch.poll() is None:
            time.sleep(0.2)
        assert "RUNNING" in _queue(), _queue()
        slurmd.kill()
        slurmd.wait(timeout=15)
        stdout, stderr = batch.communicate(timeout=600)              # a hang's guard: the stall deadline ends it
        assert batch.returncode == 4, stdout + stderr
        assert "nothing has progressed for 0.25 min" in stderr and "task " in stderr, stderr
        if (out / "summary.csv").exists():           # a task that finished before it stopped is kept
            assert all(v[0] in ("graded",) for v in _summary(out).values()), _summary(out)
    finally:
        if batch.poll() is None:
            batch.kill()
        subprocess.run(["scancel", "-u", "root"], capture_output=True)
        cluster._procs.remove(slurmd)
        cluster._spawn([str(slurmd.args[0]), *slurmd.args[1:]], "slurmd")
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], capture_output=True)
        time.sleep(2)


def test_a_drained_node_ends_the_wait_with_the_reason_not_a_silent_wait(cluster, tmp_path):
    """Every node drained (as a stopped slurmd leaves it once Slurm marks it down): the tasks stay
    pending; the wait ends within the stall deadline, exit 4, with Slurm's reason and sinfo -R to
    check. Last in this module: it puts the node back before it ends."""
    import subprocess

    node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()[0]
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=grader-test"], check=True)
    try:
        r = _stalled_batch(tmp_path)
        assert r.returncode == 4, r.stdout + r.stderr
        assert "Reason=" in r.stderr, r.stderr
        assert "sinfo" in r.stderr
    finally:
        subprocess.run(["scancel", "-u", "root"], capture_output=True)
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], capture_output=True)


def test_a_stopped_slurmd_ends_the_wait_as_the_machine_with_what_to_check(cluster, tmp_path):
    """The real fault: the node's slurmd stopped (SIGKILL, by its process id). The tasks never run;
    the wait ends within the stall deadline, exit 4 (the machine, not a student), saying what to
    check, and no student gets a grade. Last in this module: slurmd is started again before it ends."""
    import subprocess

    slurmd = next(p for p in cluster._procs if "slurmd" in str(p.args[0]))
    slurmd.kill()
    slurmd.wait(timeout=15)
    try:
        r = _stalled_batch(tmp_path)
        assert r.returncode == 4, r.stdout + r.stderr
        assert "sinfo" in r.stderr or "Reason=" in r.stderr, r.stderr
        assert not (tmp_path / "out" / "summary.csv").exists() or all(
            row["status"] != "graded" for row in csv.DictReader((tmp_path / "out" / "summary.csv").open(newline="")))
    finally:
        subprocess.run(["scancel", "-u", "root"], capture_output=True)
        cluster._procs.remove(slurmd)
        cluster._spawn([str(slurmd.args[0]), *slurmd.args[1:]], "slurmd")
