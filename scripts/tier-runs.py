#!/usr/bin/env python3
"""Whether every timed sample gets the same tier every run (issue 74: ten runs), and on two cards.

  python scripts/tier-runs.py [--runs 10] [--exercise NAME ...] [--backend cuda] --json OUT
  python scripts/tier-runs.py --compare H100.json H200.json

The first form grades each exercise's timed samples (the manifest's graded samples that are correct
on this backend, or name a tier) RUNS times with `grader samples --only` (several at once, as a batch
grades a class), and writes, per sample, its tier and fraction on each run; a row per exercise says
how many kept one tier, naming those that did not with their fractions and intervals. The JSON says
where it was measured (the commit, the device: scripts/benchmark.py's machine). The second form
compares two such files (two cards): every sample graded on both must have one tier on both, or its
rubric must say why not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark  # noqa: E402

ROOT = benchmark.ROOT


def timed_samples(exercise: str, backend: str) -> list[str]:
    """The samples a tier is given to on this backend (graded and correct, or with a tier expected)."""
    sys.path.insert(0, str(ROOT))
    from grader.batch.manifest import load_manifest
    from grader.core.backend import named
    from grader.exercises.rubric import load_rubric

    folder = ROOT / "submissions" / exercise
    rubric = load_rubric(ROOT / "rubrics" / f"{exercise}.yaml")
    return [e.file for e in load_manifest(folder / "manifest.yaml", named(backend), rubric)
            if e.status == "graded" and (e.correct is True or e.tiers) and e.generate_bytes is None]


def grade_runs(exercise: str, files: list[str], runs: int, backend: str) -> dict[str, list[dict]]:
    """Each file's tier, fraction and interval on each of `runs` runs of `grader samples`."""
    seen: dict[str, list[dict]] = {f: [] for f in files}
    only = [a for f in files for a in ("--only", f)]
    with tempfile.TemporaryDirectory(prefix="grader-tier-runs-") as tmp:
        for k in range(runs):
            out = Path(tmp) / f"run-{k}.json"
            subprocess.run([sys.executable, "-m", "grader", "samples", str(ROOT / "submissions" / exercise),
                            "--backend", backend, "--json-out", str(out), *only], cwd=ROOT, capture_output=True)
            got = json.loads(out.read_text()) if out.is_file() else {}
            for f in files:
                r = got.get(f, {})
                seen[f].append({"tier": r.get("tier"), "fraction": r.get("fraction"),
                                "fraction_ci": r.get("fraction_ci"), "borderline": r.get("borderline")})
            print(f"  {exercise} run {k + 1} of {runs}: {sum(1 for f in files if f in got)} of {len(files)} graded",
                  file=sys.stderr, flush=True)
    return seen


def _said(f: str, runs: list[dict]) -> str:
    fr = [r["fraction"] for r in runs if r["fraction"] is not None]
    tiers = sorted({str(r["tier"]) for r in runs})
    return f"{f} {'/'.join(tiers)}" + (f" ({min(fr):.4f} to {max(fr):.4f})" if fr else "")


def rows_of(exercise: str, seen: dict[str, list[dict]]) -> list[tuple]:
    runs = max((len(v) for v in seen.values()), default=0)
    flipped = [f for f, v in seen.items() if len({r["tier"] for r in v}) > 1]
    on_line = [f for f, v in seen.items() if any(r["borderline"] for r in v)]
    rows = [(f"{exercise}: timed samples with one tier on {runs} runs",
             f"{len(seen) - len(flipped)} of {len(seen)}" + (": " + "; ".join(_said(f, seen[f]) for f in flipped)
                                                              if flipped else ""), "all", not flipped)]
    if on_line:
        rows.append((f"{exercise}: borderline (within a line's band) on some run",
                     "; ".join(_said(f, seen[f]) for f in on_line), "", None))
    return rows


def compare(a: Path, b: Path) -> int:
    docs = [json.loads(p.read_text()) for p in (a, b)]
    cards = [d["machine"].get("device", p.name) for d, p in zip(docs, (a, b))]
    differ = []
    for exercise, seen in docs[0]["figures"].items():
        other = docs[1]["figures"].get(exercise, {})
        for f, runs in seen.items():
            if f in other and {r["tier"] for r in runs} != {r["tier"] for r in other[f]}:
                differ.append(f"{exercise}/{_said(f, runs)} on {cards[0]}, {_said(f, other[f]).split(' ', 1)[1]} on {cards[1]}")
    print(f"samples whose tier differs between {cards[0]} and {cards[1]}: {len(differ)}")
    for line in differ:
        print(f"  {line}")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--exercise", action="append", default=[])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    exercises = args.exercise or sorted(p.parent.name for p in (ROOT / "submissions").glob("*/manifest.yaml"))
    figures, rows = {}, []
    for exercise in exercises:
        figures[exercise] = grade_runs(exercise, timed_samples(exercise, args.backend), args.runs, args.backend)
        rows += rows_of(exercise, figures[exercise])
    for name, value, target, ok in rows:
        print(f"{name}: {value}" + (f" (target {target}: {'PASS' if ok else 'MISS'})" if ok is not None else ""))
    if args.json:
        args.json.write_text(json.dumps({"machine": benchmark.machine(args.backend), "backend": args.backend,
                                         "kind": f"tiers over {args.runs} runs of `grader samples`",
                                         "figures": figures, "rows": [list(r) for r in rows]}, indent=1) + "\n")
    return 0 if all(ok is not False for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
