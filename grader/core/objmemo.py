"""What a binutils tool reads from a built file, kept beside the file.

A build's object and library never change once written, so what nm, c++filt or readelf say of
them is worked out once and read back by every later grade of the same build (a warm
`grader submit` runs none of them). The file's size and time are checked all the same.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable


def read_beside(obj: Path, what: str, compute: Callable[[], Any]) -> Any:
    """compute()'s value (JSON data) for obj, kept in obj's '<name>.binutils.json' under what."""
    memo = obj.with_name(obj.name + ".binutils.json")
    st = obj.stat()
    stamp = [st.st_size, st.st_mtime_ns]
    try:
        saved = json.loads(memo.read_text())
        if saved.get("stamp") != stamp:
            saved = {"stamp": stamp}
    except (OSError, ValueError):
        saved = {"stamp": stamp}
    if what in saved:
        return saved[what]
    saved[what] = compute()
    try:
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps(saved))
        os.replace(tmp, memo)
    except OSError:
        pass                                    # a read-only cache: only slower
    return saved[what]
