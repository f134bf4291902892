#!/usr/bin/env python3
"""Which system calls the grading child makes once the wall is up, measured, not guessed.

Grades samples with the child's seccomp filter in audit mode (every call allowed, and
recorded by the filter's handler) and prints, per sample, each system call and how often
it was made after the CUDA context existed, and the files it opened. This is how the
filter's list in grader/run/child/guard.c was checked on the H200; it never grades students.

    PYTHONPATH=. python3 scripts/audit-syscalls.py [--backend cuda] [SAMPLE ...] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.grade.pipeline import grade_submission  # noqa: E402
from grader.exercises.rubric import load_rubric  # noqa: E402


def allowed_by_policy() -> set[str]:
    """The calls guard.c's policy lets through (with or without argument checks)."""
    text = (ROOT / "grader" / "run" / "child" / "guard.c").read_text()
    table = text[text.index("kPolicy[] = {"):text.index("#undef E")]
    return set(re.findall(r"E\((\w+), R_(?!ENOSYS)", table))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("samples", nargs="*", default=["float4_launcher.cu", "occupancy_launcher.cu",
                                                   "device_malloc_leak.cu", "printf_every_thread.cu"])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rubric = load_rubric()
    policy = allowed_by_policy()
    report = {}
    for name in args.samples:
        r = grade_submission(ROOT / "submissions" / "bias_gelu_fused" / name, rubric=rubric, backend=args.backend, audit_syscalls=True)
        seen = r.sandbox.audit if r.sandbox else {}
        report[name] = {"status": r.status, "correct": r.correct, "fraction": r.fraction, "syscalls": seen,
                        "opened": r.sandbox.audit_open_paths if r.sandbox else [],
                        "outside_policy": sorted(set(seen) - policy)}
        print(f"== {name}: {r.status}, correct {r.correct}, fraction {r.fraction}")
        print("   " + ", ".join(f"{k} {v}" for k, v in seen.items()))
        print(f"   opened: {report[name]['opened'][:20]}")
        print(f"   outside the enforced policy: {report[name]['outside_policy'] or 'none'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
