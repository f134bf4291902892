"""Finding each student's submission in a folder, in the layouts courses have.

- a folder of .cu files: each file is a student (named by its stem);
- a folder of per-student folders (GitHub Classroom's clone layout among them): each folder is a
  student, whose submission is the file named by --file, or the folder's only .cu file (searched
  below it, hidden folders such as .git skipped);
- a roster CSV (GitHub Classroom's, or any with an identifier column) names the students: each
  folder is matched to a roster row by the GitHub username it ends with, and a student on the
  roster without a folder is listed as missing.

A student whose submission cannot be found is an Entry with a problem, never skipped silently.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import UsageError


@dataclass(frozen=True)
class Entry:
    """One student's submission, or why there is none."""

    student: str                 # the roster's identifier, else the folder's or the file's name
    path: Path | None
    problem: str = ""            # "missing", "ambiguous" or "unreadable"; "" when path is the submission
    detail: str = ""


def _cu_files(folder: Path) -> list[Path]:
    found = []
    for p in sorted(folder.rglob("*.cu")):
        if any(part.startswith(".") for part in p.relative_to(folder).parts):
            continue
        found.append(p)
    return found


def _in_folder(folder: Path, student: str, file_name: str | None) -> Entry:
    if file_name:
        named = [p for p in _cu_files(folder) if p.name == file_name] if not (folder / file_name).is_file() \
            else [folder / file_name]
        if not named:
            return Entry(student, None, "missing", f"{folder.name}/ holds no {file_name}")
        if len(named) > 1:
            return Entry(student, None, "ambiguous", f"{folder.name}/ holds {len(named)} files named {file_name}: "
                         + ", ".join(str(p.relative_to(folder)) for p in named))
        return _readable(student, named[0])
    files = _cu_files(folder)
    if not files:
        return Entry(student, None, "missing", f"{folder.name}/ holds no .cu file")
    if len(files) > 1:
        return Entry(student, None, "ambiguous", f"{folder.name}/ holds {len(files)} .cu files ("
                     + ", ".join(str(p.relative_to(folder)) for p in files[:5])
                     + "): name the submission with --file")
    return _readable(student, files[0])


def _readable(student: str, path: Path) -> Entry:
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        return Entry(student, path, "unreadable", f"{path}: {exc.strerror or exc}")
    return Entry(student, path)


def read_roster(path: Path) -> list[tuple[str, str]]:
    """(identifier, github username) per row of a roster CSV; the username may be empty."""
    try:
        rows = list(csv.DictReader(path.open(newline="", encoding="utf-8-sig")))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the roster ({exc.strerror or exc})") from exc
    if not rows:
        return []
    columns = {c.strip().lower(): c for c in rows[0].keys() if c}
    ident = next((columns[c] for c in ("identifier", "student_id", "id", "email", "name") if c in columns), None)
    user = next((columns[c] for c in ("github_username", "username", "login", "folder") if c in columns), None)
    if ident is None:
        raise UsageError(f"{path}: a roster needs an identifier column (identifier, student_id, id, email or "
                         f"name); it has {', '.join(columns) or 'none'}")
    return [(row[ident].strip(), (row[user] or "").strip() if user else "") for row in rows if row[ident].strip()]


def find_submissions(directory: Path, *, file_name: str | None = None, roster: Path | None = None) -> list[Entry]:
    """Every student's submission under directory, sorted by student."""
    entries = [_readable(p.stem, p) for p in sorted(directory.glob("*.cu"))]
    folders = [d for d in sorted(directory.iterdir()) if d.is_dir() and not d.name.startswith(".")]
    by_folder = {d.name: _in_folder(d, d.name, file_name) for d in folders}
    if roster is None:
        entries += by_folder.values()
        return sorted(entries, key=lambda e: e.student)
    claimed: set[str] = set()
    for ident, user in read_roster(roster):
        keys = [k for k in (user, ident) if k]
        match = next((name for name in by_folder for k in keys if name == k or name.endswith("-" + k)), None)
        flat = next((e for e in entries if e.student in keys), None)
        if match is not None:
            claimed.add(match)
            e = by_folder[match]
            entries.append(Entry(ident, e.path, e.problem, e.detail))
        elif flat is not None:
            entries.remove(flat)
            entries.append(Entry(ident, flat.path, flat.problem, flat.detail))
        else:
            entries.append(Entry(ident, None, "missing", f"no folder or file for {user or ident} in {directory}"))
    for name, e in by_folder.items():            # folders the roster does not name are still graded
        if name not in claimed:
            entries.append(Entry(name, e.path, e.problem, (e.detail + "; " if e.detail else "") + "not on the roster"))
    return sorted(entries, key=lambda e: e.student)
