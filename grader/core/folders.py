"""The own folders of the children and of the builds: where they go (a folder that a process
dropped to nobody, as everything that touches a submission is where the grader runs as root, can
enter), and sweeping those a killed grader left behind.

Imports nothing of the grader's.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import time

FALLBACK_BASES = ("/tmp", "/var/tmp", "/dev/shm")
PREFIXES = ("grader-run-", "grader-build-")       # a child's folder, a build's
NOBODY = 65534                  # the user (and group) a child or a build runs as where the grader is root
STALE_FOLDER_S = 6 * 3600.0     # a child's folder lives as long as its run (minutes): older ones were left


@functools.cache
def sweep_stale_folders_once() -> None:
    sweep_stale_folders(tempfile.gettempdir())


def sweep_stale_folders(*bases: str) -> None:
    """Remove the children's and builds' folders that a killed grader of this user left behind (a
    SIGKILL gives it no chance to): those older than STALE_FOLDER_S (Worker and the first build do
    it once a process). As root, a build's folder belongs to nobody: its parent's owner is ours."""
    now = time.time()
    for base in bases + FALLBACK_BASES:
        with contextlib.suppress(OSError):
            for entry in os.scandir(base):
                if not entry.name.startswith(PREFIXES) or not entry.is_dir(follow_symlinks=False):
                    continue
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    ours = st.st_uid == os.geteuid() or (os.geteuid() == 0 and st.st_uid == NOBODY)
                    if ours and now - st.st_mtime > STALE_FOLDER_S:
                        remove_tree(entry.path)


def others_can_enter(folder: str) -> bool:
    """Whether a user who owns nothing on the way (nobody) can reach folder: every folder from
    the root down to it has the others' execute bit."""
    path = os.path.realpath(folder)
    while True:
        try:
            if not os.stat(path).st_mode & 0o001:
                return False
        except OSError:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


@functools.cache
def child_folder_base() -> tuple[str | None, list[str]]:
    """Where the children's own folders go, and what the grader changed to find it (for result.json).

    The temporary directory (TMPDIR), unless the grader runs as root and the child, which drops
    to nobody, could not enter it (a TMPDIR under a private folder, as `mktemp -d` makes): then
    the first of /tmp, /var/tmp and /dev/shm that it can enter, and the change is said. None of
    them: the temporary directory all the same (the child will report what it could not open)."""
    base = tempfile.gettempdir()
    if os.geteuid() != 0 or others_can_enter(base):
        return None, []
    for fallback in FALLBACK_BASES:
        if os.path.isdir(fallback) and others_can_enter(fallback) and os.access(fallback, os.W_OK):
            return fallback, [f"the children's folders are under {fallback}: they run as nobody, who cannot "
                              f"enter the temporary directory {base} (a folder on its way lacks o+x)"]
    return None, [f"the children run as nobody, who cannot enter the temporary directory {base}, and none of "
                  f"{', '.join(FALLBACK_BASES)} could be used instead: give TMPDIR a folder others can enter"]


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def own_folder(prefix: str, base: str | None = None) -> str:
    """A fresh folder for one child or one build, in base (else where child_folder_base says); where
    the grader runs as root it belongs to nobody (mode 0700), who runs what works in it."""
    if base is None:
        base, _ = child_folder_base()
    folder = tempfile.mkdtemp(prefix=prefix, dir=base)
    if os.geteuid() == 0:
        os.chown(folder, NOBODY, NOBODY)
    return folder
