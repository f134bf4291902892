"""Where a run's cases lie (Store), and the next GPU run's private cases, drawn ahead of it.

A GPU run's random cases come from a secret of its own (plan.py), so they cannot be cached the
way public cases are; drawing them and computing their float64 answers costs more than the rest
of a warm grade (the two timed sets are 16M values each; with a reference written with torch,
its import as well: 1.5 s on a warm H200 host, 4 to 6 s on a fresh one). So each `grader
submit` on a GPU, once its grade is done, starts a detached process (`python -m
grader.exercises.pool`) that draws the *next* run's private cases: every private case's
inputs, answers and prepared answers, with a new secret, into a folder under the cache's runs/.
The next grade claims that folder (renaming it, so two graders never share one), uses it once and
removes it. READY_DEPTH folders are kept ready, so that a grade right after another (a student
who submits again at once) still finds one; when none is ready (the first grade of a machine, a
batch, several grades in quick succession) the grade draws its own.

A ready folder is named `ready-<key>-<128 random bits>`: the key names what it was drawn for
(rubric, reference, generators, the cases, the tolerance), the random part keeps anyone who cannot
list runs/ (0711) from finding it. A process that runs student code cannot list runs/ and is never
given a path in it; where the grader runs as root, the children run as nobody and the folder's
answers and secret are the grader's alone (0600).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grader.core.locations import RUNS, cache_root
from grader.exercises import Reference, load_reference
from grader.exercises.casefiles import _SHARED
from grader.exercises.plan import Case, run_cases
from grader.exercises.rubric import Rubric, load_rubric

SECRET_FILE = "secret"
STALE_S = 3600.0          # a claimed or half-drawn folder older than this was left by a killed grader
READY_STALE_S = 7 * 86400.0
READY_DEPTH = 2           # ready folders kept for one key: two grades in a row both find one


def key_of(rubric, reference, cases: list[Case]) -> str:
    """What a ready folder was drawn for: a folder drawn for other cases or another reference is never used."""
    private = [(c.name, sorted(c.dims.items()), c.inputs, c.seed, c.chain, c.timed) for c in cases if c.private]
    parts = [rubric.exercise, reference.digest, _SHARED, repr(private),
             repr((rubric.tolerance.rtol, rubric.tolerance.atol, rubric.tolerance.scale))]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def runs_folder(cache: Path) -> Path:
    """cache/runs, which may be entered but not listed by anyone but its owner; old leftovers swept."""
    runs = cache / RUNS
    runs.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        os.chmod(runs, 0o711)
    now = time.time()
    with contextlib.suppress(OSError):
        for old in os.scandir(runs):
            if not old.is_dir(follow_symlinks=False):
                continue
            age = now - old.stat(follow_symlinks=False).st_mtime
            if age > (READY_STALE_S if old.name.startswith("ready-") else STALE_S):
                _remove(Path(old.path))
    return runs


def _remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def new_folder(cache: Path, prefix: str = "run-") -> Path:
    folder = runs_folder(cache) / f"{prefix}{secrets.token_hex(16)}"
    folder.mkdir(mode=0o711)
    return folder


def claim(cache: Path, key: str) -> tuple[Path, int] | None:
    """A ready folder drawn for key, renamed to this run's own, and its secret; None when there is none."""
    runs = cache / RUNS
    try:
        names = [e.name for e in os.scandir(runs) if e.name.startswith(f"ready-{key}-")]
    except OSError:
        return None
    for name in names:
        mine = runs / f"run-{secrets.token_hex(16)}"
        try:
            os.rename(runs / name, mine)              # atomic: one grader gets it
        except OSError:
            continue
        try:
            secret = int((mine / SECRET_FILE).read_text())
        except (OSError, ValueError):
            _remove(mine)
            continue
        os.utime(mine)
        return mine, secret
    return None


def draw_into(folder: Path, rubric, reference, cases: list[Case], *, threads: int = 4) -> None:
    """Every private case's inputs, answers and prepared answers, written into folder (the large ones first)."""
    # not at the top: data imports numpy (75 ms alone, 370 ms in a loaded grade), and a grade's main
    # thread imports this module (grade/children.py) while its drawing thread imports data
    from grader.exercises import data  # noqa: PLC0415  (lazy: numpy, on the drawing thread; see above)

    def draw(case: Case) -> None:
        data.expected_for(case, rubric, reference, data.materialize(rubric, reference, case, folder), folder, keep=True)

    with ThreadPoolExecutor(max_workers=max(2, min(threads, (os.cpu_count() or 2) // 2))) as pool:
        list(pool.map(draw, sorted((c for c in cases if c.private), key=lambda c: not c.timed)))


def draw_ahead(rubric, reference, cache: Path, depth: int = READY_DEPTH) -> Path | None:
    """Draw the next runs' private cases into ready folders (what the detached process does) until
    `depth` are ready, each with a secret of its own; the last one drawn, or None when enough were
    ready already or another process is drawing them."""
    key = key_of(rubric, reference, [c for c in run_cases(rubric, timed=True, secret=0) if c.private])
    runs = runs_folder(cache)
    with open(runs / f".draw-{key}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None
        drawn = None
        # Stopping rule: `depth` folders for this key are ready (a grade may claim one meanwhile:
        # counted again before each draw).
        while sum(1 for e in os.scandir(runs) if e.name.startswith(f"ready-{key}-")) < depth:
            drawn = _draw_one(rubric, reference, cache, runs, key)
        return drawn


def _draw_one(rubric, reference, cache: Path, runs: Path, key: str) -> Path:
    """One ready folder: every private case of a run drawn from a new secret."""
    secret = secrets.randbits(64)
    cases = [c for c in run_cases(rubric, timed=True, secret=secret) if c.private]
    folder = new_folder(cache, ".drawing-")
    try:
        draw_into(folder, rubric, reference, cases)
        secret_file = folder / SECRET_FILE
        secret_file.write_text(str(secret))
        if os.geteuid() == 0:       # the children run as nobody: what they never need stays the grader's
            for p in [secret_file, *folder.rglob("answers.f64"), *folder.rglob("prepared-*.f32")]:
                os.chmod(p, 0o600)
        ready = runs / f"ready-{key}-{secrets.token_hex(16)}"
        os.rename(folder, ready)
        return ready
    except BaseException:
        _remove(folder)
        raise


class Store:
    """Where a run's cases lie: the shared cache, and, for a run with a secret, the run's private
    folder (a ready one drawn ahead by exercises/pool.py when there is one, else a new one),
    removed by close(). One per grade; every step that reads or writes a case asks it (folder_for)."""

    def __init__(self, cache: Path, *, secret: int | None = None, private: Path | None = None, keep: bool = False):
        """keep: a private case's answers are written into the private folder too (a batch's
        store, which every submission of the batch reads)."""
        self.cache = cache
        self.secret = secret
        self.keep = keep
        self.drawn_ahead = private is not None
        self.private = private if private is not None else new_folder(cache) if secret is not None else None

    @classmethod
    def for_batch(cls, cache: Path, rubric: Rubric, reference: Reference, cases_for) -> "Store":
        """A GPU batch's store: one secret for the whole batch (no submission is shown it, and every
        one is timed on the same inputs), its private cases drawn once, now."""
        store = cls(cache, secret=secrets.randbits(64), keep=True)
        try:
            draw_into(store.private, rubric, reference, cases_for(store.secret), threads=8)
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def for_gpu_run(cls, cache: Path, rubric: Rubric, reference: Reference, cases_for) -> "Store":
        """A GPU run's store: the folder drawn ahead for these cases when one is ready, else a new
        secret and an empty folder. cases_for(secret) lists the run's cases."""
        claimed = claim(cache, key_of(rubric, reference, cases_for(0)))
        if claimed is not None:
            return cls(cache, secret=claimed[1], private=claimed[0])
        return cls(cache, secret=secrets.randbits(64))

    @classmethod
    def shared(cls, cache: Path, rubric: Rubric, reference: Reference, cases_for) -> "SharedStore":
        """A batch's store, made (and its cases drawn) by the first grade that needs it."""
        return SharedStore(lambda: cls.for_batch(cache, rubric, reference, cases_for))

    def folder_for(self, case: Case) -> Path:
        if not case.private:
            return self.cache
        if self.private is None:
            raise ValueError(f"{case.name} is private, and this run has no private folder")
        return self.private

    def close(self) -> None:
        if self.private is not None:
            shutil.rmtree(self.private, ignore_errors=True)
            self.private = None


class SharedStore:
    """A Store made once, on first use, by whichever thread asks first; closed by its owner."""

    def __init__(self, make):
        self._make, self._lock, self._store = make, threading.Lock(), None

    def get(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = self._make()
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()


def class_store(rubric: Rubric) -> SharedStore:
    """The store of a run of many grades on a GPU (a batch, the samples): one secret for all of
    them (none is shown it, and every one is timed on the same inputs), its private cases drawn
    once, by the first grade that needs them; the caller closes it."""
    return Store.shared(cache_root(), rubric, load_reference(rubric), lambda s: run_cases(rubric, timed=True, secret=s))


DRAW_AHEAD_NICE = 10


def start_drawing_ahead(rubric_path: str) -> None:
    """Start the detached process that draws the next run's private cases; never fails a grade.
    GRADER_DRAW_AHEAD=0 turns it off (every GPU grade then draws its own)."""
    if os.environ.get("GRADER_DRAW_AHEAD", "1") == "0":
        return
    # No preexec_fn: the process lowers its own priority (main), so that Python may start it
    # without forking this one, which by now holds the timed shape's answers (a fork copies the
    # page tables of all of it, at the end of every grade).
    with contextlib.suppress(OSError):
        subprocess.Popen([sys.executable, "-m", "grader.exercises.pool", rubric_path],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)


def main(argv: list[str]) -> int:
    os.nice(DRAW_AHEAD_NICE)                 # beside the student's next grade, never ahead of it
    rubric = load_rubric(Path(argv[0]))
    draw_ahead(rubric, load_reference(rubric), cache_root())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
