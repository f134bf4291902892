#!/usr/bin/env python3
"""What the process contract costs a process (issue 70: under 5 ms): /bin/true started N times
plainly, and as a build is (toolchain/running.run_limited: its environment, its own root beside
its room, its PID namespace, its control group, its limits, Landlock), and the control group's
own make, join and remove. Prints one JSON object; medians and best in milliseconds.

    PYTHONPATH=. python3 scripts/contract-cost.py [--n 40]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time


def timed(fn, n: int) -> dict:
    runs = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    return {"median_ms": round(statistics.median(runs), 2), "best_ms": round(min(runs), 2), "n": n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    n = ap.parse_args().n
    from grader.core import cgroups
    from grader.toolchain.running import BuildLimits, build_room, run_limited

    out: dict = {"uid": os.geteuid(), "cgroup": cgroups.available(), "load": os.getloadavg()[0]}
    out["plain"] = timed(lambda: subprocess.run(["/bin/true"], check=True), n)
    with build_room() as room:
        out["as_a_build"] = timed(lambda: run_limited(["/bin/true"], BuildLimits(), room), n)

    def group_cycle() -> None:
        group = cgroups.make(memory_bytes=256 << 20, pids=64, what="probe")
        if group is not None:
            group.remove()
    out["cgroup_make_remove"] = timed(group_cycle, n)
    out["contract_ms"] = round(out["as_a_build"]["median_ms"] - out["plain"]["median_ms"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
