#!/usr/bin/env python3
"""Warm `grader submit`, grade after grade, with where each one's wall time went (a developer's tool
and scripts/gpu-check's warm stage; scripts/benchmark.py is the benchmark): one grade to fill the
cache, then N warm grades of the same file, each after the last one's drawing ahead ended (--in-a-row:
each at once after the last, as a student resubmits), each grade's phases on a line of their own, then
the median, the largest and how many were over WARM_MAX_S, and each phase's median and largest
across the grades: a grade a second slower than the others shows which phase it spent it in.

  python scripts/warm-check.py [FILE] [--runs 20] [--in-a-row] [--trace-exit] [--json OUT]

--trace-exit runs each grade under a wrapper that times what follows the grade (the attempt kept,
the reports, the output document, the exit's wait for threads) and names the threads left at the
exit, printed under each run: where "after the grade" goes. --json writes the figures, the rows and
where they were measured (the commit, the device) as docs/figures/*.json (docs/figures.md renders it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark  # noqa: E402


# Run as `python -c TRACER grader-args...`: the grade as `python -m grader` runs it, each step after
# the grade timed, and the exit's wait, written as one "trace-exit: {...}" line on stderr.
TRACER = r"""
import sys
from grader.grade.launcher import Launcher
launcher = Launcher.for_command(sys.argv[1:])   # as grader/entry.py does, before the CLI is imported
import json, threading, time
import grader.cli as cli
from grader.platforms import delivery, documents
steps = {}
def timed(owner, name, label):
    real = getattr(owner, name)
    def run(*a, **k):
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            steps[label] = steps.get(label, 0.0) + time.perf_counter() - t
    setattr(owner, name, run)
timed(delivery, "_remember", "remember")          # the one delivery (platforms/delivery.py) keeps and writes
timed(delivery, "write_reports", "reports")
timed(documents, "render", "document")
from grader.grade import pipeline
from grader.exercises import pool
timed(pipeline, "keep_cache_in_bounds", "cache_bounds")
timed(pool, "start_drawing_ahead", "draw_ahead_start")
leave = cli._leave
def traced_leave(code):
    t = time.perf_counter()
    left = [(x.name, x.daemon) for x in threading.enumerate() if x is not threading.main_thread()]
    for x in threading.enumerate():
        if x is not threading.main_thread() and not x.daemon:
            x.join(timeout=cli.LEAVE_WAIT_S)
    steps["exit_join"] = time.perf_counter() - t
    sys.stderr.write("trace-exit: " + json.dumps({"steps": {k: round(v, 3) for k, v in steps.items()},
                                                  "threads": left, "left_at": time.time()}) + "\n")
    leave(code)
cli._leave = traced_leave
sys.argv = ["grader"] + sys.argv[1:]
cli.main(launcher)
"""


def series(runs: list[tuple[float, dict]], backend: str = "cuda") -> tuple[dict, list]:
    """The figures and the table's rows of warm grades (wall, result document) in their order, held to
    the issue's targets: on a GPU the median and the largest, on the emulator the median."""
    on_gpu = backend == "cuda"
    median_target = benchmark.WARM_S if on_gpu else benchmark.EMULATOR_CORRECT_S
    walls = [w for w, _ in runs]
    # the wall's parts, then the child's own stages (its load, the gate, the checks, the sampling...):
    # a slow grade's second may hide inside the child
    parts = [benchmark.wall_parts(doc) + [(f"child {k}", v) for k, v in benchmark.child_stages(doc.get("phases", {})).items()]
             for _, doc in runs]
    names = list(dict.fromkeys(name for p in parts for name, _ in p))
    by_phase = {name: [dict(p)[name] for p in parts if name in dict(p)] for name in names}   # over the grades that have it
    fractions = [doc.get("fraction") for _, doc in runs]
    timed = [f for f in fractions if f is not None]
    figures = {"walls_s": walls, "median_s": statistics.median(walls), "max_s": max(walls),
               "over_max": sum(w > benchmark.WARM_MAX_S for w in walls), "phases": by_phase,
               "fractions": fractions, "tiers": [doc.get("tier") for _, doc in runs],
               "spread": (max(timed) - min(timed)) / statistics.fmean(timed) if timed else None}
    rows = [(f"warm grade {i + 1}", (benchmark.wall_split(doc) or f"{w:.2f} s") + "".join(
                f"; child {k} {v:.2f}" for k, v in benchmark.child_stages(doc.get("phases", {})).items()), "", None)
            for i, (w, doc) in enumerate(runs)]
    rows += [(f"  {name}: median / largest", f"{statistics.median(v):.2f} / {max(v):.2f} s", "", None)
             for name, v in by_phase.items()]
    n = len(walls)
    rows.append((f"warm submit, median of {n}", f"{figures['median_s']:.2f} s", f"<= {median_target} s",
                 figures["median_s"] <= median_target))
    rows.append((f"warm submit, largest of {n}", f"{figures['max_s']:.2f} s ({figures['over_max']} over "
                 f"{benchmark.WARM_MAX_S} s)", f"<= {benchmark.WARM_MAX_S} s" if on_gpu else "",
                 figures["max_s"] <= benchmark.WARM_MAX_S if on_gpu else None))
    if timed:
        rows.append((f"fraction over the {n} grades", f"{min(timed):.4f} to {max(timed):.4f}: "
                     f"{100 * figures['spread']:.2f}%, tiers {sorted(set(map(str, figures['tiers'])))}",
                     f"<= {100 * benchmark.SPREAD:.1f}%, one tier",
                     figures["spread"] <= benchmark.SPREAD and len(set(figures["tiers"])) == 1))
    return figures, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default="submissions/bias_gelu_fused/float4_launcher.cu")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--in-a-row", action="store_true",
                    help="each grade at once after the last, not after its drawing ahead ended")
    ap.add_argument("--trace-exit", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="write the figures and rows here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="grader-warm-", ignore_cleanup_errors=True) as cache:
        launch = ["-c", TRACER] if args.trace_exit else None
        benchmark.submit(args.file, cache, args.backend, wait=True)
        runs = [benchmark.submit(args.file, cache, args.backend, wait=not args.in_a_row, launch=launch)
                for _ in range(args.runs)]
        benchmark._drawing_done()
    for wall, doc in runs:
        print(f"{wall:.2f} s  {benchmark.wall_split(doc)}")
        if doc.get("trace_exit"):
            print(f"         after the grade: {doc['trace_exit']}")
    figures, rows = series(runs, args.backend)
    for name, value, target, ok in rows[len(runs):]:
        print(f"{name}: {value}" + (f" (target {target}: {'PASS' if ok else 'MISS'})" if ok is not None else ""))
    if args.json:
        how = f"{args.runs} warm grades of {Path(args.file).name}" + (", in a row" if args.in_a_row else "")
        args.json.write_text(json.dumps({"machine": benchmark.machine(args.backend), "backend": args.backend,
                                         "kind": f"warm check ({how})", "figures": figures,
                                         "rows": [list(r) for r in rows]}, indent=1) + "\n")
    return 0 if all(ok is not False for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
