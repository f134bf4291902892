"""A student's file, read once, through a descriptor that no link redirects.

The grader may run as root, and a class folder is written by its students: a path checked and
then opened can be a link by the time it is opened, and a hard link is no link at all to a check
of the path. So a file is opened once, without following links (beneath a folder's descriptor in
a batch: `openat2` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or, where the kernel lacks it, a
walk from that descriptor one component at a time, each opened O_NOFOLLOW), the descriptor is
checked with fstat (a regular file; in a batch, of one name), and what it reads is a `SourceFile`:
the bytes every later step builds, hashes, keys and quotes. Its `path` is a `HeldPath`, which
reads as those bytes, so a step that takes a path and quotes its lines quotes what was built,
never what the path holds now.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import io
import os
import platform
import stat
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import UsageError

# What is read of a file: a submission may be at most this many bytes of source (core/source.py
# refuses a longer one, by this count and its size); one byte more is read to see it is longer.
READ_LIMIT = 256 * 1024

_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
# No blocking on a FIFO or a device opened by name (it is refused by fstat, never read), no
# controlling terminal, nothing inherited by a child.
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_openat2_missing = _OPENAT2 is None


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class HeldPath(type(Path())):  # type: ignore[misc]
    """A path that reads as the bytes read from it once: read_bytes, read_text and open() for
    reading never touch the file system (for a path that was refused, not read, they raise
    PermissionError naming why). Its name, parent and stat() are the path's own. A path derived
    from it (parent, with_name, resolve) is a plain path of the file system."""

    def read_bytes(self) -> bytes:
        return self._held_bytes() if _holds(self) else super().read_bytes()

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        if not _holds(self):
            return super().read_text(encoding=encoding, errors=errors)
        return self._held_bytes().decode(encoding or "utf-8", errors or "strict")

    def open(self, mode: str = "r", buffering: int = -1, encoding: str | None = None, errors: str | None = None,
             newline: str | None = None):
        if not _holds(self) or any(c in mode for c in "wax+"):
            return super().open(mode, buffering, encoding, errors, newline)
        data = io.BytesIO(self._held_bytes())
        return data if "b" in mode else io.TextIOWrapper(data, encoding=encoding or "utf-8", errors=errors,
                                                          newline=newline)

    def _held_bytes(self) -> bytes:
        held = self.__dict__["_held"]
        if held is None:
            raise PermissionError(errno.EACCES, f"not read: {self.__dict__['_refused']}", str(self))
        return held


def _holds(p: Path) -> bool:
    return "_held" in getattr(p, "__dict__", {})


def held(path: Path, data: bytes | None, refused: str = "") -> HeldPath:
    """path as a HeldPath reading as data (None: a path refused, never read; refused says why)."""
    out = HeldPath(path)
    out.__dict__.update(_held=data, _refused=refused)
    return out


@dataclass(frozen=True)
class SourceFile:
    """A submission as read, once: the path it was read from (a HeldPath, reading as data), the
    bytes (at most READ_LIMIT + 1 of them), their sha256, the file's size and its identity
    (st_dev, st_ino) when it was read."""

    path: Path
    data: bytes
    sha256: str
    size: int
    identity: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class Unread:
    """Why a file was not read: kind "linked" (a link on the way, or more than one name), "missing"
    or "unreadable" (not a regular file, or not opened), with what to say; identity and names
    (st_nlink) where the file was opened and found to have more than one name."""

    kind: str
    why: str
    identity: tuple[int, int] | None = None
    names: int = 1


def open_beneath(dir_fd: int, relative: str | bytes) -> int:
    """A descriptor for relative beneath the folder open at dir_fd, no link followed on the way
    or at its end: OSError ELOOP for a link, EXDEV for a path that leaves the folder."""
    global _openat2_missing
    rel = os.fsencode(relative)
    if not _openat2_missing:
        how = _OpenHow(_FILE_FLAGS, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        fd = libc.syscall(ctypes.c_long(_OPENAT2), ctypes.c_int(dir_fd), ctypes.c_char_p(rel), ctypes.byref(how),
                          ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EPERM):   # EPERM: a container's filter that predates openat2
            raise OSError(err, os.strerror(err), os.fsdecode(rel))
        _openat2_missing = True
    return _walk_beneath(dir_fd, rel)


def _walk_beneath(dir_fd: int, rel: bytes) -> int:
    """open_beneath where openat2 is missing: each folder of the path opened from the last one's
    descriptor with O_NOFOLLOW | O_DIRECTORY, the file with O_NOFOLLOW; "..", "." and an absolute
    path refused."""
    parts = rel.split(b"/")
    if rel.startswith(b"/") or any(p in (b"", b".", b"..") for p in parts):
        raise OSError(errno.EXDEV, "leaves the folder it is read beneath", os.fsdecode(rel))
    fd = os.dup(dir_fd)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ENOTDIR and _is_link(part, fd):     # O_NOFOLLOW | O_DIRECTORY on a link
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fsdecode(rel)) from None
                raise
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], _FILE_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def _is_link(name: bytes, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def read_descriptor(fd: int, shown: Path, *, one_name: bool) -> SourceFile | Unread:
    """The file open at fd, read (closed whatever comes): a regular file only; with one_name, one
    of a single name only (a second name may be a classmate's file or a file outside the class,
    and its bytes are not read). shown: the path it was opened by, said in messages and held by
    the SourceFile."""
    try:
        st = os.fstat(fd)
        identity = (st.st_dev, st.st_ino)
        if not stat.S_ISREG(st.st_mode):
            return Unread("unreadable", f"{shown} is not a regular file ({_kind(st.st_mode)}): a submission is a "
                          "file of CUDA source")
        if one_name and st.st_nlink > 1:
            return Unread("linked", f"{shown} has {st.st_nlink} names (hard links)", identity, st.st_nlink)
        chunks, left = [], READ_LIMIT + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return SourceFile(held(shown, data), data, hashlib.sha256(data).hexdigest(), max(st.st_size, len(data)), identity)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a plain file"


def read_beneath(dir_fd: int, relative: str | bytes, shown: Path) -> SourceFile | Unread:
    """A student's file at relative beneath the folder open at dir_fd, read once (open_beneath,
    read_descriptor with one name), or why it was not."""
    try:
        fd = open_beneath(dir_fd, relative)
    except OSError as exc:
        return _unopened(exc, shown)
    return read_descriptor(fd, shown, one_name=True)


def _unopened(exc: OSError, shown: Path) -> Unread:
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        return Unread("linked", f"{shown} is a link, or leads through one (found when it was opened to be read, "
                      "after the class was listed): a submission is a file of the student's own, and it was not read")
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return Unread("missing", f"{shown}: went away after the class was listed")
    return Unread("unreadable", f"{shown}: {exc.strerror or exc}")


def read_file(path: Path) -> SourceFile:
    """The file `grader submit` grades, read once: its last component not followed where it is a
    link (UsageError naming what it points to), a regular file only. UsageError for a folder, a
    missing file and one that cannot be read."""
    path = Path(path)
    try:
        fd = os.open(path, _FILE_FLAGS | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            target = os.readlink(path) if path.is_symlink() else "?"
            raise UsageError(f"{path} is a link (to {target}): grade the file itself") from None
        if exc.errno == errno.ENOENT:
            raise UsageError(f"{path}: no such file") from None
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    read = read_descriptor(fd, path, one_name=False)
    if isinstance(read, Unread):
        if os.path.isdir(path):
            raise UsageError(f"{path}: a folder, not a .cu file (`grader batch {path}` grades a folder of submissions)")
        raise UsageError(read.why)
    return read
