"""The `grader` command's entry (the console script and `python -m grader`): before the command
line's library (click), the rubrics and the GPU's probe are imported, `grader submit` on a machine
with a GPU starts its measuring process (grade/early.head_start), whose CUDA context is the longest
wait of a warm grade; then the command runs (grader/cli)."""

from __future__ import annotations

import sys

from grader.grade.early import head_start


def main() -> None:
    head_start(sys.argv[1:])
    from grader.cli import main as cli_main  # noqa: PLC0415  (lazy: after the head start, which click and the rubrics would delay)

    cli_main()
