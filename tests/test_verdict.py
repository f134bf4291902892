"""Judging the child's frames, without a GPU: synthetic frames for a small timed shape."""

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from grader.run import protocol
from grader.toolchain.outcome import BuildResult
from grader.core.checking import GUARD_BITS
from grader.exercises import load_reference
from grader.core.locations import cache_root
from grader.exercises.data import materialize
from grader.exercises.plan import plan_cases, timed_cases
from grader.core.results import Result
from grader.exercises.rubric import CaseSpec
from grader.run.sandbox import CappedOutput, ChildRun
from grader.verdict import expected_for


def small(rubric):
    cases = [CaseSpec(dims={"rows": 3, "cols": 5}, inputs="lesson", seeded=False, chain=True),
             CaseSpec(dims={"rows": 3, "cols": 5})]
    return dataclasses.replace(rubric, checks=dataclasses.replace(rubric.checks, cases=cases, seeds=[1], guard_floats=8),
                               timing=dataclasses.replace(rubric.timing, dims={"rows": 16, "cols": 32}))


def reference_for(case, rubric):
    reference = load_reference(rubric)
    return expected_for(case, rubric, reference, materialize(rubric, reference, case, cache_root()), cache_root())


def read_run(run, cases, refs, rubric, build, path, result):
    """The verdict step and its assembly into result, as the pipeline does them."""
    from grader.core.backend import named
    from grader.grade.pipeline import take_verdict
    from grader.verdict import Judging, judge_run

    take_verdict(result, judge_run(run, cases, refs, Judging(rubric, load_reference(rubric), build, scanned(path),
                                                             named(result.backend))))


def scanned(path):
    """The file as the pipeline scans it (a made-up name: an empty kernel file of that name)."""
    from grader.core.source import Submission, blank_comments_and_strings

    text = path.read_text() if path.is_file() else ""
    return Submission(path=path, text=text, sha256="", code=blank_comments_and_strings(text))


def output_frame(case, ref, pad, corrupt=False, past=False):
    guard = np.full(pad, GUARD_BITS, dtype=np.uint32).view(np.float32)
    header = {"type": "case", "case": case.name, "ok": True, "outputs": []}
    payload = b""
    for name, want in ref.want.items():
        got = want.astype(np.float32).reshape(-1)
        if corrupt and name == "out":
            got[3] += 1.0
        after = guard.copy()
        if past and name == "out":
            after[:2] = 1.0                    # written past the end: the guard after the output changed
        payload += np.concatenate([guard, got, after]).tobytes()
        header["outputs"].append({"name": name, "floats": got.size, "pad": pad})
    return protocol.Frame(header, payload)


def judge(rubric, frames_for, timing, backend="cuda", chain_timed=False, path=Path("k.cu")):
    cases, timed = plan_cases(rubric), timed_cases(rubric, chain=chain_timed)
    with ThreadPoolExecutor(2) as pool:
        refs = {c.name: pool.submit(reference_for, c, rubric) for c in cases + timed}
        frames = [protocol.Frame({"type": "hello"}, b"")]
        frames += [f for c in cases + timed for f in frames_for(c, refs[c.name].result())]
        frames += [protocol.Frame(timing, b""), protocol.Frame({"type": "done"}, b"")]
        run = ChildRun(frames, 0, False, 1.0, CappedOutput(64), CappedOutput(64))
        result = Result(exercise="e", submission={}, backend=backend, status="graded", grader_version="0")
        build = BuildResult(True, None, None, True, 0.0, "")
        read_run(run, cases + timed, refs, rubric, build, path, result)
    return result


def timing_frame(sub_ms, **extra):
    return {"type": "timing", "samples_ms": {"submission": sub_ms, "copy_scalar": [0.055] * len(sub_ms),
                                            "copy_vec4": [0.036] * len(sub_ms), "memcpy": [0.037] * len(sub_ms)},
            "stop_reason": "converged", "seconds": 0.1, "device": {"name": "test"}, **extra}


def test_correct_frames_give_a_tier(rubric):
    r = small(rubric)
    result = judge(r, lambda c, ref: [output_frame(c, ref, r.checks.guard_floats)], timing_frame([0.0375] * 60))
    assert result.correct is True and result.tier == "gold" and abs(result.fraction - 0.96) < 0.001
    assert any(c.kind == "chain" and c.passed for c in result.cases)
    assert len([c for c in result.cases if c.kind == "timed" and c.passed]) == 2


def test_a_timed_set_that_carries_the_chain_to_time_it_is_no_failed_chain_check(rubric):
    """On a GPU the timed sets carry the chain (timed beside the kernel) and send back only the
    kernel's output: no chain row is added for them, and a correct kernel stays correct (a chain
    row 'not run' is for a check whose own launch failed)."""
    r = small(rubric)

    def frames(c, ref):
        f = output_frame(c, ref, r.checks.guard_floats)
        if c.timed:                       # the kernel's output alone, as the timing child sends it
            keep = [o for o in f.header["outputs"] if o["name"] == "out"]
            size = (keep[0]["floats"] + 2 * keep[0]["pad"]) * 4
            f = protocol.Frame({**f.header, "outputs": keep}, f.payload[:size])
        return [f]

    result = judge(r, frames, timing_frame([0.0375] * 60), chain_timed=True)
    assert result.correct is True and result.tier == "gold"
    assert [c.passed for c in result.cases if c.kind == "chain"] == [True]


def test_a_failed_launch_still_counts_its_chain_check_as_not_run(rubric):
    r = small(rubric)

    def frames(c, ref):
        if c.chain and not c.timed:
            return [protocol.Frame({"type": "case", "case": c.name, "ok": False, "error": "invalid argument",
                                    "outputs": []}, b"")]
        return [output_frame(c, ref, r.checks.guard_floats)]

    result = judge(r, frames, timing_frame([0.0375] * 60))
    assert result.correct is False
    chain = [c for c in result.cases if c.kind == "chain"]
    assert len(chain) == 1 and chain[0].note.startswith("not run: the kernel's own launch")


@pytest.mark.parametrize("sample, code", [("row_stride_blockdim.cu", "row_stride"), ("col_stride_sizeof.cu", "col_stride")])
def test_writes_past_the_output_on_a_gpu_name_the_files_index_stride(rubric, sample, code):
    """On a GPU a wrong stride's writes land in the guards (no fault): the outputs show an access
    past the end, and the file's stride, with its line, is the one diagnosis."""
    r = small(rubric)
    path = Path(__file__).resolve().parent.parent / "submissions" / "bias_gelu_fused" / sample
    result = judge(r, lambda c, ref: [output_frame(c, ref, r.checks.guard_floats, past=True)],
                   timing_frame([0.0375] * 60), path=path)
    assert result.correct is False
    assert [d.code for d in result.diagnosis] == [code]
    assert "line 10 (`" in result.diagnosis[0].message and result.diagnosis[0].advice


def test_writes_past_the_output_in_a_file_with_a_right_index_stay_writes_past_output(rubric, tmp_path):
    r = small(rubric)
    path = Path(__file__).resolve().parent.parent / "submissions" / "bias_gelu_fused" / "scalar_2d.cu"
    result = judge(r, lambda c, ref: [output_frame(c, ref, r.checks.guard_floats, past=True)],
                   timing_frame([0.0375] * 60), path=path)
    assert "writes_past_output" in [d.code for d in result.diagnosis]


def test_a_wrong_timed_set_makes_it_incorrect_and_untiered(rubric):
    r = small(rubric)
    result = judge(r, lambda c, ref: [output_frame(c, ref, r.checks.guard_floats, corrupt=c.timed and c.seed == 1001)],
                   timing_frame([0.001] * 60))
    assert result.correct is False and result.tier is None
    bad = [c for c in result.cases if c.passed is False]
    assert [c.name for c in bad] == [timed_cases(r)[1].name]
    assert bad[0].first_mismatch["at"] == "out[row 0][col 3]"


def test_too_slow_kernel_is_graded_from_one_launch(rubric):
    r = small(rubric)
    skipped = timed_cases(r)[1].name

    def frames(c, ref):
        return [] if c.name == skipped else [output_frame(c, ref, r.checks.guard_floats)]

    result = judge(r, frames, timing_frame([15000.0], stop_reason="too_slow", skipped=[skipped]))
    assert result.status == "graded" and result.correct is True and result.tier == "below"
    assert result.timing.samples == 1 and result.fraction < 0.01
    (s,) = [c for c in result.cases if c.name == skipped]
    assert s.passed is None and s.note.startswith("skipped")


def test_a_kernel_too_slow_to_finish_one_timed_launch_is_graded_below(rubric):
    r = small(rubric)
    cases, timed = plan_cases(r), timed_cases(r)
    with ThreadPoolExecutor(2) as pool:
        refs = {c.name: pool.submit(reference_for, c, r) for c in cases + timed}
        frames = [protocol.Frame({"type": "hello"}, b"")]
        frames += [output_frame(c, refs[c.name].result(), r.checks.guard_floats) for c in cases]
        run = ChildRun(frames, -9, True, 60.0, CappedOutput(64), CappedOutput(64))   # killed in the timing
        result = Result(exercise="e", submission={}, backend="cuda", status="graded", grader_version="0")
        read_run(run, cases + timed, refs, r, BuildResult(True, None, None, True, 0.0, ""), Path("k.cu"), result)
    assert (result.status, result.correct, result.tier) == ("graded", True, "below")
    assert result.flags == ["too_slow_to_time"] and result.exit_code == 0
    assert all(c.note.startswith("skipped") for c in result.cases if c.kind == "timed")


def test_a_timeout_during_the_checks_stays_a_timeout(rubric):
    r = small(rubric)
    cases, timed = plan_cases(r), timed_cases(r)
    with ThreadPoolExecutor(2) as pool:
        refs = {c.name: pool.submit(reference_for, c, r) for c in cases + timed}
        frames = [output_frame(c, refs[c.name].result(), r.checks.guard_floats) for c in cases[:1]]
        run = ChildRun(frames, -9, True, 60.0, CappedOutput(64), CappedOutput(64))
        result = Result(exercise="e", submission={}, backend="cuda", status="graded", grader_version="0")
        read_run(run, cases + timed, refs, r, BuildResult(True, None, None, True, 0.0, ""), Path("k.cu"), result)
    assert result.status == "timeout" and result.tier is None and result.exit_code == 3


def test_a_fault_only_in_the_reverse_order_run_is_order_dependent(rubric):
    r = small(rubric)

    def frames(c, ref):
        f = output_frame(c, ref, r.checks.guard_floats)
        if c.inputs == "lesson":
            f.header.update(second_kind="reverse", second_error="fault",
                            second_fault={"buffer": "bias", "where": "past", "is_write": 0})
        return [f]

    result = judge(r, frames, timing_frame([0.0375] * 60))
    assert result.correct is False and result.tier is None
    (d,) = result.diagnosis
    assert d.code == "order_dependent" and "read past the end of bias" in d.message and d.advice


def _judge_with_sandbox(rubric, sandbox):
    """A correct, timed run whose hello frame reports these protections."""
    r = small(rubric)
    cases, timed = plan_cases(r), timed_cases(r)
    with ThreadPoolExecutor(2) as pool:
        refs = {c.name: pool.submit(reference_for, c, r) for c in cases + timed}
        frames = [protocol.Frame({"type": "hello", "sandbox": sandbox}, b"")]
        frames += [output_frame(c, refs[c.name].result(), r.checks.guard_floats) for c in cases + timed]
        frames += [protocol.Frame(timing_frame([0.04] * 60), b""), protocol.Frame({"type": "done"}, b"")]
        run = ChildRun(frames, 0, False, 1.0, CappedOutput(64), CappedOutput(64))
        result = Result(exercise="e", submission={"path": "k.cu", "sha256": None}, backend="cuda", status="graded",
                        grader_version="0")
        read_run(run, cases + timed, refs, r, BuildResult(True, None, None, True, 0.0, ""), Path("k.cu"), result)
    return result


# A child behind the file-system wall as well (a child that says nothing of its reads is noted as unconfined)
WALLED = {"reads_confined": True, "reads_detail": "Landlock ABI 7"}


def test_a_missing_filter_is_graded_with_a_warning_unless_the_rubric_requires_it(rubric):
    from grader.report.files import notices, render_markdown

    off = {"seccomp": False, "seccomp_detail": "seccomp is unavailable here (seccomp failed: Invalid argument)"}
    graded = _judge_with_sandbox(rubric, off)
    assert graded.status == "graded" and graded.correct
    assert any("not in force" in n for n in notices(graded))
    assert "no seccomp filter" in render_markdown(graded, rubric)
    strict = dataclasses.replace(rubric, limits=dataclasses.replace(rubric.limits, require_seccomp=True))
    refused = _judge_with_sandbox(strict, off)
    assert refused.status == "infrastructure_error" and "require_seccomp" in refused.message
    on = _judge_with_sandbox(strict, {"seccomp": True, "seccomp_detail": "seccomp filter", **WALLED})
    assert on.status == "graded" and notices(on) == []


def test_a_gpu_mostly_held_by_another_process_is_noted(rubric):
    from grader.report.files import notices

    busy = _judge_with_sandbox(rubric, {"seccomp": True, "gpu_memory_free_bytes": 20 << 30,
                                        "gpu_memory_total_bytes": 140 << 30})
    assert any("Another process held 120 GiB" in n for n in notices(busy))
    idle = _judge_with_sandbox(rubric, {"seccomp": True, "gpu_memory_free_bytes": 139 << 30,
                                        "gpu_memory_total_bytes": 140 << 30, **WALLED})
    assert notices(idle) == []


def test_the_speedup_over_the_pytorch_baseline_is_reported_at_every_shape():
    from grader.exercises import load_exercise
    from grader.report.files import render_markdown, render_text

    full = load_exercise("gelu_sum")
    r = dataclasses.replace(full, checks=dataclasses.replace(full.checks, cases=full.checks.cases[:2], seeds=[1],
                                                             guard_floats=8),
                            timing=dataclasses.replace(full.timing, dims={"R": 2, "B": 4, "D": 8}))
    frame = timing_frame([0.040] * 60)
    frame["samples_ms"]["baseline"] = [0.080] * 60
    frame["baseline_max_abs_diff"] = 2.5e-7
    extra = protocol.Frame({"type": "baseline_timing", "case": "baseline 4x14x40",
                            "samples_ms": {"submission": [0.004] * 9, "baseline": [0.010] * 9}}, b"")
    cases, timed = plan_cases(r), timed_cases(r)
    with ThreadPoolExecutor(2) as pool:
        refs = {c.name: pool.submit(reference_for, c, r) for c in cases + timed}
        frames = [protocol.Frame({"type": "hello"}, b"")]
        frames += [output_frame(c, refs[c.name].result(), r.checks.guard_floats) for c in cases + timed]
        frames += [protocol.Frame(frame, b""), extra, protocol.Frame({"type": "done"}, b"")]
        run = ChildRun(frames, 0, False, 1.0, CappedOutput(64), CappedOutput(64))
        result = Result(exercise="gelu_sum", submission={"path": "k.cu", "sha256": None}, backend="cuda",
                        status="graded", grader_version="0")
        read_run(run, cases + timed, refs, r, BuildResult(True, None, None, True, 0.0, ""), Path("k.cu"), result)
    assert result.correct is True
    (at_timed, tiny) = result.timing.baselines
    assert at_timed.shape == [2, 4, 8] and abs(at_timed.speedup - 2.0) < 1e-9
    assert tiny.shape == [4, 14, 40] and abs(tiny.speedup - 2.5) < 1e-9
    md = render_markdown(result, r)
    assert "Against PyTorch (`F.gelu(x).sum(0)`) in the same process: 2.00x faster at 2 x 4 x 8" in md
    assert "2.50x faster at 4 x 14 x 40" in md and "2.50e-07" in md
    assert "Against PyTorch" in render_text(result, r)


@pytest.mark.parametrize("forged", [None, [1, 2], "all on"])
def test_a_forged_hello_is_a_claim_of_nothing_not_an_internal_error(rubric, forged):
    """A hello frame whose sandbox is not a mapping (host code can forge frames in a child that runs
    it, the emulator's): nothing is claimed in force, and the run is judged as any other."""
    result = _judge_with_sandbox(rubric, forged)
    assert result.status == "graded" and result.correct, result.message
    assert result.sandbox is not None and result.sandbox.seccomp is False


def test_a_timing_frame_in_an_emulator_run_buys_nothing(rubric):
    """The emulator times nothing, and its child runs the submission's host code, which can sign a
    frame: a timing frame there (forged, at the floor's speed) gives no fraction and no tier."""
    r = small(rubric)
    frames = lambda c, ref: [output_frame(c, ref, r.checks.guard_floats)]    # noqa: E731
    on_gpu = judge(r, frames, timing_frame([0.0375] * 60))
    assert on_gpu.tier == "gold" and on_gpu.fraction > 0.9                     # the same frames, judged as timed
    forged = judge(r, frames, timing_frame([0.0375] * 60), backend="emulator")
    assert forged.correct is True and forged.tier is None and forged.fraction is None and forged.timing is None
    assert forged.floor is None and forged.device.name == ""


def test_take_verdict_puts_every_part_of_a_verdict_into_the_result_and_its_grade_only_where_it_did_not_stop():
    """pipeline.take_verdict writes each of the Verdict's parts into the Result by name (no field
    copied by reflection): the cases, maps, diagnosis, sandbox and flags always; the correctness,
    the tier, the timing and the fraction, its interval and GB/s (the timing's) only where the run
    did not stop the grade."""
    from types import SimpleNamespace

    from grader.core.results import CaseResult, DiagnosisEntry, FloorSummary, Result, SandboxSummary, Stop
    from grader.grade import pipeline
    from grader.verdict import Verdict

    def verdict(stop=None):
        timing = SimpleNamespace(fraction=0.9, fraction_ci=[0.88, 0.92], submission_gbps=3000.0)
        return Verdict(cases=[CaseResult("c", [1], "random", 1, True)], maps=[object()],
                       diagnosis=[DiagnosisEntry("tanh_gelu", "m", "a")], correct=True, stop=stop, timing=timing,
                       floor=FloorSummary("d2d", 3300.0), tier="gold", borderline=True, feedback="well done",
                       flags=["f"], sandbox=SandboxSummary(), device={"name": "GPU"})

    def fresh():
        return Result(exercise="e", submission={}, backend="cuda", status="graded", grader_version="0")

    graded, v = fresh(), verdict()
    pipeline.take_verdict(graded, v)
    assert (graded.cases, graded.maps, graded.diagnosis, graded.sandbox, graded.flags) == (
        v.cases, v.maps, v.diagnosis, v.sandbox, ["f"])
    assert (graded.correct, graded.tier, graded.borderline, graded.feedback, graded.timing, graded.floor) == (
        True, "gold", True, "well done", v.timing, v.floor)
    assert (graded.fraction, graded.fraction_ci, graded.gbps) == (0.9, [0.88, 0.92], 3000.0)
    assert graded.device.name == "" and graded.phases == {}      # the pipeline's: _device, grade/phases.py

    stopped, v = fresh(), verdict(Stop("crashed", "it crashed", flags=["blocked_by_sandbox"]))
    pipeline.take_verdict(stopped, v)
    assert stopped.status == "crashed" and stopped.message == "it crashed" and stopped.cases == v.cases
    assert stopped.sandbox is v.sandbox and stopped.flags == ["f", "blocked_by_sandbox"]
    assert (stopped.correct, stopped.tier, stopped.timing, stopped.fraction, stopped.floor) == (None,) * 5
