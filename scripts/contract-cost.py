#!/usr/bin/env python3
"""What the process contract costs a process (issue 70: under 5 ms): /bin/true started N times
plainly, and as a build is (toolchain/running.run_limited: its environment, its own root beside
its room, its PID namespace, its control group, its limits, Landlock, entered by the launcher
core/view.c), and the control group's own make, join and remove. Prints one JSON object: for each,
the wall time in milliseconds (median, best, and the 10th percentile) and the CPU time (the grader's
and every process it waited for, user and system) per process, which a machine loaded by others
changes far less than the wall time; contract_ms and contract_cpu_ms are a build's less plain's.

    PYTHONPATH=. python3 scripts/contract-cost.py [--n 100] [--rounds 1]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import time


def _cpu() -> float:
    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


def timed(fn, n: int) -> dict:
    runs = []
    cpu = _cpu()
    for _ in range(n):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    cpu_ms = (_cpu() - cpu) * 1000 / n
    runs.sort()
    return {"median_ms": round(statistics.median(runs), 2), "best_ms": round(runs[0], 2),
            "p10_ms": round(runs[n // 10], 2), "cpu_ms": round(cpu_ms, 2), "n": n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1, help="plain and as a build alternated this many times")
    args = ap.parse_args()
    n = args.n
    from grader.core import cgroups
    from grader.toolchain.running import BuildLimits, build_room, run_limited

    out: dict = {"uid": os.geteuid(), "cgroup": cgroups.available(), "load": os.getloadavg()[0]}
    rounds: dict[str, list[dict]] = {"plain": [], "as_a_build": []}
    with build_room() as room:
        run_limited(["/bin/true"], BuildLimits(), room)         # anything built once (the launcher) is built
        for _ in range(args.rounds):
            rounds["plain"].append(timed(lambda: subprocess.run(["/bin/true"], check=True), n))
            rounds["as_a_build"].append(timed(lambda: run_limited(["/bin/true"], BuildLimits(), room), n))
    for name, got in rounds.items():
        out[name] = {key: round(statistics.median(r[key] for r in got), 2) for key in got[0]}

    def group_cycle() -> None:
        group = cgroups.make(memory_bytes=256 << 20, pids=64, what="probe")
        if group is not None:
            group.remove()
    out["cgroup_make_remove"] = timed(group_cycle, n)
    out["contract_ms"] = round(out["as_a_build"]["median_ms"] - out["plain"]["median_ms"], 2)
    out["contract_best_ms"] = round(out["as_a_build"]["best_ms"] - out["plain"]["best_ms"], 2)
    out["contract_cpu_ms"] = round(out["as_a_build"]["cpu_ms"] - out["plain"]["cpu_ms"], 2)
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
