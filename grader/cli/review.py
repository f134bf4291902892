"""The student's look back and in: `grader history` (a file's attempts and what changed) and
`grader explain` (what a file's compiled code does that costs it, with --counters what the GPU
counted). `grader submit` is in student.py."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.markup import escape

from grader.analysis.explain import explain_submission, render, render_counters
from grader.cli.common import fail
from grader.cli.screen import err_console, fitted, print_table, terminal_width
from grader.core.backend import CUDA
from grader.core.errors import Exit, GraderError, InfrastructureError, UsageError
from grader.core.outcomes import Outcome
from grader.exercises import choose
from grader.grade.machine import decide
from grader.grade.pipeline import grade
from grader.grade.request import GradeOptions, GradeRequest
from grader.report import history as attempts_of
from grader.toolchain import gpuinfo


@click.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--clear", is_flag=True, help="Forget FILE's attempts.")
def history(file: Path, clear: bool) -> None:
    """List FILE's attempts (every `grader submit` of it): when, outcome, fraction, tier, what was named."""
    if clear:
        n = attempts_of.clear(file)
        click.echo(f"grader: forgot {n} attempt(s) of {file}")
        return
    rows = attempts_of.attempts(file)
    if not rows:
        click.echo(f"grader: no attempts of {file} yet (`grader submit {file}` grades it)")
        return
    print_table(["#", "when", "outcome", "fraction", "tier", "named"],
                [[str(i), time.strftime("%Y-%m-%d %H:%M", time.localtime(a.time)), a.outcome,
                  f"{a.fraction:.3f}" if a.fraction is not None else "-", a.tier or "-",
                  escape(", ".join(a.diagnoses + a.findings) or a.reason or "-")] for i, a in enumerate(rows, 1)],
                steady=("#", "when", "fraction"), last=("named",))


@click.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--exercise", default=None, metavar="NAME",
              help="The exercise whose findings to apply (default: the one whose kernel FILE defines).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A rubric YAML instead of a named exercise.")
@click.option("--arch", default=None, help=f"GPU architecture to compile for (default: this GPU's, else "
                                            f"{CUDA.default_arch}).")
@click.option("--counters", is_flag=True,
              help="On a GPU, also grade FILE and read the hardware's counters on its timed call (Nsight Compute: "
                   "DRAM throughput, sectors per request, occupancy) and their findings; a correct kernel only.")
def explain(file: Path, exercise: str | None, rubric_path: Path | None, arch: str | None, counters: bool) -> None:
    """Show what FILE's compiled code does that costs it: findings and the annotated SASS (nothing is
    run); with --counters, also what the GPU's counters measured when it ran."""
    counted = ""
    try:
        if not file.is_file():                  # said in one line, as submit says it
            raise UsageError(f"{file}: no such file" if not file.exists() else f"{file}: a folder, not a .cu file")
        rubric = choose(rubric_path=rubric_path, exercise=exercise, file=file)
        machine = decide(CUDA) if arch is None or counters else None      # the GPU probed once, if at all
        reading = machine.reading if machine is not None else None
        if counters and reading is None:
            raise InfrastructureError("--counters reads an NVIDIA GPU's counters and none is visible here: run on a GPU "
                                      f"machine (without --counters, explain needs only {CUDA.toolchain.compiler}).")
        target = arch or (gpuinfo.arch(reading) if reading else CUDA.default_arch)
        ex = explain_submission(file, rubric=rubric, backend=CUDA, arch=target)
        if counters and not ex.problem:
            counted = _counted(file, rubric, machine)
    except GraderError as exc:
        fail(exc)
    text = render(ex, file.name) + counted
    width = terminal_width()
    if width is not None:                   # its prose wrapped to the terminal; SASS and source left whole
        text = "\n".join(piece.plain for piece in fitted(escape(text.rstrip("\n")), width)) + "\n"
    click.echo(text, nl=False)
    sys.exit(Exit.NOT_GRADABLE if ex.problem else Exit.CORRECT)


def _counted(file: Path, rubric, machine) -> str:
    """explain --counters: FILE graded on machine's GPU with the counters' pass, said as render_counters says it."""
    r = grade(GradeRequest(file, rubric, machine, GradeOptions(counters=True)),
              progress=lambda msg: err_console().print(f"[dim]grader: {msg}[/dim]"))
    if r.status != Outcome.GRADED:
        graded = f"{Outcome(r.status).text}: {(r.message.strip().splitlines() or [''])[0]}"
    elif not r.correct:
        graded = "graded incorrect: the counters are read for a correct kernel; `grader submit` says what is wrong"
    else:
        graded = f"graded correct, fraction {r.fraction:.3f}" if r.fraction is not None else "graded correct"
    return render_counters(r.counters, r.findings, graded)


COMMANDS = [history, explain]
