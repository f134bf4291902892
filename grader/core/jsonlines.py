"""The grader's own JSON-lines files (attempts.jsonl, a batch's results.jsonl), read as untrusted.

Whatever is in them (a line cut short by an interruption, bytes that are not UTF-8, a line that
is JSON but not an object, a disk error's garbage), reading yields the rows that are whole objects
and skips the rest: a bad line means that grade is done again, never a traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator


def rows(path: Path) -> Iterator[dict]:
    """Every line of path that is a JSON object; nothing where path is missing or unreadable."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return
    for raw in data.splitlines():
        try:
            row = json.loads(raw.decode("utf-8"))
        except ValueError:                      # UnicodeDecodeError is one too
            continue
        if isinstance(row, dict):
            yield row


def append(path: Path, line: str) -> None:
    """Append one line (flushed), starting it on a line of its own where the file's last line was
    cut short, so that the new row is never glued to the broken one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        if f.tell() > 0:
            with path.open("rb") as r:
                r.seek(-1, os.SEEK_END)
                if r.read(1) != b"\n":
                    f.write(b"\n")
        f.write(line.encode("utf-8") + b"\n")
        f.flush()
