"""A secret under /usr, which every wall lets be read (the toolchain's and the system's folders):
only its owner and mode keep it closed, so it shows a walled process runs as nobody. Shared by the
build's and the child's wall variants (tests/test_build_wall_variants.py, test_run_wall_variants.py)."""

import os
from pathlib import Path

import pytest


def root_only_file_in_usr(folder_name: str, text: str):
    """Yield a function that sets the file's mode and returns its path; the file (in a fresh folder
    under /usr/local/share) and its folder are removed after. Skips where that needs root."""
    if os.geteuid() != 0 or not os.access("/usr/local/share", os.W_OK):
        pytest.skip("writing a root-only file under /usr needs root")
    folder = Path("/usr/local/share") / folder_name
    folder.mkdir(mode=0o755)
    secret = folder / "root-only.txt"
    secret.write_text(text)
    try:
        def with_mode(mode: int) -> str:
            secret.chmod(mode)
            return str(secret)
        yield with_mode
    finally:
        secret.unlink(missing_ok=True)
        folder.rmdir()
