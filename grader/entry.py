"""The `grader` command's entry (the console script and `python -m grader`): before the command
line's library (click), the rubrics and the GPU's probe are imported, the command's Launcher is made
(grade/launcher.py): for `grader submit` on a machine with a GPU it starts the measuring process now,
whose CUDA context is the longest wait of a warm grade. Then the command runs (grader/cli), handed
that Launcher."""

from __future__ import annotations

import sys

from grader.grade.launcher import Launcher


def main() -> None:
    launcher = Launcher.for_command(sys.argv[1:])
    from grader.cli import main as cli_main  # noqa: PLC0415  (after the head start, which click and the rubrics would delay)

    cli_main(launcher)
