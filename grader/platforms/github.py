"""GitHub Actions: the job summary and workflow-command annotations.

Workflow commands are lines on stdout: `::error file=F,line=N,title=T::message`. In the
message, %, CR and LF are escaped; in properties also : and ,. GitHub shows at most 10
annotations of each kind per step, so at most 10 of each are printed. The step summary
is Markdown appended to $GITHUB_STEP_SUMMARY, at most 1 MiB per step: the checks table is
trimmed first, never the verdict.
"""

from __future__ import annotations

import os
from pathlib import Path

from grader.core.outcomes import Outcome
from grader.core.results import Result
from grader.platforms.scoring import first_line

SUMMARY_LIMIT = 1024 * 1024
PER_KIND = 10


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, message: str, **props: object) -> str:
    shown = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{kind}{' ' + shown if shown else ''}::{escape_data(message)}"


def _workspace_path(path: str) -> str:
    """The file as GitHub names it: relative to the workspace when it lies inside it."""
    workspace = os.environ.get("GITHUB_WORKSPACE")
    p = Path(path)
    if workspace and p.is_absolute():
        try:
            return str(p.relative_to(workspace))
        except ValueError:
            pass
    return str(path)


def annotations(result: Result) -> list[str]:
    """Errors at the student's lines, a notice with the verdict; at most 10 of each kind."""
    errors, warnings, notices = [], [], []
    for note in result.notes:
        errors.append(command("error", note.message, file=_workspace_path(note.file), line=note.line,
                              title=note.title))
    if result.status != Outcome.GRADED and not result.notes:
        errors.append(command("error", first_line(result.message), file=_workspace_path(result.submission["path"]),
                              title=f"submission {Outcome(result.status).text}"))
    if result.status == Outcome.GRADED and not result.correct:
        bad = next((c for c in result.cases if c.passed is False), None)
        codes = ", ".join(d.code for d in result.diagnosis) or "wrong values"
        where = f" in {bad.name}" if bad else ""
        errors.append(command("error", f"incorrect{where}: {codes}. "
                              + " ".join(d.advice for d in result.diagnosis[:1]),
                              file=_workspace_path(result.submission["path"]), title="incorrect"))
    if result.status == Outcome.GRADED and result.correct:
        if result.tier:
            lo, hi = result.fraction_ci or (result.fraction, result.fraction)
            notices.append(command("notice", f"{result.fraction:.3f} of the copy floor (95% interval {lo:.3f} to "
                                   f"{hi:.3f}), {result.gbps:.0f} GB/s", title=f"correct, tier {result.tier}"))
        else:
            notices.append(command("notice", "every check passed on the CPU emulator; tiers are graded only on a GPU",
                                   title="correct"))
    sb = result.sandbox
    if sb is not None and not sb.seccomp:
        warnings.append(command("warning", f"the system-call filter was not in force: {sb.seccomp_detail}",
                                title="sandbox"))
    if sb is not None and sb.unconfined_reads():
        warnings.append(command("warning", f"the file-system wall was not in force: {sb.unconfined_reads()}",
                                title="sandbox"))
    return errors[:PER_KIND] + warnings[:PER_KIND] + notices[:PER_KIND]


def step_summary(markdown: str, limit: int = SUMMARY_LIMIT) -> str:
    """The report for $GITHUB_STEP_SUMMARY, within limit bytes: checks-table rows go first."""
    if len(markdown.encode()) <= limit:
        return markdown
    lines = markdown.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("## Checks")), None)
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        rows = [i for i in range(start, end) if lines[i].startswith("| ") and not lines[i].startswith("| ---")][1:]
        keep = set(range(len(lines))) - set(rows)
        note = f"| ... | {len(rows)} rows trimmed to fit GitHub's 1 MiB step summary; result.json has them all | | |"
        trimmed = [ln if i != rows[0] else note for i, ln in enumerate(lines) if i in keep or (rows and i == rows[0])]
        text = "\n".join(trimmed) + "\n"
        if len(text.encode()) <= limit:
            return text
        markdown = text
    cut = markdown.encode()[: limit - 200].decode("utf-8", "ignore")
    return cut + "\n\n*(trimmed to fit GitHub's 1 MiB step summary; result.json has everything)*\n"


def append_step_summary(markdown: str) -> None:
    """Append markdown (trimmed to GitHub's limit) to $GITHUB_STEP_SUMMARY, when set."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(step_summary(markdown))
            f.write("\n")


def publish(result: Result, markdown: str) -> list[str]:
    """Append the summary to $GITHUB_STEP_SUMMARY (when set) and return the annotation lines to print."""
    append_step_summary(markdown)
    return annotations(result)


def in_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


