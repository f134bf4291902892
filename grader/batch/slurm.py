"""Past one machine: a class graded as a Slurm job array through submitit, one shard a task (one
GPU each), and merged into one report folder when every task is done.

Each task runs `grade_folder(..., shard=(k, N))` into report_dir/shards/<k>-of-<N>/ (with resume,
as a lone batch has), so a rerun after a failed or cancelled task grades only what is missing;
the merge is `grader merge`'s. The report folder must be on a filesystem every node sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.batch.grading import Graded
from grader.batch.merge import merge_reports
from grader.errors import UsageError
from grader.rubric import Rubric

CLUSTERS = ("slurm", "local")


@dataclass(frozen=True)
class SlurmOptions:
    """How the job array is asked for."""

    tasks: int = 4                         # the array's size: the class is cut into this many shards
    partition: str | None = None           # Slurm's --partition (the cluster's default when None)
    time_min: int = 60                     # each task's time limit, minutes
    parallelism: int | None = None         # tasks running at once (Slurm's --array=...%N); no cap when None
    gres: str | None = "gpu:1"             # Slurm's --gres for each task (None: no GPU, the emulator)
    cpus_per_task: int = 8                 # cores for each task's compiles
    cluster: str = "slurm"                 # submitit's executor: slurm, or local (the tasks on this machine)


@dataclass(frozen=True)
class ShardTask:
    """What one array task is told: everything as plain values (it is pickled to the node)."""

    directory: str
    report_dir: str
    shard: tuple[int, int]
    backend: str
    rubric_path: str
    file_name: str | None = None
    roster: str | None = None
    jobs: int | None = None


@dataclass
class SlurmOutcome:
    graded: list[Graded]                                   # the merged class
    job_ids: list[str]
    failed_tasks: list[str] = field(default_factory=list)  # which task, its job id, why and its log

    @property
    def infrastructure_failures(self) -> list[Graded]:
        return [g for g in self.graded if g.result is not None and g.result.status == "infrastructure_error"]


def run_shard(task: ShardTask) -> int:
    """One array task: its shard of the class, graded into its own report folder. Returns how many
    students it wrote."""
    from grader.batch import grade_folder
    from grader.rubric import load_rubric

    outcome = grade_folder(Path(task.directory), rubric=load_rubric(task.rubric_path), backend=task.backend,
                           report_dir=Path(task.report_dir), file_name=task.file_name,
                           roster=Path(task.roster) if task.roster else None, jobs=task.jobs, shard=task.shard)
    return len(outcome.graded)


def shard_folder(report_dir: Path, k: int, n: int) -> Path:
    return report_dir / "shards" / f"{k}-of-{n}"


def grade_on_slurm(directory: Path, *, rubric: Rubric, report_dir: Path, options: SlurmOptions,
                   backend: str = "cuda", file_name: str | None = None, roster: Path | None = None,
                   jobs: int | None = None, submitted=None) -> SlurmOutcome:
    """Submit the class as a job array, wait for every task, merge their folders into report_dir.
    submitted(job_ids, log_folder) is called once the array is queued (to tell the user)."""
    try:
        import submitit
    except ImportError:
        raise UsageError("--slurm needs submitit: python -m pip install 'grader[slurm]'") from None
    if options.cluster not in CLUSTERS:
        raise UsageError(f"unknown cluster {options.cluster!r}: use one of {', '.join(CLUSTERS)}")
    if not rubric.path:
        raise UsageError("--slurm needs a rubric read from a file (every task reads it again)")
    n = options.tasks
    report_dir = report_dir.resolve()
    logs = report_dir / "slurm"
    executor = submitit.AutoExecutor(folder=str(logs / "%j"), cluster=options.cluster)
    params: dict = {"name": f"grader-{rubric.exercise}", "timeout_min": options.time_min,
                    "cpus_per_task": options.cpus_per_task}
    if options.cluster == "slurm":
        params.update(slurm_partition=options.partition, slurm_array_parallelism=options.parallelism or n)
        if options.gres and backend != "emulator":
            params["slurm_gres"] = options.gres
        params = {k: v for k, v in params.items() if v is not None}
    executor.update_parameters(**params)
    tasks = [ShardTask(str(directory.resolve()), str(shard_folder(report_dir, k, n)), (k, n), backend,
                       str(Path(rubric.path).resolve()), file_name, str(roster.resolve()) if roster else None, jobs)
             for k in range(1, n + 1)]
    array = executor.map_array(run_shard, tasks)
    ids = [str(j.job_id) for j in array]
    if submitted is not None:
        submitted(ids, logs)
    failed = []
    for task, job in zip(tasks, array):
        try:
            job.result()
        except Exception as exc:  # noqa: BLE001 - a task that failed is listed, the others still merge
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            failed.append(f"shard {task.shard[0]}/{n} (job {job.job_id}): {first[:300]} (log: {job.paths.stderr})")
    folders = [Path(t.report_dir) for t in tasks if (Path(t.report_dir) / "results.jsonl").is_file()]
    graded = merge_reports(folders, out=report_dir, rubric=rubric) if folders else []
    return SlurmOutcome(graded, ids, failed)
