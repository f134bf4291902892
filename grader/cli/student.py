"""The student's grade: `grader submit` (with --watch, or --server). `grader history` and `grader
explain` are in review.py."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import click

from grader.cli.common import FORMATS, LazyErrConsole, fail
from grader.core.backend import CHOICES
from grader.core.errors import Exit, GraderError, UsageError
from grader.core.handin import read_file
from grader.exercises import choose, load_exercise
from grader.grade.launcher import Launcher
from grader.grade.machine import decide
from grader.grade.request import GradeOptions, GradeRequest

# What stays imported inside the functions below, each with its reason: the pipeline (numpy, the
# verdict) and the reports (jinja2) after the children have started (start_ahead: on the H100 host
# they then overlap the measuring process's CUDA context, the longest wait of a warm grade), rich
# at the first line printed (25 to 60 ms, none printed with -q on the way to the grade), watchfiles
# for --watch and the server's client for --server only.


@click.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--exercise", default=None, metavar="NAME",
              help="The exercise to grade against (`grader exercises` lists them; default: the one whose kernel "
                   "FILE defines).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A rubric YAML to grade against instead of a named exercise.")
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write report.md, report.html and result.json into this directory (default: FILE's name with "
                   "-report, beside FILE; $GRADER_REPORTS_ROOT/<name> where that is set).")
@click.option("--no-report", is_flag=True, help="Write no report files (the summary is still printed).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="What to print: a summary, the result.json document, the Markdown report, JUnit XML, GitHub "
                   "Classroom's result line (also appended to $GITHUB_OUTPUT), Gradescope's or PrairieLearn's "
                   "results.json.")
@click.option("--output", "output_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the --format document to this file instead of stdout (e.g. "
                   "/autograder/results/results.json); a summary still goes to stdout.")
@click.option("--github/--no-github", "github", default=None,
              help="Also write the GitHub Actions job summary and annotations (default: when GITHUB_ACTIONS=true).")
@click.option("--backend", type=click.Choice(CHOICES), default="auto", show_default=True,
              help="cuda: an NVIDIA GPU (timing and tier); emulator: the CPU (correctness only); "
                   "auto: the GPU when one is visible.")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages on stderr.")
@click.option("--counters", is_flag=True,
              help="On a GPU, after a correct timed grade, read what the hardware counted for your kernels "
                   "(Nsight Compute: DRAM throughput, sectors per request, occupancy, L2 hits) into the "
                   "report and its findings; a few seconds more, never a change of fraction or tier.")
@click.option("--watch", is_flag=True,
              help="Grade FILE again each time it is saved, the terminal redrawn; Ctrl-C ends it (exit 0).")
@click.option("--server", default=None, metavar="URL",
              help="Grade on the course's server (`grader serve`) instead of this machine, with your token from "
                   "$GRADER_TOKEN: the same summary, reports and exit status (docs/serve.md).")
def submit(file: Path, exercise: str | None, rubric_path: Path | None, report_dir: Path | None, no_report: bool,
           fmt: str, output_path: Path | None, github: bool | None, backend: str, quiet: bool, counters: bool,
           watch: bool, server: str | None) -> None:
    """Grade one submission FILE (a .cu defining an exercise's kernel: `grader exercises` names them).

    Exit status: 0 graded correct, 1 graded incorrect, 2 a usage or rubric error, 3 not gradable
    (compile_error, rejected, crashed, timeout), 4 the machine, not the file (infrastructure_error:
    no compiler or GPU, a full disk, a limit), 130 interrupted (Ctrl-C, SIGTERM).
    """
    once = SubmitOptions(exercise=exercise, rubric_path=rubric_path, report_dir=report_dir, no_report=no_report,
                         fmt=fmt, output_path=output_path, github=github, backend=backend, quiet=quiet,
                         counters=counters, one_grade=not watch, server=server)
    if not watch:
        sys.exit(_submit_once(file, once).exit_code)
    _watch(file, once)


@dataclass(frozen=True)
class SubmitOptions:
    """What `grader submit` was asked, for each grade of FILE (one, or one per save with --watch)."""

    exercise: str | None
    rubric_path: Path | None
    report_dir: Path | None
    no_report: bool
    fmt: str
    output_path: Path | None
    github: bool | None
    backend: str
    quiet: bool
    counters: bool = False
    one_grade: bool = True          # the process grades FILE once (not --watch)
    server: str | None = None       # the course server's URL (--server): graded there


def _watch(file: Path, once: SubmitOptions) -> None:
    """Grade, then wait for FILE to be saved again (watchfiles: the folder is watched, so an editor
    that saves by renaming a new file over it is seen too), redraw, grade again."""
    from rich.console import Console  # noqa: PLC0415  (lazy: rich's import, see the top)
    from watchfiles import watch  # noqa: PLC0415  (lazy: --watch only)

    out = Console(highlight=False, soft_wrap=True)
    target = file.resolve()

    def stamp():
        try:
            st = target.stat()
            return st.st_mtime_ns, st.st_size
        except OSError:
            return None

    try:
        while True:
            if out.is_terminal:
                out.clear()
            graded = stamp()
            _submit_once(file, once)
            if stamp() != graded:               # saved while it was being graded: grade the new one now
                continue
            out.print(f"[dim]grader: watching {file}; save it to grade again, Ctrl-C to stop[/dim]")
            # Stopping rule: the file differs from the one graded. The watcher's events wake it at once;
            # its half-second timeouts catch a save made before the watcher had started.
            for _changes in watch(str(target.parent), watch_filter=lambda _change, path: Path(path) == target,
                                  raise_interrupt=True, rust_timeout=500, yield_on_timeout=True):
                if target.is_file() and stamp() != graded:
                    break
    except KeyboardInterrupt:
        out.print("grader: stopped watching")
        sys.exit(Exit.CORRECT)


def _submit_once(file: Path, once: SubmitOptions):
    """One grade of FILE (here, or on the course server with --server), delivered (its attempt
    kept, its reports, its document: platforms/delivery.py) and printed; the Result."""
    err = LazyErrConsole()
    progress = None if once.quiet else (lambda msg: err.print(f"[dim]grader: {msg}[/dim]"))
    try:
        if once.server is not None:
            result, rubric = _graded_remotely(file, once, progress)
        else:
            result, rubric = _graded_here(file, once, progress)
    except GraderError as exc:
        fail(exc)
    from grader.platforms.delivery import Delivery, deliver  # noqa: PLC0415  (lazy: jinja2, after the grade)
    from grader.report.files import default_report_dir  # noqa: PLC0415  (lazy: jinja2, after the grade)

    folder = None if once.no_report else (once.report_dir or default_report_dir(file))
    done = deliver(result, rubric, to=Delivery(
        report_dir=folder, attempts_of=file, document=None if once.fmt == "text" else once.fmt,
        output_path=once.output_path, github=once.github))
    _say_delivered(done, folder, err, once)
    _print(result, rubric, done, err, once)
    return result


def _graded_here(file: Path, once: SubmitOptions, progress):
    """FILE read once (the exercise's choice and the grade take those bytes), the machine decided
    once (grade/machine.py) and its children started by the command's Launcher (grader/entry.py made
    it; a plain one where the command was invoked otherwise) before the pipeline's imports, then graded."""
    launcher = click.get_current_context().find_object(Launcher) or Launcher()
    source = read_file(file)
    rubric = choose(rubric_path=once.rubric_path, exercise=once.exercise, file=source)
    # Where the command's own start went (the interpreter, its imports, the exercise's choice, the
    # children's start): the launcher's marks, said by its first grade only.
    launcher.mark("cli_to_early_s")
    # The GPU's probe and the children's start (their CUDA context) before the pipeline's imports
    # (and rich's): they overlap them (grade/launcher.py).
    machine = decide(once.backend)
    launcher.start_ahead(machine, rubric=rubric)
    try:
        from grader.grade.pipeline import grade  # noqa: PLC0415  (lazy: after start_ahead, see the top)

        launcher.mark("cli_to_grade_s")
        options = GradeOptions(draw_ahead=True, counters=once.counters, one_grade=once.one_grade)
        return grade(GradeRequest(Path(file), rubric, machine, options, source=source), progress=progress,
                     launcher=launcher), rubric
    finally:
        launcher.end_unused()       # children no grade took (a usage error before the grade)


def _graded_remotely(file: Path, once: SubmitOptions, progress):
    """FILE graded by the course's server (grader/serve/client.py): the same Result a local grade
    gives, and the rubric it names, for the reports."""
    from grader.serve.client import submit_remote, token_from_environment  # noqa: PLC0415  (lazy: --server only)

    token = token_from_environment()
    if not token:
        raise UsageError("--server needs your token: set GRADER_TOKEN (or write it to the file docs/serve.md names); "
                         "your instructor gives it to you")
    result = submit_remote(file, server=once.server, token=token, exercise=once.exercise, progress=progress)
    return result, load_exercise(result.exercise)


def _say_delivered(done, folder: Path | None, err: LazyErrConsole, once: SubmitOptions) -> None:
    """What delivery could not do, on stderr (the grade stands), and the workflow commands."""
    if done.report_error is not None:
        err.print(f"grader: could not write the report into {folder} "
                  f"({done.report_error.strerror or done.report_error}); name another folder with --report-dir")
    if done.history_error is not None and not once.quiet:
        err.print(f"grader: could not keep this attempt ({done.history_error.strerror or done.history_error})")
    for line in done.annotations:
        click.echo(line)
    if done.classroom_output and not once.quiet:
        err.print("[dim]grader: wrote the Classroom result to $GITHUB_OUTPUT[/dim]")


def _print(result, rubric, done, err: LazyErrConsole, once: SubmitOptions) -> None:
    """The --format document on stdout, or the terminal summary (ending with the report's path),
    with what changed since the last attempt."""
    from grader.report.files import render_text  # noqa: PLC0415  (lazy: jinja2, after the grade)

    said, html = done.change, done.html
    if done.document is not None:
        sys.stdout.write(done.document)
        if html is not None and not once.quiet:
            err.print(f"grader: report: {html}")        # the document is stdout's: the path on stderr
    else:
        from rich.console import Console  # noqa: PLC0415  (lazy: rich's import, see the top)

        from grader.cli.screen import fitted  # noqa: PLC0415  (lazy: rich's import, see the top)

        out = Console(highlight=False, soft_wrap=True)
        text = render_text(result, rubric, colour=out.color_system is not None, report=html)
        lines = fitted(text.rstrip("\n"), out.width)
        last = lines.pop() if html is not None and lines and lines[-1].plain.startswith("report: ") else None
        for line in lines:
            out.print(line)
        if said and not once.quiet:             # before the report's path: the summary ends with it
            err.print(f"grader: {said}")
            said = None
        if last is not None:
            out.print(last)
    if said and not once.quiet:
        err.print(f"grader: {said}")


COMMANDS = [submit]
