"""A digest kept beside each file the cache reuses, checked before it is reused.

A build's library and object, the fatbinaries the measuring process loads and every case's inputs
and answers are written once and read by every later grade. A file truncated by a full disk, or
overwritten by anything, must be rebuilt, never used: a truncated library crashes every student's
child, and inputs of the right size but the wrong bytes fail a correct kernel.

seal(path) writes `<name>.seal` beside the file: its SHA-256 and the stamp (size, mtime, inode)
it had then. intact(path) is True where the seal is there and the file still has that digest. The
digest is recomputed where the stamp changed, or always with full=True (the small files: a
library's 2 MB hash in about 2 ms); an unchanged stamp vouches for a large file's bytes (the timed
shape's inputs are 64 MiB), since whatever rewrites a file moves its time or size.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

_CHUNK = 1 << 22


def _seal_path(path: Path) -> Path:
    return path.with_name(path.name + ".seal")


def digest_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def seal(path: Path, digest: str | None = None) -> None:
    """Write path's seal (digest: its SHA-256 where the writer has it already). Best effort: a
    read-only cache is only slower (the file is then not reused)."""
    try:
        record = {"sha256": digest or digest_of(path), "stamp": _stamp(path.stat())}
        tmp = _seal_path(path).with_name(f"{_seal_path(path).name}.{os.getpid()}")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, _seal_path(path))
    except OSError:
        pass


def check(path: Path, *, full: bool = False) -> str:
    """'' where path is intact (its seal is there and matches), else what is wrong with it."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"{path.name} cannot be read ({exc.strerror})"
    try:
        record = json.loads(_seal_path(path).read_text())
        want, stamp = str(record["sha256"]), list(record["stamp"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{path.name} has no valid seal beside it"
    if stamp[:1] != [st.st_size]:
        return f"{path.name} is {st.st_size} bytes, {stamp[0]} when it was written"
    if stamp == _stamp(st) and not full:
        return ""
    try:
        got = digest_of(path)
    except OSError as exc:
        return f"{path.name} cannot be read ({exc.strerror})"
    if got != want:
        return f"{path.name} does not hold the bytes it was written with (SHA-256 {got[:12]}, sealed {want[:12]})"
    if stamp != _stamp(st):
        seal(path, got)                         # the same bytes, touched: the new stamp vouches from now on
    return ""


def unlink_with_seal(path: Path) -> None:
    for p in (path, _seal_path(path)):
        try:
            p.unlink()
        except OSError:
            pass


def say_healed(what: str, problem: str) -> None:
    """Tell the user (stderr) that a cached file failed its check and is made again."""
    sys.stderr.write(f"grader: the cached {what} failed its check ({problem}); made again.\n")
