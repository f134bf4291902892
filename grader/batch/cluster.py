"""How a batch asks Slurm for its job array (SlurmOptions: each field a `grader batch --slurm`
option, with its flag, help and default said once here). Imports nothing of the grader: the command
line reads it at every command's start."""

from __future__ import annotations

from dataclasses import dataclass, field

CLUSTERS = ("slurm", "local")
WANT_CPUS = 8           # a task's compiles and children overlap on this many cores
WANT_MEM_MB = 8192      # a build may take 8 GiB of address space, a child 2 GiB beyond what it holds


def _option(default, flag: str, text: str, **more):
    """A field of SlurmOptions with its command-line flag and help (the CLI makes `grader batch`'s
    Slurm section from these: the defaults and the words live here once). more: metavar, at_least,
    choices."""
    return field(default=default, metadata={"flag": flag, "help": text, **more})


@dataclass(frozen=True)
class SlurmOptions:
    """How the job array is asked for: each field is a `grader batch --slurm` option."""

    tasks: int = _option(4, "--slurm-tasks", "The array's size (the class is cut into this many shards).",
                         at_least=1)
    partition: str | None = _option(None, "--partition", "The partition (default: the cluster's).")
    time_min: int = _option(60, "--time-limit", "Each task's time limit, in minutes.", at_least=1)
    parallelism: int | None = _option(None, "--array-parallelism",
                                      "At most this many tasks at once (Slurm's --array=...%N; default: all).",
                                      at_least=1)
    gres: str | None = _option("gpu:1", "--gres", "Each task's --gres (an empty value: none, for the emulator).")
    cpus_per_task: int | None = _option(None, "--cpus-per-task",
                                        f"Each task's cores (default: {WANT_CPUS}, or a node's cores where the partition's "
                                        "nodes have fewer, from sinfo).", at_least=1)
    mem_mb: int | None = _option(None, "--mem", f"Each task's memory in MB (default: {WANT_MEM_MB}, or a node's where less, "
                                 "from sinfo).", at_least=1, metavar="MB")
    cluster: str = _option("slurm", "--slurm-cluster", "local runs the array's tasks on this machine instead "
                           "(submitit's local executor), to try a setup without a cluster.", choices=CLUSTERS)
    stall_min: float = _option(15.0, "--slurm-stall-min",
                               "End the wait when nothing has progressed for this many minutes (no task started or "
                               "ended, no student graded: a node down or drained, a task left COMPLETING, or squeue "
                               "silent), saying why and merging what finished; the rest stay queued.", at_least=0.1)
    poll_s: float = 2.0                    # how often the queue is asked while waiting (not an option)

    def __post_init__(self) -> None:
        if self.gres == "":
            object.__setattr__(self, "gres", None)      # `--gres ""`: no GPU asked for
