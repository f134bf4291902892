"""How a grade ends and where a correct kernel's speed puts it, as types.

Each member is the string result.json, the CSVs and the platforms' files already use (a StrEnum
member equals its string and is written as it), so code compares members and a user reads the
same words as before. Defined once here; every other module imports them.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """A Result's status: graded (the checks ran; correct or not), or why the grade ended before."""

    GRADED = "graded"
    COMPILE_ERROR = "compile_error"
    REJECTED = "rejected"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    INFRASTRUCTURE_ERROR = "infrastructure_error"    # the machine's fault, never the student's

    @property
    def text(self) -> str:
        """The outcome in words, for reports and platforms."""
        return _TEXT[self]


_TEXT = {
    Outcome.GRADED: "graded",
    Outcome.COMPILE_ERROR: "did not compile",
    Outcome.REJECTED: "not accepted for grading",
    Outcome.CRASHED: "crashed",
    Outcome.TIMEOUT: "timed out",
    Outcome.INFRASTRUCTURE_ERROR: "could not be graded on this machine",
}


class Tier(StrEnum):
    """A correct, timed kernel's tier, from its fraction of the copy floor (the rubric's thresholds)."""

    GOLD = "gold"
    SILVER = "silver"
    BELOW = "below"


def outcome_word(status: str | None, correct: bool | None, tier: str | None = None) -> str:
    """A grade in one word, the one place it is worked out (Result.word, a batch's table and class
    page, a file's history, the course server's pages): the tier of a correct timed kernel (tier
    None: not asked for), else correct or incorrect, else why it was not graded, as result.json's
    status says it (compile_error, timeout, ...: one word, as a table's column holds it)."""
    if status is None:
        return "-"
    if status != Outcome.GRADED:
        # why it was not graded: an Outcome, or a batch's row without a grade (its Entry's Problem:
        # missing, linked, ...)
        return str(status)
    if correct and tier:
        return str(tier)
    return {True: "correct", False: "incorrect"}.get(correct, "-")

