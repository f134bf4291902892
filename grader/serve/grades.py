"""A stored grade, as the course server's pages, its queue's memory and its leaderboard say it:
an upload's states, a grade in one word, a grade's rank and a student's best, and what a watcher
is told when a grade ends, and what a grade tells its student to do next (next_step, performance);
a finished grade as the store takes it (StoredGrade). Plain rows and documents in, plain values out
(no store here: store.py imports this)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from grader.core.backend import BACKENDS
from grader.core.outcomes import Outcome, Tier
from grader.core.outcomes import outcome_word as _word
from grader.report.files import Rendered

QUEUED, GRADING, DONE, REPLACED = "queued", "grading", "done", "replaced"     # an upload's states


@dataclass(frozen=True)
class StoredGrade:
    """A finished grade as the store keeps it, built from the grade's documents in memory (never read
    back from a folder, never parsed back from its text): result.json's text and the reports, served
    as they are, and the outcome's columns, taken from the Result."""

    result: str                   # result.json's text (report/files.render_json: within RESULT_CHARS)
    report_md: str
    report_html: str
    status: str
    correct: bool | None
    fraction: float | None
    tier: str | None

    @classmethod
    def of(cls, documents: Rendered) -> StoredGrade:
        """The grade documents holds (report/files.Rendered: each document made once)."""
        r = documents.result
        return cls(documents.json, documents.markdown, documents.html, r.status, r.correct, r.fraction, r.tier)


def summary(grade: StoredGrade) -> dict:
    """What a watcher is told of a finished grade: its outcome, not the whole document."""
    return {"state": DONE, "status": grade.status, "correct": grade.correct, "fraction": grade.fraction,
            "tier": grade.tier}


# A grade's rank for "the best so far": a correct timed kernel by its tier and fraction, then a
# correct untimed one, an incorrect one, one not graded; never the machine's fault.
_TIER_RANK = {Tier.GOLD: 3, Tier.SILVER: 2, Tier.BELOW: 1}


def rank(row) -> tuple:
    if row["state"] != DONE or row["status"] in (None, Outcome.INFRASTRUCTURE_ERROR):
        return (-1,)
    if row["status"] != Outcome.GRADED:
        return (0,)
    if not row["correct"]:
        return (1,)
    return (2, _TIER_RANK.get(row["tier"] or "", 0), row["fraction"] or 0.0)


def best(rows):
    """The best of a student's uploads (rank), None before any is graded."""
    done = [r for r in rows if rank(r) >= (0,)]
    return max(done, key=rank) if done else None


def outcome_word(row) -> str:
    """A stored grade in one word (core/outcomes.outcome_word, the one place it is worked out)."""
    return _word(row["status"], None if row["correct"] is None else bool(row["correct"]), row["tier"])


# --- what a student fixes next ---------------------------------------------------------------------

NO_GPU = "checked for correctness only (no GPU on this server)"
_LINE = re.compile(r"(?:\bline (\d+)\b|\.cu:(\d+)\b|\.cu\((\d+)\))")
_AT_LINE = re.compile(r"^line \d+: ")          # a diagnosis's own "line 14: ", said once on the page
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(_])")
# A sentence that tells the student what to do starts with a verb of doing, not with what they did.
_NOT_A_FIX = re.compile(r"^(Your|The|A|An|It|This|These|They|That|Its|Every|Each|Only|One|Two)\b")
STOPPED_FIX = {Outcome.COMPILE_ERROR: "Fix this error first: the compiler's later errors often follow from it."}
LONGEST = 300                    # characters of a cause or a fix, on the page


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= LONGEST else text[:LONGEST - 3].rstrip() + "..."


def _line(*texts: str) -> int | None:
    for text in texts:
        m = _LINE.search(text or "")
        if m:
            return int(next(g for g in m.groups() if g))
    return None


def one_fix(advice: str) -> str:
    """The advice's sentence that says what to do (the first that starts with a verb of doing, not
    with what the kernel did), else its last sentence."""
    sentences = _sentences(advice)
    if not sentences:
        return ""
    return next((s for s in sentences if not _NOT_A_FIX.match(s)),
                next((s for s in sentences if not s.startswith("Your")), sentences[-1]))


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(" ".join((text or "").split())) if s.strip()]


@dataclass(frozen=True)
class NextStep:
    """What a grade tells its student to do next: the cause (a diagnosis's code, or the outcome's
    reason), what shows it, the line of their file it names (None: no line), and the fix in one
    sentence ("" for a correct kernel with nothing to improve)."""

    cause: str
    what: str
    line: int | None
    fix: str


def next_step(doc: dict) -> NextStep:
    """A result.json document's first thing to fix: its first diagnosis (the line its message names,
    the rubric's advice in a sentence); for a grade that stopped (compile_error, rejected, crashed,
    timeout), its first note at a line of the file, else its message; for an incorrect one without a
    diagnosis, its first failing check; for a correct one, its first finding (what costs it time)."""
    status, notes = doc.get("status") or "", [n for n in doc.get("notes") or [] if isinstance(n, dict)]
    message = str(doc.get("message") or "")
    for d in doc.get("diagnosis") or []:
        what = str(d.get("message") or "")
        return NextStep(str(d.get("code") or "incorrect"), _cut(_AT_LINE.sub("", what)), _line(what),
                        _cut(one_fix(str(d.get("advice") or ""))))
    if status != Outcome.GRADED:
        note = next((n for n in notes if n.get("line")), notes[0] if notes else None)
        first = (message.strip().splitlines() or [""])[0]
        said = str(note.get("message") or first) if note is not None else first
        lines = [line.strip() for line in said.strip().splitlines() if line.strip()] or [""]
        sentences = _sentences(lines[0]) or [""]
        fix = sentences[1] if len(sentences) > 1 else (STOPPED_FIX.get(status, "") if status else "")
        if fix.endswith(":") and len(lines) > 1:            # "Define this one:" and the signature under it
            fix = f"{fix} {lines[1]}"
        return NextStep(str(note.get("title") or status) if note is not None else (status or "not graded"),
                        _cut(sentences[0]), (note or {}).get("line") or _line(said, message), _cut(fix))
    if not doc.get("correct"):
        failed = next((c for c in doc.get("cases") or [] if c.get("passed") is False), None)
        if failed is None:
            return NextStep("incorrect", "", None, "")
        m = failed.get("first_mismatch")
        what = (f"{failed.get('name')}: first bad element {m.get('at')}: got {m.get('got')}, want {m.get('want')}"
                if isinstance(m, dict) else f"{failed.get('name')}: {failed.get('note') or 'failed'}")
        return NextStep("incorrect", _cut(what), _line(str(failed.get("note") or "")), "")
    for f in doc.get("findings") or []:
        what = str(f.get("message") or "")
        return NextStep(str(f.get("code") or ""), _cut(what), _line(what), _cut(one_fix(str(f.get("advice") or ""))))
    return NextStep("", "", None, "")


def performance(doc: dict) -> str:
    """A grade's speed in words: its fraction of the copy floor and tier on a GPU; on the emulator,
    that the server checked correctness only (NO_GPU); "" where the kernel was not correct."""
    if not doc.get("correct"):
        return ""
    backend = BACKENDS.get(str(doc.get("backend") or ""))
    if backend is not None and not backend.on_gpu:
        return NO_GPU
    if doc.get("fraction") is None:
        return "not timed"
    return f"{doc['fraction']:.3f} of the copy floor" + (f", {doc['tier']}" if doc.get("tier") else "")
