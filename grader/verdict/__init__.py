"""Judging what the grading child sent back: checks, diagnosis, timing statistics, tier.

Runs in the parent, which never loads student code: the float64 references are computed here
from the same inputs the child was given, and every frame the child sent is treated as data.
One module per job: checks (outputs against the reference), wall (what the sandbox stopped),
timing (the fraction, the speedup, the tier); read_run here puts them together.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

from grader.core.backend import named
from grader.toolchain.outcome import BuildResult
from grader.core.contract import BaselineTimingFrame, CaseFrame, DoneFrame, FatalFrame, HelloFrame, TimingFrame
from grader.exercises import Reference as ExerciseReference
from grader.exercises.plan import Case
from grader.core.results import CaseResult, DiagnosisEntry, Result
from grader.exercises.rubric import Rubric
from grader.run.sandbox import ChildRun
from grader.exercises.data import Expected, expected_for
from grader.verdict.checks import check_case
from grader.verdict.timing import give_tier, judge_timing
from grader.verdict.wall import stopped_by_wall

__all__ = ["Expected", "expected_for", "read_run"]


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
            outcome = check_case(case, h, frame.payload, references[case.name], rubric, reference, build, p,
                                 {d.code for d in result.diagnosis})
            result.cases += outcome.rows
            result.maps += outcome.maps
            for d in outcome.diagnoses:
                if all(e.code != d.code for e in result.diagnosis):    # the first case that shows a mistake names it
                    result.diagnosis.append(DiagnosisEntry(d.code, d.message, "", d.case))
        elif isinstance(h, TimingFrame):
            timing_frame = h
        elif isinstance(h, BaselineTimingFrame):
            baseline_frames.append(h)
        elif isinstance(h, FatalFrame):
            fatal = h
        elif isinstance(h, DoneFrame):
            done = True
            result.phases["child_done_t"] = round(h.t, 3)
            if h.checks_t is not None:
                result.phases["child_checks_t"] = round(h.checks_t, 3)
            if h.sampled_t is not None:
                result.phases["child_sampled_t"] = round(h.sampled_t, 3)
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
    if stopped_by_wall(run, fatal, rubric, result, str(p)):
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
        if named(result.backend).times:
            result.tier = "below"
        result.feedback = (f"Every correctness check passed, but one launch at the timed shape "
                           f"({' x '.join(str(v) for v in rubric.timing.dims.values())}) did not finish within {rubric.limits.time_limit_s:g} s, so it "
                           "could not be timed" + (" and is graded below." if named(result.backend).times else ".")
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
        _untouched_during_timing(timing_frame, rubric, result)
        t = result.timing = judge_timing(timing_frame, rubric, baseline_frames)
        result.fraction, result.fraction_ci, result.gbps = t.fraction, t.fraction_ci, t.submission_gbps
        result.floor = {"kind": t.floor_kind, "gbps": t.floor_gbps, "copies": {c.kind: c.gbps for c in t.copies}}
        result.device.update(timing_frame.device)
    if result.status == "graded":
        if result.correct and result.timing is not None:
            tier = give_tier(result.timing, rubric)
            result.tier, result.borderline, result.feedback = tier.tier, tier.borderline, tier.feedback
            result.flags += tier.flags
        elif result.correct:
            result.feedback = rubric.feedback.no_gpu
        else:
            result.feedback = "Fix correctness first: only a correct kernel is timed against the floor and gets a tier."
    for d in result.diagnosis:
        d.advice = rubric.feedback.diagnosis.get(d.code, "")


def _untouched_during_timing(frame: TimingFrame, rubric: Rubric, result: Result) -> None:
    """What the measuring process saw of the timed launches besides their time: a grader buffer the
    kernels changed, or timed launches of one set that left different outputs (a launcher or a
    kernel that does less on some calls; only where the exercise's outputs are bit-exact)."""
    found = []
    if frame.clobbered:
        found.append(DiagnosisEntry("writes_into_input", f"during the timing the kernel changed "
                                    f"{', '.join(frame.clobbered)}, which it may only read", "", "timing"))
    if rubric.checks.order_exact:
        for case, outputs in (frame.output_checksums or {}).items():
            for output, sums in outputs.items():
                if not sums:
                    continue
                differ = sum(1 for s in sums if s != sums[-1])
                if differ:
                    found.append(DiagnosisEntry(
                        "timed_outputs_differ", f"{differ} of the {len(sums)} checked launches of {case} (chosen at random among the timed ones) left {output} "
                        "different from the last one, which was verified: each timed call must do the whole work",
                        "", case))
    for entry in found:
        result.correct = False
        if all(e.code != entry.code for e in result.diagnosis):
            result.diagnosis.append(entry)
