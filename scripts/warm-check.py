#!/usr/bin/env python3
"""A short look at warm `grader submit` on a GPU (a developer's tool; scripts/benchmark.py is the
benchmark): one grade to fill the cache, then N warm grades of the same file, each after the last
one's drawing ahead ended, with where each one's wall time went.

  python scripts/warm-check.py [FILE] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default="submissions/bias_gelu_fused/float4_launcher.cu")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="grader-warm-", ignore_cleanup_errors=True) as cache:
        benchmark.submit(args.file, cache, wait=True)
        runs = [benchmark.submit(args.file, cache, wait=True) for _ in range(args.runs)]
        benchmark._drawing_done()
    for wall, doc in runs:
        print(f"{wall:.2f} s  {benchmark.wall_split(doc)}")
    fractions = " ".join(f"{doc['fraction']:.3f}" for _, doc in runs if doc.get("fraction") is not None)
    print(f"median of {args.runs}: {statistics.median(w for w, _ in runs):.2f} s (fractions {fractions})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
