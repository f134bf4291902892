"""Where the grader's data lives: the exercises (rubrics/) and the reference kernels (reference/),
and the cache of builds and cases (cache_root).

In a checkout (an editable install, or PYTHONPATH=. on a GPU machine) they are the folders at
the top of the repository; an installed wheel carries the same files as grader/data/ (see
pyproject.toml). The checkout wins when the package runs from one.
"""

from __future__ import annotations

import os
from pathlib import Path

from grader.core.folders import NOBODY

PACKAGE_DIR = Path(__file__).resolve().parent.parent          # grader/ (this file is grader/core/locations.py)
_CHECKOUT = PACKAGE_DIR.parent

RUNS = "runs"          # cache/runs: the folders of runs in progress (their private inputs), never pruned as a build


def _data_dir(name: str) -> Path:
    """The checkout's folder `name`, or the installed package's copy of it."""
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / name).is_dir():
        return _CHECKOUT / name
    return PACKAGE_DIR / "data" / name


# The exercise a command grades when none is named, found nowhere else: rubrics/<it>.yaml and
# submissions/<it>/ (a new exercise changes nothing here; this only picks the course's first).
DEFAULT_EXERCISE = "bias_gelu_fused"


def rubrics_dir() -> Path:
    return _data_dir("rubrics")


def reference_dir() -> Path:
    return _data_dir("reference")


def cache_root() -> Path:
    """The build cache ($GRADER_CACHE_DIR, else the user's cache folder's grader/), made private
    (private_cache) the first time it is named."""
    env = os.environ.get("GRADER_CACHE_DIR")
    if env:
        path = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "grader"
    if str(path) not in _MADE_PRIVATE:
        private_cache(path)
    return path


_MADE_PRIVATE: set[str] = set()


def private_cache(path: Path) -> None:
    """The cache's folder, made where it is missing, closed to every other account whatever the umask
    (it holds every graded source, the cases' private inputs and the builds): 0700, the grader's
    user's alone; where the grader is root, whose children and builds run as nobody and load their
    libraries from it, 2750 with nobody's group (core/folders.NOBODY): root and nobody's group enter
    it, and what is made in it takes that group; no student's account does. A folder of another
    user, or one that cannot be made (grade/faults.py says so when it is used), is left as it is."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.stat(path)
        if st.st_uid != os.geteuid():
            return
        if os.geteuid() == 0:
            if st.st_gid != NOBODY:
                os.chown(path, 0, NOBODY)
            os.chmod(path, 0o2750)
        else:
            os.chmod(path, 0o700)
    except OSError:
        return
    _MADE_PRIVATE.add(str(path))
