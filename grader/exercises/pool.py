"""The next GPU run's private cases, drawn ahead of it.

A GPU run's random cases come from a secret of its own (plan.py), so they cannot be cached the
way public cases are; drawing them needs torch in the grading process (the generators and the
float64 answers are written with it), which costs more than the rest of a warm grade (on the
H200's host: torch's import alone about 1.5 s; drawing the two timed sets and their answers as
much again). So each `grader submit` on a GPU, once its grade is done, starts a detached process
(`python -m grader.exercises.pool`) that draws the *next* run's private cases: every private case's
inputs, answers and prepared answers, with a new secret, into a folder under the cache's runs/.
The next grade claims that folder (renaming it, so two graders never share one), uses it once and
removes it. When none is ready (the first grade of a machine, a batch, two grades in quick
succession) the grade draws its own.

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
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grader.cache import RUNS
from grader.exercises.plan import Case

SECRET_FILE = "secret"
STALE_S = 3600.0          # a claimed or half-drawn folder older than this was left by a killed grader
READY_STALE_S = 7 * 86400.0


def key_of(rubric, reference, cases: list[Case]) -> str:
    """What a ready folder was drawn for: a folder drawn for other cases or another reference is never used."""
    from grader.exercises.data import _SHARED

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
    import shutil

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
    from grader.exercises import data
    from grader.verdict.checks import expected_for

    def draw(case: Case) -> None:
        expected_for(case, rubric, reference, data.materialize(rubric, reference, case, folder), folder, keep=True)

    with ThreadPoolExecutor(max_workers=max(2, min(threads, (os.cpu_count() or 2) // 2))) as pool:
        list(pool.map(draw, sorted((c for c in cases if c.private), key=lambda c: not c.timed)))


def draw_ahead(rubric, reference, cache: Path) -> Path | None:
    """Draw the next run's private cases into a ready folder (what the detached process does);
    None when one is ready already or another process is drawing it."""
    from grader.grading import _all_cases

    secret = secrets.randbits(64)
    cases = [c for c in _all_cases(rubric, "cuda", secret) if c.private]
    key = key_of(rubric, reference, cases)
    runs = runs_folder(cache)
    with open(runs / f".draw-{key}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None
        if any(e.name.startswith(f"ready-{key}-") for e in os.scandir(runs)):
            return None
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


def start_drawing_ahead(rubric_path: str) -> None:
    """Start the detached process that draws the next run's private cases; never fails a grade.
    GRADER_DRAW_AHEAD=0 turns it off (every GPU grade then draws its own)."""
    if os.environ.get("GRADER_DRAW_AHEAD", "1") == "0":
        return
    with contextlib.suppress(OSError):
        subprocess.Popen([sys.executable, "-m", "grader.exercises.pool", rubric_path],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, preexec_fn=lambda: os.nice(10))


def main(argv: list[str]) -> int:
    from grader.build import cache_root
    from grader.exercises import load_reference
    from grader.rubric import load_rubric

    rubric = load_rubric(Path(argv[0]))
    draw_ahead(rubric, load_reference(rubric), cache_root())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
