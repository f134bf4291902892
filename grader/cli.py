"""The `grader` command: a thin click layer over the library.

Exit codes: 0 graded and correct; 1 graded and incorrect; 2 usage or rubric
error; 3 not gradable (compile error, rejected, crashed, timeout);
4 infrastructure (no nvcc or g++, --backend cuda without a GPU).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click
from rich.console import Console

from grader import __version__
from grader.core.errors import Exit, GraderError, UsageError
from grader.grade.pipeline import BACKENDS

FORMATS = ("text", "json", "markdown", "junit", "classroom", "gradescope", "prairielearn")


def _err_console() -> Console:
    # soft_wrap: never hard-wrapped at 80 columns where stderr is not a terminal (a CI log)
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(exc: GraderError) -> None:
    """The one place a domain error becomes a message and an exit code."""
    click.echo(f"grader: {exc}", err=True)
    sys.exit(exc.exit_code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="grader", message="%(prog)s %(version)s")
def cli() -> None:
    """Autograder for CUDA kernel exercises (biasGeluFused, ropeHalfSplit, geluSum): compile, check, time and
    grade a kernel."""


@cli.command()
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
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="cuda: an NVIDIA GPU (timing and tier); emulator: the CPU (correctness only); "
                   "auto: the GPU when one is visible.")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages on stderr.")
@click.option("--watch", is_flag=True,
              help="Grade FILE again each time it is saved, the terminal redrawn; Ctrl-C ends it (exit 0).")
def submit(file: Path, exercise: str | None, rubric_path: Path | None, report_dir: Path | None, no_report: bool,
           fmt: str, output_path: Path | None, github: bool | None, backend: str, quiet: bool, watch: bool) -> None:
    """Grade one submission FILE (a .cu defining an exercise's kernel, such as biasGeluFused)."""
    once = dict(exercise=exercise, rubric_path=rubric_path, report_dir=report_dir, no_report=no_report, fmt=fmt,
                output_path=output_path, github=github, backend=backend, quiet=quiet)
    if not watch:
        sys.exit(_submit_once(file, **once).exit_code)
    _watch(file, once)


def _watch(file: Path, once: dict) -> None:
    """Grade, then wait for FILE to be saved again (watchfiles: the folder is watched, so an editor
    that saves by renaming a new file over it is seen too), redraw, grade again."""
    from watchfiles import watch

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
            _submit_once(file, **once)
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


def _submit_once(file: Path, *, exercise: str | None, rubric_path: Path | None, report_dir: Path | None,
                 no_report: bool, fmt: str, output_path: Path | None, github: bool | None, backend: str,
                 quiet: bool):
    """One grade of FILE, its reports, its output and its attempt kept; the Result."""
    from grader.grade.pipeline import grade_submission
    from grader.platforms import classroom, documents
    from grader.platforms import github as gh
    from grader.exercises import choose
    from grader.report.files import default_report_dir, render_json, render_markdown, render_text, write_reports

    err = _err_console()
    try:
        rubric = choose(rubric_path=rubric_path, exercise=exercise, file=file)
        progress = None if quiet else (lambda msg: err.print(f"[dim]grader: {msg}[/dim]"))
        result = grade_submission(file, rubric=rubric, backend=backend, progress=progress, draw_ahead=True)
    except GraderError as exc:
        _fail(exc)
    said, attempts = _remember(result, file, err, quiet)
    if not no_report:
        folder = report_dir or default_report_dir(file)
        try:
            written = write_reports(result, rubric, folder, attempts=attempts)
        except OSError as exc:                  # a read-only folder: the grade stands, the report is skipped
            err.print(f"grader: could not write the report into {folder} ({exc.strerror or exc}); "
                      "name another folder with --report-dir")
        else:
            if not quiet:
                html = next(p for p in written if p.name == "report.html")
                err.print(f"grader: report: {html}")
    if github if github is not None else gh.in_actions():
        for line in gh.publish(result, render_markdown(result, rubric)):
            click.echo(line)
    if fmt == "json":
        document = render_json(result)
    elif fmt == "markdown":
        document = render_markdown(result, rubric)
    elif fmt in documents.PLATFORM_FORMATS:
        document = documents.render(fmt, result, rubric)
        if fmt == "classroom" and classroom.write_output(document.strip()) and not quiet:
            err.print("[dim]grader: wrote the Classroom result to $GITHUB_OUTPUT[/dim]")
    else:
        document = None
    if document is not None and output_path is None:
        sys.stdout.write(document)
    else:
        if document is not None:
            output_path.parent.mkdir(parents=True, exist_ok=True)
            output_path.write_text(document)
        out = Console(highlight=False, soft_wrap=True)
        out.print(render_text(result, rubric, colour=out.color_system is not None), end="")
    if said and not quiet:
        err.print(f"grader: {said}")
    return result


def _remember(result, file: Path, err: Console, quiet: bool) -> tuple[str | None, list]:
    """Keep this attempt (grader/report/history.py): what changed since the last one of the file, and the
    file's attempts (this one last) for the report's chart."""
    from grader.report import history

    try:
        previous, now = history.record(result, file)
    except OSError as exc:
        if not quiet:
            err.print(f"grader: could not keep this attempt ({exc.strerror or exc})")
        return None, []
    try:
        kept = history.attempts(file)
    except OSError:
        kept = [now]
    return history.change(previous, now), kept


@cli.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--clear", is_flag=True, help="Forget FILE's attempts.")
def history(file: Path, clear: bool) -> None:
    """List FILE's attempts (every `grader submit` of it): when, outcome, fraction, tier, what was named."""
    from rich.table import Table

    from grader.report import history as attempts_of

    if clear:
        n = attempts_of.clear(file)
        click.echo(f"grader: forgot {n} attempt(s) of {file}")
        return
    rows = attempts_of.attempts(file)
    if not rows:
        click.echo(f"grader: no attempts of {file} yet (`grader submit {file}` grades it)")
        return
    table = Table("#", "when", "outcome", "fraction", "tier", "named")
    for i, a in enumerate(rows, 1):
        table.add_row(str(i), attempts_of.when_text(a.time), a.outcome, f"{a.fraction:.3f}" if a.fraction is not None else "-",
                      a.tier or "-", ", ".join(a.diagnoses + a.findings) or "-")
    Console(highlight=False, width=max(Console().width, 100)).print(table)


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write each student's reports into DIR/<student>/, and summary.csv, gradebook.csv, junit.xml "
                   "and results.jsonl into DIR; a rerun into the same DIR grades only what changed.")
@click.option("--file", "file_name", default=None, metavar="NAME",
              help="In per-student folders, the submission's file name (default: the folder's only .cu file).")
@click.option("--roster", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Roster CSV (GitHub Classroom's, or any with an identifier column): names each student, "
                   "and lists those without a submission.")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="Where to run the submissions (auto: the GPU when one is visible).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Submissions in flight at once (default: up to 8 for each visible GPU, one per core on the emulator). "
                   "Compiles overlap; timings never do: each GPU times one submission at a time.")
@click.option("--shard", default="1/1", metavar="K/N", callback=lambda _c, _p, v: _shard(v),
              help="Grade only the K-th of N deterministic shares of the students (one per machine); "
                   "combine the report folders with `grader merge`.")
@click.option("--exercise", default=None, metavar="NAME",
              help="The exercise (`grader exercises` lists them; default: the one whose kernel most files define).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A rubric YAML instead of a named exercise.")
@click.option("--slurm", is_flag=True,
              help="Grade on a Slurm cluster: a job array through submitit, one shard and one GPU a task, merged into "
                   "--report-dir (on a filesystem every node sees) when all are done.")
@click.option("--slurm-tasks", type=click.IntRange(min=1), default=4, show_default=True,
              help="With --slurm: the array's size (the class is cut into this many shards).")
@click.option("--partition", default=None, help="With --slurm: the partition (default: the cluster's).")
@click.option("--time-limit", "time_min", type=click.IntRange(min=1), default=60, show_default=True,
              help="With --slurm: each task's time limit, in minutes.")
@click.option("--array-parallelism", type=click.IntRange(min=1), default=None,
              help="With --slurm: at most this many tasks at once (default: all).")
@click.option("--gres", default="gpu:1", show_default=True, help="With --slurm: each task's --gres.")
@click.option("--cpus-per-task", type=click.IntRange(min=1), default=None,
              help="With --slurm: each task's cores (default: 8, or a node's cores where the partition's nodes "
                   "have fewer, from sinfo).")
@click.option("--mem", "mem_mb", type=click.IntRange(min=1), default=None, metavar="MB",
              help="With --slurm: each task's memory in MB (default: 8192, or a node's where less, from sinfo).")
@click.option("--slurm-cluster", type=click.Choice(["slurm", "local"]), default="slurm", show_default=True,
              help="With --slurm: local runs the array's tasks on this machine instead (submitit's local executor), "
                   "to try a setup without a cluster.")
def batch(directory: Path, report_dir: Path | None, file_name: str | None, roster: Path | None, backend: str,
          jobs: int | None, shard: tuple[int, int], exercise: str | None, rubric_path: Path | None,
          slurm: bool, slurm_tasks: int, partition: str | None, time_min: int, array_parallelism: int | None,
          gres: str, cpus_per_task: int | None, mem_mb: int | None, slurm_cluster: str) -> None:
    """Grade every student's submission in DIRECTORY: .cu files, or one folder per student.

    Exit status: 0 when every submission was processed (whatever its grade), 4 when some could
    not be (the machine, not the student; with --slurm also a task that failed), 130 when
    interrupted (the summary so far is written), 2 on a usage error such as a folder without
    submissions.
    """
    from rich.table import Table

    from grader.batch import find_submissions, grade_folder
    from grader.batch.outputs import summary_row
    from grader.batch.slurm import SlurmOptions
    from grader.exercises import choose, exercise_for_class

    err = _err_console()
    try:
        entries = find_submissions(directory, file_name=file_name, roster=roster)
        if not entries:
            raise UsageError(f"{directory} holds no .cu files and no student folders")
        picked = None if rubric_path or exercise else exercise_for_class([e.path for e in entries if e.path])
        rubric = picked or choose(rubric_path=rubric_path, exercise=exercise)
        if picked is not None:
            err.print(f"[dim]grader: grading against {picked.exercise} (the kernel most files define; "
                      "--exercise names another)[/dim]")
        if slurm:
            _batch_on_slurm(directory, rubric=rubric, report_dir=report_dir, backend=backend, file_name=file_name,
                            roster=roster, jobs=jobs, shard=shard, err=err,
                            options=SlurmOptions(tasks=slurm_tasks, partition=partition, time_min=time_min,
                                                 parallelism=array_parallelism, gres=gres or None,
                                                 cpus_per_task=cpus_per_task, mem_mb=mem_mb,
                                                 cluster=slurm_cluster))
            return
        with _BatchProgress(err) as progress:
            outcome = grade_folder(directory, rubric=rubric, backend=backend, report_dir=report_dir,
                                   file_name=file_name, roster=roster, progress=progress, jobs=jobs,
                                   shard=shard)
    except GraderError as exc:
        _fail(exc)
    table = Table("student", "file", "status", "correct", "tier", "fraction", "diagnosis", "seconds")
    for g in outcome.graded:
        row = summary_row(g)
        table.add_row(row["student"], row["file"] or "-", row["status"], row["correct"] or "-", row["tier"] or "-",
                      row["fraction"] or "-", row["diagnosis"] or "-",
                      (row["seconds"] + (" (kept)" if g.reused else "")) if row["seconds"] else "-")
    Console(highlight=False, width=max(Console().width, 120)).print(table)
    if report_dir is not None and outcome.graded:          # the tables are written only when a row exists
        err.print(f"[dim]grader: wrote {report_dir / 'summary.csv'}, gradebook.csv, junit.xml, results.jsonl and a "
                  "report directory for each student[/dim]")
    if outcome.interrupted:
        err.print(f"grader: interrupted; {outcome.not_reached} submission(s) not graded. Run the same command "
                  "again to grade only those.")
        sys.exit(Exit.INTERRUPTED)
    failed = outcome.infrastructure_failures
    if failed:
        err.print(f"grader: {len(failed)} submission(s) could not be graded on this machine (status "
                  "infrastructure_error): " + ", ".join(g.entry.student for g in failed))
        sys.exit(Exit.INFRASTRUCTURE)


def _batch_on_slurm(directory: Path, *, rubric, report_dir: Path | None, backend: str, file_name: str | None,
                    roster: Path | None, jobs: int | None, shard: tuple[int, int], err, options) -> None:
    from grader.batch.slurm import grade_on_slurm

    if report_dir is None:
        raise UsageError("--slurm needs --report-dir: a folder every node can write (the shards go there, then "
                         "the merged class)")
    if shard != (1, 1):
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

    outcome = grade_on_slurm(directory, rubric=rubric, report_dir=report_dir, options=options,
                             backend=backend,
                             file_name=file_name, roster=roster, jobs=jobs, submitted=submitted, waiting=waiting)
    if outcome.interrupted:
        err.print(f"grader: interrupted; the array was cancelled, {len(outcome.graded)} student(s) that finished "
                  f"merged into {report_dir / 'summary.csv'}. Run the same command again to grade the rest.")
        sys.exit(Exit.INTERRUPTED)
    err.print(f"[dim]grader: merged {len(outcome.graded)} student(s) into {report_dir / 'summary.csv'}, "
              "gradebook.csv, junit.xml and class.html[/dim]")
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


@cli.command()
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.argument("folders", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--exercise", default=None, metavar="NAME",
              help="The exercise (`grader exercises` lists them; default: bias_gelu_fused).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A rubric YAML for the gradebook's points instead of a named exercise.")
def merge(out: Path, folders: tuple[Path, ...], exercise: str | None, rubric_path: Path | None) -> None:
    """Combine the --report-dir FOLDERS of `grader batch --shard` runs into OUT: one summary.csv,
    gradebook.csv, junit.xml and a Gradescope export per student."""
    from grader.batch import merge_reports
    from grader.exercises import choose

    try:
        graded = merge_reports(list(folders), out=out, rubric=choose(rubric_path=rubric_path, exercise=exercise))
    except GraderError as exc:
        _fail(exc)
    _err_console().print(f"[dim]grader: merged {len(graded)} students from {len(folders)} folders into {out}[/dim]")


class _BatchProgress:
    """A progress bar with counts by status on a terminal; one line per submission otherwise."""

    def __init__(self, console: Console):
        self.console = console
        self.bar = None
        self.counts: dict[str, int] = {}

    def __enter__(self):
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                TextColumn("{task.description}"), console=self.console, transient=True)
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


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path),
                default="submissions/bias_gelu_fused")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="Where to run the samples (auto: the GPU when one is visible).")
@click.option("--exercise", default=None, metavar="NAME",
              help="The exercise (default: the one DIRECTORY is named for).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A rubric YAML instead of a named exercise.")
@click.option("--only", multiple=True, help="Run only this sample (repeatable).")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write every sample's result.json document, keyed by file, to this file.")
def samples(directory: Path, backend: str, exercise: str | None, rubric_path: Path | None, only: tuple[str, ...], json_out: Path | None) -> None:
    """Grade every sample in DIRECTORY and check it gets the outcome its manifest.yaml expects."""
    import json

    from rich.table import Table

    from grader.batch.manifest import run_samples
    from grader.exercises import choose

    err = _err_console()
    try:
        rubric = choose(rubric_path=rubric_path, exercise=exercise, folder=directory)
        outcomes = run_samples(directory, rubric=rubric, backend=backend, only=list(only) or None,
                               progress=lambda f: err.print(f"[dim]grader: {f}[/dim]"))
    except GraderError as exc:
        _fail(exc)
    table = Table("sample", "backend", "status", "correct", "tier", "fraction", "diagnosis", "seconds", "verdict")
    for o in outcomes:
        r = o.result
        table.add_row(o.expectation.file, r.backend, r.status, str(r.correct), str(r.tier),
                      f"{r.fraction:.3f}" if r.fraction is not None else "-",
                      ",".join(d.code for d in r.diagnosis) or "-", f"{r.seconds:.1f}",
                      "ok" if o.ok else "[red]" + "; ".join(o.problems) + "[/red]")
    Console(highlight=False, width=max(Console().width, 150)).print(table)
    if json_out is not None:
        json_out.write_text(json.dumps({o.expectation.file: o.result.to_json() for o in outcomes}, indent=1))
    bad = [o for o in outcomes if not o.ok]
    click.echo(f"{len(outcomes) - len(bad)} passed, {len(bad)} failed")
    sys.exit(Exit.INCORRECT if bad else Exit.CORRECT)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--exercise", default=None, metavar="NAME",
              help="The exercise whose findings to apply (default: the one whose kernel FILE defines).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A rubric YAML instead of a named exercise.")
@click.option("--arch", default=None, help="GPU architecture to compile for (default: this GPU's, else sm_90).")
def explain(file: Path, exercise: str | None, rubric_path: Path | None, arch: str | None) -> None:
    """Show what FILE's compiled code does that costs it: findings and the annotated SASS (nothing is run)."""
    from grader.toolchain import gpuinfo
    from grader.analysis.explain import explain_submission, render
    from grader.exercises import choose

    try:
        rubric = choose(rubric_path=rubric_path, exercise=exercise, file=file)
        reading = gpuinfo.probe() if arch is None else None
        target = arch or (gpuinfo.arch(reading) if reading else "sm_90")
        ex = explain_submission(file, rubric=rubric, arch=target)
    except GraderError as exc:
        _fail(exc)
    click.echo(render(ex, file.name), nl=False)
    sys.exit(Exit.NOT_GRADABLE if ex.problem else Exit.CORRECT)


@cli.command()
@click.option("--prune", is_flag=True, help="Delete least recently used builds until the cache fits --max-mib.")
@click.option("--max-mib", type=click.IntRange(min=0), default=None,
              help="The cap for --prune (default: GRADER_CACHE_MAX_MIB, else the rubric's limits.cache_max_mib).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Rubric whose limits.cache_max_mib is the default cap.")
def cache(prune: bool, max_mib: int | None, rubric_path: Path | None) -> None:
    """Show the build cache's size; with --prune, shrink it to its cap."""
    from grader.toolchain import cache as build_cache
    from grader.exercises import choose

    try:
        limit = (max_mib << 20) if max_mib is not None else build_cache.max_bytes(
            choose(rubric_path=rubric_path).limits.cache_max_mib)
    except GraderError as exc:
        _fail(exc)
    r = build_cache.prune(limit_bytes=limit) if prune else build_cache.report()
    click.echo(f"{r.root}: {r.entries} builds, {r.bytes / 2**20:.1f} MiB (cap {limit / 2**20:.0f} MiB)")
    if prune:
        click.echo(f"pruned {r.pruned} builds, {r.freed_bytes / 2**20:.1f} MiB "
                   "(builds used in the last 10 minutes or being built are kept)")


@cli.command()
def exercises() -> None:
    """List the exercises: each one's kernel, launcher, dimensions and tensors."""
    from grader.exercises import exercise_files, load_all

    try:
        found = load_all()
    except GraderError as exc:
        _fail(exc)
    for name, r in found.items():
        click.echo(f"{name}: {r.title}\n    rubric    {exercise_files()[name]}")
        click.echo(f"    kernel    {r.kernel.signature}")
        if r.kernel.launcher:
            click.echo(f"    launcher  {r.kernel.launcher}   (optional)")
        click.echo("    default launch  grid (" + ", ".join(r.kernel.grid) + "), block (" + ", ".join(r.kernel.block) + ")")
        for d, what in r.dims.items():
            click.echo(f"    {d:<9} {what}")
        for t in r.tensors:
            extra = " (chain only)" if t.chain else ""
            click.echo(f"    {t.role:<3} {t.name}[{']['.join(t.shape)}] {t.dtype}" +
                       (f", starts {t.init}" if t.role == "out" else "") + extra)
        timed = " x ".join(f"{k}={v}" for k, v in r.timing.dims.items())
        click.echo(f"    timed at  {timed}; bytes {r.timing.bytes}")


@cli.command()
@click.option("--exercise", "names", multiple=True, metavar="NAME",
              help="The exercise to calibrate (repeatable; default: every exercise with calibrate runs).")
def calibrate(names: tuple[str, ...]) -> None:
    """Time the lessons' own reference kernels and the copies on this GPU: where the tier lines sit."""
    from grader.grade.calibration import calibrate as run, render
    from grader.exercises import load_all, load_exercise

    try:
        rubrics = [load_exercise(n) for n in names] or [r for r in load_all().values() if r.calibrate.runs]
        for rubric in rubrics:
            click.echo(render(run(rubric)))
    except GraderError as exc:
        _fail(exc)


@cli.command("rubric-keys")
def rubric_keys() -> None:
    """List every rubric key with its default and what it means."""
    from grader.exercises.rubric import describe

    for key, default, doc in describe():
        click.echo(f"{key}\n    {doc}" + (f"\n    default: {default}" if default else ""))


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
