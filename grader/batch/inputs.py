"""Finding each student's submission in a folder, in the layouts courses have.

- a folder of .cu files: each file is a student (named by its stem);
- a folder of per-student folders (GitHub Classroom's clone layout among them): each folder is a
  student, whose submission is the file named by --file, or the folder's only .cu file (searched
  below it, hidden folders such as .git skipped);
- a roster CSV (GitHub Classroom's, or any with an identifier column) names the students: each
  folder is matched to a roster row by the GitHub username it ends with, and a student on the
  roster without a folder is listed as missing.

A student whose submission cannot be found is an Entry with a problem, never skipped silently.

Links are resolved before anything is opened (the grader may run as root): a student's file or
folder that is a link leading out of the student's own folder (or, for a class of flat files, out of
the class folder), or onto another student's file, is that student's `linked` problem, naming the
link and its target, and the file is never read. Students who hand in the same bytes are named to
each other (Entry.identical_to); nothing is marked down for it.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import UsageError


@dataclass(frozen=True)
class Entry:
    """One student's submission, or why there is none."""

    student: str                 # the roster's identifier, else the folder's or the file's name
    path: Path | None
    problem: str = ""            # "missing", "ambiguous", "unreadable" or "linked"; "" when path is the submission
    detail: str = ""
    identical_to: tuple[str, ...] = ()     # the other students who handed in the same bytes, as student/file
    sha256: str = ""                       # the file's bytes, hashed (where it was read)
    class_folder: Path | None = None       # the folder the class was found in


def _link_problem(path: Path, own: Path, class_dir: Path) -> str:
    """Why path (a student's file, beneath own: their folder, or the file itself) may not be graded
    as theirs: a link on the way out of own. "" when every component stays inside. Nothing is opened:
    only links are read (lstat, readlink), so a link to /etc/shadow is never opened as root."""
    shown = path.relative_to(class_dir) if path.is_relative_to(class_dir) else path
    real = Path(os.path.realpath(path))
    own_real = Path(os.path.realpath(own))
    if own.is_symlink():
        what = "folder" if own_real.is_dir() else "file"
        return (f"{own.name} is a link to {os.readlink(own)} ({real}): a student's {what} must be their own, not a "
                "link elsewhere")
    if real != own_real and not real.is_relative_to(own_real):
        link = next((p for p in [path, *path.parents] if p.is_symlink()), path)
        return (f"{shown} leads through the link {link.relative_to(class_dir) if link.is_relative_to(class_dir) else link}"
                f" -> {os.readlink(link)} to {real}, outside {own.name}/: a submission is a file of the student's own")
    return ""


def _cu_files(folder: Path) -> list[Path]:
    """The .cu files beneath folder, hidden folders skipped; a linked folder is not entered (its
    files would be another folder's), a linked file is listed (and judged by _link_problem)."""
    found = []
    for root, dirs, files in os.walk(folder):             # os.walk enters no linked folder
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [Path(root) / f for f in files if f.endswith(".cu")]
    return sorted(found)


def _in_folder(folder: Path, student: str, file_name: str | None) -> Entry:
    if folder.is_symlink():
        return Entry(student, None, "linked", _link_problem(folder, folder, folder.parent))
    if file_name:
        named = [p for p in _cu_files(folder) if p.name == file_name] if not (folder / file_name).is_file() \
            else [folder / file_name]
        if not named:
            return Entry(student, None, "missing", f"{folder.name}/ holds no {file_name}")
        if len(named) > 1:
            return Entry(student, None, "ambiguous", f"{folder.name}/ holds {len(named)} files named {file_name}: "
                         + ", ".join(str(p.relative_to(folder)) for p in named))
        return _readable(student, named[0], folder)
    files = _cu_files(folder)
    if not files:
        return Entry(student, None, "missing", f"{folder.name}/ holds no .cu file")
    if len(files) > 1:
        return Entry(student, None, "ambiguous", f"{folder.name}/ holds {len(files)} .cu files ("
                     + ", ".join(str(p.relative_to(folder)) for p in files[:5])
                     + "): name the submission with --file")
    return _readable(student, files[0], folder)


def _readable(student: str, path: Path, own: Path) -> Entry:
    """The student's entry for path beneath own (their folder, or the file itself): refused where a
    link leads out of own, else opened once to see that it can be read."""
    linked = _link_problem(path, own, own.parent)
    if linked:
        return Entry(student, path, "linked", linked)
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        return Entry(student, path, "unreadable", f"{path}: {exc.strerror or exc}")
    return Entry(student, path)


def _flat(path: Path, directory: Path) -> Entry:
    """A flat file's entry: a link is allowed only to a file inside the class folder that is no
    other student's .cu (an instructor's own layout); checked by _other_students below."""
    if not path.is_symlink():
        return _readable(path.stem, path, path)
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(Path(os.path.realpath(directory))):
        return Entry(path.stem, path, "linked", f"{path.name} is a link to {os.readlink(path)} ({real}), outside "
                     f"the class folder {directory}: a submission is a file of the student's own")
    return _readable(path.stem, path, real)


def _other_students(entries: list[Entry], directory: Path) -> list[Entry]:
    """Each entry whose file is, through a link, another student's file (or inside their folder) is
    refused: two names for one file never take one grade twice."""
    owners: dict[Path, str] = {}
    for e in entries:
        if e.path is not None and not e.problem and not e.path.is_symlink():
            owners[Path(os.path.realpath(e.path))] = e.student
    folders = {Path(os.path.realpath(d)): d.name for d in directory.iterdir()
               if d.is_dir() and not d.is_symlink() and not d.name.startswith(".")}     # the students' folders
    out = []
    for e in entries:
        if e.path is not None and not e.problem and e.path.is_symlink():
            real = Path(os.path.realpath(e.path))
            owner = owners.get(real) or next((name for f, name in folders.items()
                                              if real.is_relative_to(f) and name != e.student), None)
            if owner is not None and owner != e.student:
                e = dataclasses.replace(e, problem="linked", detail=f"{e.path.relative_to(directory)} is a link to "
                                        f"{os.readlink(e.path)}, {owner}'s file: a submission is a file of the "
                                        "student's own")
        out.append(e)
    return out


def _identical(entries: list[Entry], directory: Path) -> list[Entry]:
    """Each graded entry with the other students whose file holds the same bytes (a hint an
    instructor reads; nothing is marked down). A file that cannot be read is left as it is: its
    grade says why."""
    digests: dict[str, list[Entry]] = {}
    for e in entries:
        if e.path is None or e.problem:
            continue
        try:
            digest = hashlib.sha256(e.path.read_bytes()).hexdigest()
        except OSError:
            continue
        digests.setdefault(digest, []).append(e)
    out = []
    for e in entries:
        digest = next((d for d, group in digests.items() if e in group), "")
        others = tuple(_shown(o, directory) for o in digests.get(digest, []) if o is not e)
        out.append(dataclasses.replace(e, identical_to=others, sha256=digest) if digest else e)
    return out


def _shown(e: Entry, directory: Path) -> str:
    assert e.path is not None
    return str(e.path.relative_to(directory)) if e.path.is_relative_to(directory) else str(e.path)


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
    entries = _found(directory, file_name=file_name, roster=roster)
    entries = [dataclasses.replace(e, class_folder=directory) for e in entries]
    return _identical(_other_students(entries, directory), directory)


def _found(directory: Path, *, file_name: str | None, roster: Path | None) -> list[Entry]:
    entries = [_flat(p, directory) for p in sorted(directory.glob("*.cu"))]
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
            entries.append(dataclasses.replace(e, student=ident))
        elif flat is not None:
            entries.remove(flat)
            entries.append(dataclasses.replace(flat, student=ident))
        else:
            entries.append(Entry(ident, None, "missing", f"no folder or file for {user or ident} in {directory}"))
    for name, e in by_folder.items():            # folders the roster does not name are still graded
        if name not in claimed:
            entries.append(dataclasses.replace(e, detail=(e.detail + "; " if e.detail else "") + "not on the roster"))
    return sorted(entries, key=lambda e: e.student)
