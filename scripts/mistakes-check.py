#!/usr/bin/env python3
"""Grade the mistakes corpus (tests/data/mistakes/, issue 71) on one backend and print, per file,
the outcome and the first diagnosis beside the cause the manifest gives; writes the rows as JSON
(--json FILE) so two backends' runs can be compared (--compare A.json B.json).

    PYTHONPATH=. python3 scripts/mistakes-check.py --backend cuda --out DIR --json rows.json
    python3 scripts/mistakes-check.py --compare emulator.json cuda.json
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "mistakes"


def grade(backend: str, out: Path) -> list[dict]:
    manifest = yaml.safe_load((CORPUS / "manifest.yaml").read_text())["mistakes"]
    rows = []
    for exercise in sorted({m["exercise"] for m in manifest}):
        mine = [m for m in manifest if m["exercise"] == exercise]
        with tempfile.TemporaryDirectory() as tmp:
            klass = Path(tmp) / "class"
            klass.mkdir()
            for m in mine:
                shutil.copy(CORPUS / m["file"], klass / Path(m["file"]).name)
            reports = out / exercise
            subprocess.run([sys.executable, "-m", "grader", "batch", str(klass), "--exercise", exercise,
                            "--backend", backend, "--report-dir", str(reports)], check=False,
                           stdout=subprocess.DEVNULL)
        for m in mine:
            student = Path(m["file"]).stem
            path = reports / student / "result.json"
            r = json.loads(path.read_text()) if path.is_file() else {}
            first = (r.get("diagnosis") or [{}])[0]
            rows.append({"file": m["file"], "expected": m["code"], "outcome": m["outcome"],
                         "status": r.get("status"), "correct": r.get("correct"),
                         "first": first.get("code"), "message": (first.get("message") or r.get("message") or "")[:160]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--compare", nargs=2, type=Path)
    a = ap.parse_args()
    if a.compare:
        left, right = (json.loads(p.read_text()) for p in a.compare)
        by = {r["file"]: r for r in right}
        same = 0
        for r in left:
            o = by.get(r["file"], {})
            agree = (r["status"], r["correct"], r["first"]) == (o.get("status"), o.get("correct"), o.get("first"))
            same += agree
            if not agree:
                print(f"{r['file']}: {r['status']}/{r['first']}  vs  {o.get('status')}/{o.get('first')}")
        print(f"{same} of {len(left)} files agree (outcome and first diagnosis code)")
        return
    rows = grade(a.backend, a.out)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    for r in rows:
        print(f"{r['file'][:48]:48} {str(r['status']):10} {str(r['first']):24} want {r['expected']}")
    print(f"{len(rows)} files graded on {a.backend}")


if __name__ == "__main__":
    main()
