#!/usr/bin/env python3
"""The similarity check's figures (docs/instructors.md, "Similar kernels"): how many disguised
copies are named, how close the kernels written apart come, and what a class of 300 costs.

  python scripts/similarity-bench.py                  # all three, at the default threshold
  python scripts/similarity-bench.py --threshold 0.7  # another threshold
  python scripts/similarity-bench.py --independence   # also check the independent set's texts
                                                      # (difflib under 0.7 for every pair: slow)

(a) each copy of tests/similarity_cases.py (the samples' graded kernels and the correct idioms,
disguised; the copies made by hand) is judged in a class of its exercise's independent kernels:
named when the pair is at the threshold and the original's closest match. (b) every pair of each
exercise's independent kernels. (c) a class of 300: the graded samples and idioms of
bias_gelu_fused, each disguised with a new seed until there are 300, compared as `grader batch`
does (batch/similarity.py: the reference set aside), timed over 3 runs (the median).
"""

from __future__ import annotations

import argparse
import difflib
import statistics
import sys
import time
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import similarity_cases as cases

from grader.analysis.similarity import DEFAULT_THRESHOLD
from grader.batch.similarity import similarity_of
from grader.exercises import load_exercise


def judged(exercise: str, name: str, original, copy, threshold: float) -> tuple[bool, float]:
    sources = [s for s in cases.independent(exercise) if s[0] != name] + [(name, original), (name + "~copy", copy)]
    sim = similarity_of(sources, rubric=load_exercise(exercise), threshold=0.0)
    score = next((p.score for p in sim.pairs if {p.a, p.b} == {name, name + "~copy"}), 0.0)
    best = sim.closest.get(name)
    return best is not None and best.other(name) == name + "~copy" and score >= threshold, score


def copies(threshold: float) -> None:
    named, total, scores, missed = 0, 0, [], []
    for exercise in cases.EXERCISES:
        for name, original, copy in cases.copied(exercise):
            ok, score = judged(exercise, name, original, copy, threshold)
            total += 1
            named += ok
            (scores if ok else missed).append(score if ok else f"{exercise}/{name} ({score:.2f})")
    print(f"(a) disguised copies: {named} of {total} named ({named / total:.1%}); named scores "
          f"{min(scores):.2f} to {max(scores):.2f}, median {statistics.median(scores):.2f}")
    print(f"    not named: {', '.join(missed) or 'none'}")
    hand = [(ex, judged(ex, f"sample:{o.stem}", o.read_bytes(), c.read_bytes(), threshold)) for ex, o, c in
            cases.hand_made()]
    print(f"    made by hand: {sum(ok for _, (ok, _) in hand)} of {len(hand)} named, scores "
          + ", ".join(f"{ex} {s:.2f}" for ex, (_, s) in hand))


def independent(threshold: float, check_texts: bool) -> None:
    for exercise in cases.EXERCISES:
        found = cases.independent(exercise)
        sim = similarity_of(found, rubric=load_exercise(exercise), threshold=0.0)
        above = [p for p in sim.pairs if p.score >= threshold]
        top = ", ".join(f"{p.a} ~ {p.b} {p.score:.2f}" for p in sim.pairs[:3])
        print(f"(b) {exercise}: {len(found)} kernels written apart, {len(found) * (len(found) - 1) // 2} pairs, "
              f"{len(above)} at {threshold:.2f} or above; closest: {top}")
        if check_texts:
            def bare(data: bytes) -> str:
                return " ".join(cases.strip_comments(data.decode("utf-8", "replace")).split())
            texts = {n: bare(d) for n, d in found}
            worst = max((difflib.SequenceMatcher(None, texts[a], texts[b], autojunk=False).ratio(), a, b)
                        for a, b in combinations(texts, 2))
            print(f"    texts: the closest pair by difflib is {worst[1]} ~ {worst[2]} at {worst[0]:.2f}")


def class_of_300(threshold: float, size: int = 300) -> None:
    exercise = "bias_gelu_fused"
    bases = [p for p in cases.graded_samples(exercise) + cases.idioms(exercise)]
    sources = []
    seed = 0
    while len(sources) < size:
        p = bases[seed % len(bases)]
        seed += 1
        text = p.read_text(errors="replace")
        sources.append((f"s{seed:03d}_{p.stem}", text if seed <= len(bases) else cases.disguise(text, seed=seed)))
    sources = [(n, t.encode()) for n, t in sources]
    rubric = load_exercise(exercise)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        sim = similarity_of(sources, rubric=rubric, threshold=threshold)
        times.append(time.perf_counter() - start)
    print(f"(c) a class of {len(sources)} ({len(bases)} kernels, each also disguised): "
          f"{statistics.median(times):.2f} s (median of 3; {min(times):.2f} to {max(times):.2f}), "
          f"{len(sim.pairs)} pairs at {threshold:.2f} or above, {len(sim.closest)} students with a closest match, "
          f"{len(sim.too_small)} too small to compare")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    parser.add_argument("--independence", action="store_true",
                        help="also check that no two independent kernels' texts are alike (difflib; slow)")
    args = parser.parse_args()
    copies(args.threshold)
    independent(args.threshold, args.independence)
    class_of_300(args.threshold)


if __name__ == "__main__":
    main()
