#!/usr/bin/env python3
"""What a grade's processes spend starting, on this machine (a developer's tool: the figure behind
tests/test_imports.py, which holds what each process imports without timing anything).

  python scripts/start-time.py [--rounds 30] [--tree PATH ...]

For each tree (default: this one; name another checkout, e.g. a `git archive` of an earlier commit,
to compare), in rounds that alternate between the trees so that a machine's load falls on each alike:
- child: the emulator's child started as run/sandbox.py starts it (`python -S -m grader.run.child.worker`),
  until it writes its ready byte (its imports done), then ended by closing its stdin;
- measurer: the same for the measuring process's module set (`cuda`; on a machine without a GPU it
  stops at its CUDA context, after its imports: the imports are what is measured);
- parent: `python -c "import grader.entry, grader.cli, grader.grade.pipeline"`, the imports a
  `grader submit` makes before its grade, and the number of modules they load.
Printed: each figure's median and quartiles per tree, its CPU time (user + system, which a loaded
machine inflates far less than the wall), and the machine's load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARENT = "import sys, grader.entry, grader.cli, grader.grade.pipeline; print(len(sys.modules))"


def _cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def child_ready_s(tree: Path, backend: str) -> float:
    """Seconds from the child's start to its ready byte (or its exit, where it cannot start: no GPU)."""
    result_r, result_w = os.pipe()
    guard_r, guard_w = os.pipe()
    ready_r, ready_w = os.pipe()
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-S", "-m", "grader.run.child.worker", str(result_w), str(guard_w), backend,
                             str(ready_w)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            pass_fds=(result_w, guard_w, ready_w), env=env, cwd="/tmp")
    for fd in (result_w, guard_w, ready_w):
        os.close(fd)
    os.read(ready_r, 1)             # the ready byte, or b"" at its exit
    took = time.perf_counter() - start
    proc.stdin.close()              # no job: it ends
    proc.wait(timeout=60)
    for fd in (result_r, guard_r, ready_r):
        os.close(fd)
    return took


def parent_s(tree: Path) -> tuple[float, int]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.perf_counter()
    got = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, env=env, cwd="/tmp", check=True)
    return time.perf_counter() - start, int(got.stdout.strip())


def _said(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"median {1000 * statistics.median(values):6.1f} ms (quartiles {1000 * q[0]:.1f} to {1000 * q[2]:.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--tree", type=Path, action="append", default=[])
    args = ap.parse_args()
    trees = args.tree or [ROOT]
    for tree in trees:              # bytecode, as an installed grader has it
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "grader")], stdout=subprocess.DEVNULL)
    figures: dict = {str(t): {"child": [], "measurer": [], "parent": [], "modules": 0} for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            f = figures[str(tree)]
            for name, run in (("child", lambda t=tree: child_ready_s(t, "emulator")),
                              ("measurer", lambda t=tree: child_ready_s(t, "cuda")),
                              ("parent", lambda t=tree: parent_s(t))):
                cpu = _cpu_s()
                got = run()
                f.setdefault(f"{name}_cpu", []).append(_cpu_s() - cpu)     # the whole process's, to its exit
                if name == "parent":
                    got, f["modules"] = got
                f[name].append(got)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores, {args.rounds} rounds")
    for tree, f in figures.items():
        print(tree)
        print(f"  emulator child to ready:       {_said(f['child'])}; CPU {_said(f['child_cpu'])}")
        print(f"  measuring process's imports:   {_said(f['measurer'])}; CPU {_said(f['measurer_cpu'])}")
        print(f"  parent's imports before grade: {_said(f['parent'])}; CPU {_said(f['parent_cpu'])}, "
              f"{f['modules']} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
