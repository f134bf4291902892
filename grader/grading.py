"""Grading one submission: scan, build, run in a child, check, time, tier.

The one entry point is grade_submission(); it returns a Result whatever the
student's code does. It raises only the grader's own errors (errors.py):
a missing file, a bad rubric, a machine without the tools.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

import torch

from grader import __version__, gpuinfo
from grader.build import BuildResult, build_reference, build_submission
from grader.cases import Case, make_inputs, plan_cases, timed_cases
from grader.checking import compare, read_guards
from grader.diagnosis import Diagnosis, diagnose
from grader.errors import InfrastructureError, UsageError
from grader.reference_math import bias_gelu, chain
from grader.results import CaseResult, CopyTiming, DiagnosisEntry, Result, TimingResult
from grader.rubric import Rubric
from grader.sandbox import ChildRun, run_worker
from grader.source import (Submission, SourceProblem, emulator_blockers, missing_kernel_message, read_submission,
                           signature_problem)
from grader.stats import fraction_interval, median

Progress = Callable[[str], None]
BACKENDS = ("auto", "cuda", "emulator")


def grade_submission(path: str | Path, *, rubric: Rubric, backend: str = "auto",
                     progress: Progress | None = None) -> Result:
    """Grade the .cu file at path against rubric on backend ('auto', 'cuda' or 'emulator')."""
    started = time.perf_counter()
    say = progress or (lambda _msg: None)
    p = Path(path)
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if not p.is_file():
        raise UsageError(f"{path}: no such file")
    has_gpu = gpuinfo.cuda_available() if backend != "emulator" else False
    chosen = "emulator" if backend == "emulator" or (backend == "auto" and not has_gpu) else "cuda"

    result = Result(exercise=rubric.exercise, submission={"path": str(path), "sha256": None}, backend=chosen,
                    status="graded", grader_version=__version__)
    try:
        _grade(p, rubric, chosen, has_gpu, result, say)
    finally:
        result.seconds = round(time.perf_counter() - started, 3)
    return result


def _grade(p: Path, rubric: Rubric, backend: str, has_gpu: bool, result: Result, say: Progress) -> None:
    scanned = read_submission(p, rubric.kernel.launcher)
    if isinstance(scanned, SourceProblem):
        _stop(result, "rejected", scanned.message)
        return
    sub: Submission = scanned
    result.submission["sha256"] = sub.sha256
    kernel = sub.kernel(rubric.kernel.name)
    if kernel is None:
        _stop(result, "rejected", missing_kernel_message(sub, rubric.kernel.name, rubric.kernel.signature))
        return
    if not sub.has_launcher:
        problem = signature_problem(kernel)
        if problem:
            _stop(result, "rejected", problem)
            return
    if backend == "emulator":
        blockers = emulator_blockers(sub)
        if blockers:
            b = blockers[0]
            _stop(result, "rejected",
                  f"{p.name}:{b.line}: {b.what}: the CPU emulator cannot run this, so this check needs a GPU; "
                  "run `grader submit` on a machine with an NVIDIA GPU.")
            return

    arch = gpuinfo.arch() if backend == "cuda" and has_gpu else os.environ.get("GRADER_CUDA_ARCH", "sm_90")
    if backend == "emulator" and shutil.which("nvcc"):
        # nvcc judges the CUDA; g++ would accept host-only code in a kernel and miss CUDA's own errors.
        say(f"compiling {p.name} with nvcc ({arch}) to check it as CUDA")
        nvcc_build = build_submission(sub, rubric, backend="cuda", arch=arch)
        if not nvcc_build.ok:
            result.build = _build_summary(nvcc_build)
            _stop(result, "compile_error", _compile_message(nvcc_build, p))
            return
    say(f"building {p.name} for {'the GPU (' + arch + ')' if backend == 'cuda' else 'the CPU emulator'}")
    build = build_submission(sub, rubric, backend=backend, arch=arch)
    result.build = _build_summary(build)
    if not build.ok:
        _stop(result, "compile_error", _compile_message(build, p))
        return
    if backend == "cuda" and not has_gpu:
        raise InfrastructureError(
            f"{p.name} compiled for {arch}, but grading on the cuda backend needs an NVIDIA GPU and none is "
            "visible. Run on a GPU machine, or use --backend emulator to check correctness on the CPU.")
    reference = build_reference(backend=backend, arch=arch)

    cases = plan_cases(rubric)
    timed = timed_cases(rubric)
    job = {
        "backend": backend,
        "library": str(build.library),
        "reference_library": str(reference.library),
        "cases": [c.to_dict() for c in cases],
        "guard_floats": rubric.checks.guard_floats,
        "reverse_check": backend == "emulator" and rubric.emulator.reverse_order_check,
    }
    if backend == "cuda":
        job["timing"] = {
            "floor": rubric.timing.floor, "informational_floor": rubric.timing.informational_floor,
            "warmup": rubric.timing.warmup, "min_samples": rubric.timing.min_samples,
            "max_samples": rubric.timing.max_samples, "target_half_width": rubric.timing.target_half_width,
            "budget_s": rubric.timing.budget_s,
        }
        job["timed_cases"] = [c.to_dict() for c in timed]
        result.device["before"] = gpuinfo.snapshot()
    elif rubric.emulator.verify_timed_shape:
        timed = timed[:1]
        job["verify_cases"] = [c.to_dict() for c in timed]
    else:
        timed = []

    say(f"running {len(cases)} checks{' and the timing' if backend == 'cuda' else ''} in a child process")
    run = run_worker(job, time_limit_s=rubric.limits.time_limit_s, output_cap=rubric.limits.output_cap_bytes)
    if backend == "cuda":
        result.device["after"] = gpuinfo.snapshot()
    result.output = {"stdout": run.stdout.text(), "stderr": run.stderr.text(),
                     "stdout_bytes": run.stdout.total, "stderr_bytes": run.stderr.total,
                     "dropped_bytes": run.stdout.dropped + run.stderr.dropped}
    _read_run(run, cases + timed, rubric, build, p, result)
    result.device.setdefault("nvcc" if backend == "cuda" else "compiler", build.compiler)


def _stop(result: Result, status: str, message: str) -> None:
    result.status = status
    result.message = message
    result.correct = None


def _build_summary(build: BuildResult) -> dict:
    return {
        "ok": build.ok, "cached": build.cached, "seconds": round(build.seconds, 3), "compiler": build.compiler,
        "resources": [vars(r) for r in build.resources],
        "messages": [vars(m) for m in build.messages],
    }


def _compile_message(build: BuildResult, p: Path) -> str:
    errors = [m for m in build.messages if m.severity == "error"]
    if not errors:
        return f"{p.name} did not compile:\n{build.log.strip()[-4000:]}"
    lines = p.read_text(errors="replace").splitlines()
    out = []
    for m in errors[:10]:
        loc = f"{m.file}:{m.line}" if m.line else m.file
        out.append(f"{loc}: error: {m.text}")
        if m.in_submission and m.line and 0 < m.line <= len(lines):
            out.append(f"    {m.line} | {lines[m.line - 1].rstrip()}")
    if len(errors) > 10:
        out.append(f"... and {len(errors) - 10} more errors")
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Reading the child's results
# ---------------------------------------------------------------------------


def _read_run(run: ChildRun, cases: list[Case], rubric: Rubric, build: BuildResult, p: Path, result: Result) -> None:
    by_name = {c.name: c for c in cases}
    seen: set[str] = set()
    timing_frame = None
    fatal = None
    done = False
    for frame in run.frames:
        h = frame.header
        kind = h.get("type")
        if kind == "case" and h.get("case") in by_name:
            case = by_name[h["case"]]
            seen.add(case.name)
            _check_case(case, h, frame.payload, rubric, build, p, result)
        elif kind == "timing":
            timing_frame = h
        elif kind == "fatal":
            fatal = h
        elif kind == "done":
            done = True
    for case in cases:
        if case.name not in seen:
            result.cases.append(CaseResult(case.name, [case.rows, case.cols], case.pattern, case.seed, None,
                                           note="not run", kind="timed" if case.timed else "check"))

    crashed_frame = next((c for c in result.cases if c.note.startswith("crashed:")), None)
    if run.timed_out:
        _stop(result, "timeout", f"the submission did not finish within {rubric.limits.time_limit_s:g} s "
              "(an endless loop, or a kernel far too slow); the run was stopped.")
    elif crashed_frame is not None:
        _stop(result, "crashed", crashed_frame.note.removeprefix("crashed: "))
    elif fatal is not None:
        stage = fatal.get("stage", "")
        _stop(result, "crashed" if stage != "load" else "infrastructure_error",
              f"{fatal.get('error', 'the child process failed')}" + (f" (during {stage})" if stage else ""))
        if stage == "load":
            result.status = "crashed" if "undefined symbol" in fatal.get("error", "") else "infrastructure_error"
    elif not done:
        how = f"killed by {run.signal_name}" if run.signal_name else f"exit status {run.returncode}"
        problem = f"; {run.stream_problem}" if run.stream_problem else ""
        _stop(result, "crashed", f"the grading process died ({how}){problem} before finishing.")
    else:
        checked = [c for c in result.cases if c.passed is not None]
        result.correct = bool(checked) and all(c.passed for c in checked) and not any(
            c.passed is None for c in result.cases)

    if result.status == "graded" and timing_frame is not None:
        _timing(timing_frame, rubric, result)
    if result.status == "graded":
        if result.correct and result.timing is not None:
            _tier(result, rubric)
        elif result.correct:
            result.feedback = rubric.feedback.no_gpu
        else:
            result.feedback = "Fix correctness first: only a correct kernel is timed against the floor and gets a tier."
    for d in result.diagnosis:
        d.advice = rubric.feedback.diagnosis.get(d.code, "")


def _check_case(case: Case, h: dict, payload: bytes, rubric: Rubric, build: BuildResult, p: Path, result: Result) -> None:
    kind = "timed" if case.timed else "check"
    cr = CaseResult(case.name, [case.rows, case.cols], case.pattern, case.seed, None, kind=kind)
    result.cases.append(cr)
    if not h.get("ok"):
        fault = h.get("fault")
        if fault:
            where = _source_line(build, fault.get("pc_offset"), p)
            if fault.get("buffer"):
                code = "writes_past_output" if fault["buffer"] in ("out", "chain") and fault["where"] == "past" else (
                    "writes_before_output" if fault["buffer"] in ("out", "chain") else "reads_past_input")
                verb = "wrote" if fault.get("is_write") == 1 else "read"
                msg = f"{verb} {fault['where']} the end of {fault['buffer']}" if fault["where"] == "past" else \
                    f"{verb} before the start of {fault['buffer']}"
                cr.passed = False
                cr.note = f"the kernel {msg}{where}"
                _add_diag(result, Diagnosis(code, f"{msg}{where}", case.name))
                return
            sig = {11: "SIGSEGV", 7: "SIGBUS", 8: "SIGFPE"}.get(fault.get("signal"), "")
            if fault.get("signal") == -1:
                cr.note = f"crashed: {fault.get('message')}{where}"
            elif sig == "SIGFPE":
                cr.note = f"crashed: arithmetic fault (integer division by zero?){where}"
            else:
                cr.note = (f"crashed: the kernel accessed address {fault.get('address', 0):#x}, outside every buffer "
                           f"({sig or 'fault'}): a wild pointer{where}")
            return
        if h.get("fatal"):
            cr.note = f"crashed: {h.get('error')}"
            return
        cr.passed = False
        cr.note = h.get("error", "launch failed")
        _add_diag(result, Diagnosis("launch_error", cr.note, case.name))
        return

    pad = rubric.checks.guard_floats
    n = case.elements
    full_floats = h.get("full_floats", n + 2 * pad)
    full = torch.frombuffer(bytearray(payload[: full_floats * 4]), dtype=torch.float32)
    pad_here = (full_floats - n) // 2
    got = full[pad_here : pad_here + n].view(case.rows, case.cols)
    x, bias, r = make_inputs(case)
    want = bias_gelu(x, bias)
    tol = rubric.tolerance
    cmp = compare(got, want, rtol=tol.rtol, atol=tol.atol)
    guards = read_guards(full, pad_here, n)
    cr.bad, cr.total, cr.unwritten = cmp.bad, cmp.total, cmp.unwritten
    cr.max_abs_error, cr.max_rel_error = cmp.max_abs_error, cmp.max_rel_error
    if cmp.first:
        cr.first_mismatch = vars(cmp.first)
    cr.passed = cmp.passed and not guards.damaged
    if not cr.passed and not (case.timed and result.diagnosis):     # the small cases already named it
        for d in diagnose(got, want, x, bias, cmp, guards, rtol=tol.rtol, atol=tol.atol):
            d.case = case.name
            _add_diag(result, d)
    if h.get("reverse_differs"):
        cr.passed = False
        _add_diag(result, Diagnosis("order_dependent",
                                    f"{h.get('reverse_diff_count', '?')} output floats changed when blocks and threads "
                                    "ran in reverse order", case.name))
    if h.get("chain_bytes") and r is not None:
        chain_got = torch.frombuffer(bytearray(payload[full_floats * 4 :]), dtype=torch.float32).view(case.rows, case.cols)
        ccmp = compare(chain_got, chain(x, bias, r), rtol=tol.rtol, atol=tol.atol)
        chain_case = CaseResult(f"chain {case.rows}x{case.cols} (submission + addResidual)", [case.rows, case.cols],
                                case.pattern, case.seed, ccmp.passed, ccmp.bad, ccmp.total, ccmp.unwritten,
                                vars(ccmp.first) if ccmp.first else None, ccmp.max_abs_error, ccmp.max_rel_error,
                                kind="chain")
        result.cases.append(chain_case)


def _add_diag(result: Result, d: Diagnosis) -> None:
    if any(e.code == d.code for e in result.diagnosis):
        return                                     # the first case that shows a mistake describes it
    result.diagnosis.append(DiagnosisEntry(d.code, d.message, "", d.case))


def _source_line(build: BuildResult, pc_offset: int | None, p: Path) -> str:
    if not pc_offset or build.library is None or shutil.which("addr2line") is None:
        return ""
    try:
        out = subprocess.run(["addr2line", "-e", str(build.library), "-i", hex(pc_offset)], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for line in out.splitlines():
        file, _, num = line.rpartition(":")
        num = num.split()[0] if num else ""
        if file.endswith("submission.cu") and num.isdigit():
            return f" at {p.name}:{num}"
    return ""


# ---------------------------------------------------------------------------
# Timing and the tier
# ---------------------------------------------------------------------------


def _timing(frame: dict, rubric: Rubric, result: Result) -> None:
    t = rubric.timing
    samples: dict[str, list[float]] = frame["samples_ms"]
    n = t.shape.rows * t.shape.cols
    nbytes = int(t.floats_per_element * 4 * n)

    def gbps(ms: float, floats: float = t.floats_per_element) -> float:
        return floats * 4 * n / (ms * 1e-3) / 1e9

    copies = [CopyTiming(k, median(samples[k]), gbps(median(samples[k]), 2.0)) for k in samples
              if k not in ("submission", "chain")]
    floor = min((c for c in copies if c.kind in t.floor), key=lambda c: c.median_ms)
    sub_ms = median(samples["submission"])
    interval = fraction_interval(samples[floor.kind], samples["submission"], resamples=t.bootstrap)
    info = next(c for c in copies if c.kind == t.informational_floor)
    chain_ms = median(samples["chain"]) if samples.get("chain") else None
    # The fraction is a ratio of GB/s on each kernel's own byte count; with the
    # same 2 floats per element on both sides it is the ratio of the times.
    scale = t.floats_per_element / 2.0
    result.timing = TimingResult(
        shape=[t.shape.rows, t.shape.cols], floats_per_element=t.floats_per_element, bytes_moved=nbytes,
        samples=len(samples["submission"]), stop_reason=frame.get("stop_reason", ""), seconds=frame.get("seconds", 0.0),
        submission_ms=sub_ms, submission_gbps=gbps(sub_ms), floor_kind=floor.kind, floor_gbps=floor.gbps,
        copies=copies, fraction=interval.median * scale, fraction_ci=[interval.low * scale, interval.high * scale],
        informational_kind=info.kind, informational_fraction=info.median_ms / sub_ms * scale,
        chain_ms=chain_ms, chain_gbps=gbps(chain_ms, t.chain_floats_per_element) if chain_ms else None,
        chain_floats_per_element=t.chain_floats_per_element,
    )
    result.fraction = result.timing.fraction
    result.fraction_ci = result.timing.fraction_ci
    result.gbps = result.timing.submission_gbps
    result.floor = {"kind": floor.kind, "gbps": floor.gbps, "copies": {c.kind: c.gbps for c in copies}}
    result.device.update(frame.get("device", {}))


def assign_tier(fraction: float, low: float, high: float, rubric: Rubric) -> tuple[str, bool, list[str]]:
    """(tier, borderline, flags) for a correct kernel's fraction and its 95% interval."""
    tiers = rubric.tiers
    if low > 1.0:
        return tiers.exceeds_floor_tier, False, ["exceeds_copy_floor"]
    value = {"median": fraction, "lower": low, "upper": high}[tiers.borderline_policy]
    borderline = any(low < threshold <= high for threshold in (tiers.gold, tiers.silver))
    tier = "gold" if value >= tiers.gold else "silver" if value >= tiers.silver else "below"
    return tier, borderline, []


def _tier(result: Result, rubric: Rubric) -> None:
    assert result.timing is not None
    tier, borderline, flags = assign_tier(result.timing.fraction, *result.timing.fraction_ci, rubric)
    result.tier, result.borderline = tier, borderline
    result.flags.extend(flags)
    text = rubric.feedback.tiers.get(tier, "")
    if "exceeds_copy_floor" in flags:
        text = (f"Measured faster than the best copy of the same bytes (interval {result.timing.fraction_ci[0]:.3f} to "
                f"{result.timing.fraction_ci[1]:.3f}): a kernel that reads and writes what a copy does cannot beat it, "
                "so this is skipped work, caching or a timing escape, and it gets no gold. " + text)
    result.feedback = text
