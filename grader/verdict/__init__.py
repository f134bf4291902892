"""Judging what the grading child sent back: checks, diagnosis, timing statistics, tier.

Runs in the parent, which never loads student code: the float64 references are computed here
from the same inputs the child was given, and every frame the child sent is treated as data.
One module per job: checks (outputs against the reference), wall (what the sandbox stopped),
timing (the fraction, the speedup, the tier); judge_run here puts them together into a Verdict,
which the pipeline puts into the Result. It imports core, exercises, toolchain and run (what a
child's run brought back); grade calls it.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from grader.core.backend import Backend
from grader.core.contract import (
    BaselineTimingFrame,
    CaseFrame,
    ChildSandbox,
    DoneFrame,
    FatalFrame,
    HelloFrame,
    TimingFrame,
    clock_phases,
)
from grader.core.emulation import spreads_over_cores
from grader.core.outcomes import Outcome, Tier
from grader.core.results import CaseResult, DiagnosisEntry, FloorSummary, MistakeMap, SandboxSummary, Stop, TimingResult
from grader.core.source import Submission
from grader.exercises.data import Expected, expected_for
from grader.exercises.plan import Case
from grader.exercises.rubric import Rubric
from grader.run.sandbox import ChildRun
from grader.verdict import bounds, causes, coverage, races, workspace
from grader.verdict.checks import Judging, check_case, index_stride, past_in_timing
from grader.verdict.formulaline import formula_line, with_line
from grader.verdict.timing import give_tier, judge_timing
from grader.verdict.wall import audited, read_wall_stop, stopped_by_wall  # noqa: F401 - read_wall_stop for the pipeline

INDEX_STRIDES = ("row_stride", "col_stride")      # verdict/checks.index_stride's codes
# what an index past a buffer shows as (checks.py, diagnosis.py)
OUT_OF_BOUNDS = ("writes_past_output", "reads_past_input", "writes_before_output", "writes_into_input")

__all__ = ["Expected", "Judging", "Verdict", "expected_for", "judge_run"]


@dataclass
class Verdict:
    """What a child's run comes to: the verdict step's value, put into the Result by the pipeline."""

    cases: list[CaseResult] = field(default_factory=list)
    maps: list[MistakeMap] = field(default_factory=list)
    diagnosis: list[DiagnosisEntry] = field(default_factory=list)
    correct: bool | None = None
    stop: Stop | None = None                   # the run ended the grade (a crash, a timeout, the wall)
    timing: TimingResult | None = None
    floor: FloorSummary | None = None
    tier: Tier | None = None
    borderline: bool = False
    feedback: str = ""
    flags: list[str] = field(default_factory=list)
    sandbox: SandboxSummary | None = None      # None: the child never said what was in force
    device: dict = field(default_factory=dict)  # the GPU as the timing read it
    # where the judging's time went, for result.json's phases (the pipeline's grade/phases.Phases):
    child_clock: dict[str, float] = field(default_factory=dict)   # the child's own (child_<moment>_t: ready, job, ...)
    answers_wait_s: float | None = None        # the float64 answers waited for (None: no case came back)


@dataclass
class _Frames:
    """What the child sent, read once: the checked cases and everything else by kind."""

    verdict: Verdict
    timing: TimingFrame | None = None
    baselines: list[BaselineTimingFrame] = field(default_factory=list)
    fatal: FatalFrame | None = None
    done: bool = False
    ended_by_access: bool = False       # a GPU's fatal launch named as an access past a buffer (checks.past_anywhere)


def _read_frames(run: ChildRun, cases: list[Case], references: dict[str, "Future[Expected]"],
                 judging: Judging) -> _Frames:
    by_name = {c.name: c for c in cases}
    seen: set[str] = set()
    v = Verdict()
    out = _Frames(v)
    for frame in run.frames:
        h = frame.data
        if isinstance(h, CaseFrame) and h.case in by_name:
            case = by_name[h.case]
            seen.add(case.name)
            waited = time.perf_counter()
            references[case.name].exception()           # the answers, waited for here: answers_wait_s
            v.answers_wait_s = round((v.answers_wait_s or 0.0) + time.perf_counter() - waited, 3)
            outcome = check_case(case, h, frame.payload, references[case.name], judging,
                                 {d.code for d in v.diagnosis})
            v.cases += outcome.rows
            v.maps += outcome.maps
            out.ended_by_access |= h.fatal and any(d.code in OUT_OF_BOUNDS for d in outcome.diagnoses)
            for d in outcome.diagnoses:
                if all(e.code != d.code for e in v.diagnosis):    # the first case that shows a mistake names it
                    v.diagnosis.append(DiagnosisEntry(d.code, d.message, "", d.case))
        elif isinstance(h, TimingFrame):
            out.timing = h
        elif isinstance(h, BaselineTimingFrame):
            out.baselines.append(h)
        elif isinstance(h, FatalFrame):
            out.fatal = h
        elif isinstance(h, DoneFrame):
            out.done = True
            v.child_clock.update(clock_phases(h, "child"))
        elif isinstance(h, HelloFrame):
            v.child_clock.update(clock_phases(h, "child"))
            # claimed: on the emulator the child runs the submission's host code, which can forge it
            claimed = h.sandbox if isinstance(h.sandbox, ChildSandbox) else ChildSandbox()
            v.sandbox = SandboxSummary(**vars(claimed))
    skipped = set(out.timing.skipped) if out.timing else set()
    for case in cases:
        if case.name not in seen:
            note = ("skipped: one launch at the timed shape took longer than timing.slow_launch_s, so only set 0 "
                    "was run" if case.name in skipped else "not run")
            v.cases.append(CaseResult(case.name, list(case.dims.values()), case.inputs, case.seed, None,
                                      note=note, kind="timed" if case.timed else "check"))
    return out


def judge_run(run: ChildRun, cases: list[Case], references: dict[str, "Future[Expected]"],
              judging: Judging) -> Verdict:
    """The verdict on a child's run: each case checked against its float64 answers (judging: the
    rubric, the reference, the build, the file and the backend), how the run ended, and for a
    correct kernel on a GPU its timing and tier."""
    rubric, sub, backend = judging.rubric, judging.source, judging.backend
    read = _read_frames(run, cases, references, judging)
    if not backend.times:
        # Nothing is timed there: a timing frame can only be forged (the emulator's child runs the
        # submission's host code, which can sign frames), and it never buys a fraction or a tier.
        read.timing, read.baselines = None, []
    v = read.verdict
    if v.sandbox is not None:
        v.sandbox.peak_rss_mib = round(run.max_rss_kib / 1024)
        v.sandbox.audit, v.sandbox.audit_open_paths = audited(run)
    v.stop = stopped_by_wall(run, read.fatal, rubric, v.sandbox, str(sub.path))
    found = past_in_timing(judging, read.fatal, v.cases) if v.stop is None and backend.on_gpu else None
    if found is not None:                       # graded as the emulator grades it
        read.fatal, read.ended_by_access = None, True
        v.diagnosis.append(found)
    if v.stop is None and _timed_shape_only_too_slow(run, read, v):
        _graded_too_slow(v, rubric, backend)
    elif v.stop is None:
        v.stop = _how_it_ended(run, read, v, rubric)
        if v.stop is None:
            checked = [c for c in v.cases if c.passed is not None]
            v.correct = bool(checked) and all(c.passed for c in checked) and not any(
                c.passed is None and not c.note.startswith("skipped") for c in v.cases)
            _timed(v, read, rubric)
    v.diagnosis = _named_causes(v, judging)
    for d in v.diagnosis:                       # bounds.named_fix: the guard a diagnosis named as missing
        d.advice = advice_for(rubric.feedback.diagnosis.get(d.code, ""), sub.code, missing=bounds.named_fix(v.diagnosis))
    return v


def _named_causes(v: Verdict, judging: Judging) -> list[DiagnosisEntry]:
    """The diagnosis with the cause named from the student's own line where the file holds one the
    outputs show (verdict/causes.py: a stride, a guard one past the end or one short; verdict/races.py:
    a race); first, and its echoes dropped. A race the run could not show (the emulator adds on one thread, in
    order) is said on a correct run too, with what this backend could not see."""
    found = _with_index_stride(v.diagnosis, judging)
    if any(d.code in INDEX_STRIDES for d in found):
        return _with_formula_line(found, judging)
    found = _with_workspace(found, judging.source)
    found = _with_shared(found, judging.source)
    found = _with_guard(found, judging.source, set(judging.rubric.mistakes))
    found = _with_coverage(found, judging.source)
    found = _with_partial_warp(found, judging)
    found = _with_guard_line(found, judging)
    found = _with_formula_line(found, judging)
    return _with_race(found, v, judging)


def _with_workspace(found: list[DiagnosisEntry], sub: Submission) -> list[DiagnosisEntry]:
    """Memory of the student's own that a kernel adds into and nothing resets (verdict/workspace.py),
    where the outputs show it: a cudaMalloc'd workspace never zeroed, where they are NaN (the grader
    poisons a workspace before every call); a __device__ array never reset, where they change from
    one run of a case to the next (or are wrong in no recognised way): that line first, echoes dropped."""
    shows = {d.code: d for d in found}
    for cause, codes in ((workspace.unzeroed_workspace, ("nan_output",)),
                         (workspace.stale_workspace, ("order_dependent", "timed_outputs_differ", "wrong_values"))):
        seen = next((shows[c] for c in codes if c in shows), None)
        if seen is None:
            continue
        named = cause(sub)
        if named is not None:
            kept = [d for d in found if d.code not in _RACE_SHOWS]
            return [DiagnosisEntry(named.code, f"{named.text} ({seen.message})", "", seen.case)] + kept
    return found


def _with_shared(found: list[DiagnosisEntry], sub: Submission) -> list[DiagnosisEntry]:
    """Outputs carrying the emulator's fill of shared memory (reads_unwritten_shared): the line that
    stages the array the block read beyond (workspace.unwritten_shared), where the file has one."""
    for d in found:
        if d.code == "reads_unwritten_shared" and not d.message.startswith("line "):
            named = workspace.unwritten_shared(sub)
            if named is not None:
                d.message = f"{named.text} ({d.message})"
    return found


def _with_coverage(found: list[DiagnosisEntry], sub: Submission) -> list[DiagnosisEntry]:
    """Elements never written, shown first and explained by no guard: the launch that leaves them
    (verdict/coverage.py: a grid that rounds down, a switch that launches nothing, a fixed block one
    index a thread), with its line."""
    if not found or not found[0].code.startswith("unwritten_"):
        return found
    shown = found[0]
    for cause in (coverage.tail_start, coverage.grid_rounds_down, coverage.block_too_small,
                  *((coverage.no_launch,) if shown.message.startswith("none of") else ())):
        named = cause(sub)
        if named is not None:
            return [DiagnosisEntry(named.code, f"{named.text} ({shown.message})", "", shown.case)] + found[1:]
    return found


def _with_partial_warp(found: list[DiagnosisEntry], judging: Judging) -> list[DiagnosisEntry]:
    """A warp's shuffle reduction that starts below 16 (causes.partial_warp_reduce), where the values
    are wrong (a modelled mistake they happen to match at this shape, the last slice left out where
    R is 17, included): that line first."""
    if not found or not (found[0].code in judging.rubric.mistakes or found[0].code in ("wrong_values", "near_miss")):
        return found
    named = causes.partial_warp_reduce(judging.source)
    if named is None:
        return found
    return [DiagnosisEntry(named.code, f"{named.text} ({found[0].message})", "", found[0].case)] + found[1:]


def _with_formula_line(found: list[DiagnosisEntry], judging: Judging) -> list[DiagnosisEntry]:
    """A mistake a declared hypothesis named from the outputs, with the student's line that computes
    it (verdict/formulaline.py, guided by the variant's `at:` hints), where no line is said yet."""
    variants = {}
    for variant in judging.rubric.hypotheses.variants:
        variants.setdefault(variant.code, variant)
    for d in found:
        variant = variants.get(d.code)
        if variant is None or d.message.startswith("line "):
            continue
        line = formula_line(judging.source, variant.at)
        if line is not None:
            d.message = with_line(judging.source, line, d.message)
    return found


def _with_guard_line(found: list[DiagnosisEntry], judging: Judging) -> list[DiagnosisEntry]:
    """An exercise's modelled mistake that is a bound (a sum's loop stopping at r < R - 1) with the
    line of the guard that carries it: a guard off by one whose right comparison the rubric's
    advice for that mistake writes out (r < R)."""
    modelled = [d for d in found if d.code in judging.rubric.mistakes]
    if not modelled:
        return found
    guards = causes.guard_off_by_one(judging.source)
    for d in modelled:
        advice = _squeezed(judging.rubric.feedback.diagnosis.get(d.code, ""))
        guard = next((g for g in guards if g.fix and _squeezed(g.fix) in advice), None)
        if guard is not None:
            d.message = f"{guard.text} ({d.message})"
    return found


# what a write past the end (or a read) echoes as: the values it overwrote, the order it happened in
_ECHOES = (*OUT_OF_BOUNDS, "order_dependent", "wrong_values", "nan_output")
# what a race looks like in the outputs, when it shows
_RACE_SHOWS = ("order_dependent", "wrong_values", "near_miss", "nan_output", "timed_outputs_differ",
               "reads_unwritten_shared")


def _with_guard(found: list[DiagnosisEntry], sub: Submission, modelled: set[str]) -> list[DiagnosisEntry]:
    """A guard one past the end, where the outputs show an access past a buffer; one short, where
    they show elements never written: the guard with its line first, the echoes dropped."""
    codes = {d.code for d in found}
    past = next((d for d in found if d.code in OUT_OF_BOUNDS), None)
    unwritten = next((d for d in found if d.code.startswith("unwritten_")), None)
    if past is None and unwritten is None:
        return found
    guards = causes.guard_off_by_one(sub)
    if past is not None:
        guard = next((g for g in guards if g.code == "guard_past_end"), None)
        guard = (guard and causes.one_based_index(sub, guard)) or guard   # the guard right, an index not shifted
        if guard is not None:
            kept = [d for d in found if d.code not in _ECHOES]
            return [DiagnosisEntry(guard.code, f"{guard.text} ({past.message})", "", past.case)] + kept
        bare = causes.unguarded_index(sub) if not guards else None
        if bare is not None:                # no guard at all: the access past the end, said with its line
            kept = [d for d in found if d.code not in _ECHOES]
            return [DiagnosisEntry(past.code, f"{bare.text} ({past.message})", "", past.case)] + kept
    if unwritten is not None and not codes & modelled:
        guard = next((g for g in guards if g.code == "guard_stops_short"), None)
        if guard is not None:
            kept = [d for d in found if not d.code.startswith("unwritten_") and d.code not in _ECHOES]
            return [DiagnosisEntry(guard.code, f"{guard.text} ({unwritten.message})", "", unwritten.case)] + kept
    return found


def _with_race(found: list[DiagnosisEntry], v: Verdict, judging: Judging) -> list[DiagnosisEntry]:
    """A race the file holds (a plain += into an element several threads share; a shared array read
    at another thread's slot with no barrier): named first where the outputs show a race (they
    changed with the order, or are wrong in no recognised way), after the named mistakes where they
    show another, and on a correct run as what this run could not see."""
    sub, backend = judging.source, judging.backend
    for race in (races.lost_update(sub), races.missing_barrier(sub)):
        if race is None:
            continue
        shows = next((d for d in found if d.code in _RACE_SHOWS), None)
        if shows is not None:
            # what the outputs showed besides: a modelled mistake one order's sums happened to match is an echo
            echoes = set(_RACE_SHOWS) | (set(judging.rubric.mistakes) if shows.code == "order_dependent" else set())
            kept = [d for d in found if d.code not in echoes]
            return [DiagnosisEntry(race.code, f"{race.text} ({shows.message})", "", shows.case)] + kept
        if v.correct:
            return found + [DiagnosisEntry(race.code, f"{race.text}. {_unseen(race.code, backend, sub)}", "", "")]
        if v.stop is None and found:
            return found + [DiagnosisEntry(race.code, race.text, "", "")]
    return found


def _unseen(code: str, backend: Backend, sub: Submission) -> str:
    """What this run could not see of a race the file holds, in a sentence."""
    if backend.on_gpu:
        return ("This run's outputs came out right, but nothing orders those threads: another run, or another GPU, "
                "can lose the race and fail")
    if code == "race_lost_update" and spreads_over_cores(sub):
        return ("The emulator ran the blocks on a few cores and lost no addition this time: a GPU runs thousands of "
                "threads at once, and its grade can differ")
    if code == "race_lost_update":
        return ("The emulator adds on one thread, in order, so it cannot lose one: a GPU runs the threads at once, "
                "and its grade can differ")
    return ("The emulator ran the threads in order and in reverse, and each read came after its write: a GPU keeps "
            "no such order, and its grade can differ")


def _with_index_stride(found: list[DiagnosisEntry], judging: Judging) -> list[DiagnosisEntry]:
    """Where the outputs show an access past a buffer and the file steps through the tensor with
    the wrong row or column stride (checks.index_stride), that stride, with its line, is the
    diagnosis: the rest follows from it (rows never written, guards and inputs overwritten, threads
    writing one element, timed sets that differ). On the emulator the access faults and the check
    names the stride itself; on a GPU it lands in the guards and shows here."""
    modelled = set(judging.rubric.mistakes)
    if any(d.code in INDEX_STRIDES for d in found):
        # a hypothesis that explained a case's values (a sum over the wrong axis) is the cause; the
        # stride of a later case's access past the end follows from it
        return [d for d in found if d.code in modelled] + [d for d in found if d.code in INDEX_STRIDES]
    past = next((d for d in found if d.code in OUT_OF_BOUNDS), None)
    if past is None and not {d.code for d in found} & modelled:
        # a stride that stays inside the buffers at these shapes: values from the wrong elements
        past = next((d for d in found if d.code in ("wrong_values", "order_dependent")
                     or d.code.startswith("unwritten_")), None)
    stride = index_stride(judging.source, judging.rubric) if past is not None else None
    if stride is None:
        return found
    return [DiagnosisEntry(stride[0], f"{stride[1]} ({past.message})", "", past.case)]


_SNIPPET = re.compile(r"`([^`]+)`")
_SENTENCE_END = re.compile(r"(?<=[.:;])\s+(?=[A-Z(])")


def _squeezed(code: str) -> str:
    return re.sub(r"\s+", "", code)


def advice_for(advice: str, source: str, missing: str = "") -> str:
    """The rubric's advice, less what the student's file already does: a sentence that tells the student
    to write code in backticks (`if (col < cols)`) the file already holds (spaces aside, comments not
    counted) is replaced by one that says so, with its line: the fix lies elsewhere (in missing, where
    the diagnosis named it: `row < rows`). Advice that quotes no code the file holds is given as written."""
    if not advice or not source:
        return advice
    lines = [line.split("//")[0] for line in source.splitlines()]
    squeezed_lines = [_squeezed(line) for line in lines]
    kept, already = [], []
    for sentence in _SENTENCE_END.split(advice):
        held = []
        for snippet in _SNIPPET.findall(sentence):
            s = _squeezed(snippet)
            n = next((i for i, line in enumerate(squeezed_lines, 1) if s and s in line), None)
            if n is not None:
                held.append((snippet, n))
        if held:
            already += held
        else:
            kept.append(sentence)
    if not already:
        return f"The guard your file lacks is `{missing}`. {advice}" if missing else advice
    said = ", ".join(f"`{snippet}` (line {n})" for snippet, n in already)
    why = (f"; the guard it lacks is `{missing}`." if missing else ", so adding it is not the fix: work out by hand the "
           "index each access computes for the last elements.")
    return (f"Your file already has {said}{why} " + " ".join(kept)).strip()


def _timed_shape_only_too_slow(run: ChildRun, read: _Frames, v: Verdict) -> bool:
    """Every check passed; only the timed shape did not finish in the limit."""
    checks = [c for c in v.cases if c.kind != "timed"]
    return bool(run.timed_out and read.fatal is None and read.timing is None and checks
                and all(c.passed for c in checks))


def _graded_too_slow(v: Verdict, rubric: Rubric, backend: Backend) -> None:
    """Such a kernel cannot be cheating for speed: it is graded, and on a GPU it is below every
    threshold (the floor copies this shape in tens of microseconds)."""
    limit = rubric.limits.time_limit_s
    for c in v.cases:
        if c.kind == "timed" and c.passed is None:
            c.note = f"skipped: the launch at the timed shape did not finish within {limit:g} s"
    v.correct = True
    v.flags.append("too_slow_to_time")
    if backend.times:
        v.tier = Tier.BELOW
    v.feedback = (f"Every correctness check passed, but one launch at the timed shape "
                  f"({' x '.join(str(d) for d in rubric.timing.dims.values())}) did not finish within {limit:g} s, so "
                  "it could not be timed" + (" and is graded below." if backend.times else ".")
                  + " Look for what makes it slow: a printf from every thread costs minutes at this size.")


def _how_it_ended(run: ChildRun, read: _Frames, v: Verdict, rubric: Rubric) -> Stop | None:
    """A run that did not finish: a timeout, a crash, a failure to load; None when it finished."""
    crashed_frame = next((c for c in v.cases if c.note.startswith("crashed:")), None)
    if run.timed_out:
        return Stop(Outcome.TIMEOUT, f"the submission did not finish within {rubric.limits.time_limit_s:g} s "
                    "(an endless loop, or a kernel far too slow); the run was stopped.")
    if crashed_frame is not None:
        return Stop(Outcome.CRASHED, crashed_frame.note.removeprefix("crashed: "))
    if read.fatal is not None:
        stage, error = read.fatal.stage, read.fatal.error
        status = Outcome.CRASHED if stage != "load" or "undefined symbol" in error else Outcome.INFRASTRUCTURE_ERROR
        return Stop(status, f"{error or 'the child process failed'}" + (f" (during {stage})" if stage else ""))
    if not read.done and not read.ended_by_access:     # ended by an access past a buffer: graded, as the emulator does
        how = f"killed by {run.signal_name}" if run.signal_name else f"exit status {run.returncode}"
        problem = f"; {run.stream_problem}" if run.stream_problem else ""
        return Stop(Outcome.CRASHED, f"the grading process died ({how}){problem} before finishing.")
    return None


def _timed(v: Verdict, read: _Frames, rubric: Rubric) -> None:
    """The timing's verdict and the tier, for a run that finished."""
    if read.timing is not None:
        for entry in _untouched_during_timing(read.timing, rubric):
            v.correct = False
            if all(e.code != entry.code for e in v.diagnosis):
                v.diagnosis.append(entry)
        t = v.timing = judge_timing(read.timing, rubric, read.baselines)
        v.floor = FloorSummary(t.floor_kind, t.floor_gbps, {c.kind: c.gbps for c in t.copies})
        v.device = dict(read.timing.device) if isinstance(read.timing.device, dict) else {}
    if v.correct and v.timing is not None:
        tier = give_tier(v.timing, rubric)
        v.tier, v.borderline, v.feedback = tier.tier, tier.borderline, tier.feedback
        v.flags += tier.flags
        kept = read.timing.heap_kept_bytes if read.timing is not None else 0
        if kept:
            v.tier, v.borderline = Tier.BELOW, False
            v.flags.append("heap_kept_across_calls")
            v.feedback = (f"Your kernel kept {kept / 1024:.0f} KiB of the device heap from one call to the next "
                          "(malloc in a kernel without a free): what one call leaves can serve the next, so this "
                          "timing earns no tier. free() in the same launch what a kernel mallocs, or better, take "
                          "scratch space from registers or shared memory.")
    elif v.correct:
        v.feedback = rubric.feedback.no_gpu
    else:
        v.feedback = "Fix correctness first: only a correct kernel is timed against the floor and gets a tier."


def _untouched_during_timing(frame: TimingFrame, rubric: Rubric) -> list[DiagnosisEntry]:
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
                        "timed_outputs_differ", f"{differ} of the {len(sums)} checked launches of {case} (chosen at random "
                        f"among the timed ones) left {output} different from the last one, which was verified: each "
                        "timed call must do the whole work",
                        "", case))
    return found
