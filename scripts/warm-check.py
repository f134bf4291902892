#!/usr/bin/env python3
"""A short look at warm `grader submit` on a GPU (a developer's tool; scripts/benchmark.py is the
benchmark): one grade to fill the cache, then N warm grades of the same file, each after the last
one's drawing ahead ended, with where each one's wall time went.

  python scripts/warm-check.py [FILE] [--runs 5] [--trace-exit]

--trace-exit runs each grade under a wrapper that times what follows the grade (the attempt kept,
the reports, the output document, the exit's wait for threads) and names the threads left at the
exit, printed under each run: where "after the grade" goes.
"""

from __future__ import annotations

import argparse
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
from grader.grade.early import head_start
head_start(sys.argv[1:])            # as grader/entry.py does, before the CLI is imported
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
cli.main()
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default="submissions/bias_gelu_fused/float4_launcher.cu")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--trace-exit", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="grader-warm-", ignore_cleanup_errors=True) as cache:
        launch = ["-c", TRACER] if args.trace_exit else None
        benchmark.submit(args.file, cache, args.backend, wait=True)
        runs = [benchmark.submit(args.file, cache, args.backend, wait=True, launch=launch) for _ in range(args.runs)]
        benchmark._drawing_done()
    for wall, doc in runs:
        print(f"{wall:.2f} s  {benchmark.wall_split(doc)}")
        if doc.get("trace_exit"):
            print(f"         after the grade: {doc['trace_exit']}")
    fractions = " ".join(f"{doc['fraction']:.3f}" for _, doc in runs if doc.get("fraction") is not None)
    print(f"median of {args.runs}: {statistics.median(w for w, _ in runs):.2f} s (fractions {fractions})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
