"""Fairness: correct kernels written in idioms students really use, none of them among the samples,
graded end to end on the CPU emulator (tests/data/fairness/<exercise>/*.cu, each file's first line
says its idiom).

Refusing or failing a correct kernel is the worst outcome a grader has, so every file here must be
graded correct, except the few constructs docs/design.md lists as ones the emulator cannot run
(inline PTX, cooperative-groups tiles): those must get the documented needs-a-GPU rejection with its
message, never `incorrect`.

The files are graded once, two at a time (the emulator's heavy kernels run on one core each), and
each test reads its file's result.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.exercises import load_exercise
from grader.grade.pipeline import grade_submission

DATA = Path(__file__).resolve().parent / "data" / "fairness"
EXERCISES = ("bias_gelu_fused", "rope_half_split", "gelu_sum")

FILES = [(ex, p) for ex in EXERCISES for p in sorted((DATA / ex).glob("*.cu"))]

# The constructs docs/design.md says the emulator cannot run ("inline PTX", "cooperative groups
# beyond a block's sync"): the outcome is `rejected`, the message names the line and the construct
# and says the check needs a GPU.
NEEDS_GPU = {
    ("gelu_sum", "ptx_laneid_warp_per_output.cu"): "uses inline PTX",
    ("gelu_sum", "cg_tiled_partition_reduce.cu"): "uses cooperative groups beyond a block's sync",
}

# A kernel the default launch cannot call as written, refused before any build with a message that
# says what to write instead (a launcher): by the exercise's contract, not a false refusal. The
# harness calls biasGeluFused with its own pointer types, from which no template argument follows.
BY_CONTRACT = {
    ("bias_gelu_fused", "template_typename_default_launch.cu"): "where the default launch passes const float* x",
}

WORKERS = max(1, min(2, os.cpu_count() or 1))


@pytest.fixture(scope="module")
def results():
    """Every file's Result, graded on the emulator, WORKERS at a time."""
    rubrics = {ex: load_exercise(ex) for ex in EXERCISES}
    threads = max(1, (os.cpu_count() or 1) // WORKERS)

    def one(item):
        ex, path = item
        return (ex, path.name), grade_submission(path, rubric=rubrics[ex], backend="emulator",
                                                 emulator_threads=threads)

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return dict(pool.map(one, FILES))


def test_every_file_says_its_idiom_on_its_first_line():
    assert len(FILES) >= 30
    for ex, path in FILES:
        first = path.read_bytes().decode("utf-8-sig").splitlines()[0]
        assert first.startswith("// Idiom: "), f"{ex}/{path.name}: {first!r}"


@pytest.mark.slow
@pytest.mark.parametrize("exercise,path", FILES, ids=[f"{ex}/{p.name}" for ex, p in FILES])
def test_a_correct_idiom_is_graded_correct(results, exercise, path):
    r = results[(exercise, path.name)]
    why = f"{exercise}/{path.name}: status {r.status}, correct {r.correct}: {r.message}"
    assert r.backend == "emulator", why
    expected_gpu = NEEDS_GPU.get((exercise, path.name))
    if expected_gpu is not None:
        assert r.status == "rejected" and r.correct is not True, why
        assert expected_gpu in r.message, why
        assert "the CPU emulator cannot run this, so this check needs a GPU" in r.message, why
        assert r.message.startswith(f"{path.name}:"), why            # with the line
        return
    contract = BY_CONTRACT.get((exercise, path.name))
    if contract is not None:
        assert r.status == "rejected" and contract in r.message and "define void launchBiasGeluFused(" in r.message, why
        return
    assert r.status == "graded", why
    assert r.correct is True, why + "; diagnosis: " + ", ".join(d.code for d in (r.diagnosis or []))
    assert r.tier is None                                            # nothing is timed on the emulator
