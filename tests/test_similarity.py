"""The similarity check (analysis/similarity.py, batch/similarity.py): copies are named through
renaming, reordering, re-commenting and re-spacing; kernels written apart are not; the exercise's
own code is no match; `grader batch` names the pair in summary.csv and class.html.

The sets are tests/similarity_cases.py's. Each copy is judged in a class of the exercise's
independent kernels, the copy and its original: the pair must be named (at the default threshold)
and be the original's closest match. scripts/similarity-bench.py prints the same figures, and
times a class of 300.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.analysis.similarity import DEFAULT_THRESHOLD, compare, tokens
from grader.batch.similarity import similarity_of
from grader.exercises import load_exercise

sys.path.insert(0, str(Path(__file__).resolve().parent))
import similarity_cases as cases

ROOT = Path(__file__).resolve().parent.parent


def _class_with(exercise: str, name: str, original: bytes | str, copy: bytes | str):
    """The similarity of the exercise's independent kernels (the original left out of them), the
    original and its copy."""
    sources = [s for s in cases.independent(exercise) if s[0] != name] + [(name, original), (name + "~copy", copy)]
    return similarity_of(sources, rubric=load_exercise(exercise))


def _named(sim, name: str) -> bool:
    p = sim.closest.get(name)
    return p is not None and p.other(name) == name + "~copy"


def test_disguised_copies_of_correct_and_incorrect_kernels_are_named():
    """At least 90% of the samples' graded kernels and the correct idioms, each renamed, reordered,
    re-commented, re-spaced and renumbered, are named as their original's closest match. Those not
    named are the ones whose code is the exercise's own (the reference's kernel) or the lesson's
    kernel most of the class writes (the class's idiom): listed here, so a change shows."""
    total, missed = 0, []
    for exercise in cases.EXERCISES:
        for name, original, copy in cases.copied(exercise):
            total += 1
            if not _named(_class_with(exercise, name, original, copy), name):
                missed.append(f"{exercise}/{name}")
    assert total >= 30
    assert (total - len(missed)) / total >= 0.9, missed
    # the ones missed: the reference's own kernel (scalar_2d, device_helper; gelu_sum's
    # thread_per_output keeps 9 of its 40 hashes), and the lesson's kernel with one thing changed
    assert set(missed) <= {"bias_gelu_fused/sample:scalar_2d", "bias_gelu_fused/sample:device_helper",
                           "gelu_sum/sample:thread_per_output",
                           "bias_gelu_fused/sample:extern_c_kernel", "bias_gelu_fused/idiom:bom_start",
                           "bias_gelu_fused/idiom:if0_dead_code_asm",
                           "bias_gelu_fused/idiom:ifdef_guarded_helper_include"}, missed


@pytest.mark.parametrize("exercise, original, copy", cases.hand_made(), ids=lambda v: getattr(v, "stem", v))
def test_a_copy_made_by_hand_is_named_with_its_regions(exercise, original, copy):
    name = f"sample:{original.stem}"
    sim = _class_with(exercise, name, original.read_bytes(), copy.read_bytes())
    assert _named(sim, name)
    pair = sim.pairs[0]
    assert {pair.a, pair.b} == {name, name + "~copy"} and pair.score >= DEFAULT_THRESHOLD
    # the largest region is a good part of the code, each side's text the file's own lines
    first = pair.regions[0]
    a_text, b_text = (first.a_text, first.b_text) if pair.a == name else (first.b_text, first.a_text)
    assert a_text in original.read_text() and b_text in copy.read_text()
    assert first.tokens >= 40


@pytest.mark.parametrize("exercise", cases.EXERCISES)
def test_kernels_written_apart_are_not_named(exercise):
    """No pair of the exercise's independent kernels (33 for bias_gelu_fused) at the threshold."""
    found = cases.independent(exercise)
    sim = similarity_of(found, rubric=load_exercise(exercise))
    assert [(p.a, p.b, p.score) for p in sim.pairs] == []
    assert sim.compared == len(found)
    if exercise == "bias_gelu_fused":
        assert len(found) >= 30


REFERENCE_KERNEL = """
#include <cuda_runtime.h>
__device__ __forceinline__ float refGelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                              size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) out[blockIdx.y * cols + col] = refGelu(x[blockIdx.y * cols + col] + bias[col]);
}
"""


def test_the_reference_and_the_given_code_are_no_match(tmp_path):
    """Two students who both hand in the exercise's reference kernel (reference/bias_gelu_fused/
    kernels.cu's refBiasGelu, renamed differently) are no pair: the reference's code is set aside.
    Compared without it, the same two files are named. Code the course handed out
    (--similarity-given) is set aside the same way."""
    rubric = load_exercise("bias_gelu_fused")
    a = cases.disguise(REFERENCE_KERNEL, seed=1)
    b = cases.disguise(REFERENCE_KERNEL, seed=2)
    assert [(p.a, p.b) for p in compare([("ann", a), ("ben", b)], given=[]).pairs] == [("ann", "ben")]
    sim = similarity_of([("ann", a), ("ben", b)], rubric=rubric)
    assert sim.pairs == () and sim.too_small == ("ann", "ben")

    lesson = (ROOT / "submissions" / "gelu_sum" / "workspace_partials.cu").read_text()   # long, handed out
    own_a = (ROOT / "submissions" / "rope_half_split" / "grid_stride.cu").read_text()
    own_b = (ROOT / "submissions" / "gelu_sum" / "atomic_add.cu").read_text()
    students = [("ann", lesson + own_a), ("ben", cases.disguise(lesson, seed=4) + own_b)]
    assert [(p.a, p.b) for p in similarity_of(students, rubric=rubric, threshold=0.5).pairs] == [("ann", "ben")]
    given = tmp_path / "lesson.cu"
    given.write_text(lesson)
    assert similarity_of(students, rubric=rubric, given=[given], threshold=0.3).pairs == ()


def test_the_order_of_the_functions_and_the_names_change_nothing():
    text = (ROOT / "submissions" / "bias_gelu_fused" / "warp_per_row.cu").read_text()
    moved = cases.disguise(text, seed=1, recomment=False, respace=False, renumber=False)
    assert text.index("void biasGeluFused") < text.index("void launchBiasGeluFused")
    assert moved.index("void biasGeluFused") > moved.index("void launchBiasGeluFused")     # the functions moved
    sim = compare([("a", text), ("b", moved)], threshold=0.0)
    assert sim.pairs[0].score == 1.0
    assert [t.kind for t in tokens("int count = 3; // x\n")] == ["int", "I", "=", "N", ";"]
    assert [t.kind for t in tokens("float4 v = a.x + threadIdx.x;")] == \
        ["float4", "I", "=", "I", ".", "x", "+", "threadIdx", ".", "x", ";"]


def test_grader_batch_names_a_renamed_copy_in_the_summary_and_the_class_report(tmp_path):
    """A class of four on the emulator: bob handed in alice's kernel renamed, reordered and
    re-commented; carol and dan wrote their own. summary.csv names bob for alice and alice for bob
    (no one for carol or dan), class.html lists the pair with its regions side by side, and the
    terminal says it."""
    from grader.cli import cli

    samples = ROOT / "submissions" / "bias_gelu_fused"
    cls = tmp_path / "class"
    cls.mkdir()
    alice = (samples / "warp_per_row.cu").read_text()
    (cls / "alice.cu").write_text(alice)
    (cls / "bob.cu").write_text(cases.disguise(alice, seed=5, renumber=False))
    (cls / "carol.cu").write_text((samples / "float4_launcher.cu").read_text())
    (cls / "dan.cu").write_text((samples / "shared_bias_tile.cu").read_text())
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["batch", str(cls), "--report-dir", str(out), "--backend", "emulator",
                                 "--exercise", "bias_gelu_fused"])
    assert r.exit_code == 0, r.output
    rows = {row["student"]: row for row in csv.DictReader((out / "summary.csv").open(newline=""))}
    assert rows["alice"]["correct"] == rows["bob"]["correct"] == "true"      # the copy builds and runs
    assert rows["alice"]["similar_to"].startswith("bob (") and rows["bob"]["similar_to"].startswith("alice (")
    assert rows["carol"]["similar_to"] == rows["dan"]["similar_to"] == ""
    html = (out / "class.html").read_text()
    assert "Similar kernels" in html and 'id="pair-1"' in html and html.count('class="sides"') >= 1
    assert "alice, lines" in html and "bob, lines" in html
    assert "rowsByWarps" in html                     # alice's own code, shown beside bob's
    assert "similar kernels: alice and bob" in r.output


def test_the_threshold_is_the_instructors(tmp_path):
    """--similarity-threshold 1.0 names no disguised copy (its score is under 1), the default does."""
    text = (ROOT / "submissions" / "bias_gelu_fused" / "warp_per_row.cu").read_text()
    copy = cases.disguise(text, seed=6) + "\n__global__ void extra(float* p) { p[threadIdx.x] *= 2.0f; " \
                                          "if (threadIdx.x == 0) p[1] = p[0] + p[2] * p[3]; }\n"
    rubric = load_exercise("bias_gelu_fused")
    assert similarity_of([("a", text), ("b", copy)], rubric=rubric).closest_text("a").startswith("b (")
    assert similarity_of([("a", text), ("b", copy)], rubric=rubric, threshold=1.0).pairs == ()


def test_a_class_report_without_the_files_says_it_compared_none(tmp_path):
    """A class merged from shards holds results, not files: class.html says the kernels were not
    compared, rather than that no pair was found."""
    from grader.batch.classreport import write_class_report
    from grader.batch.grading import Graded
    from grader.batch.inputs import Entry

    graded = [Graded(Entry(who, None, "missing", "no file"), None) for who in ("ann", "ben")]
    write_class_report(graded, load_exercise("bias_gelu_fused"), tmp_path / "class.html")
    html = (tmp_path / "class.html").read_text()
    assert "Not compared" in html and "No pair at or above" not in html
