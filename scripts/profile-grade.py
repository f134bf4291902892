#!/usr/bin/env python3
"""Where a warm grade's time goes, function by function (a developer's tool; scripts/benchmark.py
gives the phases): `grader submit FILE` run in this process under cProfile after a warm-up grade,
the parent's main thread only (the builds and draws run in pools: their waits show as
`result()`), and the imports of a fresh `grader submit` (python -X importtime), largest first.

  python scripts/profile-grade.py [FILE] [--backend cuda] [--runs 3] [--top 35]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imports(file: str, backend: str, top: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "grader", "submit", file, "--backend", backend,
                           "-q", "--no-report", "--format", "json"], capture_output=True, text=True, env=env, cwd=ROOT)
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            self_us, cum_us, name = line.removeprefix("import time:").split("|")
            rows.append((int(cum_us), int(self_us), name.rstrip()))
    total = sum(s for _, s, _ in rows)
    print(f"\n== imports of a fresh `grader submit`: {total / 1e6:.3f} s in all (self times summed)")
    for cum, self_us, name in sorted(rows, key=lambda r: -r[1])[:top]:
        print(f"  self {self_us / 1e3:7.1f} ms  cumulative {cum / 1e3:7.1f} ms  {name}")
    print("  top-level packages, cumulative:")
    for cum, _, name in sorted((r for r in rows if r[2].startswith(" ") and not r[2].startswith("  ")),
                               key=lambda r: -r[0])[:12]:
        print(f"    {cum / 1e3:7.1f} ms  {name.strip()}")


def profiled(file: str, backend: str, runs: int, top: int) -> None:
    sys.path.insert(0, str(ROOT))
    from grader.cli import cli as command

    def once() -> dict:
        out = io.StringIO()
        saved = sys.stdout
        sys.stdout = out
        try:
            command.main(["submit", file, "--backend", backend, "-q", "--no-report", "--format", "json"],
                     standalone_mode=False)
        except SystemExit:
            pass
        finally:
            sys.stdout = saved
        try:
            return json.loads(out.getvalue())
        except ValueError:
            return {}

    once()                                   # warm: the build cached, the children's code read
    cache = Path(os.environ.get("GRADER_CACHE_DIR") or Path.home() / ".cache" / "grader")
    for k in range(runs):
        # As a student's next grade finds it: the private cases drawn ahead (exercises/pool.py).
        waited = time.perf_counter()
        while backend == "cuda" and not any((cache / "runs").glob("ready-*")) and time.perf_counter() - waited < 30:
            time.sleep(0.1)
        prof = cProfile.Profile()
        clock = time.perf_counter()
        prof.enable()
        doc = once()
        prof.disable()
        wall = time.perf_counter() - clock
        print(f"\n== in-process grade {k + 1}: {wall:.3f} s, {doc.get('status')}, fraction {doc.get('fraction')}")
        print("  phases: " + " ".join(f"{key} {v}" for key, v in (doc.get("phases") or {}).items()))
        sandbox = doc.get("sandbox") or {}
        print("  measuring process: " + " ".join(f"{key} {sandbox.get(key)}" for key in
                                                 ("read_wall_ms", "filter_install_ms", "submission_load_ms")))
        if k == runs - 1:
            for order in ("cumulative", "tottime"):
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats(order).print_stats(r"grader|numpy|json|thread|select", top)
                print(f"\n-- by {order}\n" + "\n".join(text.getvalue().splitlines()[6:]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default="submissions/bias_gelu_fused/float4_launcher.cu")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--top", type=int, default=35)
    args = ap.parse_args()
    imports(args.file, args.backend, args.top)
    profiled(args.file, args.backend, args.runs, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
