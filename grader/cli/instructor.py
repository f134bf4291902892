"""The instructor's commands: `grader batch` (locally, sharded or on Slurm), `grader merge`, `grader samples`."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from grader.analysis.similarity import DEFAULT_THRESHOLD
from grader.batch import find_submissions, grade_class, merge_reports
from grader.batch.classreport import class_insights
from grader.batch.cluster import SlurmOptions
from grader.batch.insights import markdown, terminal_lines
from grader.batch.manifest import run_samples
from grader.batch.outputs import identical_text, summary_row
from grader.batch.request import ClassRequest
from grader.batch.slurm import grade_on_slurm
from grader.cli.common import SectionedCommand, fail, interrupted, options_from
from grader.cli.screen import err_console, print_table, terminal_width
from grader.core.backend import CHOICES
from grader.core.errors import Exit, GraderError, UsageError
from grader.core.locations import DEFAULT_EXERCISE
from grader.core.outcomes import outcome_word
from grader.exercises import choose, exercise_for_class
from grader.platforms import github as gh

SLURM_SECTION = "Slurm options (with --slurm)"


class _SlurmFlag(click.Option):
    """--slurm itself, listed first in the Slurm section of --help."""

    section = SLURM_SECTION


@click.command(cls=SectionedCommand)
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write each student's reports into DIR/<student>/, and summary.csv, gradebook.csv, junit.xml "
                   "and results.jsonl into DIR; a rerun into the same DIR grades only what changed.")
@click.option("--file", "file_name", default=None, metavar="NAME",
              help="In per-student folders, the submission's file name (default: the folder's only .cu file).")
@click.option("--roster", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Roster CSV (GitHub Classroom's, or any with an identifier column): names each student, "
                   "and lists those without a submission.")
@click.option("--backend", type=click.Choice(CHOICES), default="auto", show_default=True,
              help="Where to run the submissions (auto: the GPU when one is visible).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Submissions in flight at once (default: up to 16 for each visible GPU, one per core on the emulator). "
                   "Compiles overlap; timings never do: each GPU times one submission at a time.")
@click.option("--shard", default="1/1", metavar="K/N", callback=lambda _c, _p, v: _shard(v),
              help="Grade only the K-th of N deterministic shares of the students (one per machine); "
                   "combine the report folders with `grader merge`.")
@click.option("--exercise", default=None, metavar="NAME",
              help="The exercise (`grader exercises` lists them; default: the one whose kernel most files define).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A rubric YAML instead of a named exercise.")
@click.option("--counters", is_flag=True,
              help="On a GPU, also read the hardware's counters for each correct, timed kernel (Nsight Compute: "
                   "DRAM throughput, sectors per request, occupancy) into its report, and the class's spread of them "
                   "into class.html and insights.json; the counters' pass costs each correct student a few seconds "
                   "more on the GPU, never a change of fraction or tier.")
@click.option("--similarity-threshold", type=click.FloatRange(0.0, 1.0), default=DEFAULT_THRESHOLD, show_default=True,
              metavar="SCORE",
              help="Name two students' kernels as similar at this score and above (0 to 1: the mean share of each "
                   "kernel's code the other holds, once names, numbers, comments, spacing and the order of the "
                   "functions are set aside); class.html lists the pairs, summary.csv each student's closest.")
@click.option("--similarity-given", type=click.Path(dir_okay=False, exists=True, path_type=Path), multiple=True,
              metavar="FILE",
              help="Code the course handed out (the lesson's kernel, a starter file): no match between students "
                   "who both kept it. The exercise's reference folder is always left out. Repeatable.")
@click.option("--slurm", is_flag=True, cls=_SlurmFlag,
              help="Grade on a Slurm cluster: a job array through submitit, one shard and one GPU a task, merged into "
                   "--report-dir (on a filesystem every node sees) when all are done.")
@options_from(SlurmOptions, into="slurm_options", section=SLURM_SECTION)
def batch(directory: Path, report_dir: Path | None, file_name: str | None, roster: Path | None, backend: str,
          jobs: int | None, shard: tuple[int, int], exercise: str | None, rubric_path: Path | None,
          counters: bool, similarity_threshold: float, similarity_given: tuple[Path, ...], slurm: bool,
          slurm_options: SlurmOptions) -> None:
    """Grade every student's submission in DIRECTORY: .cu files, or one folder per student.

    Exit status: 0 when every submission was processed (whatever its grade), 4 when some could
    not be (the machine, not the student; with --slurm also a task that failed), 130 when
    interrupted (the summary so far is written), 2 on a usage error such as a folder without
    submissions.
    """
    err = err_console()
    try:
        entries = find_submissions(directory, file_name=file_name, roster=roster)
        if not entries:
            raise UsageError(f"{directory} holds no .cu files and no student folders")
        picked = None if rubric_path or exercise else exercise_for_class([e.source for e in entries if e.source])
        rubric = picked or choose(rubric_path=rubric_path, exercise=exercise)
        if picked is not None:
            err.print(f"[dim]grader: grading against {picked.exercise} (the kernel most files define; "
                      "--exercise names another)[/dim]")
        request = ClassRequest(directory, rubric, backend, report_dir=report_dir, file_name=file_name, roster=roster,
                               jobs=jobs, shard=shard, counters=counters, similarity_threshold=similarity_threshold,
                               similarity_given=similarity_given)
        if slurm:
            _batch_on_slurm(request, options=slurm_options, err=err)
            return
        with _BatchProgress(err) as progress:
            outcome = grade_class(request, progress=progress, entries=entries)     # the class listed and read once
    except GraderError as exc:
        fail(exc)
    _print_class(outcome, report_dir, err)


def _say_similar(outcome, report_dir: Path | None, err, shown: int = 5) -> None:
    """The most similar pairs of kernels (not byte-identical: those are named above), a line each."""
    sim = outcome.similarity
    pairs = [p for p in sim.pairs if not p.identical] if sim is not None else []
    for p in pairs[:shown]:
        err.print(f"grader: similar kernels: {p.a} and {p.b} (score {p.score:.2f})", markup=False)
    if len(pairs) > shown:
        err.print(f"grader: {len(pairs) - shown} more similar pair(s)", markup=False)
    if pairs and report_dir is not None:
        err.print(f"grader: {report_dir / 'class.html'} shows their matching code side by side", markup=False)


def _say_insights(outcome, err) -> None:
    """What made the slow kernels slow, in a few lines (batch/insights.py), and in the GitHub job
    summary where the batch runs in GitHub Actions: the insights the class report was written with,
    gathered here only where no report was written."""
    insights = outcome.insights if outcome.insights is not None else class_insights(outcome.graded)
    for line in terminal_lines(insights, width=min(terminal_width(sys.stderr) or 80, 120)):
        err.print(line, markup=False)
    if gh.in_actions() and (insights.findings or insights.mistakes or insights.spreads):
        gh.append_step_summary(markdown(insights))


def class_rows(outcome) -> tuple[list[str], list[list[str]], str]:
    """The class's table for the terminal, as class.html says it: headers, rows and a caption.
    outcome: the tier of a correct timed kernel, else correct or incorrect, else the status
    (compile_error, rejected, ...). The file column is left out where it says nothing the student's
    does (each file is <student>.cu, or every file has one name: the caption names it), fraction
    where no row has one (the emulator times nothing: the caption says so); a diagnosis's codes are
    separated by ", " so that they wrap between codes. summary.csv has every column."""
    rows = [(g, summary_row(g)) for g in outcome.graded]
    files = {row["file"] for _, row in rows if row["file"]}
    own = all(not row["file"] or row["file"] == f"{row['student']}.cu" for _, row in rows)
    timed = any(row["fraction"] for _, row in rows)
    columns = ["student", *([] if own or len(files) <= 1 else ["file"]), "outcome",
               *(["fraction"] if timed else []), "diagnosis", "seconds"]
    out = []
    for g, row in rows:
        said = outcome_word(row["status"], {"true": True, "false": False}.get(row["correct"]), row["tier"])
        shown = {**row, "outcome": said, "fraction": row["fraction"][:5],
                 "diagnosis": ", ".join(row["diagnosis"].split()),
                 "seconds": (row["seconds"] + (" (kept)" if g.reused else "")) if row["seconds"] else ""}
        out.append([escape(shown[c] or "-") for c in columns])
    notes = [] if timed or not any(row["correct"] == "true" for _, row in rows) else [
        "no fraction or tier: nothing was timed (the emulator checks correctness; timing needs a GPU)"]
    if len(files) == 1 and not own:
        notes.append(f"every student's file: {next(iter(files))}")
    return columns, out, "; ".join(notes)


def _print_class(outcome, report_dir: Path | None, err) -> None:
    """The class's table, where its files went, and the exit status for what could not be graded."""
    columns, rows, caption = class_rows(outcome)
    print_table(columns, rows, caption=caption, steady=("fraction",), last=("diagnosis", "outcome"))

    for g in outcome.graded:
        if g.entry.identical_to:
            err.print(f"grader: {g.entry.student}: {identical_text(g)}")
    _say_similar(outcome, report_dir, err)
    _say_insights(outcome, err)
    if report_dir is not None and outcome.graded:          # the tables are written only when a row exists
        graded = sum(1 for g in outcome.graded if g.result is not None)
        err.print(f"[dim]grader: wrote {report_dir / 'class.html'}, summary.csv, gradebook.csv, junit.xml" +
                  (", results.jsonl and a report directory for each student graded[/dim]" if graded else
                   " (no student was graded in this run: each row says why)[/dim]"))
    if outcome.interrupted:
        err.print(f"grader: {interrupted()}; {outcome.not_reached} submission(s) not graded. Run the same command "
                  "again to grade only those.")
        sys.exit(Exit.INTERRUPTED)
    failed = outcome.infrastructure_failures
    if failed:
        err.print(f"grader: {len(failed)} submission(s) could not be graded on this machine (status "
                  "infrastructure_error): " + ", ".join(g.entry.student for g in failed))
        sys.exit(Exit.INFRASTRUCTURE)


def _batch_on_slurm(request, *, options, err) -> None:
    report_dir = request.report_dir
    if report_dir is None:
        raise UsageError("--slurm needs --report-dir: a folder every node can write (the shards go there, then "
                         "the merged class)")
    if request.shard != (1, 1):
        raise UsageError("--slurm cuts the class into shards itself (--slurm-tasks): leave out --shard")

    def submitted(ids: list[str], logs: Path) -> None:
        err.print(f"grader: submitted {len(ids)} task(s) ({options.cluster}): job {', '.join(ids[:3])}"
                  f"{' ...' if len(ids) > 3 else ''}; logs in {logs}. Waiting for them (Ctrl-C cancels the array "
                  "and keeps what finished).")

    last: list = []

    def waiting(counts: dict) -> None:
        if counts != (last[0] if last else None):          # a line when the counts change, not every poll
            last[:] = [counts]
            err.print(f"grader: {counts['pending']} pending, {counts['running']} running, {counts['done']} done")

    outcome = grade_on_slurm(request, options=options, submitted=submitted, waiting=waiting)
    if outcome.interrupted:
        state = (f"the array was NOT cancelled ({outcome.not_cancelled}): cancel it with `scancel "
                 f"{outcome.job_ids[0].split('_')[0]}`" if outcome.not_cancelled and outcome.job_ids
                 else "the array was cancelled")
        err.print(f"grader: {interrupted()}; {state}, {len(outcome.graded)} student(s) that finished "
                  f"merged into {report_dir / 'summary.csv'}. Run the same command again to grade the rest.")
        sys.exit(Exit.INTERRUPTED)
    _say_insights(outcome, err)
    err.print(f"[dim]grader: merged {len(outcome.graded)} student(s) into {report_dir / 'summary.csv'}, "
              "gradebook.csv, junit.xml, class.html and insights.json[/dim]")
    problems = outcome.failed_tasks + [f"{g.entry.student}: infrastructure_error"
                                       for g in outcome.infrastructure_failures]
    if problems:
        err.print("grader: not everything was graded:\n  " + "\n  ".join(problems))
        sys.exit(Exit.INFRASTRUCTURE)


def _shard(value: str) -> tuple[int, int]:
    k, sep, n = value.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise click.BadParameter(f"{value!r}: write K/N with 1 <= K <= N, as in --shard 2/4")
    return int(k), int(n)


@click.command()
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.argument("folders", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--exercise", default=None, metavar="NAME",
              help=f"The exercise (`grader exercises` lists them; default: {DEFAULT_EXERCISE}).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A rubric YAML for the gradebook's points instead of a named exercise.")
def merge(out: Path, folders: tuple[Path, ...], exercise: str | None, rubric_path: Path | None) -> None:
    """Combine the --report-dir FOLDERS of `grader batch --shard` runs into OUT: one summary.csv,
    gradebook.csv, junit.xml and a Gradescope export per student."""
    try:
        graded = merge_reports(list(folders), out=out, rubric=choose(rubric_path=rubric_path, exercise=exercise)).graded
    except GraderError as exc:
        fail(exc)
    err_console().print(f"[dim]grader: merged {len(graded)} students from {len(folders)} folders into {out}[/dim]")


class _BatchProgress:
    """A progress bar with counts by status on a terminal; one line per submission otherwise."""

    def __init__(self, console: Console):
        self.console = console
        self.bar = None
        self.counts: dict[str, int] = {}

    def __enter__(self):
        if self.console.is_terminal:
            from rich import progress as bars  # noqa: PLC0415  (lazy: rich's progress bar, on a terminal only)

            self.bar = bars.Progress(bars.TextColumn("grading"), bars.BarColumn(), bars.MofNCompleteColumn(),
                                     bars.TimeRemainingColumn(), bars.TextColumn("{task.description}"),
                                     console=self.console, transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task("", total=None)
        return self

    def __call__(self, g, done: int, total: int) -> None:
        status = g.result.status if g.result is not None else g.entry.problem
        self.counts[status] = self.counts.get(status, 0) + 1
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total,
                            description=" ".join(f"{k} {v}" for k, v in sorted(self.counts.items())))
        else:
            self.console.print(f"[dim]grader: {done}/{total} {g.entry.student}: {status}"
                               f"{' (kept from the last run)' if g.reused else ''}[/dim]")

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def sample_rows(outcomes) -> tuple[list[str], list[list[str]], str]:
    """`grader samples`'s table: headers, rows and a caption, as `grader batch`'s (class_rows): the
    backend in the caption where every sample ran on one, fraction only where one was timed; each
    sample's verdict, ok or "mismatch" (what it did not get is said under the table, whole:
    mismatch_lines)."""
    backends = sorted({o.result.backend for o in outcomes})
    timed = any(o.result.fraction is not None for o in outcomes)
    columns = ["sample", *(["backend"] if len(backends) > 1 else []), "outcome", *(["fraction"] if timed else []),
               "diagnosis", "seconds", "verdict"]
    rows = []
    for o in outcomes:
        r = o.result
        cell = {"sample": o.expectation.file, "backend": r.backend,
                "outcome": outcome_word(r.status, r.correct, r.tier),
                "fraction": f"{r.fraction:.3f}" if r.fraction is not None else "-",
                "diagnosis": ", ".join(d.code for d in r.diagnosis) or "-", "seconds": f"{r.seconds:.1f}",
                "verdict": "ok" if o.ok else "[red]mismatch[/red]"}
        rows.append([cell[c] if c == "verdict" else escape(cell[c]) for c in columns])
    caption = f"backend: {backends[0]}" if len(backends) == 1 else ""
    return columns, rows, caption


def mismatch_lines(outcomes, width: int) -> list[str]:
    """What each sample's manifest expected that it did not get, whole (never cut), wrapped at width
    with its sample's name first: the table says only "mismatch", so its columns fit."""
    lines = []
    for o in outcomes:
        for problem in ([] if o.ok else o.problems):
            lines += textwrap.wrap(f"{o.expectation.file}: {problem}", width=width, subsequent_indent="  ",
                                   break_long_words=True, break_on_hyphens=False)
    return lines


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path),
                default=f"submissions/{DEFAULT_EXERCISE}")
@click.option("--backend", type=click.Choice(CHOICES), default="auto", show_default=True,
              help="Where to run the samples (auto: the GPU when one is visible).")
@click.option("--exercise", default=None, metavar="NAME",
              help="The exercise (default: the one DIRECTORY is named for).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A rubric YAML instead of a named exercise.")
@click.option("--only", multiple=True, help="Run only this sample (repeatable).")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write every sample's result.json document, keyed by file, to this file.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Samples graded at once (default: as `grader batch` on a GPU, one on the emulator).")
def samples(directory: Path, backend: str, exercise: str | None, rubric_path: Path | None, only: tuple[str, ...],
            json_out: Path | None, jobs: int | None) -> None:
    """Grade every sample in DIRECTORY and check it gets the outcome its manifest.yaml expects."""
    err = err_console()
    try:
        rubric = choose(rubric_path=rubric_path, exercise=exercise, folder=directory)
        outcomes = run_samples(directory, rubric=rubric, backend=backend, only=list(only) or None, jobs=jobs,
                               progress=lambda f: err.print(f"[dim]grader: {f}[/dim]"))
    except GraderError as exc:
        fail(exc)

    columns, rows, caption = sample_rows(outcomes)
    print_table(columns, rows, caption=caption, steady=("fraction",), last=("diagnosis", "outcome", "sample"))
    for line in mismatch_lines(outcomes, terminal_width() or 200):
        click.echo(line)
    if json_out is not None:
        json_out.write_text(json.dumps({o.expectation.file: o.result.to_json() for o in outcomes}, indent=1))
    bad = [o for o in outcomes if not o.ok]
    click.echo(f"{len(outcomes) - len(bad)} passed, {len(bad)} failed")
    sys.exit(Exit.INCORRECT if bad else Exit.CORRECT)


COMMANDS = [batch, merge, samples]
