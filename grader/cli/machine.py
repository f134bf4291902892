"""The machine's commands: `grader cache`, `grader exercises`, `grader calibrate`, `grader rubric-keys`."""

from __future__ import annotations

from pathlib import Path

import click

from grader.cli.common import fail
from grader.cli.screen import echo_fitted
from grader.core.backend import CUDA
from grader.core.errors import GraderError
from grader.exercises import choose, exercise_files, load_all, load_exercise
from grader.exercises.rubric import describe
from grader.grade.calibration import calibrate as run
from grader.grade.calibration import render, write_json
from grader.toolchain import cache as build_cache


@click.command()
@click.option("--prune", is_flag=True, help="Delete least recently used builds until the cache fits --max-mib.")
@click.option("--max-mib", type=click.IntRange(min=0), default=None,
              help="The cap for --prune (default: GRADER_CACHE_MAX_MIB, else the rubric's limits.cache_max_mib).")
@click.option("--rubric", "rubric_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Rubric whose limits.cache_max_mib is the default cap.")
def cache(prune: bool, max_mib: int | None, rubric_path: Path | None) -> None:
    """Show the build cache's size; with --prune, shrink it to its cap."""
    try:
        limit = (max_mib << 20) if max_mib is not None else build_cache.max_bytes(
            choose(rubric_path=rubric_path).limits.cache_max_mib)
    except GraderError as exc:
        fail(exc)
    r = build_cache.prune(limit_bytes=limit) if prune else build_cache.report()
    click.echo(f"{r.root}: {r.entries} builds, {r.bytes / 2**20:.1f} MiB (cap {limit / 2**20:.0f} MiB)")
    if prune:
        click.echo(f"pruned {r.pruned} builds, {r.freed_bytes / 2**20:.1f} MiB "
                   "(builds used in the last 10 minutes or being built are kept)")


@click.command()
def exercises() -> None:
    """List the exercises: each one's kernel, launcher, dimensions and tensors."""
    try:
        found = load_all()
    except GraderError as exc:
        fail(exc)
    for name, r in found.items():
        echo_fitted(f"{name}: {r.title}")
        echo_fitted(f"    rubric    {exercise_files()[name]}", 10)
        echo_fitted(f"    kernel    {r.kernel.signature}", 10)
        if r.kernel.launcher:
            echo_fitted(f"    launcher  {r.kernel.launcher}   (optional)", 10)
        echo_fitted("    default launch  grid (" + ", ".join(r.kernel.grid) + "), block (" + ", ".join(r.kernel.block) + ")", 16)
        for d, what in r.dims.items():
            echo_fitted(f"    {d:<9} {what}", 10)
        for t in r.tensors:
            extra = " (chain only)" if t.chain else ""
            echo_fitted(f"    {t.role:<3} {t.name}[{']['.join(t.shape)}] {t.dtype}" +
                       (f", starts {t.init}" if t.role == "out" else "") + extra, 4)
        timed = " x ".join(f"{k}={v}" for k, v in r.timing.dims.items())
        echo_fitted(f"    timed at  {timed}; bytes {r.timing.bytes}", 10)


@click.command()
@click.option("--exercise", "names", multiple=True, metavar="NAME",
              help="The exercise to calibrate (repeatable; default: every exercise with calibrate runs).")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the tables as JSON here (docs/figures/ keeps them: docs/figures.md).")
def calibrate(names: tuple[str, ...], json_out: Path | None) -> None:
    """Time the lessons' own reference kernels and the copies on this GPU: where the tier lines sit."""
    try:
        rubrics = [load_exercise(n) for n in names] or [r for r in load_all().values() if r.calibrate.runs]
        done = []
        for rubric in rubrics:
            done.append(run(rubric, backend=CUDA))
            click.echo(render(done[-1]))
        if json_out is not None:
            write_json(done, json_out)
    except GraderError as exc:
        fail(exc)


@click.command("rubric-keys")
def rubric_keys() -> None:
    """List every rubric key with its default and what it means."""
    for key, default, doc in describe():
        click.echo(f"{key}\n    {doc}" + (f"\n    default: {default}" if default else ""))


COMMANDS = [cache, exercises, calibrate, rubric_keys]
