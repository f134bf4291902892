"""`grader batch --slurm`: a job array through submitit, one shard a task, merged when done. Driven
here by submitit's local executor (the tasks run as processes of this machine), on the emulator."""

import csv
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

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
    assert asked["params"] == {"name": "grader-bias_gelu_fused", "timeout_min": 30, "cpus_per_task": 8,
                               "slurm_partition": "gpu-h200", "slurm_array_parallelism": 2, "slurm_gres": "gpu:1"}
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
