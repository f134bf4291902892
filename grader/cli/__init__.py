"""The `grader` command: a thin click layer over the library, its commands by who runs them
(student.py, review.py, instructor.py, machine.py, serve.py).

Exit codes: 0 graded and correct; 1 graded and incorrect; 2 usage or rubric
error; 3 not gradable (compile error, rejected, crashed, timeout);
4 infrastructure (no nvcc or g++, --backend cuda without a GPU).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import signal
import sys
import threading
import time

import click

from grader import __version__
from grader.cli import common
from grader.core import processes
from grader.core.errors import Exit
from grader.core.locations import rubrics_dir

# Where each command lives, in the order `grader --help` lists them: a command's module is imported
# when it runs (or --help lists it), so `grader submit` imports none of the instructor's or the
# machine's commands (nor the batch they reach).
WHERE = {"submit": "student", "history": "review", "explain": "review", "batch": "instructor",
         "merge": "instructor", "samples": "instructor", "cache": "machine", "exercises": "machine",
         "calibrate": "machine", "rubric-keys": "machine", "serve": "serve"}


class _Commands(click.Group):
    """The grader's commands, each imported from its module (WHERE) when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(WHERE) + [name for name in self.commands if name not in WHERE]     # and any added

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in WHERE:
            return super().get_command(ctx, name)       # a command added with cli.command() or add_command()

        module = importlib.import_module(f"grader.cli.{WHERE[name]}")
        command = next(c for c in module.COMMANDS if c.name == name)
        command.short_help = SHORT_HELP.get(name, command.short_help)
        return command


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="grader", message="%(prog)s %(version)s")
def cli() -> None:
    """Autograder for CUDA kernel exercises: compile, check, time and grade a kernel."""


def _exercises_named() -> str:
    """The exercises this install has, by their rubrics' file names (a glob: no YAML is read at start)."""
    names = sorted(p.stem for p in rubrics_dir().glob("*.yaml"))
    return f" Exercises here: {', '.join(names)} (`grader exercises` says what each asks for)." if names else ""


cli.help = (cli.help or "") + _exercises_named()


def all_commands() -> dict[str, click.Command]:
    """Every command by name, each imported (the docs and the tests walk them all)."""
    ctx = click.Context(cli)
    return {name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)}


# Each command's line in `grader --help`, whole (click cuts a docstring's first sentence to fit).
SHORT_HELP = {
    "submit": "Grade one submission: check, time, tier, report.",
    "history": "List a file's attempts and what changed.",
    "explain": "Show what a file's compiled code does that costs it.",
    "batch": "Grade every student's submission in a folder.",
    "merge": "Combine the report folders of a sharded batch.",
    "samples": "Grade a sample folder against its manifest.",
    "cache": "Show the build cache's size, or prune it.",
    "exercises": "List the exercises and what each asks for.",
    "calibrate": "Time the reference kernels and copies on a GPU.",
    "rubric-keys": "List every rubric key with its default.",
    "serve": "Run a course server that takes submissions over HTTP.",
}



STOP_GRACE_S = float(os.environ.get("GRADER_STOP_GRACE_S", "20"))
_stopping = threading.Event()


def _interrupted(signum, _frame) -> None:
    """SIGINT (Ctrl-C) and SIGTERM (what Slurm, CI runners and `timeout` send): the same clean stop,
    a KeyboardInterrupt in the main thread. The first one also starts a deadline: a KeyboardInterrupt
    raised at an arbitrary point can leave a lock held (logging's, inside an import in a thread of
    the grader's), so a stop that has not ended STOP_GRACE_S later ends the grader's process groups
    and the process itself. A second signal ends them at once."""
    if _stopping.is_set():
        _end_now(f"a second {signal.Signals(signum).name}")
    _stopping.set()
    common.stopped_by(signal.Signals(signum).name)
    threading.Thread(target=_end_if_still_running, daemon=True, name="grader-stop-deadline").start()
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _end_if_still_running() -> None:
    time.sleep(STOP_GRACE_S)
    _end_now(f"still stopping {STOP_GRACE_S:g} s after the signal (a thread of the grader did not end)")


def _end_now(why: str) -> None:
    processes.end_all()
    os.write(2, f"grader: {common.interrupted()}; {why}: ended now, nothing unfinished was kept.\n".encode())
    os._exit(Exit.INTERRUPTED)


def main(launcher=None) -> None:
    """The command, handed the Launcher its entry made (grader/entry.py; grade/launcher.py): `grader
    submit` takes its children from it and says the command's start in its first grade's phases."""
    _leave(_run(launcher))


def _run(launcher=None) -> int:
    """The command's exit code (the module docstring lists them)."""
    signal.signal(signal.SIGTERM, _interrupted)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:       # not where SIGINT is ignored
        signal.signal(signal.SIGINT, _interrupted)
    try:
        code = cli.main(prog_name="grader", standalone_mode=False, obj=launcher)
    except (KeyboardInterrupt, click.exceptions.Abort):
        processes.end_all()
        click.echo(f"grader: {common.interrupted()}; nothing unfinished was kept.", err=True)
        return Exit.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except SystemExit as exc:                   # a command's own sys.exit
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    return code if isinstance(code, int) else 0


LEAVE_WAIT_S = 0.2     # how long the quick exit waits for the grader's own threads to end


def _leave(code: int) -> None:
    """Exit with code. Once every thread of the grader's has ended, the exit handlers run and the
    process ends without the interpreter's teardown: tearing torch down (imported for a first
    grade's answers) took 0.4 s, a tenth of the grade. A thread still running (a file still being
    written) gets the ordinary exit, which waits for it."""
    deadline = time.monotonic() + LEAVE_WAIT_S
    try:
        for t in threading.enumerate():
            if t is not threading.main_thread() and not t.daemon:
                t.join(timeout=max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
            sys.exit(code)
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):      # a closed pipe (`grader ... | head`) loses nothing of ours
                stream.flush()
    except KeyboardInterrupt:
        code = Exit.INTERRUPTED
    os._exit(code)


if __name__ == "__main__":
    main()
