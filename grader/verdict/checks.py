"""A case's outputs against the float64 reference: the comparison, the guards, the diagnosis,
and the second run (reverse order on the emulator, a repeat on a GPU)."""

from __future__ import annotations

import math
import re
import subprocess
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from grader.core.backend import Backend
from grader.core.checking import FailedOutput, compare, read_guards, within
from grader.core.contract import CaseFrame, FatalFrame, Fault
from grader.core.results import CaseResult, DiagnosisEntry, MistakeMap
from grader.core.source import Submission
from grader.exercises import Reference as ExerciseReference
from grader.exercises.data import Expected
from grader.exercises.plan import Case, shape_of
from grader.exercises.rubric import Rubric, default_launch, dims_values
from grader.toolchain import tools
from grader.toolchain.outcome import BuildResult
from grader.verdict import bounds
from grader.verdict.causes import index_strides
from grader.verdict.diagnosis import Diagnosis, diagnose
from grader.verdict.hostlaunch import launches_at
from grader.verdict.maps import build_map

# what a case's diagnosis says where the hypotheses were tried and none explained the values
_UNEXPLAINED = frozenset({"wrong_values", "near_miss", "nan_output", "reads_unwritten_shared"})

# ---------------------------------------------------------------------------


@dataclass
class CaseOutcome:
    """What one case frame shows: its rows (the case, and the chain's) and the mistakes named."""

    rows: list[CaseResult]
    diagnoses: list[Diagnosis]
    maps: list[MistakeMap] = field(default_factory=list)


@dataclass(frozen=True)
class Judging:
    """What every case of one grade is judged against: the rubric (its hypotheses name a wrong
    output), the exercise's reference, the build (a fault's source line), the student's file as scanned (nothing
    is read from disk again: its text is quoted, its code searched) and the backend."""

    rubric: Rubric
    reference: ExerciseReference
    build: BuildResult
    source: Submission
    backend: Backend                        # what the verdict asks what it times


def _how_it_ended(note: str) -> str:
    """A launch that did not finish, as its check's note says it: 'read past the end of bias at
    k.cu:9' (the sandbox stopped an access out of bounds), 'crashed (...)', else 'failed (...)'."""
    first = (note.strip().splitlines() or [""])[0]
    if first.startswith("the kernel "):
        return first[len("the kernel "):]
    if first.startswith("crashed: "):
        return f"crashed ({first[len('crashed: '):]})"
    return f"failed ({first})" if first else "failed"


def check_case(case: Case, h: CaseFrame, payload: bytes, expected: Future, judging: Judging,
               known: set[str]) -> CaseOutcome:
    """Judge one case's frame; known: the diagnosis codes earlier cases gave (a named mistake
    explains the later cases' failures too)."""
    kind = "timed" if case.timed else "check"
    cr = CaseResult(case.name, list(case.dims.values()), case.inputs, case.seed, None, kind=kind)
    check = _CaseCheck(judging, case, h, cr, CaseOutcome([cr], []), {t.name: t for t in judging.rubric.tensors})
    check.judge(payload, expected, known)
    rubric, out = judging.rubric, check.out
    if case.chain and rubric.chain is not None and not h.ok and not any(r.kind == "chain" for r in out.rows):
        # a check the progress line counted: said, never dropped (the chain runs on the kernel's output).
        # Only where the kernel's launch failed: a timed set carries the chain to time it, not to check it,
        # and sends no chain output back.
        out.rows.append(CaseResult(f"chain {case.shape_text} ({rubric.chain.title or rubric.chain.kernel})",
                                   list(case.dims.values()), case.inputs, case.seed, False, kind="chain",
                                   note=f"not run: the kernel's own launch in this check {_how_it_ended(cr.note)}, "
                                        "and the chain runs on its output"))
    if h.clobbered:
        cr.passed = False
        what = ", ".join(h.clobbered)
        cr.note = (cr.note + "; " if cr.note else "") + f"the kernel changed {what}, which it may only read"
        out.diagnoses.append(Diagnosis("writes_into_input", f"the kernel wrote into {what} (an input the grader "
                                       f"owns) in {case.name}", case.name))
    return out


@dataclass
class _CaseCheck:
    """One case's frame being judged: what it is judged against, the case, the frame, its row (cr)
    and what it shows (out), and the rubric's tensors by name."""

    judging: Judging
    case: Case
    h: CaseFrame
    cr: CaseResult
    out: CaseOutcome
    roles: dict

    def judge(self, payload: bytes, expected: Future, known: set[str]) -> None:
        h, case, cr, out, rubric = self.h, self.case, self.cr, self.out, self.judging.rubric
        if not h.ok:
            self.failed_launch()
            return
        ref: Expected = expected.result()
        values = dims_values(rubric, case.dims)
        outputs = _outputs(h, payload)
        primary, second = outputs[: len(h.outputs)], outputs[len(h.outputs):]
        first_failure = self.compare_outputs(primary, ref, values)
        cr.passed = first_failure is None
        if first_failure is not None:
            name, tensor, got, cmp, guards = first_failure
            if guards.damaged:              # said on the check's line too: it may be all the check found
                spilled = "; ".join(w for w in (
                    f"{guards.after} float{'s' if guards.after != 1 else ''} written past the end of {name}"
                    if guards.after else "",
                    f"{guards.before} float{'s' if guards.before != 1 else ''} written before its start"
                    if guards.before else "") if w)
                cr.note = (cr.note + "; " if cr.note else "") + (
                    spilled if cmp.first else f"every element of {name} right, but {spilled}")
            failed = FailedOutput(case.name, name, _axes(rubric, tensor), got, ref.want[name], ref.inputs,
                                  dict(case.dims), ref.rtol, ref.atol, tensor.init, cmp, guards)
            out.maps.append(build_map(failed))
            # A named mistake, or outputs never written, explains the later cases' failures too.
            named = any(code in rubric.mistakes or code.startswith("unwritten_") for code in known)
            if not named and not (case.timed and known):
                # the hypotheses are tried on the first output, once a grade: an earlier case's values
                # that none explained (said as wrong, NaN or near) are the same kernel's
                tried = bool(known & _UNEXPLAINED)
                hypotheses = rubric.hypotheses if name == _first_output(rubric) and not tried else None
                for d in diagnose(failed, hypotheses=hypotheses, values=values):
                    d.case = case.name
                    out.diagnoses.append(d)
        self.second_run(primary, second, ref, values)

    def failed_launch(self) -> None:
        """A case whose launch failed: a fault in a buffer (named, and a diagnosis), a crash (the note
        the verdict stops with), a launch error."""
        h, cr, out, roles, sub = self.h, self.cr, self.out, self.roles, self.judging.source
        fault = h.fault
        if fault:
            where = _source_line(self.judging.build, fault.pc_offset, sub.path.name)
            if fault.buffer:
                output = fault.buffer in roles and roles[fault.buffer].role == "out"
                code = "writes_past_output" if output and fault.where == "past" else (
                    "writes_before_output" if output else "reads_past_input")
                msg = _fault_words(fault)
                cr.passed = False
                cr.note = f"the kernel {msg}{where}"
                stride = (index_stride(sub, self.judging.rubric) if code in ("reads_past_input", "writes_past_output")
                          else None)
                ran_past = self.ran_past(fault, where) if stride is None else None
                if ran_past is not None:
                    # the thread, the index that ran past and the guard it lacks (verdict/bounds.py)
                    out.diagnoses.append(Diagnosis(code, ran_past.text, self.case.name))
                elif stride is not None:
                    # the fault follows from the index's row or column stride: said with its line, and no
                    # advice to add a guard the file may already have
                    out.diagnoses.append(Diagnosis(stride[0], f"{stride[1]} ({msg}{where})", self.case.name))
                else:
                    out.diagnoses.append(Diagnosis(code, f"{msg}{where}", self.case.name))
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
            found = self.past_anywhere() if self.judging.backend.on_gpu else None
            if found is not None:
                # The GPU stops at an illegal address and says no more: the access the source shows
                # running past a grader's buffer at this case's shape is the student's, as on the emulator.
                cr.passed = False
                cr.note = f"the kernel stopped with {h.error.removeprefix('CUDA error: ')}: {found.text}"
                out.diagnoses.append(Diagnosis(found.code, f"{found.text} (on the GPU: {h.error})", self.case.name))
                return
            cr.note = f"crashed: {h.error}"
            return
        cr.passed = False
        cr.note = h.error or "launch failed"
        out.diagnoses.append(Diagnosis("launch_error", cr.note, self.case.name))

    def ran_past(self, fault: Fault, where: str):
        """The access behind a fault in a buffer, attributed to the index that ran past (bounds.attribute),
        or None."""
        rubric = self.judging.rubric
        tensor = self.roles.get(fault.buffer)
        line = re.search(r":(\d+)$", where)
        return bounds.attribute(self.judging.source, fault, line=int(line.group(1)) if line else None,
                                shape=[str(d) for d in tensor.shape] if tensor is not None else [],
                                dims=dims_values(rubric, self.case.dims))

    def past_anywhere(self):
        """A launch that ended the GPU's context (an illegal address): the access of a grader's buffer
        that runs past it at this case's shape (bounds.attribute_anywhere), or None."""
        rubric, h = self.judging.rubric, self.h
        if "illegal" not in h.error and "out of bounds" not in h.error.lower():
            return None
        values = dims_values(rubric, self.case.dims)
        buffers = {t.name: ([str(d) for d in t.shape], math.prod(shape_of(t, values))) for t in rubric.tensors}
        return bounds.attribute_anywhere(self.judging.source, launches=h.launches, buffers=buffers, dims=values)

    def compare_outputs(self, primary: list, ref: Expected, values: dict):
        """Every output against its float64 answer and its guards: the counts into cr, a chain's into
        a row of its own; the first output that failed (name, tensor, got, comparison, guards) or None."""
        case, cr, out, rubric = self.case, self.cr, self.out, self.judging.rubric
        first_failure = None
        for name, full, pad, floats in primary:
            tensor = self.roles[name]
            got = full[pad: pad + floats].reshape(shape_of(tensor, values))
            cmp = compare(got, ref.want[name], rtol=ref.rtol, atol=ref.atol, prepared=ref.prepared[name],
                          init=tensor.init)
            guards = read_guards(full, pad, floats)
            ok = cmp.passed and not guards.damaged
            at_ = _location(name, tensor, cmp.first.index) if cmp.first else ""
            mismatch = {"at": at_, "got": cmp.first.got, "want": cmp.first.want} if cmp.first else None
            if tensor.chain:
                out.rows.append(CaseResult(
                    f"chain {case.shape_text} ({rubric.chain.title or rubric.chain.kernel})", list(case.dims.values()),
                    case.inputs, case.seed, ok, cmp.bad, cmp.total, cmp.unwritten, mismatch,
                    cmp.max_abs_error, cmp.max_rel_error, kind="chain"))
                continue
            cr.bad += cmp.bad
            cr.total += cmp.total
            cr.unwritten += cmp.unwritten
            cr.max_abs_error = max(cr.max_abs_error or 0.0, cmp.max_abs_error)
            cr.max_rel_error = max(cr.max_rel_error or 0.0, cmp.max_rel_error)
            if mismatch and cr.first_mismatch is None:
                cr.first_mismatch = mismatch
            if not ok and first_failure is None:
                first_failure = (name, tensor, got, cmp, guards)
        return first_failure

    def second_run(self, primary: list, second: list, ref: Expected, values: dict) -> None:
        """The same case run again: in reverse block and thread order (the emulator) or once more (a
        GPU, for an exercise whose sums may run in any order). A race shows as a difference."""
        h, case, cr, out, roles = self.h, self.case, self.cr, self.out, self.roles
        passed = cr.passed
        how = ("when the same launch ran a second time" if h.second_kind == "repeat"
               else "when blocks and threads ran in reverse order")
        if h.second_error:
            cr.passed = False
            what = _fault_words(h.second_fault) if h.second_fault and h.second_fault.buffer else h.second_error
            out.diagnoses.append(Diagnosis("order_dependent", f"the kernel failed ({what}) {how}, though it ran the "
                                           "first time", case.name))
        if second:
            # The exercise lets a sum's order vary: the second run must be within the tolerance too,
            # and must agree with the first within it.
            firsts = {name: full[pad: pad + floats] for name, full, pad, floats in primary}
            for name, full, pad, floats in second:
                got = full[pad: pad + floats].reshape(shape_of(roles[name], values))
                rc = compare(got, ref.want[name], rtol=ref.rtol, atol=ref.atol, prepared=ref.prepared[name],
                             init=roles[name].init)
                first = firsts[name].reshape(got.shape)
                moved = int(((first.view(np.uint32) != got.view(np.uint32)) &
                             ~within(got, first, rtol=ref.rtol, atol=ref.atol)).sum())
                if (not rc.passed and passed) or moved:
                    cr.passed = False
                    out.diagnoses.append(Diagnosis("order_dependent", f"{moved} of {got.size} output values changed "
                                                   f"{how} (beyond the tolerance): a race on the output", case.name))
        elif h.second_differs and self.judging.rubric.checks.order_exact:
            cr.passed = False
            out.diagnoses.append(Diagnosis("order_dependent",
                                           f"{h.second_diff_count} output floats changed {how}", case.name))
        if passed and not cr.passed and not cr.note:      # right the first time: the check's line says what changed
            cr.note = next((f"right the first time, but {d.message}" for d in reversed(out.diagnoses)
                            if d.code == "order_dependent"), "")


def _outputs(h: CaseFrame, payload: bytes) -> list[tuple[str, np.ndarray, int, int]]:
    """Each output's full buffer (guards included) in the payload: (name, floats, pad, count),
    the first run's, then the second run's."""
    outputs, at = [], 0
    for meta in h.outputs + h.second_outputs:
        floats, pad = int(meta.floats), int(meta.pad)
        size = (floats + 2 * pad) * 4
        outputs.append((meta.name, np.frombuffer(payload, dtype=np.float32, count=size // 4, offset=at), pad, floats))
        at += size
    return outputs


def _fault_words(fault: Fault) -> str:
    """'wrote past the end of out', 'read before the start of x'."""
    verb = "wrote" if fault.is_write == 1 else "read"
    return (f"{verb} past the end of {fault.buffer}" if fault.where == "past"
            else f"{verb} before the start of {fault.buffer}")


def _axes(rubric: Rubric, tensor) -> list[str]:
    """The output's dimensions by name (an expression's axis by its position)."""
    return [d if d in rubric.dims else f"axis {k}" for k, d in enumerate(tensor.shape)]


def _first_output(rubric: Rubric) -> str:
    return next(t.name for t in rubric.tensors if t.role == "out" and not t.chain)


def _location(name: str, tensor, index: list[int]) -> str:
    """out[row 3][col 5]: where an element is, each index with the dimension it runs along (its
    singular where the rubric names it in the plural; a bare index for a dimension that is an
    expression)."""
    def label(dim: str, i: int) -> str:
        if not dim.isidentifier():
            return str(i)
        return f"{dim[:-1] if dim.endswith('s') and len(dim) > 2 else dim} {i}"

    return name + "".join(f"[{label(str(d), i)}]" for d, i in zip(tensor.shape, index, strict=False))


def index_stride(sub: Submission, rubric: Rubric | None = None) -> tuple[str, str] | None:
    """What in the student's file steps through the output with the wrong row or column stride, as
    (code, text with the line), or None (verdict/causes.index_strides; for a 2-D output the
    rubric's dimensions say which is the row's length)."""
    out = next((t for t in rubric.tensors if t.role == "out" and not t.chain), None) if rubric is not None else None
    if out is not None and len(out.shape) == 2 and all(str(d) in rubric.dims for d in out.shape):
        return index_strides(sub, row_length=str(out.shape[1]), dims=tuple(str(d) for d in out.shape))
    return index_strides(sub)


def past_in_timing(judging: Judging, fatal: FatalFrame | None, rows: list[CaseResult]) -> DiagnosisEntry | None:
    """A GPU timing that stopped (fatal: its frame) with an illegal address, where the source shows an access of a
    grader's buffer running past it at the timed shape (bounds.attribute_anywhere, the launches the
    launcher makes there or the default launch): that access, as the emulator names it there, and
    the first timed set's row (of rows) failed with it; None where the source does not explain it."""
    rubric, sub = judging.rubric, judging.source
    error = fatal.error if fatal is not None and fatal.stage == "timing" else ""
    if "illegal" not in error and "out of bounds" not in error.lower():
        return None
    values = dims_values(rubric, dict(rubric.timing.dims))
    buffers = {t.name: ([str(d) for d in t.shape], math.prod(shape_of(t, values))) for t in rubric.tensors}
    grid, block = default_launch(rubric, values)
    launches = launches_at(sub, values, None if sub.has_launcher else (rubric.kernel.name, grid, block))
    found = bounds.attribute_anywhere(sub, launches=launches, buffers=buffers, dims=values)
    if found is None:
        return None
    message = f"{found.text} (on the GPU, at the timed shape: {error})"
    row = next((c for c in rows if c.kind == "timed"), None)
    if row is not None:
        row.passed, row.note = False, message
    return DiagnosisEntry(found.code, message, "", row.name if row is not None else "timing")


def _source_line(build: BuildResult, pc_offset: int | None, name: str) -> str:
    if not pc_offset or build.library is None or tools.locate("addr2line") is None:
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
            return f" at {name}:{num}"
    return ""
