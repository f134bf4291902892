#!/usr/bin/env python3
"""The grader's own benchmark, run on a GPU machine (scripts/gpu-check runs it).

Measures what issue "grader submit" promises, each through the real CLI as a user runs it:
- wall time of `grader submit` with an empty build cache (cold) and a filled one (warm);
- the spread of the fraction over five runs of the same submission (max minus min);
- the floor against the faster of cudaMemcpyAsync and the 16-byte copy in the same run;
- the float4 sample's fraction and tier, and the scalar sample's fraction against the lesson's copy.
Writes a JSON document (--out) and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def submit(path: str, cache: str, backend: str = "cuda") -> tuple[float, dict]:
    env = dict(os.environ, GRADER_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grader", "submit", path, "--backend", backend, "--format", "json", "-q"],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"grader submit {path} printed no JSON (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("--runs", type=int, default=5, help="runs of each submission for the spread")
    ap.add_argument("--backend", default="cuda")
    args = ap.parse_args()

    rows = []
    figures: dict = {"backend": args.backend}
    with tempfile.TemporaryDirectory(prefix="grader-bench-cache-") as cache:
        cold, first = submit("submissions/float4_launcher.cu", cache, args.backend)
        warm, _ = submit("submissions/float4_launcher.cu", cache, args.backend)
        figures["cold_s"], figures["warm_s"] = cold, warm
        figures["device"] = first.get("device", {})
        rows.append(("submit cold (empty cache), float4", f"{cold:.2f} s", "<= 6 s", cold <= 6.0))
        rows.append(("submit warm, float4", f"{warm:.2f} s", "<= 4 s", warm <= 4.0))
        if args.backend != "cuda":
            figures["status"] = first["status"]
        else:
            for sample in ("float4_launcher.cu", "scalar_2d.cu"):
                docs = [submit(f"submissions/{sample}", cache)[1] for _ in range(args.runs)]
                fr = [d["fraction"] for d in docs]
                spread = (max(fr) - min(fr)) / (sum(fr) / len(fr))
                figures[sample] = {
                    "fractions": fr, "spread": spread, "tiers": [d["tier"] for d in docs],
                    "informational": [d["timing"]["informational_fraction"] for d in docs],
                    "gbps": [d["gbps"] for d in docs], "floor": [d["floor"] for d in docs],
                    "ci": [d["fraction_ci"] for d in docs], "samples": [d["timing"]["samples"] for d in docs],
                    "stop": [d["timing"]["stop_reason"] for d in docs],
                }
                rows.append((f"{sample}: fraction over {args.runs} runs", " ".join(f"{f:.3f}" for f in fr),
                             "spread <= 1%", spread <= 0.01))
                rows.append((f"{sample}: spread", f"{100 * spread:.2f}%", "", None))
                floors = [d["floor"] for d in docs]
                gaps = [f["gbps"] / max(f["copies"].get("memcpy", 0), f["copies"].get("copy_vec4", 0)) for f in floors]
                rows.append((f"{sample}: floor / max(memcpy, vec4)", " ".join(f"{g:.3f}" for g in gaps),
                             "within 2%", all(abs(g - 1) <= 0.02 for g in gaps)))
            f4 = figures["float4_launcher.cu"]
            rows.append(("float4: median fraction, tier", f"{sorted(f4['fractions'])[len(f4['fractions']) // 2]:.3f} "
                         f"{set(f4['tiers'])}", ">= 0.95, gold",
                         min(f4["fractions"]) >= 0.95 and set(f4["tiers"]) == {"gold"}))
            sc = figures["scalar_2d.cu"]
            info = sorted(sc["informational"])[len(sc["informational"]) // 2]
            rows.append(("scalar: fraction of the lesson's copy", f"{info:.3f}", "about 0.90 (measurements.md)",
                         abs(info - 0.90) <= 0.03))
            fl = first["floor"]["copies"]
            rows.append(("copies GB/s (first run)", ", ".join(f"{k} {v:.0f}" for k, v in fl.items()), "", None))
    if args.out:
        args.out.write_text(json.dumps({"figures": figures, "rows": [list(r) for r in rows]}, indent=1))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'figure':<{width}}  {'measured':<34} {'target':<30} verdict")
    for name, value, target, ok in rows:
        verdict = "" if ok is None else ("PASS" if ok else "MISS")
        print(f"{name:<{width}}  {value:<34} {target:<30} {verdict}")
    return 0 if all(ok is not False for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
