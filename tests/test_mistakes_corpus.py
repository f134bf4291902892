"""The mistakes corpus (tests/data/mistakes/, issue 71): 54 wrong kernels, each graded on the CPU
emulator once, two at a time, and held to its manifest entry:

- every file keeps its real outcome (`outcome`), and the same one on one OS thread as on several:
  each grade runs with the emulator's thread check (Backend.thread_check: every call
  a thread count could change run on one thread and on two or more, compared), which ends a grade
  whose faults or written words differ;
- the number named by cause WITH THE LINE does not fall below RATCHET: an entry counts where its
  first diagnosis is one of the codes its `named_by` lists (the codes whose message really names
  this file's mistake) and that message cites `line N` for its `line` (or one of its `cited_lines`);
- no entry whose mistake is one of its exercise's declared hypotheses gets the catch-all.

The goal is 90% of the corpus (49 of 54); RATCHET is what the code achieves today: raise it with
the code, never lower it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from grader.core.backend import EMULATOR
from grader.exercises import load_exercise
from grader.grade.pipeline import grade_submission

CORPUS = Path(__file__).resolve().parent / "data" / "mistakes"
ENTRIES = yaml.safe_load((CORPUS / "manifest.yaml").read_text())["mistakes"]
RATCHET = 52
CATCH_ALL = "wrong_values"
CHECKED = dataclasses.replace(EMULATOR, thread_check=True)
WORKERS = max(1, min(2, os.cpu_count() or 1))


@pytest.fixture(scope="module")
def results():
    """Every corpus file's Result, graded on the emulator, WORKERS at a time."""
    rubrics = {ex: load_exercise(ex) for ex in {e["exercise"] for e in ENTRIES}}
    threads = max(1, (os.cpu_count() or 1) // WORKERS)

    def one(entry):
        return entry["file"], grade_submission(CORPUS / entry["file"], rubric=rubrics[entry["exercise"]],
                                               backend=CHECKED, emulator_threads=threads)

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return dict(pool.map(one, ENTRIES))


def named_with_line(entry: dict, result) -> bool:
    """Whether the first diagnosis names this entry's cause (a code of its named_by) and cites its line."""
    if not result.diagnosis:
        return False
    first = result.diagnosis[0]
    lines = entry.get("cited_lines") or [entry["line"]]
    return first.code in (entry.get("named_by") or []) and any(
        re.search(rf"\bline {n}\b", first.message) for n in lines)


def test_every_entry_says_what_names_it():
    assert len(ENTRIES) == 54
    for e in ENTRIES:
        assert "named_by" in e and isinstance(e["named_by"], list), e["file"]
        assert isinstance(e["line"], int), e["file"]


@pytest.mark.slow
def test_every_file_keeps_its_outcome(results):
    wrong = []
    for e in ENTRIES:
        r = results[e["file"]]
        assert e["outcome"] == "incorrect", e["file"]      # every file compiles and is wrong
        if not (r.status == "graded" and r.correct is False) or "ThreadCountChanged" in r.output.stderr:
            wrong.append(f"{e['file']}: status {r.status}, correct {r.correct}: {r.message} {r.output.stderr[-400:]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_named_by_cause_with_the_line_does_not_fall(results):
    named = [e["file"] for e in ENTRIES if named_with_line(e, results[e["file"]])]
    missed = [f"{e['file']}: {(results[e['file']].diagnosis or [None])[0]}" for e in ENTRIES
              if e["file"] not in named]
    print(f"named by cause with the line: {len(named)} of {len(ENTRIES)} (goal 49)")
    assert len(named) >= RATCHET, "\n".join(missed)


@pytest.mark.slow
def test_no_declared_hypothesis_gets_the_catch_all(results):
    """An entry whose mistake its exercise declares as a hypothesis (a named_by code among the
    rubric's variants) is never told the grader does not recognise the output."""
    rubrics = {ex: load_exercise(ex) for ex in {e["exercise"] for e in ENTRIES}}
    for e in ENTRIES:
        declared = {v.code for v in rubrics[e["exercise"]].hypotheses.variants}
        if not declared & set(e["named_by"]):
            continue
        codes = [d.code for d in results[e["file"]].diagnosis]
        assert codes and codes[0] != CATCH_ALL, f"{e['file']}: {codes}"
