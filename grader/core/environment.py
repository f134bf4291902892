"""The environment of every process that touches a submission, written once: each build's ninja
and compilers (toolchain/running.py) and every child (run/sandbox.py: the emulator's child, the
recorder, the measuring process, the profiler and the child under it).

It is built from an allow-list, never from the grader's own environment: a GRADER_TOKEN, a CI
secret, a cloud key (AWS_*), the course server's variables, a class folder named in a variable,
PYTHONPATH, VIRTUAL_ENV, an OLDPWD, none of them reaches a process a student's text drives (a
build prints what `.include "/proc/self/environ"` reads into its compile error; a launcher reads
its own `environ`). What each gets:

- PATH: the folders the step names (a build's toolchain: nvcc's, the host compiler's, ninja's),
  then the system's (`SYSTEM_PATH`);
- LANG and LC_ALL: `LOCALE`, the same on every machine (so a compiler's messages read alike);
- HOME, TMPDIR, TMP and TEMP: the process's own folder (a build's room's tmp/, a child's folder);
- LD_LIBRARY_PATH: the grader's, its absolute folders only (`library_path`): the loader finds a
  GPU's driver and runtime through it where they are installed outside the system's folders;
- the variables its backend names (core/backend.py's Backend.environment: the devices it may see,
  the toolkit's home), each as the grader has it;
- and what the step sets itself (`extra`: a child's PYTHONPATH, computed from where its packages
  lie, its device).

The name of this module says what it owns (the environment), as fswall owns the file-system wall
and limits the resource limits: a process's contract is these three and its namespaces.
Only the standard library: the child imports core/ before its wall goes up.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
LOCALE = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def library_path() -> str:
    """The grader's LD_LIBRARY_PATH, absolute folders only (a relative entry, or an empty one, which
    the loader reads as the current folder, would load a library from the process's own folder)."""
    return os.pathsep.join(p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if os.path.isabs(p))


def contract_environment(*, home: str, path: Iterable[str] = (), keep: Iterable[str] = (),
                         extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of one process that touches a submission (the module's docstring):
    home its own folder, path the folders its tools lie in (before the system's), keep the names of
    the grader's variables its backend needs (Backend.environment), extra what the step sets."""
    env = {"PATH": os.pathsep.join(dict.fromkeys(p for p in (*path, *SYSTEM_PATH) if os.path.isabs(p))),
           **LOCALE, "HOME": home, "TMPDIR": home, "TMP": home, "TEMP": home}
    libraries = library_path()
    if libraries:
        env["LD_LIBRARY_PATH"] = libraries
    for name in keep:
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(extra or {})
    return env
