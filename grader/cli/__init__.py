"""The `grader` command: a thin click layer over the library, its commands by who runs them
(student.py, instructor.py, machine.py).

Exit codes: 0 graded and correct; 1 graded and incorrect; 2 usage or rubric
error; 3 not gradable (compile error, rejected, crashed, timeout);
4 infrastructure (no nvcc or g++, --backend cuda without a GPU).
"""

from __future__ import annotations

import signal
import sys

import click

from grader import __version__
from grader.cli import instructor, machine, student
from grader.core.errors import Exit


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="grader", message="%(prog)s %(version)s")
def cli() -> None:
    """Autograder for CUDA kernel exercises (biasGeluFused, ropeHalfSplit, geluSum): compile, check, time and
    grade a kernel."""


for _module in (student, instructor, machine):
    for _command in _module.COMMANDS:
        cli.add_command(_command)


def _interrupted(signum, _frame) -> None:
    """SIGTERM (what Slurm, CI runners and `timeout` send) handled as Ctrl-C: the same clean stop."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        code = cli.main(prog_name="grader", standalone_mode=False)
    except (KeyboardInterrupt, click.exceptions.Abort):
        from grader.core import processes

        processes.end_all()
        click.echo("grader: interrupted; nothing unfinished was kept.", err=True)
        sys.exit(Exit.INTERRUPTED)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
