"""Finding each student's submission in a folder, in the layouts courses have, and reading it once.

- a folder of .cu files: each file is a student (named by its stem);
- a folder of per-student folders (GitHub Classroom's clone layout among them): each folder is a
  student, whose submission is the file named by --file, or the folder's only .cu file (searched
  below it, hidden folders such as .git skipped);
- a roster CSV (GitHub Classroom's, or any with an identifier column) names the students: each
  folder is matched to a roster row by the GitHub username it ends with, and a student on the
  roster without a folder is listed as missing.

A student whose submission cannot be found is an Entry with a problem, never skipped silently.

The grader may run as root and the class folder is the students'. The listing opens nothing: it
reads links only (lstat, readlink), and a student's file or folder that is a link leading out of
the student's own folder (or, for a class of flat files, out of the class folder), or onto another
student's file, is that student's `linked` problem, naming the link and its target. Then each
student's file is read once, as the class is listed (core/handin.py): opened beneath the student's
folder (for flat files, the class folder) by a descriptor that follows no link on the way
(`openat2` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, else an O_NOFOLLOW walk), checked by
fstat (a regular file of one name) and read. A path that turned into a link since it was looked
at is `linked`; a file that is the same file (st_dev, st_ino) as another student's is `linked`
for each of them, naming both; a file with a second name the class does not hold (a hard link to a
file outside it) is `linked` and never read. Those bytes are the Entry's source: what the batch
chooses the exercise from, keys its stored results with, builds, hashes and reports; nothing
opens the student's path again (Entry.path reads as those bytes: core/handin.HeldPath), so a
file swapped, changed or deleted after the listing changes nothing of the grade. Students who
hand in the same bytes are named to each other (Entry.identical_to); nothing is marked down for it.
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import os
import stat
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from grader.core.errors import UsageError
from grader.core.handin import SourceFile, Unread, held, read_beneath


class Problem(StrEnum):
    """Why a student has no submission to grade (a row of the class, never a grade's Outcome)."""

    MISSING = "missing"              # no .cu file (or not the one --file-name names), or gone since the listing
    AMBIGUOUS = "ambiguous"          # several .cu files and no --file-name
    UNREADABLE = "unreadable"        # not a regular file, or not opened
    LINKED = "linked"                # a link on the way, or a file with more than one name
    NOT_GRADED = "not_graded"        # the batch was interrupted before it


@dataclass(frozen=True)
class Entry:
    """One student's submission, or why there is none."""

    student: str                 # the roster's identifier, else the folder's or the file's name
    path: Path | None            # the file as listed: reads as source's bytes, or, not read, raises (handin.HeldPath)
    problem: Problem | None = None   # why path is no submission to grade; None when it is
    detail: str = ""
    identical_to: tuple[str, ...] = ()     # the other students who handed in the same bytes, as student/file
    source: SourceFile | None = None       # the file as read, once, at the listing (where it was read)

    def __post_init__(self) -> None:
        if self.problem is not None and not isinstance(self.problem, Problem):
            object.__setattr__(self, "problem", Problem(self.problem) if self.problem else None)

    @property
    def sha256(self) -> str:
        """The bytes read, hashed ("" where none were read)."""
        return self.source.sha256 if self.source is not None else ""


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
        return Entry(student, None, Problem.LINKED, _link_problem(folder, folder, folder.parent))
    if file_name:
        named = [p for p in _cu_files(folder) if p.name == file_name] if not (folder / file_name).is_file() \
            else [folder / file_name]
        if not named:
            return Entry(student, None, Problem.MISSING, f"{folder.name}/ holds no {file_name}")
        if len(named) > 1:
            return Entry(student, None, Problem.AMBIGUOUS, f"{folder.name}/ holds {len(named)} files named {file_name}: "
                         + ", ".join(str(p.relative_to(folder)) for p in named))
        return _readable(student, named[0], folder)
    files = _cu_files(folder)
    if not files:
        return Entry(student, None, Problem.MISSING, f"{folder.name}/ holds no .cu file")
    if len(files) > 1:
        return Entry(student, None, Problem.AMBIGUOUS, f"{folder.name}/ holds {len(files)} .cu files ("
                     + ", ".join(str(p.relative_to(folder)) for p in files[:5])
                     + "): name the submission with --file")
    return _readable(student, files[0], folder)


def _readable(student: str, path: Path, own: Path) -> Entry:
    """The student's entry for path beneath own (their folder, or the file itself): refused where a
    link leads out of own; read later, once, by _read_all."""
    linked = _link_problem(path, own, own.parent)
    if linked:
        return Entry(student, path, Problem.LINKED, linked)
    return Entry(student, path)


def _flat(path: Path, directory: Path) -> Entry:
    """A flat file's entry: a link is allowed only to a file inside the class folder that is no
    other student's .cu (an instructor's own layout); checked by _other_students below."""
    if not path.is_symlink():
        return _readable(path.stem, path, path)
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(Path(os.path.realpath(directory))):
        return Entry(path.stem, path, Problem.LINKED, f"{path.name} is a link to {os.readlink(path)} ({real}), outside "
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
                e = dataclasses.replace(e, problem=Problem.LINKED, detail=f"{e.path.relative_to(directory)} is a link to "
                                        f"{os.readlink(e.path)}, {owner}'s file: a submission is a file of the "
                                        "student's own")
        out.append(e)
    return out


def _read_all(entries: list[Entry], directory: Path) -> list[Entry]:
    """Each entry without a problem with its file read, once (_read_one); then each file that is
    the same file as another student's, or has a name outside the class, refused (_one_file_each).
    An entry not read has a path that never reads (handin.HeldPath)."""
    try:
        class_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"{directory}: cannot open the class folder ({exc.strerror or exc})") from exc
    try:
        return _one_file_each([_read_one(e, directory, class_fd) for e in entries], directory)
    finally:
        os.close(class_fd)


def _read_one(e: Entry, directory: Path, class_fd: int) -> tuple[Entry, tuple[int, int] | None, int]:
    """(the entry, with its source where read; the file's identity where it was opened; its
    number of names). Read beneath the student's folder, opened from the class folder's
    descriptor without following a link (for flat files, beneath the class folder itself); a link
    the listing allowed (one inside the student's own folder, or a flat file's onto no student's
    file) is read by where it leads, with no link followed on the way."""
    if e.path is None or e.problem:
        return _unread(e, e.problem, e.detail) if e.path is not None else e, None, 1
    rel = e.path.relative_to(directory)
    own = rel.parts[0] if len(rel.parts) > 1 else None
    beneath = directory / own if own is not None else directory
    real, base = Path(os.path.realpath(e.path)), Path(os.path.realpath(beneath))
    inside = real.relative_to(base) if real.is_relative_to(base) and real != base else Path(*rel.parts[1 if own else 0:])
    try:
        fd = os.open(own, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=class_fd) \
            if own is not None else class_fd
    except OSError as exc:
        if _is_link(own, class_fd):
            return _unread(e, Problem.LINKED, f"{own}/ turned into a link after the class was listed: a student's folder "
                           "must be their own, and nothing in it was read"), None, 1
        return _unread(e, Problem.MISSING if exc.errno == errno.ENOENT else Problem.UNREADABLE,
                       f"{own}/: {exc.strerror or exc}"), None, 1
    try:
        got = read_beneath(fd, str(inside), e.path)
    finally:
        if fd != class_fd:
            os.close(fd)
    if isinstance(got, Unread):
        return _unread(e, got.kind, _relative(got.why, directory)), got.identity, got.names
    return dataclasses.replace(e, path=got.path, source=got), got.identity, 1


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _relative(why: str, directory: Path) -> str:
    return why.replace(str(directory) + os.sep, "", 1)


def _unread(e: Entry, problem: Problem | str, detail: str) -> Entry:
    """e refused or not read: no source, and a path that says why when something tries to read it."""
    return dataclasses.replace(e, problem=problem, detail=detail, source=None,
                               path=held(e.path, None, detail) if e.path is not None else None)


def _one_file_each(read: list[tuple[Entry, tuple[int, int] | None, int]], directory: Path) -> list[Entry]:
    """Each entry whose file is the same file (st_dev, st_ino) as another student's refused as
    `linked`, naming the others (a hard link, or two links to one file: whose it is cannot be told,
    so neither is graded); a file of several names the class does not account for (a hard link
    to a file outside the class) refused, never read."""
    by_identity: dict[tuple[int, int], list[Entry]] = {}
    for e, identity, _names in read:
        if identity is not None:
            by_identity.setdefault(identity, []).append(e)
    out = []
    for e, identity, names in read:
        others = [o for o in by_identity.get(identity, []) if o.student != e.student] if identity else []
        if others:
            shown = ", ".join(f"{o.student}'s {_shown(o, directory)}" for o in others)
            out.append(_unread(e, Problem.LINKED, f"{_shown(e, directory)} is the same file as {shown} ("
                               + ("hard links" if names > 1 else "each leads to it") + "): a submission is a file of "
                               "the student's own, so none of them is graded; hand in a copy"))
        elif identity is not None and names > 1:
            inside = _names_in_class(directory, identity)
            shown = _shown(e, directory)
            if names > len(inside):
                out.append(_unread(e, Problem.LINKED, f"{shown} is a hard link to a file outside the class ({names} names, "
                                   f"{names - len(inside)} outside {directory}): it was not read (the grader may run "
                                   "as root); hand in a copy of the file, not a link"))
            else:
                out.append(_unread(e, Problem.LINKED, f"{shown} is a hard link ({names} names: {', '.join(inside)}): a "
                                   "submission is a file of one name, the student's own; hand in a copy"))
        else:
            out.append(e)
    return out


def _names_in_class(directory: Path, identity: tuple[int, int]) -> list[str]:
    """Every name beneath directory of the file with this identity, no link followed."""
    found, folders = [], [directory]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as it:
                for d in it:
                    if d.is_dir(follow_symlinks=False):
                        folders.append(Path(d.path))
                    elif d.inode() == identity[1] and d.stat(follow_symlinks=False).st_dev == identity[0]:
                        found.append(str(Path(d.path).relative_to(directory)))
        except OSError:
            continue
    return sorted(found)


def _identical(entries: list[Entry], directory: Path) -> list[Entry]:
    """Each entry read with the other students whose file holds the same bytes (a hint an
    instructor reads; nothing is marked down)."""
    digests: dict[str, list[Entry]] = {}
    for e in entries:
        if e.source is not None:
            digests.setdefault(e.source.sha256, []).append(e)
    return [dataclasses.replace(e, identical_to=tuple(_shown(o, directory) for o in digests[e.sha256] if o is not e))
            if e.source is not None else e for e in entries]


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
    """Every student's submission under directory, sorted by student, each file read once (its
    Entry's source)."""
    entries = _other_students(_found(directory, file_name=file_name, roster=roster), directory)
    return _identical(_read_all(entries, directory), directory)


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
            entries.append(Entry(ident, None, Problem.MISSING, f"no folder or file for {user or ident} in {directory}"))
    for name, e in by_folder.items():            # folders the roster does not name are still graded
        if name not in claimed:
            entries.append(dataclasses.replace(e, detail=(e.detail + "; " if e.detail else "") + "not on the roster"))
    return sorted(entries, key=lambda e: e.student)
