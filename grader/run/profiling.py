"""The counters' pass: the measuring process's replay of the timed call, once, under Nsight Compute.

The process is the measuring process's kind (run/child/measurer.py's ReplayBackend, role PROFILE):
it never loads the submission's library, replays the recording from the device code alone, and
sits behind the wall in its profile mode (guard.c: the enforced policy plus ncu's socket and
files). ncu is its parent, started by sandbox.Worker as the command's prefix, and writes its CSV
to a file of ours. Only the submission's kernels are profiled (by their device names), each
launch of the timed call once; ncu replays a kernel as often as its counters need, restoring
memory between passes, and flushes the caches before each.

Nothing here reaches the fraction or the tier. Every way it can fail (no ncu, counters restricted
to administrators, a driver too old, the wall, a time limit) ends in a CountersSummary whose
problem says why, never in a failed grade.

Imports core/, toolchain/tools and run/sandbox.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass

from grader.core.contract import GuardMode, Job, Role
from grader.core.results import CountersSummary, KernelCounters
from grader.run.sandbox import ChildSpec, Worker
from grader.toolchain import tools

# The metrics read, ncu's names, each once: KernelCounters' fields come from them (counters_of).
METRICS = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "lts__t_sector_hit_rate.pct",
)
STARTUP_S = 60             # ncu's own start, the child's imports and CUDA context under it
MAX_LAUNCHES = 16           # of one call: a launcher that launches more is profiled on its first 16
RESTRICTED = "ERR_NVGPUCTRPERM"     # ncu's word for counters open to administrators only


def ncu_command(ncu: str, kernels: list[str], log: str, launches: int) -> list[str]:
    """ncu's command line, the child's command after it: the kernels by their device (mangled)
    names, each launch once, the metrics as a CSV of raw values in base units into log."""
    names = "|".join(re.escape(k) for k in sorted(set(kernels)))
    return [ncu, "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(METRICS),
            "--kernel-name-base", "mangled", "--print-kernel-base", "mangled", "--kernel-name", f"regex:^({names})$",
            "--launch-count", str(max(1, min(launches, MAX_LAUNCHES))), "--target-processes", "application-only",
            "--log-file", log]


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if not text or text in ("n/a", "N/A"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def read_csv(text: str) -> list[dict[str, str]]:
    """ncu's raw page: its own lines (==PROF==, ==WARNING==) left out, a header row, a units row,
    then a row per profiled launch."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 2:
        return []
    header = rows[0]
    body = rows[2:] if rows[1] and not rows[1][0].strip() else rows[1:]      # the units row has no ID
    return [dict(zip(header, row)) for row in body if len(row) == len(header)]


def _dims(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text.replace(",", ""))][:3] or [0, 0, 0]


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def counters_of(rows: list[dict[str, str]], names: dict[str, str]) -> list[KernelCounters]:
    """A KernelCounters per profiled launch; names maps a device name to the one the student wrote."""
    out = []
    for row in rows:
        v = {m: _number(row.get(m, "")) for m in METRICS}
        mangled = row.get("Kernel Name", "")
        out.append(KernelCounters(
            kernel=names.get(mangled, mangled), mangled=mangled, grid=_dims(row.get("Grid Size", "")),
            block=_dims(row.get("Block Size", "")),
            duration_us=round((v["gpu__time_duration.sum"] or 0) / 1000, 3),
            dram_pct=round(v["dram__throughput.avg.pct_of_peak_sustained_elapsed"] or 0, 2),
            dram_gbps=round((v["dram__bytes.sum.per_second"] or 0) / 1e9, 1),
            dram_bytes=int((v["dram__bytes_read.sum"] or 0) + (v["dram__bytes_write.sum"] or 0)),
            load_sectors_per_request=_ratio(v["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"],
                                            v["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]),
            store_sectors_per_request=_ratio(v["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"],
                                             v["l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"]),
            achieved_occupancy_pct=v["sm__warps_active.avg.pct_of_peak_sustained_active"],
            theoretical_occupancy_pct=v["sm__maximum_warps_per_active_cycle_pct"],
            l2_hit_pct=v["lts__t_sector_hit_rate.pct"]))
    return out


def summarise(kernels: list[KernelCounters], model_bytes: int | None) -> CountersSummary:
    total = sum(k.dram_bytes for k in kernels)
    return CountersSummary(kernels=kernels, model_bytes=model_bytes,
                           dram_over_model=round(total / model_bytes, 2) if model_bytes and kernels else None)


def problem_of(log_text: str, run, kernels: list[str]) -> str:
    """Why a pass gave no counters, in words a course's admin can act on."""
    if RESTRICTED in log_text:
        return ("the GPU's performance counters are open to administrators only on this machine (ncu: "
                "ERR_NVGPUCTRPERM): an admin can open them (NVreg_RestrictProfilingToAdminUsers=0), or run the "
                "grader as root.")
    if run is not None and run.blocked:
        return (f"the counters' process was stopped by the sandbox's wall ({run.blocked[0].describe()}): this "
                "ncu needs a system call its profile mode does not allow.")
    if run is not None and run.timed_out:
        return "Nsight Compute took longer than the exercise's time limit."
    errors = [ln.strip() for ln in log_text.splitlines() if ln.startswith("==ERROR==")]
    if errors:
        return "Nsight Compute said: " + " ".join(errors)[:400]
    if not kernels:
        return "the timed call launched no kernel of the submission's."
    return "Nsight Compute profiled none of the timed call's kernels."


def profile_job(replay: Job, kernels: list[str]) -> Job:
    """The counters' job: the replay's first timed set, run once, no timing and no output sent."""
    first = dataclasses.replace(replay.timed_cases[0], chain=None)
    return dataclasses.replace(replay, role=Role.PROFILE, guard_mode=GuardMode.PROFILE, cases=[], timing=None,
                               timed_cases=[], baseline_cases=[], verify_cases=[first], gated=False)


def call_kernels(recording, key: str) -> list[str]:
    """The device names of the kernels the recorder saw the first call for key launch, in order."""
    rows = recording.calls.get(key) or []
    if not rows:
        return []
    return [op.kernel for op in recording.ops[rows[0][0]] if op.kind in ("launch", "cooperative") and op.kernel]


@dataclass(frozen=True)
class CountersCall:
    """What the counters' pass reads and under which limits: profile_call's options."""

    ncu: str                        # the Nsight Compute executable (tools.locate)
    kernels: list[str]              # the timed call's kernels, by device name (call_kernels)
    names: dict[str, str]           # each device name's kernel as the student named it
    model_bytes: int | None         # the rubric's byte model at the timed shape (the DRAM share's denominator)
    output_cap: int                 # bytes of the child's stdout and stderr kept
    time_limit_s: float             # the child's time limit, its start under ncu aside
    device: str | None              # the GPU the child may see


def profile_call(replay: Job, call: CountersCall) -> CountersSummary:
    """The counters of the timed call's kernels (their device names; names: the student's for
    each), from a child of the measuring process's kind started under ncu; its log is written into
    a folder of ours and removed after."""
    ncu, kernels, names, time_limit_s = call.ncu, call.kernels, call.names, call.time_limit_s
    started = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="grader-ncu-")
    log = os.path.join(folder, "counters.csv")
    run, text = None, ""
    try:
        if kernels:
            spec = ChildSpec(backend=replay.backend, output_cap=call.output_cap, cpu_limit_s=time_limit_s + STARTUP_S,
                             device=call.device, wrapper=tuple(ncu_command(ncu, kernels, log, len(kernels))))
            with Worker(spec) as worker:
                worker.wait_ready(timeout_s=STARTUP_S)       # ncu's start and the child's CUDA context
                run = worker.run(profile_job(replay, kernels), time_limit_s=time_limit_s)
        try:
            with open(log, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    found = counters_of(read_csv(text), names)
    summary = summarise(found, call.model_bytes) if found else CountersSummary(problem=problem_of(text, run, kernels))
    summary.tool = tools.version("ncu")
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary
