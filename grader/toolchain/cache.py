"""The build cache: an entry's key, its outputs kept (whole, sealed) and read back, how big it
is, and least-recently-used pruning.

Every build lives in a directory of its own under cache_root(), named by a hash (digest) of its
inputs; a build touches its directory each time it is used. A build's outputs are copied in
whole or not at all (keep), and its record (build.json: the compiler's log, the kernels'
resources, the compiler's version, the wall it ran behind) is read back only where its outputs
pass their seals (cached_build). Pruning deletes the least recently used directories until the
cache fits its cap. It is safe while other graders use the same cache: a directory used in the
last `keep_recent_s` seconds is never deleted (a grade takes well under that), nor one whose
lock another process holds (a build in progress).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.core import sealed
from grader.core.folders import NOBODY
from grader.core.locations import RUNS, cache_root
from grader.toolchain.outcome import KernelResources


@dataclass(frozen=True)
class Entry:
    path: Path
    bytes: int
    last_used: float


@dataclass(frozen=True)
class CacheReport:
    root: Path
    entries: int
    bytes: int
    pruned: int = 0
    freed_bytes: int = 0


def digest(*parts: str | bytes) -> str:
    """The key of a cache entry: a hash of everything that decides its output."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def touch(directory: Path) -> None:
    """Mark a cache entry used (least-recently-used pruning reads this time)."""
    try:
        os.utime(directory, None)
    except OSError:
        pass


# A build's kept outputs (its library and object): the grader's user's alone, and, where the grader is
# root, its children's too (they run as nobody and load the library: the cache's group is nobody's,
# core/locations.private_cache).
ENTRY_MODE = 0o640 if os.geteuid() == 0 else 0o600


def keep(made: Path, kept: Path) -> None:
    """A build's output copied from its room into the cache (whole, or not at all)."""
    tmp = kept.with_name(f"{kept.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        shutil.copyfile(made, tmp)
        if os.geteuid() == 0:
            os.chown(tmp, -1, NOBODY)               # an entry made before the cache's group was nobody's
        os.chmod(tmp, ENTRY_MODE)
        os.replace(tmp, kept)
    finally:
        tmp.unlink(missing_ok=True)


def keep_text(path: Path, data: bytes) -> None:
    """A file of a build kept in its entry to read (the student's source, the harness, build.ninja):
    the grader's user's alone (0600) whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(fd, 0o600)
        f.write(data)


def cached_build(directory: Path, library: Path, obj: Path, meta: Path) -> dict | None:
    """A cached build's record where its library and object pass their seals (core/sealed.py) and
    build.json reads; otherwise every output is removed, said on stderr, and None: built again."""
    problem = sealed.check(library, full=True) or sealed.check(obj, full=True)
    data = None
    if not problem:
        try:
            data = json.loads(meta.read_text())
            if not (isinstance(data, dict) and isinstance(data.get("log"), str) and isinstance(data.get("compiler"), str)
                    and isinstance(data.get("resources"), list)):
                problem, data = "build.json is not the record a build writes", None
            else:
                [KernelResources(**r) for r in data["resources"]]
        except (OSError, ValueError, TypeError) as exc:
            problem, data = f"build.json cannot be read ({exc})", None
    if data is not None:
        return data
    if "no valid seal" not in problem:             # a build of a grader before seals: rebuilt quietly
        sealed.say_healed(f"build {directory.name}", problem)
    for path in (library, obj, meta, *directory.glob("device-*.fatbin"), *directory.glob("*.binutils.json")):
        sealed.unlink_with_seal(path)
    return None


def keep_record(meta: Path, *, log: str, resources: list[KernelResources], compiler: str, confined: bool,
                wall: str) -> None:
    """A build's record (build.json, what cached_build reads back), written whole or not at all."""
    tmp = meta.with_name(f"build.json.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)    # the grader's alone
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"log": log, "resources": [asdict(r) for r in resources], "compiler": compiler,
                            "confined": confined, "wall": wall}))
    os.replace(tmp, meta)


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def entries(root: Path | None = None) -> list[Entry]:
    root = root or cache_root()
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        if child.name == RUNS:                    # runs in progress: each removes its own (exercises/data.py)
            continue
        if child.is_dir() and not child.is_symlink():
            try:
                found.append(Entry(child, _size(child), child.stat().st_mtime))
            except OSError:
                continue
    return sorted(found, key=lambda e: e.last_used)


def _busy(path: Path) -> bool:
    lock = path / ".lock"
    if not lock.exists():
        return False
    try:
        with open(lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(f, fcntl.LOCK_UN)
        return False
    except OSError:
        return True


def max_bytes(configured_mib: int) -> int:
    """The cap: GRADER_CACHE_MAX_MIB when set, else the rubric's limits.cache_max_mib."""
    env = os.environ.get("GRADER_CACHE_MAX_MIB")
    return (int(env) if env and env.isdigit() else configured_mib) << 20


def prune(*, limit_bytes: int, root: Path | None = None, keep_recent_s: float = 600.0) -> CacheReport:
    """Delete least-recently-used builds until the cache holds at most limit_bytes."""
    root = root or cache_root()
    found = entries(root)
    total = sum(e.bytes for e in found)
    pruned = freed = 0
    now = time.time()
    for e in found:
        if total <= limit_bytes:
            break
        if now - e.last_used < keep_recent_s or _busy(e.path):
            continue
        shutil.rmtree(e.path, ignore_errors=True)
        if not e.path.exists():
            total -= e.bytes
            freed += e.bytes
            pruned += 1
    return CacheReport(root, len(found) - pruned, total, pruned, freed)


STAMP = ".pruned"


def prune_if_grown(*, limit_bytes: int, root: Path | None = None, every_s: float = 3600.0,
                   at_most_every_s: float = 0.0) -> CacheReport | None:
    """prune() when the cache gained an entry since the last prune (or the last is every_s old),
    and the last is at least at_most_every_s old; else None: sizing every build costs a warm grade
    more than the grade's own checks, a grade that built nothing new cannot have pushed the cache
    past its cap, and a batch (whose every grade builds) sized a cache growing with the class after
    each one."""
    root = root or cache_root()
    stamp = root / STAMP
    try:
        last = stamp.stat().st_mtime_ns
        age_ns = time.time_ns() - last
        if age_ns < at_most_every_s * 1e9 or (root.stat().st_mtime_ns <= last and age_ns < every_s * 1e9):
            return None
    except OSError:
        pass
    done = prune(limit_bytes=limit_bytes, root=root)
    try:
        stamp.touch()
    except OSError:
        pass                                    # a read-only cache: pruned again next time
    return done


def report(root: Path | None = None) -> CacheReport:
    root = root or cache_root()
    found = entries(root)
    return CacheReport(root, len(found), sum(e.bytes for e in found))
