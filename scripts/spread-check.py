#!/usr/bin/env python3
"""How far a kernel's fraction moves from one grade to the next, under the exercise's timing keys
as they are and as changed (a developer's tool for choosing the rubric's sampling keys;
scripts/benchmark.py is the benchmark): N warm grades of FILE per variant, each variant a copy of
the exercise's rubric with some `timing:` keys replaced.

  python scripts/spread-check.py [FILE] [--runs 8] [--variant NAME:KEY=VALUE,KEY=VALUE ...] [--json OUT]

Printed per variant: the fractions, their spread (max minus min over the mean) and standard
deviation, the interval's half-widths, the rounds sampled, why sampling stopped, the seconds it
took, and the floor's GB/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark  # noqa: E402

ROOT = benchmark.ROOT


def variant_rubric(base: Path, changes: dict, folder: Path, name: str) -> Path:
    """A copy of the rubric at base with its timing keys changed (the reference is found by the
    exercise's name, so the copy may lie anywhere)."""
    doc = yaml.safe_load(base.read_text())
    doc["timing"].update(changes)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, keys = text.partition(":")
    changes = {}
    for pair in filter(None, keys.split(",")):
        key, _, value = pair.partition("=")
        changes[key.strip()] = yaml.safe_load(value)
    return name, changes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default="submissions/bias_gelu_fused/float4_launcher.cu")
    ap.add_argument("--rubric", default="rubrics/bias_gelu_fused.yaml")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE,...",
                    help="timing keys changed (none: the rubric as it is, named 'as-is')")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    variants = [parse_variant(v) for v in args.variant] or [("as-is", {})]
    report = {}
    with tempfile.TemporaryDirectory(prefix="grader-spread-", ignore_cleanup_errors=True) as tmp:
        folder = Path(tmp)
        cache = folder / "cache"
        for name, changes in variants:
            rubric = variant_rubric(ROOT / args.rubric, changes, folder, name)
            extra = ["--rubric", str(rubric)]
            benchmark.submit(args.file, str(cache), args.backend, wait=True, extra=extra)      # the build cached
            docs = [benchmark.submit(args.file, str(cache), args.backend, wait=True, extra=extra)[1]
                    for _ in range(args.runs)]
            fr = [d["fraction"] for d in docs]
            if None in fr:
                raise SystemExit(f"{name}: not timed: {[d['status'] for d in docs]}")
            mean = statistics.fmean(fr)
            row = {
                "changes": changes, "fractions": fr, "spread": (max(fr) - min(fr)) / mean,
                "sd": statistics.stdev(fr) / mean if len(fr) > 1 else 0.0,
                "half_widths": [(d["fraction_ci"][1] - d["fraction_ci"][0]) / 2 / d["fraction"] for d in docs],
                "samples": [d["timing"]["samples"] for d in docs], "stop": [d["timing"]["stop_reason"] for d in docs],
                "seconds": [d["timing"]["seconds"] for d in docs], "floor_gbps": [d["floor"]["gbps"] for d in docs],
                "wall_s": [d["wall_s"] for d in docs],
            }
            report[name] = row
            print(f"{name} {changes}: fractions {' '.join(f'{f:.4f}' for f in fr)}; spread {100 * row['spread']:.2f}% "
                  f"sd {100 * row['sd']:.2f}%; half-widths {' '.join(f'{100 * h:.2f}' for h in row['half_widths'])}%; "
                  f"rounds {row['samples']}; stop {sorted(set(row['stop']))}; sampling s "
                  f"{' '.join(f'{s:.2f}' for s in row['seconds'])}; floor GB/s "
                  f"{' '.join(f'{g:.0f}' for g in row['floor_gbps'])}; wall median {statistics.median(row['wall_s']):.2f} s",
                  flush=True)
    rows = [(f"{Path(args.file).name}, {name}: fraction over {args.runs} warm grades",
             f"{100 * row['spread']:.2f}% ({min(row['fractions']):.4f} to {max(row['fractions']):.4f})",
             f"<= {100 * benchmark.SPREAD:.1f}%", row["spread"] <= benchmark.SPREAD) for name, row in report.items()]
    if args.json:       # where it was measured (the commit, the device), as every figure says
        args.json.write_text(json.dumps({"machine": benchmark.machine(args.backend), "backend": args.backend,
                                         "kind": f"fraction spread (scripts/spread-check.py, {args.runs} warm grades)",
                                         "figures": report, "rows": [list(r) for r in rows]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
