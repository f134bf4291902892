"""Files replaced whole: written beside their place under a name of their own, then renamed.

A reader (a course platform picking up gradebook.csv, a student opening report.html, a rerun
reading result.json) sees the old file or the new one, never half of either, and an interrupted
write leaves the old file as it was.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def replace_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def replace_text(path: Path, text: str) -> None:
    """text written as UTF-8. A file name that is not UTF-8 (Python holds its bytes as lone
    surrogates) is written with U+FFFD for each such byte: a report or a CSV stays valid UTF-8."""
    replace_bytes(path, text.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode("utf-8"))
