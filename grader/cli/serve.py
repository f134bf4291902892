"""`grader serve`: the course server (grader/serve/), its tokens and its export."""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path

import click

from grader.batch.cluster import SlurmOptions
from grader.batch.inputs import read_roster
from grader.cli.common import SectionedCommand, fail, options_from
from grader.core.backend import CHOICES
from grader.core.errors import Exit, GraderError, UsageError
from grader.exercises import load_exercise
from grader.serve.store import INSTRUCTOR, STORE_NAME, Rules, Store


class _ServeGroup(click.Group):
    """`grader serve COURSE ...` starts the server (the `start` command); `grader serve tokens|revoke|
    export ...` are the others."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["start", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_ServeGroup)
def serve() -> None:
    """Run a course server that takes submissions over HTTP: `grader serve COURSE --exercise NAME`
    (`grader serve COURSE --help` lists its options).

    Students submit with `grader submit FILE --server URL` (their token in GRADER_TOKEN) or from
    the web page; the store is COURSE/grader.sqlite. docs/serve.md says the rest.
    """


def _deadline(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()        # without a zone: the machine's local time
    except ValueError:
        raise click.BadParameter(f"{value!r} is no ISO 8601 time (e.g. 2026-12-07T23:59 or 2026-12-07T23:59+01:00)") from None


SLURM_SECTION = "Slurm options (with --slurm)"


class _SlurmFlag(click.Option):
    section = SLURM_SECTION


class _StartCommand(SectionedCommand):
    """`start`, written as the docs write it: `grader serve COURSE --exercise NAME [OPTIONS]` (the
    group takes a folder as its first argument for `start`)."""

    def format_usage(self, ctx: click.Context, formatter) -> None:
        formatter.write_usage(ctx.parent.command_path if ctx.parent is not None else ctx.command_path,
                              "FOLDER --exercise NAME [OPTIONS]")


@serve.command(cls=_StartCommand, short_help="Serve the course in FOLDER: `grader serve FOLDER --exercise NAME`.")
@click.argument("folder", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--exercise", required=True, metavar="NAME", help="The exercise the course grades (`grader exercises`).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on (0.0.0.0: every interface; put TLS in front, docs/serve.md).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="The port to listen on.")
@click.option("--certfile", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="A TLS certificate (PEM) to serve HTTPS with; with --keyfile.")
@click.option("--keyfile", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="The TLS certificate's private key (PEM).")
@click.option("--backend", type=click.Choice(CHOICES), default="auto", show_default=True,
              help="Where to grade (auto: the GPU when one is visible), as `grader batch`.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Grades in flight at once (default: as `grader batch`).")
@click.option("--per-hour", type=click.IntRange(min=0), default=60, show_default=True,
              help="Uploads a student may make in any hour; more answer 429 with Retry-After (0: no cap). A cap "
                   "by default bounds what one student can add to the store.")
@click.option("--max-kb", type=click.IntRange(min=1), default=256, show_default=True,
              help="An upload's size limit in KiB (larger ones answer 413).")
@click.option("--deadline", default=None, metavar="ISO8601",
              help="Uploads after this time are late: kept and marked late, or refused with --late refuse.")
@click.option("--late", type=click.Choice(["keep", "refuse"]), default="keep", show_default=True,
              help="What a late upload gets.")
@click.option("--leaderboard", is_flag=True,
              help="Show a leaderboard of the best correct grades under aliases the students choose (a student "
                   "without an alias is not on it).")
@click.option("--slurm", is_flag=True, cls=_SlurmFlag,
              help="Grade each wave of uploads as `grader batch --slurm` grades a class: a job array through "
                   "submitit (FOLDER must be on a filesystem every node sees).")
@options_from(SlurmOptions, into="slurm_options", section=SLURM_SECTION)
def start(folder: Path, exercise: str, host: str, port: int, certfile: Path | None, keyfile: Path | None,
          backend: str, jobs: int | None, per_hour: int | None, max_kb: int, deadline: str | None, late: str,
          leaderboard: bool, slurm: bool, slurm_options: SlurmOptions) -> None:
    """Serve the course in FOLDER (its store: FOLDER/grader.sqlite) until Ctrl-C."""
    from grader.serve.app import Settings, run_server  # noqa: PLC0415  (lazy: starlette and uvicorn, where a server starts)

    try:
        load_exercise(exercise)
        served = Store(folder).setting("exercise") if (folder / STORE_NAME).exists() else None
        if served is not None and served != exercise:
            raise UsageError(f"{folder} is the course of {served} (its store holds that exercise's uploads and "
                             f"results): serve {exercise} from another folder, or pass --exercise {served}")
        if (certfile is None) != (keyfile is None):
            raise UsageError("TLS needs both --certfile and --keyfile")
        settings = Settings(folder, exercise, backend, jobs, Rules(per_hour or None, max_kb * 1024, _deadline(deadline), late),
                            leaderboard=leaderboard, slurm=slurm_options if slurm else None)
    except GraderError as exc:
        fail(exc)
    run_server(settings, host=host, port=port, certfile=certfile, keyfile=keyfile)


@serve.command()
@click.argument("roster", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--folder", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The course's folder (its store, grader.sqlite); made (private, 0700) where it does not exist.")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the tokens to this file, made readable by you alone (0600), instead of printing them.")
def tokens(roster: Path, folder: Path, out: Path | None) -> None:
    """Print `identifier,token` for each student of ROSTER and the instructor (its identifier
    @instructor), or write them to --out FILE (0600); a student's earlier token stops working. Only
    hashes are stored: keep the output."""
    try:
        students = [ident for ident, _user in read_roster(roster)]
        if not students:
            raise UsageError(f"{roster}: no students (a roster needs an identifier column)")
        _make_course_folder(folder)
        fd = _private_file(out) if out is not None else None     # before any token is issued
        store = Store(folder)
        lines = [f"{s},{store.issue(s)}" for s in students] + [f"{INSTRUCTOR},{store.issue(INSTRUCTOR, instructor=True)}"]
    except GraderError as exc:
        fail(exc)
    # (the roster's identifiers are the instructor's, and a token may start with '-': written as they are)
    text = "identifier,token\n" + "".join(f"{line}\n" for line in lines)
    if fd is None:
        click.echo(text, nl=False)
        return
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    click.echo(f"grader: wrote {len(lines)} tokens to {out} (readable by you alone); hand each student their line",
               err=True)


def _private_file(path: Path) -> int:
    """path opened for writing, emptied and readable and writable by this user alone (0600) whatever
    the umask, before anything is written to it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the tokens there ({exc.strerror}): name a file in a folder you can "
                         "write, that is not another user's") from None
    return fd


def _make_course_folder(folder: Path) -> None:
    """The course's folder, made private (0700: it will hold every upload and the tokens' hashes)
    where it does not exist yet; one that exists is left as it is."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{folder}: cannot make the course's folder ({exc.strerror}): name a folder you may "
                         "create, or create it first") from None


@serve.command()
@click.argument("identifier")
@click.option("--folder", required=True, type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="The course's folder.")
def revoke(identifier: str, folder: Path) -> None:
    """Revoke IDENTIFIER's token (a student's, or @instructor)."""
    try:
        n = Store(folder).revoke(identifier)
    except GraderError as exc:
        fail(exc)
    if not n:
        click.echo(f"grader: {identifier} has no live token in {folder}", err=True)
        sys.exit(Exit.USAGE)
    click.echo(f"grader: revoked {identifier}'s token")


@serve.command()
@click.argument("folder", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the class's files (as `grader batch --report-dir`).")
@click.option("--late/--no-late", "include_late", default=False, show_default=True,
              help="Count late uploads (default: each student's latest upload before the deadline).")
def export(folder: Path, out: Path, include_late: bool) -> None:
    """Write gradebook.csv, summary.csv, class.html, insights.json, junit.xml and each student's
    reports into OUT from the store, as `grader batch` writes them: each student's latest graded
    upload."""
    from grader.serve.export import export_class  # noqa: PLC0415  (lazy: the batch's writers, where a class is exported)

    try:
        n = export_class(folder, out=out, include_late=include_late)
    except GraderError as exc:
        fail(exc)
    click.echo(f"grader: wrote the class's files for {n} students into {out}")


COMMANDS = [serve]
