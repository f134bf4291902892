"""Every number a diagnosis says, checked against the output it describes (issue 71: "0 elements are
NaN or infinite" where every element was +infinity). Each test builds an output (or two runs of
one), counts by hand what the message should say, and compares: writes before and past the
output (from the guard words themselves), elements and slices never written, each kind of value
that is not finite, the values read from shared memory no thread wrote, and the outputs that
changed between a check's two runs (both the child's bit count and the parent's count beyond the
tolerance). Infinities are counted as such in tests/test_hypotheses.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from grader.core.checking import GUARD_BITS, POISON_BITS, FailedOutput, compare, read_guards
from grader.core.contract import SHARED_POISON_BITS, CaseFrame
from grader.core.results import CaseResult
from grader.exercises import load_exercise
from grader.run.child.backends import count_differences
from grader.verdict import diagnosis
from grader.verdict.checks import CaseOutcome, _CaseCheck

TOL = dict(rtol=1e-5, atol=1e-6)


def _diagnose(got: np.ndarray, want: np.ndarray, guards=None, axes=("rows", "cols")):
    cmp = compare(got, want, **TOL)
    failed = FailedOutput("case", "out", list(axes), got, want, {}, {}, TOL["rtol"], TOL["atol"], "poison", cmp,
                          guards if guards is not None else read_guards(_guarded(got.size, 4), 4, got.size))
    return diagnosis.diagnose(failed, hypotheses=None)


def _guarded(n: int, pad: int) -> np.ndarray:
    full = np.zeros(n + 2 * pad, dtype=np.float32)
    full.view(np.uint32)[:] = GUARD_BITS
    return full


def _set_bits(a: np.ndarray, where, bits: int) -> None:
    a.view(np.uint32)[where] = bits


def test_writes_outside_the_output_are_counted_from_its_guard_words():
    want = np.linspace(-1, 1, 40).reshape(5, 8)
    pad, n = 16, 40
    full = _guarded(n, pad)
    full[pad: pad + n] = want.ravel()
    full[pad + n + 0] = 1.0
    full[pad + n + 3] = 2.0
    full[pad + n + 10] = 3.0            # the farthest: 11 floats past the end
    full[pad - 1] = 4.0
    full[pad - 5] = 5.0
    got = full[pad: pad + n].reshape(5, 8)
    got.ravel()[0] += 1.0               # one wrong value, so the output fails its check
    found = {d.code: d.message for d in _diagnose(got, want, read_guards(full, pad, n))}
    assert found["writes_past_output"] == ("3 floats past the end of the output changed, the farthest 11 floats "
                                           "past its end")
    assert found["writes_before_output"] == "2 floats before the output changed"


def test_elements_and_slices_never_written_are_counted_and_listed():
    want = np.linspace(-1, 1, 48).reshape(8, 6)
    got = want.astype(np.float32)
    _set_bits(got, (slice(5, 8), slice(None)), POISON_BITS)          # rows 5..7
    found = _diagnose(got, want)
    assert found[0].code == "unwritten_rows" and found[0].message == "3 of 8 rows never written (rows 5..7)"
    got = want.astype(np.float32)
    scattered = [(0, 1), (2, 2), (7, 5)]
    for at in scattered:
        _set_bits(got, at, POISON_BITS)
    found = _diagnose(got, want)
    assert found[0].code == "unwritten_elements"
    assert found[0].message == f"{len(scattered)} of 48 elements never written"
    got = want.astype(np.float32)
    _set_bits(got, slice(None), POISON_BITS)
    assert _diagnose(got, want)[0].message == "none of the 48 elements was written"


def test_values_not_finite_and_the_fill_of_shared_memory_are_each_counted_as_what_they_are():
    want = np.linspace(-1, 1, 60).reshape(6, 10)
    got = want.astype(np.float32)
    got[0, :4] = np.inf
    got[1, :2] = -np.inf
    got[2, :3] = np.nan
    _set_bits(got, (slice(None), 9), POISON_BITS)                     # column 9 never written
    found = _diagnose(got, want)
    nan = next(d for d in found if d.code == "nan_output")
    assert nan.message == ("of the 54 elements written, 3 are NaN, 4 are +infinity and 2 are -infinity where the "
                           "reference is finite")
    _set_bits(got, (3, slice(0, 5)), SHARED_POISON_BITS)
    _set_bits(got, (4, 0), SHARED_POISON_BITS | 0x80000000)
    shared = next(d for d in _diagnose(got, want) if d.code == "reads_unwritten_shared")
    assert shared.message.startswith("6 of the 54 elements written are the NaN the emulator fills shared memory with")
    assert "(3 more NaN otherwise)" in shared.message


def _check(order_exact: bool, kind: str, **frame) -> _CaseCheck:
    rubric = load_exercise("gelu_sum")
    judging = SimpleNamespace(rubric=SimpleNamespace(checks=SimpleNamespace(order_exact=order_exact)))
    h = CaseFrame("case", ok=True, second_kind=kind, **frame)
    cr = CaseResult("case", [2, 3, 4], "random", 1, True)
    return _CaseCheck(judging, SimpleNamespace(name="case"), h, cr, CaseOutcome([cr], []),
                      {t.name: t for t in rubric.tensors})


def test_the_outputs_that_changed_between_two_runs_are_counted():
    """gelu_sum (sums in any order): the parent counts the elements beyond the tolerance; an exercise
    judged bit for bit: the child's count of the 32-bit words that differ (count_differences)."""
    values = {"R": 2, "B": 3, "D": 4}
    want = np.linspace(0.5, 2.0, 12).reshape(3, 4)
    first = want.astype(np.float32).ravel()
    second = first.copy()
    second[[0, 5, 7]] += 1.0                                  # beyond the tolerance
    second[9] = np.nextafter(second[9], np.float32(10))       # a last bit: within it
    ref = SimpleNamespace(want={"out": want}, rtol=TOL["rtol"], atol=TOL["atol"], prepared={"out": None})
    check = _check(False, "repeat")
    check.second_run([("out", first, 0, 12)], [("out", second, 0, 12)], ref, values)
    (said,) = [d.message for d in check.out.diagnoses]
    assert said == ("3 of 12 output values changed when the same launch ran a second time (beyond the tolerance): "
                    "a race on the output")
    differ = count_differences(first.tobytes(), second.tobytes())
    assert differ == 4
    check = _check(True, "reverse", second_differs=True, second_diff_count=differ)
    check.second_run([], [], ref, values)
    (said,) = [d.message for d in check.out.diagnoses]
    assert said == "4 output floats changed when blocks and threads ran in reverse order"
