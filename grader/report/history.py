"""A student's attempts, remembered: every `grader submit` of a file is kept (in the grader's cache
folder, attempts.jsonl), so the next one can say what changed since, and `grader history FILE`
can list them.

One line an attempt, appended as it is graded; bounded to MAX_PER_FILE attempts a file and
MAX_ATTEMPTS in all (the oldest dropped first). Clearing forgets one file's attempts, or all.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.core import jsonlines
from grader.core.locations import cache_root
from grader.core.outcomes import Outcome, outcome_word
from grader.core.results import Result

FILE_NAME = "attempts.jsonl"
MAX_PER_FILE = 50
MAX_ATTEMPTS = 2000


@dataclass
class Attempt:
    """One grade of one file, as the history keeps it."""

    file: str                       # the submission's absolute path
    sha256: str
    time: float                     # seconds since the epoch
    status: str
    correct: bool | None
    fraction: float | None
    tier: str | None
    backend: str
    diagnoses: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    reason: str = ""                # why an attempt that was not graded was not (its message's first line)

    @classmethod
    def of(cls, result: Result, file: Path, when: float | None = None) -> "Attempt":
        return cls(str(Path(file).resolve()), result.submission.get("sha256") or "", time.time() if when is None else when,
                   result.status, result.correct, result.fraction, result.tier, result.backend,
                   [d.code for d in result.diagnosis], [f.code for f in result.findings],
                   "" if result.status == Outcome.GRADED else (result.message.strip().splitlines() or [""])[0][:80])

    @classmethod
    def of_document(cls, doc: dict, file: str, when: float) -> "Attempt":
        """An attempt from a stored result.json document (the course server's), as `of` makes one
        from its Result."""
        status = str(doc.get("status") or "")
        return cls(file, str((doc.get("submission") or {}).get("sha256") or ""), when, status, doc.get("correct"),
                   doc.get("fraction"), doc.get("tier"), str(doc.get("backend") or ""),
                   [str(d.get("code")) for d in doc.get("diagnosis") or []],
                   [str(f.get("code")) for f in doc.get("findings") or []],
                   "" if status == Outcome.GRADED else (str(doc.get("message") or "").strip().splitlines() or [""])[0][:80])

    @property
    def outcome(self) -> str:
        """correct, incorrect, or the status when it was not graded."""
        return outcome_word(self.status, self.correct)


def store_path() -> Path:
    return cache_root() / FILE_NAME


def _read(path: Path) -> list[Attempt]:
    out = []
    names = {f.name for f in dataclasses.fields(Attempt)}
    for row in jsonlines.rows(path):            # a broken line (cut short, not UTF-8): skipped
        try:
            attempt = Attempt(**{k: v for k, v in row.items() if k in names})
        except TypeError:
            continue
        if isinstance(attempt.file, str):
            out.append(attempt)
    return out


def attempts(file: Path, *, path: Path | None = None) -> list[Attempt]:
    """The file's attempts, oldest first."""
    key = str(Path(file).resolve())
    return [a for a in _read(path or store_path()) if a.file == key]


def record(result: Result, file: Path, *, path: Path | None = None,
           when: float | None = None) -> tuple[Attempt | None, Attempt]:
    """Keep this grade of file: (the file's previous attempt, None for the first; this one)."""
    path = path or store_path()
    now = Attempt.of(result, file, when)
    every = _read(path)
    mine = [a for a in every if a.file == now.file]
    previous = mine[-1] if mine else None
    path.parent.mkdir(parents=True, exist_ok=True)
    if len(mine) + 1 > MAX_PER_FILE or len(every) + 1 > MAX_ATTEMPTS:
        to_drop, kept = len(mine) + 1 - MAX_PER_FILE, []
        for a in every:                     # the file's oldest attempts first, then the oldest of all
            if a.file == now.file and to_drop > 0:
                to_drop -= 1
                continue
            kept.append(a)
        kept = (kept + [now])[-MAX_ATTEMPTS:]
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text("".join(json.dumps(dataclasses.asdict(a)) + "\n" for a in kept), encoding="utf-8")
        os.replace(tmp, path)
    else:
        jsonlines.append(path, json.dumps(dataclasses.asdict(now)))
    return previous, now


def clear(file: Path | None = None, *, path: Path | None = None) -> int:
    """Forget file's attempts (every file's when None); how many were forgotten."""
    path = path or store_path()
    every = _read(path)
    if file is None:
        kept = []
    else:
        key = str(Path(file).resolve())
        kept = [a for a in every if a.file != key]
    if path.exists():
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text("".join(json.dumps(dataclasses.asdict(a)) + "\n" for a in kept), encoding="utf-8")
        os.replace(tmp, path)
    return len(every) - len(kept)


def change(previous: Attempt | None, now: Attempt) -> str | None:
    """What changed since the previous attempt, in a line: 'since 14:02: 0.59 -> 0.94 of the floor,
    below -> gold; scalar_loads fixed'. None for a first attempt."""
    if previous is None:
        return None
    return f"since {when_text(previous.time)}: {difference(previous, now)}"


def difference(previous: Attempt, now: Attempt) -> str:
    """change's line without its time: '0.59 -> 0.94 of the floor, below -> gold; scalar_loads
    fixed', or 'no change (an edited file)'."""
    parts = []
    if previous.outcome != now.outcome and previous.sha256 and previous.sha256 == now.sha256 \
            and previous.backend == now.backend and {previous.outcome, now.outcome} <= {"correct", "incorrect"}:
        # the same bytes, the same backend, another outcome: the file's outcome depends on the run
        parts.append(f"the same file was {previous.outcome} then and is {now.outcome} now: its outcome changes from "
                     "run to run, the mark of a race between threads (atomicAdd, or a __syncthreads() between a "
                     "shared write and another thread's read)")
    elif previous.outcome != now.outcome:
        parts.append(f"{previous.outcome} -> {now.outcome}")
    if previous.fraction is not None and now.fraction is not None and round(previous.fraction, 2) != round(now.fraction, 2):
        parts.append(f"{previous.fraction:.2f} -> {now.fraction:.2f} of the floor")
    if (previous.tier or now.tier) and previous.tier != now.tier:
        parts.append(f"{previous.tier or 'no tier'} -> {now.tier or 'no tier'}")
    fixed = [c for c in previous.diagnoses + previous.findings if c not in now.diagnoses + now.findings]
    new = [c for c in now.diagnoses + now.findings if c not in previous.diagnoses + previous.findings]
    notes = ([", ".join(fixed) + " fixed"] if fixed else []) + ([", ".join(new) + " new"] if new else [])
    if not parts and not notes:
        same = "the same file" if previous.sha256 == now.sha256 else "an edited file"
        return f"no change ({same})"
    return ", ".join(parts) + ("; " if parts and notes else "") + "; ".join(notes)


def when_text(t: float) -> str:
    """14:02 today, else 'Nov 30 14:02'."""
    stamp = time.localtime(t)
    today = time.localtime()
    return time.strftime("%H:%M" if stamp[:3] == today[:3] else "%b %d %H:%M", stamp)
