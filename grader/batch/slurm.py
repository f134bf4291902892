"""Past one machine: a class graded as a Slurm job array through submitit, one shard a task (one
GPU each), and merged into one report folder when every task is done.

Each task runs `grade_folder(..., shard=(k, N))` into report_dir/shards/<k>-of-<N>/ (with resume,
as a lone batch has), so a rerun after a failed or cancelled task grades only what is missing;
the merge is `grader merge`'s. The report folder must be on a filesystem every node sees.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from grader.batch.grading import Graded
from grader.batch.merge import merge_reports
from grader.core.backend import AUTO, Backend, named
from grader.toolchain import tools

if TYPE_CHECKING:
    from grader.batch.insights import ClassInsights
import re

from grader.batch import grade_folder
from grader.batch.cluster import CLUSTERS, WANT_CPUS, WANT_MEM_MB, SlurmOptions  # noqa: F401 - SlurmOptions for callers
from grader.batch.request import ClassRequest
from grader.batch.store import holding
from grader.core.errors import InfrastructureError, UsageError
from grader.core.outcomes import Outcome
from grader.exercises.rubric import Rubric, load_rubric
from grader.toolchain.gpuinfo import resolve_backend

# Reasons a pending job can never start without someone changing the cluster or the request.
NEVER_STARTS = ("PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "ReqNodeNotAvail", "InvalidAccount",
                "InvalidQOS", "BadConstraints", "QOSMax", "AssocMax", "AccountNotAllowed", "NodeDown",
                "PartitionDown", "PartitionInactive")


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
    counters: bool = False            # the counters' pass for each correct, timed kernel (--counters)


@dataclass
class SlurmOutcome:
    graded: list[Graded]                                   # the merged class
    job_ids: list[str]
    failed_tasks: list[str] = field(default_factory=list)  # which task, its job id, why and its log
    interrupted: bool = False                              # Ctrl-C: the array cancelled, what finished merged
    not_cancelled: str = ""                                # after Ctrl-C: why scancel did not cancel it ('' it did)
    insights: ClassInsights | None = None                  # the merged class's (insights.json), where one was merged

    @property
    def infrastructure_failures(self) -> list[Graded]:
        return [g for g in self.graded if g.result is not None and g.result.status == Outcome.INFRASTRUCTURE_ERROR]


def run_shard(task: ShardTask) -> int:
    """One array task: its shard of the class, graded into its own report folder. Returns how many
    students it wrote."""
    outcome = grade_folder(Path(task.directory), rubric=load_rubric(task.rubric_path), backend=task.backend,
                           report_dir=Path(task.report_dir), file_name=task.file_name,
                           roster=Path(task.roster) if task.roster else None, jobs=task.jobs, shard=task.shard,
                           counters=task.counters)
    return len(outcome.graded)


def shard_folder(report_dir: Path, k: int, n: int) -> Path:
    return report_dir / "shards" / f"{k}-of-{n}"


def node_shape(partition: str | None) -> tuple[int, int] | None:
    """(CPUs, memory in MB) of the smallest node of the partition (the default one when None), from
    sinfo; None when sinfo cannot say."""
    if tools.locate("sinfo") is None:
        return None
    args = ["sinfo", "-h", "-o", "%c|%m"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    shapes = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        cpus, _, mem = line.strip().partition("|")
        try:
            shapes.append((int(cpus.rstrip("+")), int(mem.rstrip("+"))))
        except ValueError:
            continue
    return (min(c for c, _ in shapes), min(m for _, m in shapes)) if shapes else None


def task_resources(options: SlurmOptions) -> tuple[int, int | None]:
    """What each task asks for: the options' values, else what grading wants cut to the partition's
    nodes (a request larger than every node stays pending for ever, Reason=PartitionConfig)."""
    shape = node_shape(options.partition) if options.cluster == "slurm" else None
    cpus = options.cpus_per_task or (min(WANT_CPUS, shape[0]) if shape else WANT_CPUS)
    mem = options.mem_mb or (min(WANT_MEM_MB, shape[1]) if shape else None)
    return cpus, mem


class NeverStarts(Exception):
    """A task is pending for a reason that does not clear by itself: the array is cancelled."""


class Stalled(Exception):
    """The wait saw no progress (or no answer from the controller) for its deadline: the array is
    left as it is (its tasks may still run), and the message says what to check."""


def squeue_answer(ids: list[str]) -> tuple[dict[str, tuple[str, str]] | None, str]:
    """(squeue's (state, reason) for each listed task still in the queue, ''), or (None, why) when
    squeue did not answer (no squeue, the controller down, a timeout)."""
    base = sorted({i.split("_")[0] for i in ids})
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T|%r", "-j", ",".join(base)], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"squeue did not answer ({exc})"
    if out.returncode != 0:
        if "Invalid job id" in out.stderr:
            return {}, ""                       # every task has left the queue
        return None, (out.stderr.strip().splitlines() or [f"squeue exited {out.returncode}"])[-1][:300]
    states = {}
    for line in out.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            states[parts[0]] = (parts[1], parts[2])
    return states, ""


def grade_on_slurm(request: ClassRequest, *, options: SlurmOptions, submitted=None,
                   waiting: Callable[[dict[str, int]], None] | None = None) -> SlurmOutcome:
    """Submit the class as a job array, wait for every task, merge their folders into report_dir.
    submitted(job_ids, log_folder) is called once the array is queued (to tell the user);
    waiting(counts) while it waits, with how many tasks are pending, running and done.

    Stopping rule of the wait: until every task has left the queue (done, failed or cancelled); a
    task pending for a reason that never clears (NEVER_STARTS: more CPUs than any node has, an
    invalid account) cancels the array at once and raises InfrastructureError with Slurm's reason;
    Ctrl-C cancels the array (scancel) and merges what finished. request.report_dir is required: a
    folder every node can write (the shards go there, then the merged class)."""
    backend, rubric = request.backend, request.rubric

    # "auto" on a cluster means what the array asks for: its GPU nodes where --gres asks for a GPU,
    # the emulator where it asks for none (--gres ''), never this machine's GPUs.
    asks_gpu = bool(options.gres) and "gpu" in (options.gres or "")
    if options.cluster == "slurm" and backend != AUTO and named(backend).on_gpu and not asks_gpu:
        raise UsageError(f"--backend {named(backend).name} on Slurm needs a GPU in each task: pass --gres gpu:1 (or "
                         "the GPU type the cluster names), or --backend emulator for a CPU partition")
    backend = resolve_backend(backend, has_gpu=asks_gpu if options.cluster == "slurm" else None)
    try:
        import submitit  # noqa: PLC0415  (optional: the slurm extra, asked for here only)
    except ImportError:
        raise UsageError("--slurm needs submitit: python -m pip install 'grader[slurm]'") from None
    if options.cluster not in CLUSTERS:
        raise UsageError(f"unknown cluster {options.cluster!r}: use one of {', '.join(CLUSTERS)}")
    if not rubric.path:
        raise UsageError("--slurm needs a rubric read from a file (every task reads it again)")
    # submitit asks sacct for states and warns every few seconds where accounting is off; the wait
    # below asks squeue instead.
    logging.getLogger("submitit").setLevel(logging.ERROR)
    request = request.resolved(backend=backend, report_dir=request.report_dir.resolve())
    with holding(request.report_dir, "grader batch --slurm"):
        return _run_array(request, options=options, submitted=submitted, waiting=waiting, submitit=submitit)


def _run_array(request: ClassRequest, *, options: SlurmOptions, submitted, waiting, submitit) -> SlurmOutcome:
    """grade_on_slurm's array (request: its backend resolved), submitted, waited for and merged, under
    the report folder's lock."""
    rubric, report_dir, backend = request.rubric, request.report_dir, request.backend
    logs = report_dir / "slurm"
    executor = submitit.AutoExecutor(folder=str(logs / "%j"), cluster=options.cluster)
    logs.mkdir(parents=True, exist_ok=True)
    executor.update_parameters(**_array_parameters(options, rubric, backend, logs))
    n = options.tasks
    tasks = [ShardTask(str(request.directory.resolve()), str(shard_folder(report_dir, k, n)), (k, n), backend.name,
                       str(Path(rubric.path).resolve()), request.file_name,
                       str(request.roster.resolve()) if request.roster else None, request.jobs, request.counters)
             for k in range(1, n + 1)]
    try:
        array = executor.map_array(run_shard, tasks)
    except Exception as exc:  # noqa: BLE001 - sbatch refused the array: say what Slurm said
        raise InfrastructureError(f"Slurm refused the job array: {str(exc).strip()[-600:]}") from None
    ids = [str(j.job_id) for j in array]
    if submitted is not None:
        submitted(ids, logs)
    interrupted, not_cancelled = False, ""
    def graded_so_far() -> int:           # the shards' results grow with each student a task grades
        return sum(_size(Path(t.report_dir) / "results.jsonl") for t in tasks)

    try:
        _wait(array, ids, options, waiting, progress=graded_so_far)
    except NeverStarts as never:
        why = _cancel(ids, options, array)
        raise InfrastructureError(f"{never} " + (f"The array was NOT cancelled ({why}): `scancel {ids[0].split('_')[0]}`."
                                                 if why else "The array was cancelled.")) from None
    except Stalled as stalled:
        folders = [Path(t.report_dir) for t in tasks if (Path(t.report_dir) / "results.jsonl").is_file()]
        if folders:                       # what finished is kept: the rerun merges the rest
            merge_reports(folders, out=report_dir, rubric=rubric)
        raise InfrastructureError(str(stalled) + (f" Merged the {len(folders)} shard(s) that wrote results into "
                                                  f"{report_dir}." if folders else "")) from None
    except KeyboardInterrupt:
        interrupted = True
        not_cancelled = _cancel(ids, options, array)
    failed = _failed_tasks(tasks, array, n, interrupted)
    folders = [Path(t.report_dir) for t in tasks if (Path(t.report_dir) / "results.jsonl").is_file()]
    merged = merge_reports(folders, out=report_dir, rubric=rubric) if folders else None
    return SlurmOutcome(merged.graded if merged else [], ids, failed, interrupted, not_cancelled,
                        merged.insights if merged else None)


def _array_parameters(options: SlurmOptions, rubric: Rubric, backend: Backend, logs: Path | None = None) -> dict:
    """submitit's parameters for the array: its name, time, CPUs, and on Slurm the partition, the
    parallelism, the memory and (for a GPU grade) the GPUs each task asks for."""
    cpus, mem = task_resources(options)
    params: dict = {"name": f"grader-{rubric.exercise}", "timeout_min": options.time_min, "cpus_per_task": cpus}
    if options.cluster == "slurm":
        # Each task runs the grader it was started from, wherever the command was run: `python -m`
        # puts the task's working folder first on sys.path, where a folder named grader (a checkout's
        # name) shadowed the package and every task failed with ImportError. The task starts in its
        # log folder, with this grader's folder first on PYTHONPATH.
        here = str(Path(__file__).resolve().parents[2])
        params.update(slurm_partition=options.partition, slurm_array_parallelism=options.parallelism or options.tasks,
                      slurm_mem=f"{mem}M" if mem else None,
                      slurm_setup=[f'export PYTHONPATH="{here}${{PYTHONPATH:+:$PYTHONPATH}}"'],
                      slurm_additional_parameters={"chdir": str(logs)} if logs is not None else None)
        if options.gres and backend.on_gpu:
            params["slurm_gres"] = options.gres
        params = {k: v for k, v in params.items() if v is not None}
    return params


def _failed_tasks(tasks: list, array: list, n: int, interrupted: bool) -> list[str]:
    """Each task that failed, in words with its log (after a Ctrl-C, only those that wrote nothing
    are left out: they were cancelled)."""
    failed = []
    for task, job in zip(tasks, array):
        if interrupted and not (Path(task.report_dir) / "results.jsonl").is_file():
            continue
        try:
            job.result()
        except Exception as exc:  # noqa: BLE001 - a task that failed is listed, the others still merge
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            first = _error_line(job.paths.stderr) or first
            failed.append(f"shard {task.shard[0]}/{n} (job {job.job_id}): {first[:300]} (log: {job.paths.stderr})")
    return failed


def _wait(array, ids: list[str], options: SlurmOptions, waiting, clock: Callable[[], float] = time.monotonic,
          progress: Callable[[], int] = lambda: 0) -> None:
    """Until every task has left the queue (see grade_on_slurm's stopping rule). On Slurm the
    queue is asked with squeue, never the jobs (submitit's sacct, which a cluster without
    accounting answers with a warning each time). The wait ends early, raising:
    - NeverStarts: a task pending for a reason in NEVER_STARTS;
    - Stalled: squeue has not answered for options.stall_min (the controller is down), or nothing
      has progressed for as long, whatever the tasks' states say: no task left the queue and
      progress() (the students graded so far, the shards' results) did not move. A node whose
      slurmd died leaves its task COMPLETING and the rest pending on a DOWN node for ever; a
      grade takes minutes at most, so a stall deadline without one is the machine's. The message
      names each task still queued with its state and reason, and `sinfo -R`'s."""
    last_answer = last_change = clock()
    seen: tuple | None = None
    states: dict = {}
    while True:
        now = clock()
        if options.cluster == "slurm":
            states, why = squeue_answer(ids)
            if states is None and _all_done(array):        # squeue silent, but the jobs say they ended
                return
            if states is None:
                if now - last_answer > options.stall_min * 60:
                    raise Stalled(f"the Slurm controller has not answered for {now - last_answer:.0f} s ({why}). "
                                  "Check it with `scontrol ping` and `systemctl status slurmctld`. The tasks were "
                                  "not cancelled and may still run: run the same command again later to merge "
                                  "what finished (finished students are kept).")
                time.sleep(options.poll_s)
                continue
            last_answer = now
            for task, (state, reason) in states.items():
                if state == "PENDING" and reason.startswith(NEVER_STARTS):
                    raise NeverStarts(f"Slurm will not start task {task}: it is pending with Reason={reason}. "
                                      f"{_advice(reason)}")
            pending = sum(1 for s, _ in states.values() if s in ("PENDING", "CONFIGURING", "REQUEUED"))
            counts = {"pending": pending, "running": len(states) - pending, "done": len(ids) - len(states)}
            reasons = sorted({r for s, r in states.values() if s == "PENDING" and r not in ("None", "")})
        else:                                   # the local executor: ask the jobs
            done = sum(1 for j in array if j.done())
            counts = {"pending": 0, "running": len(ids) - done, "done": done}
            reasons = []
        moved = (counts["done"], counts["running"], progress())
        if moved != seen:
            seen, last_change = moved, now
        if waiting is not None:
            waiting(counts)
        if counts["done"] >= len(ids):
            return
        if now - last_change > options.stall_min * 60:
            queued = "; ".join(f"task {t}: {s}{' (Reason=' + r + ')' if r not in ('None', '') else ''}"
                               for t, (s, r) in sorted(states.items())) if options.cluster == "slurm" else \
                f"{counts['running']} running"
            raise Stalled(f"nothing has progressed for {options.stall_min:g} min (no task ended, no student was "
                          f"graded): {queued}{' (Reason=' + ', '.join(reasons) + ')' if reasons else ''}. "
                          f"{_down_nodes()}Check the nodes with `sinfo -R` (down or drained nodes are listed with "
                          "why) and `scontrol show node`. What finished is merged; the rest stay queued and run once "
                          "the nodes are back, and the same command merges them then; `scancel` removes them. "
                          "(--slurm-stall-min sets this deadline.)")
        time.sleep(options.poll_s)


def _down_nodes() -> str:
    """`sinfo -R`'s lines (the nodes down or drained, with why), as a sentence; "" where it says none."""
    try:
        done = subprocess.run(["sinfo", "-R", "-h", "-o", "%N %T %E"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
    return f"sinfo -R: {'; '.join(lines[:5])}. " if lines else ""


def _error_line(log: Path) -> str:
    """The last line of a task's error log that names an exception (`ImportError: cannot import name
    ...`), or "": a failure is summarised with what went wrong, not only where its log is."""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    found = [ln.strip() for ln in tail.splitlines()
             if re.match(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b:?", ln)]
    return found[-1][:300] if found else ""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _all_done(array) -> bool:
    """Whether every job says it has ended (submitit's own check, which asks sacct: its warnings
    are silenced, and a failure to ask reads as not done)."""
    try:
        return bool(array) and all(j.done() for j in array)
    except Exception:  # noqa: BLE001 - sacct unreachable too: not known to be done
        return False


def _advice(reason: str) -> str:
    if reason.startswith(("PartitionConfig", "PartitionNodeLimit")):
        return ("The request is larger than any node of the partition: lower --cpus-per-task or --mem, "
                "or choose another --partition (sinfo lists them).")
    if reason.startswith("PartitionTimeLimit"):
        return "The time limit is above the partition's: lower --time-limit."
    if reason.startswith(("InvalidAccount", "InvalidQOS", "AccountNotAllowed")):
        return "The account or QOS is not valid here: ask the cluster's administrators which to use."
    return "Check the partition's nodes with sinfo."


def _cancel(ids: list[str], options: SlurmOptions, array=None) -> str:
    """Cancel the array: '' where it was cancelled, else why not (said instead of "cancelled")."""
    if options.cluster != "slurm":
        for job in array or []:
            try:
                job.cancel(check=False)
            except Exception:  # noqa: BLE001 - the local executor's jobs: best effort
                pass
        return ""
    if not tools.locate("scancel"):
        return "scancel was not found"
    try:
        done = subprocess.run(["scancel", *sorted({i.split("_")[0] for i in ids})], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scancel did not answer ({exc})"
    if done.returncode != 0:
        return f"scancel failed: {(done.stderr.strip().splitlines() or ['exit ' + str(done.returncode)])[-1][:200]}"
    return ""
