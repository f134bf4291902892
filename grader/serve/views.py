"""What the course server's pages show of the store's rows (course.py renders them): a student's
attempts, each with what to fix next (grades.next_step), its speed and what changed since the grade
before; a student's row on the instructor's page; moments as the pages write them."""

from __future__ import annotations

import itertools
import json
import time

from grader.report.history import Attempt, difference
from grader.serve.grades import (
    DONE,
    QUEUED,
    REPLACED,
    best,
    next_step,
    outcome_word,
    performance,
)


def attempt(r, previous=None) -> dict:
    """One upload as the student's page shows it (previous: the upload graded before it, for what
    changed): its outcome, what to fix next (grades.next_step), its speed (grades.performance)."""
    doc = json.loads(r["result"]) if r["state"] == DONE and r["result"] else None
    step = next_step(doc) if doc is not None else None
    change = ""
    if doc is not None and previous is not None:
        change = difference(Attempt.of_document(json.loads(previous["result"]), previous["name"], previous["received"]),
                            Attempt.of_document(doc, r["name"], r["received"]))
    return {"id": r["id"], "file": r["name"], "state": r["state"], "late": bool(r["late"]),
            "when": utc(r["received"]), "outcome": outcome_word(r) if r["state"] == DONE else r["state"],
            "step": step, "performance": performance(doc) if doc is not None else "", "change": change,
            "first": previous is None and doc is not None, "again": r["state"] == QUEUED and r["claimed"] is not None}


def attempts(rows) -> list[dict]:
    """A student's uploads (their rows, the newest first) as their page shows them; each graded one
    says what changed since the one graded before it (report/history.difference, as `grader
    history` says it)."""
    graded = [r for r in reversed(rows) if r["state"] == DONE and r["result"]]
    before = {b["id"]: a for a, b in itertools.pairwise(graded)}
    return [attempt(r, before.get(r["id"])) for r in rows]


def class_row(rows, student: str) -> dict:
    """A student's row on the instructor's page (rows: their uploads, the newest first): their latest
    outcome and its cause, their best, their graded attempts (replaced uploads counted apart), when
    they last uploaded."""
    top = best(rows)
    latest = rows[0] if rows else None
    graded = [r for r in rows if r["state"] == DONE]
    doc = json.loads(graded[0]["result"]) if graded and graded[0]["result"] else None
    step = next_step(doc) if doc is not None else None
    return {"student": student, "attempts": len(graded),
            "replaced": sum(1 for r in rows if r["state"] == REPLACED),
            "best": outcome_word(top) if top is not None else "-",
            "fraction": top["fraction"] if top is not None and top["correct"] else None,
            "tier": top["tier"] if top is not None and top["correct"] else None,
            "latest": (outcome_word(latest) if latest["state"] == DONE else latest["state"]) if latest else "-",
            "cause": step.cause if step is not None and graded and not graded[0]["correct"] else "",
            "line": step.line if step is not None and graded and not graded[0]["correct"] else None,
            "latest_id": graded[0]["id"] if graded else None,
            "last_upload": utc(latest["received"]) if latest else None,
            "ago": ago(time.time() - latest["received"]) if latest else "",
            "late": any(r["late"] for r in rows)}


def utc(t: float) -> dict:
    """A moment as the pages write it: ISO 8601 in UTC for the <time> element's datetime (the
    script shows it in the reader's local time) and the same moment as text, for a reader without
    the script."""
    return {"iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)),
            "text": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))}


def ago(seconds: float) -> str:
    """How long ago, in the unit a reader counts it in: just now, 12 min ago, 5 h ago, 3 days ago."""
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 2 * 86400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} days ago"
