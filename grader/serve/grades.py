"""A stored grade, as the course server's pages, its queue's memory and its leaderboard say it:
an upload's states, a grade in one word, a grade's rank and a student's best, and what a watcher
is told when a grade ends. Plain rows in, plain values out (no store here: store.py imports this)."""

from __future__ import annotations

from grader.core.outcomes import Outcome, Tier
from grader.core.outcomes import outcome_word as _word

QUEUED, GRADING, DONE, REPLACED = "queued", "grading", "done", "replaced"     # an upload's states


def summary(doc: dict) -> dict:
    """What a watcher is told of a finished grade: its outcome, not the whole document."""
    return {"state": DONE, "status": doc.get("status"), "correct": doc.get("correct"), "fraction": doc.get("fraction"),
            "tier": doc.get("tier")}


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
