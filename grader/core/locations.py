"""Where the grader's data lives: the exercises (rubrics/) and the reference kernels (reference/),
and the cache of builds and cases (cache_root).

In a checkout (an editable install, or PYTHONPATH=. on a GPU machine) they are the folders at
the top of the repository; an installed wheel carries the same files as grader/data/ (see
pyproject.toml). The checkout wins when the package runs from one.
"""

from __future__ import annotations

import os
from pathlib import Path

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
    env = os.environ.get("GRADER_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "grader"
