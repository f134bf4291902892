"""Judging what the grading child sent back: checks, diagnosis, timing statistics, tier.

Runs in the parent, which never loads student code: the float64 references are
computed here from the same inputs the child generated, and every frame the
child sent is treated as data.
"""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import torch

from grader import protocol
from grader.build import BuildResult
from grader.contract import (BaselineTimingFrame, CaseFrame, DoneFrame, FatalFrame, Fault, HelloFrame,
                             TimingFrame)
from grader.checking import Prepared, compare, prepare, read_guards
from grader.diagnosis import Diagnosis, diagnose
from grader.errors import ExerciseError
from grader.exercises import Reference as ExerciseReference
from grader.exercises import exprs
from grader.exercises.plan import Case, baseline_cases, shape_of, tensors_of
from grader.results import BaselineTiming, CaseResult, CopyTiming, DiagnosisEntry, Result, SourceNote, TimingResult
from grader.rubric import Rubric, dims_values
from grader.sandbox import ChildRun
from grader.stats import fraction_interval, median
from grader.tiers import assign_tier


@dataclass
class Expected:
    """A case's inputs and its float64 answers, with the tolerance at its dimensions."""

    inputs: dict[str, torch.Tensor]
    want: dict[str, torch.Tensor]
    prepared: dict[str, Prepared]
    rtol: float
    atol: float


def expected_for(case: Case, rubric: Rubric, reference: ExerciseReference, inputs: dict[str, torch.Tensor]) -> Expected:
    """The case's answers from the exercise's reference (computed in the parent while the child runs)."""
    want = reference.expected(inputs, dict(case.dims))
    for t in tensors_of(rubric, case):
        if t.role == "out" and t.name not in want:
            raise ExerciseError(f"{reference.folder / 'reference.py'}: expected() gave no {t.name!r} for {case.name}")
    scale = float(exprs.evaluate(rubric.tolerance.scale, dims_values(rubric, case.dims), integer=False))
    rtol, atol = rubric.tolerance.rtol * scale, rubric.tolerance.atol * scale
    want = {k: v.to(torch.float64) for k, v in want.items()}
    return Expected(inputs, want, {k: prepare(v.clone(), rtol=rtol, atol=atol) for k, v in want.items()}, rtol, atol)


# ---------------------------------------------------------------------------


def read_run(run: ChildRun, cases: list[Case], references: dict[str, "Future[Expected]"], rubric: Rubric,
             reference: ExerciseReference, build: BuildResult, p: Path, result: Result) -> None:
    by_name = {c.name: c for c in cases}
    seen: set[str] = set()
    timing_frame: TimingFrame | None = None
    baseline_frames: list[BaselineTimingFrame] = []
    fatal: FatalFrame | None = None
    done = False
    for frame in run.frames:
        h = frame.data
        if isinstance(h, CaseFrame) and h.case in by_name:
            case = by_name[h.case]
            seen.add(case.name)
            _check_case(case, h, frame.payload, references[case.name], rubric, reference, build, p, result)
        elif isinstance(h, TimingFrame):
            timing_frame = h
        elif isinstance(h, BaselineTimingFrame):
            baseline_frames.append(h)
        elif isinstance(h, FatalFrame):
            fatal = h
        elif isinstance(h, DoneFrame):
            done = True
            result.phases["child_done_t"] = round(h.t, 3)
        elif isinstance(h, HelloFrame):
            result.phases.update(child_ready_t=round(h.ready_t, 3), child_job_t=round(h.job_t, 3),
                                 child_hello_t=round(h.t, 3))
            result.sandbox.update(h.sandbox if isinstance(h.sandbox, dict) else {})
    skipped = set(timing_frame.skipped) if timing_frame else set()
    for case in cases:
        if case.name not in seen:
            note = ("skipped: one launch at the timed shape took longer than timing.slow_launch_s, so only set 0 "
                    "was run" if case.name in skipped else "not run")
            result.cases.append(CaseResult(case.name, list(case.dims.values()), case.inputs, case.seed, None,
                                           note=note, kind="timed" if case.timed else "check"))

    result.sandbox["peak_rss_mib"] = round(run.max_rss_kib / 1024)
    if _stopped_by_wall(run, fatal, rubric, result, str(p)):
        return
    crashed_frame = next((c for c in result.cases if c.note.startswith("crashed:")), None)
    checks = [c for c in result.cases if c.kind != "timed"]
    timed_only = (run.timed_out and fatal is None and timing_frame is None and checks
                  and all(c.passed for c in checks))
    if timed_only:
        # Every check passed; only the timed shape did not finish in the limit. Such a
        # kernel cannot be cheating for speed: it is graded, and on a GPU it is below
        # every threshold (the floor copies this shape in tens of microseconds).
        for c in result.cases:
            if c.kind == "timed" and c.passed is None:
                c.note = f"skipped: the launch at the timed shape did not finish within {rubric.limits.time_limit_s:g} s"
        result.correct = True
        result.flags.append("too_slow_to_time")
        if result.backend == "cuda":
            result.tier = "below"
        result.feedback = (f"Every correctness check passed, but one launch at the timed shape "
                           f"({' x '.join(str(v) for v in rubric.timing.dims.values())}) did not finish within {rubric.limits.time_limit_s:g} s, so it "
                           "could not be timed" + (" and is graded below." if result.backend == "cuda" else ".")
                           + " Look for what makes it slow: a printf from every thread costs minutes at this size.")
        for d in result.diagnosis:
            d.advice = rubric.feedback.diagnosis.get(d.code, "")
        return
    if run.timed_out:
        result.stop("timeout", f"the submission did not finish within {rubric.limits.time_limit_s:g} s "
              "(an endless loop, or a kernel far too slow); the run was stopped.")
    elif crashed_frame is not None:
        result.stop("crashed", crashed_frame.note.removeprefix("crashed: "))
    elif fatal is not None:
        stage = fatal.stage
        result.stop("crashed" if stage != "load" else "infrastructure_error",
                    f"{fatal.error or 'the child process failed'}" + (f" (during {stage})" if stage else ""))
        if stage == "load":
            result.status = "crashed" if "undefined symbol" in fatal.error else "infrastructure_error"
    elif not done:
        how = f"killed by {run.signal_name}" if run.signal_name else f"exit status {run.returncode}"
        problem = f"; {run.stream_problem}" if run.stream_problem else ""
        result.stop("crashed", f"the grading process died ({how}){problem} before finishing.")
    else:
        checked = [c for c in result.cases if c.passed is not None]
        result.correct = bool(checked) and all(c.passed for c in checked) and not any(
            c.passed is None and not c.note.startswith("skipped") for c in result.cases)

    if result.status == "graded" and timing_frame is not None:
        _timing(timing_frame, rubric, result, baseline_frames)
    if result.status == "graded":
        if result.correct and result.timing is not None:
            _tier(result, rubric)
        elif result.correct:
            result.feedback = rubric.feedback.no_gpu
        else:
            result.feedback = "Fix correctness first: only a correct kernel is timed against the floor and gets a tier."
    for d in result.diagnosis:
        d.advice = rubric.feedback.diagnosis.get(d.code, "")


_MEMORY_WORDS = ("MemoryError", "out of memory", "bad_alloc", "Cannot allocate memory")


def _stopped_by_wall(run: ChildRun, fatal: FatalFrame | None, rubric: Rubric, result: Result, p: str) -> bool:
    """What the sandbox stopped: a blocked system call, a forged result channel, the host-memory
    cap, a filter that could not be installed where the rubric requires one. True when the
    result was stopped here."""
    blocked = [b for b in run.blocked if b.action == "blocked"]
    audit = [b for b in run.blocked if b.action == "audit"]
    if audit:
        counts: dict[str, int] = {}
        for b in audit:
            counts[b.name] = counts.get(b.name, 0) + 1
        result.sandbox["audit"] = dict(sorted(counts.items()))
        result.sandbox["audit_open_paths"] = sorted({b.path for b in audit if b.path})[:200]
    if blocked:
        lines = list(dict.fromkeys(b.describe() for b in blocked))
        result.stop("rejected", "Stopped by the grader's sandbox: " + "; ".join(lines) + ". Nothing it attempted "
                    "happened. A submission computes in kernels and launches them; it may not start programs, "
                    "processes or connections, or write files.")
        result.flags.append("blocked_by_sandbox")
        result.notes += [SourceNote(p, None, "blocked by the sandbox", line) for line in lines]
        return True
    if run.signal_name == "SIGSYS":
        result.stop("rejected", "Stopped by the grader's sandbox: your code made a system call the grader blocks, "
                    "with every signal blocked at the time (as system() and popen() do when they start a program), so "
                    "it could not be named. Nothing it attempted happened.")
        result.flags.append("blocked_by_sandbox")
        return True
    if any(b.action == "malformed" for b in run.blocked) or run.stream_problem == protocol.TAMPERED:
        result.stop("rejected", f"Stopped: {protocol.TAMPERED}. A submission may print to stdout and stderr, but "
                    "never write to the grader's own file descriptors.")
        result.flags.append("blocked_by_sandbox")
        return True
    if result.sandbox and not result.sandbox.get("seccomp") and rubric.limits.require_seccomp:
        result.stop("infrastructure_error", "the system-call filter could not be installed here ("
                    f"{result.sandbox.get('seccomp_detail', 'unknown')}) and the rubric requires it "
                    "(limits.require_seccomp): grade on a Linux machine that allows seccomp.")
        return True
    cap = rubric.limits.host_memory_mib
    base_rss = result.sandbox.get("rss_at_load_mib", 0)
    said = " ".join((fatal.error if fatal else "", run.stderr.text()[-4000:]))
    grew = run.max_rss_kib / 1024 - base_rss
    finished = any(isinstance(f.data, DoneFrame) for f in run.frames)
    if not finished and not run.timed_out and (any(w in said for w in _MEMORY_WORDS) or grew >= 0.9 * cap):
        result.stop("crashed", f"your code used more than {cap} MiB of host memory (limits.host_memory_mib, beyond "
                    f"what the grader itself holds; the child peaked at {run.max_rss_kib / 1024:.0f} MiB), so its "
                    "allocations failed. Free what you allocate, and allocate nothing per thread.")
        result.flags.append("host_memory_exceeded")
        return True
    return False


def _check_case(case: Case, h: CaseFrame, payload: bytes, expected: Future, rubric: Rubric,
                reference: ExerciseReference, build: BuildResult, p: Path, result: Result) -> None:
    kind = "timed" if case.timed else "check"
    cr = CaseResult(case.name, list(case.dims.values()), case.inputs, case.seed, None, kind=kind)
    result.cases.append(cr)
    roles = {t.name: t for t in rubric.tensors}
    if not h.ok:
        fault = h.fault
        if fault:
            where = _source_line(build, fault.pc_offset, p)
            if fault.buffer:
                output = fault.buffer in roles and roles[fault.buffer].role == "out"
                code = "writes_past_output" if output and fault.where == "past" else (
                    "writes_before_output" if output else "reads_past_input")
                msg = _fault_words(fault)
                cr.passed = False
                cr.note = f"the kernel {msg}{where}"
                _add_diag(result, Diagnosis(code, f"{msg}{where}", case.name))
                return
            sig = {11: "SIGSEGV", 7: "SIGBUS", 8: "SIGFPE"}.get(fault.signal, "")
            if fault.signal == -1:
                cr.note = f"crashed: {fault.message}{where}"
            elif sig == "SIGFPE":
                cr.note = f"crashed: arithmetic fault (integer division by zero?){where}"
            else:
                cr.note = (f"crashed: the kernel accessed address {fault.address:#x}, outside every buffer "
                           f"({sig or 'fault'}): a wild pointer{where}")
            return
        if h.fatal:
            cr.note = f"crashed: {h.error}"
            return
        cr.passed = False
        cr.note = h.error or "launch failed"
        _add_diag(result, Diagnosis("launch_error", cr.note, case.name))
        return

    ref: Expected = expected.result()
    values = dims_values(rubric, case.dims)
    outputs, at = [], 0
    for meta in h.outputs + h.second_outputs:
        floats, pad = int(meta.floats), int(meta.pad)
        size = (floats + 2 * pad) * 4
        full = torch.frombuffer(bytearray(payload[at: at + size]), dtype=torch.float32)
        at += size
        outputs.append((meta.name, full, pad, floats))
    primary = outputs[: len(h.outputs)]
    second = outputs[len(primary):]
    passed, first_failure = True, None
    cr.passed = True
    for name, full, pad, floats in primary:
        tensor = roles[name]
        shape = shape_of(tensor, values)
        got = full[pad: pad + floats].view(shape)
        cmp = compare(got, ref.want[name], rtol=ref.rtol, atol=ref.atol, prepared=ref.prepared[name], init=tensor.init)
        guards = read_guards(full, pad, floats)
        ok = cmp.passed and not guards.damaged
        at_ = _location(name, tensor, cmp.first.index) if cmp.first else ""
        if tensor.chain:
            result.cases.append(CaseResult(
                f"chain {case.shape_text} ({rubric.chain.title or rubric.chain.kernel})", list(case.dims.values()),
                case.inputs, case.seed, ok, cmp.bad, cmp.total, cmp.unwritten,
                {"at": at_, "got": cmp.first.got, "want": cmp.first.want} if cmp.first else None,
                cmp.max_abs_error, cmp.max_rel_error, kind="chain"))
            continue
        cr.bad += cmp.bad
        cr.total += cmp.total
        cr.unwritten += cmp.unwritten
        cr.max_abs_error = max(cr.max_abs_error or 0.0, cmp.max_abs_error)
        cr.max_rel_error = max(cr.max_rel_error or 0.0, cmp.max_rel_error)
        if cmp.first and cr.first_mismatch is None:
            cr.first_mismatch = {"at": at_, "got": cmp.first.got, "want": cmp.first.want}
        if not ok:
            passed = False
            if first_failure is None:
                first_failure = (name, tensor, got, cmp, guards)
    cr.passed = passed
    # A named mistake, or outputs never written, explains the later cases' failures too.
    named = any(d.code in rubric.mistakes or d.code.startswith("unwritten_") for d in result.diagnosis)
    if first_failure is not None and not named and not (case.timed and result.diagnosis):
        name, tensor, got, cmp, guards = first_failure
        axes = [d if d in rubric.dims else f"axis {k}" for k, d in enumerate(tensor.shape)]
        mistakes = reference.mistakes if name == _first_output(rubric) else {}
        for d in diagnose(got, ref.want[name], ref.inputs, dict(case.dims), cmp, guards, rtol=ref.rtol, atol=ref.atol,
                          axes=axes, mistakes=mistakes, init=tensor.init):
            d.case = case.name
            _add_diag(result, d)
    _check_second_run(case, h, primary, second, ref, rubric, roles, values, passed, cr, result)


def _check_second_run(case: Case, h: CaseFrame, primary: list, second: list, ref: Expected, rubric: Rubric, roles: dict,
                      values: dict, passed: bool, cr: CaseResult, result: Result) -> None:
    """The same case run again: in reverse block and thread order (the emulator) or once more (a
    GPU, for an exercise whose sums may run in any order). A race shows as a difference."""
    how = ("when the same launch ran a second time" if h.second_kind == "repeat"
           else "when blocks and threads ran in reverse order")
    if h.second_error:
        cr.passed = False
        what = _fault_words(h.second_fault) if h.second_fault and h.second_fault.buffer else h.second_error
        _add_diag(result, Diagnosis("order_dependent", f"the kernel failed ({what}) {how}, though it ran the first "
                                    "time", case.name))
    if second:
        # The exercise lets a sum's order vary: the second run must be within the tolerance too,
        # and must agree with the first within it.
        firsts = {name: full[pad: pad + floats] for name, full, pad, floats in primary}
        for name, full, pad, floats in second:
            got = full[pad: pad + floats].view(shape_of(roles[name], values))
            rc = compare(got, ref.want[name], rtol=ref.rtol, atol=ref.atol, prepared=ref.prepared[name],
                         init=roles[name].init)
            first = firsts[name].view(got.shape)
            a, b = first.double(), got.double()
            moved = int(((first.view(torch.int32) != got.view(torch.int32)) &
                         ~((a - b).abs() <= ref.atol + ref.rtol * a.abs())).sum())
            if (not rc.passed and passed) or moved:
                cr.passed = False
                _add_diag(result, Diagnosis("order_dependent", f"{moved} of {got.numel()} output values changed "
                                            f"{how} (beyond the tolerance): a race on the output", case.name))
    elif h.second_differs and rubric.checks.order_exact:
        cr.passed = False
        _add_diag(result, Diagnosis("order_dependent",
                                    f"{h.second_diff_count} output floats changed {how}", case.name))


def _fault_words(fault: Fault) -> str:
    """'wrote past the end of out', 'read before the start of x'."""
    verb = "wrote" if fault.is_write == 1 else "read"
    return (f"{verb} past the end of {fault.buffer}" if fault.where == "past"
            else f"{verb} before the start of {fault.buffer}")


def _first_output(rubric: Rubric) -> str:
    return next(t.name for t in rubric.tensors if t.role == "out" and not t.chain)


def _location(name: str, tensor, index: list[int]) -> str:
    """out[3][5] (rows 3, cols 5): where an element is, by index and by dimension."""
    dims = ", ".join(f"{d} {i}" for d, i in zip(tensor.shape, index) if d.isidentifier())
    return name + "".join(f"[{i}]" for i in index) + (f" ({dims})" if dims else "")


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


def _timing(frame: TimingFrame, rubric: Rubric, result: Result, baseline_frames: list[BaselineTimingFrame]) -> None:
    t = rubric.timing
    samples: dict[str, list[float]] = frame.samples_ms
    values = dims_values(rubric, t.dims)
    nbytes = int(exprs.evaluate(t.bytes, values))
    copy_bytes = 8 * int(exprs.evaluate(t.copy_floats, values))

    def gbps(ms: float, moved: int) -> float:
        return moved / (ms * 1e-3) / 1e9

    copies = [CopyTiming(k, median(samples[k]), gbps(median(samples[k]), copy_bytes), copy_bytes) for k in samples
              if k not in ("submission", "chain")]
    floor = min((c for c in copies if c.kind in t.floor), key=lambda c: c.median_ms)
    sub_ms = median(samples["submission"])
    interval = fraction_interval(samples[floor.kind], samples["submission"], resamples=t.bootstrap)
    info = next(c for c in copies if c.kind == t.informational_floor)
    chain_ms = median(samples["chain"]) if samples.get("chain") else None
    chain_bytes = int(exprs.evaluate(t.chain_bytes, values)) if t.chain_bytes else None
    # The fraction is a ratio of bandwidths, each on its own byte count: the ratio of the
    # times scaled by the ratio of the bytes.
    scale = nbytes / copy_bytes
    result.timing = TimingResult(
        shape=list(t.dims.values()), kernel=rubric.kernel.name, byte_model=t.byte_model, bytes_moved=nbytes,
        samples=len(samples["submission"]), stop_reason=frame.stop_reason, seconds=frame.seconds,
        submission_ms=sub_ms, submission_gbps=gbps(sub_ms, nbytes), floor_kind=floor.kind, floor_gbps=floor.gbps,
        copies=copies, fraction=interval.median * scale, fraction_ci=[interval.low * scale, interval.high * scale],
        informational_kind=info.kind, informational_fraction=info.median_ms / sub_ms * scale,
        chain_ms=chain_ms, chain_gbps=gbps(chain_ms, chain_bytes) if chain_ms and chain_bytes else None,
        chain_bytes=chain_bytes, chain_title=rubric.chain.title, baseline=t.baseline,
        baseline_max_abs_diff=frame.baseline_max_abs_diff,
    )
    if samples.get("baseline"):
        result.timing.baselines.append(_against(list(t.dims.values()), samples))
    shapes = {c.name: list(c.dims.values()) for c in baseline_cases(rubric)}
    for h in baseline_frames:
        if h.case in shapes and h.samples_ms.get("baseline"):
            result.timing.baselines.append(_against(shapes[h.case], h.samples_ms))
    result.fraction = result.timing.fraction
    result.fraction_ci = result.timing.fraction_ci
    result.gbps = result.timing.submission_gbps
    result.floor = {"kind": floor.kind, "gbps": floor.gbps, "copies": {c.kind: c.gbps for c in copies}}
    result.device.update(frame.device)


def _against(shape: list[int], samples: dict) -> BaselineTiming:
    sub, base = median(samples["submission"]), median(samples["baseline"])
    return BaselineTiming(shape, sub, base, base / sub)


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
