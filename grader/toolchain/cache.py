"""The build cache: how big it is, and least-recently-used pruning.

Every build lives in a directory of its own under cache_root(), named by a hash
of its inputs; a build touches its directory each time it is used. Pruning
deletes the least recently used directories until the cache fits its cap. It
is safe while other graders use the same cache: a directory used in the last
`keep_recent_s` seconds is never deleted (a grade takes well under that), nor
one whose lock another process holds (a build in progress).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from grader.core.locations import RUNS, cache_root


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
