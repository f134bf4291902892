"""Grading one submission: scan, build, run in a child, check, time, tier.

The one entry point is grade_submission(); it returns a Result whatever the
student's code does. It raises only the grader's own errors (errors.py):
a missing file, a bad rubric, a machine without the tools.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from grader import __version__
from grader.toolchain import gpuinfo
from grader.run import lanes
from grader.analysis import launches
from grader.toolchain.outcome import BuildResult
from grader.toolchain.build import build_guard, build_reference
from grader.core.contract import spread_threads
from grader.core.backend import AUTO, Backend, named
from grader.core.errors import GraderError, InfrastructureError, UsageError
from grader.exercises import load_reference
from grader.exercises.plan import run_cases
from grader.grade.jobs import child_job, draw_inputs
from grader.core.results import Result, SourceNote
from grader.exercises.rubric import Rubric
from grader.run.replaying import record_then_replay
from grader.run.sandbox import Worker
from grader.core.source import Submission
from grader.grade.steps import build_and_screen, vet_source

Progress = Callable[[str], None]


def grade_submission(path: str | Path, *, rubric: Rubric, backend: str | Backend = AUTO,
                     progress: Progress | None = None, audit_syscalls: bool = False,
                     device: str | None = None, emulator_threads: int = 0, draw_ahead: bool = False,
                     inputs=None) -> Result:
    """Grade the .cu file at path against rubric on backend ('auto', 'cuda' or 'emulator').

    Whatever the submission does, and when the machine lacks a tool or a GPU, the answer is a
    Result (status infrastructure_error for the latter). Only a usage or rubric error raises.

    device names the GPU to run on, as a CUDA_VISIBLE_DEVICES entry (default: the first visible
    one). The child's checks and timing run inside that GPU's lane (lanes.py): no other grader
    times on it meanwhile.

    emulator_threads caps the OS threads a large emulated launch runs on (0: every core the child
    may use); a batch grading several submissions at once on the emulator gives each one.

    audit_syscalls runs the child's filter in audit mode: every system call is allowed and
    recorded (result.sandbox['audit']). It measures what CUDA and the grader need; it is
    never for grading students, and the command line does not offer it.

    inputs: a batch's store of cases (exercises/pool.SharedStore), made by its first GPU grade,
    shared by the rest and closed by the batch; by default a grade makes its own.

    draw_ahead: after a GPU grade, start the detached process that draws the next run's private
    cases (exercises/pool.py), so that the next grade of this exercise need not (`grader submit`).
    """
    started = time.perf_counter()
    say = progress or (lambda _msg: None)
    p = Path(path)
    requested = backend if backend == AUTO else named(backend)     # an unknown name is a UsageError
    if p.is_dir():
        raise UsageError(f"{path}: a folder, not a .cu file (`grader batch {path}` grades a folder of submissions)")
    if not p.is_file():
        raise UsageError(f"{path}: no such file")
    reading = gpuinfo.probe() if requested == AUTO or requested.on_gpu else None
    has_gpu = reading is not None
    chosen = gpuinfo.resolve_backend(requested, has_gpu=has_gpu)

    result = Result(exercise=rubric.exercise, submission={"path": str(path), "sha256": None}, backend=chosen.name,
                    status="graded", grader_version=__version__)
    try:
        if chosen.on_gpu and not has_gpu:
            raise InfrastructureError(
                "--backend cuda needs an NVIDIA GPU and none is visible here (nothing was compiled). Run on a GPU "
                "machine, or use --backend emulator to check correctness on the CPU.")
        _grade(p, rubric, chosen, reading, result, say, "audit" if audit_syscalls else "enforce", device,
               emulator_threads, inputs)
    except InfrastructureError as exc:          # the machine, not the submission: still a valid result
        result.stop("infrastructure_error", str(exc))
    except GraderError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug of ours still leaves a valid result behind
        if isinstance(exc, OSError) and exc.errno in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT):
            result.stop("infrastructure_error", _no_room(exc))      # the machine's limit, said as such
        else:
            result.stop("infrastructure_error", "internal error in the grader (please report it): "
                        + "".join(traceback.format_exception_only(type(exc), exc)).strip()
                        + "\n" + "".join(traceback.format_tb(exc.__traceback__)[-3:]))
    finally:
        result.seconds = round(time.perf_counter() - started, 3)
    _keep_cache_in_bounds(rubric)
    if draw_ahead and chosen.private_cases and rubric.path and result.status != "infrastructure_error":
        from grader.exercises.pool import start_drawing_ahead

        start_drawing_ahead(rubric.path)
    return result


def _answers(case, rubric: Rubric, exercise, drawn, store):
    """One case's float64 answers (verdict.expected_for), from its inputs once they are drawn."""
    from grader import verdict

    return verdict.expected_for(case, rubric, exercise, drawn.result(), store.folder_for(case), keep=store.keep)


def _no_room(exc: OSError) -> str:
    """What to do when the grader cannot write its own files: a file-size limit, a full disk."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    why = (f"the file-size limit this grader inherited ({limit} bytes: `ulimit -f`)" if exc.errno == errno.EFBIG
           else "the disk (or its quota)")
    return (f"the grader could not write {exc.filename or 'its data'}: {why} is too small for what it writes "
            "(the timed shape's inputs are 64 MiB a set). Raise it, or set GRADER_CACHE_DIR to a folder with "
            "room, and grade again.")


def _keep_cache_in_bounds(rubric: Rubric) -> None:
    """Prune the build cache to its cap (least recently used first); never fails a grade."""
    from grader.toolchain import cache

    try:
        cache.prune_if_grown(limit_bytes=cache.max_bytes(rubric.limits.cache_max_mib))
    except OSError:
        pass


def _grade(p: Path, rubric: Rubric, backend: Backend, reading: dict | None, result: Result, say: Progress,
           guard_mode: str, device: str | None, emulator_threads: int = 0, shared=None) -> None:
    has_gpu = reading is not None
    sub = vet_source(p, rubric, result)
    if sub is None:
        return
    arch = gpuinfo.arch(reading) if backend.on_gpu and has_gpu else os.environ.get("GRADER_CUDA_ARCH", "sm_90")
    phases = result.phases
    clock = time.perf_counter()
    worker = recorder = None
    if not backend.on_gpu or has_gpu:
        # Started now so its imports and CUDA context overlap the build; it loads nothing of
        # the student's until it is handed the job. On a GPU, two: the recorder, which runs the
        # submission's host code, and the measuring process, which runs none (child/replay.py).
        if backend.records_then_replays:
            from grader.core.processes import close_to_children

            close_to_children()         # the recorder runs as this user: keep it out of /proc/<grader>
            device = device or lanes.default_device()
            recorder = Worker(backend=backend.name, output_cap=rubric.limits.output_cap_bytes,
                              cpu_limit_s=rubric.limits.time_limit_s, device=device)
        worker = Worker(backend=backend.name, output_cap=rubric.limits.output_cap_bytes,
                        cpu_limit_s=rubric.limits.time_limit_s, device=device if backend.on_gpu else None,
                        torch=backend.times and bool(rubric.timing.baseline),
                        cpu_threads=1 if backend.on_gpu else spread_threads(emulator_threads))
    pool = ThreadPoolExecutor(max_workers=3)           # the builds, the SASS, the device code
    # The cases' inputs and answers, beside the builds: a first grade draws every case, a GPU
    # grade without cases drawn ahead its private ones (numpy and torch release the GIL).
    draws = ThreadPoolExecutor(max_workers=max(2, min(6, (os.cpu_count() or 2) // 2)))
    # Imported only now, with the child already starting: numpy's import overlaps its start-up.
    from grader import verdict
    from grader.core.locations import cache_root
    from grader.exercises.pool import Store

    # On a GPU the random cases are drawn from 64 bits chosen for this run alone, kept in this
    # process (exercises/plan.py): the emulator runs the student's host code beside the device
    # code, so there they are the rubric's seeds, reproducible and public.
    store = None
    try:
        exercise = load_reference(rubric)
        if shared is not None and backend.private_cases and worker:
            store = shared.get()
        else:
            store = (Store.for_gpu_run(cache_root(), rubric, exercise, lambda s: run_cases(rubric, backend, s))
                     if backend.private_cases and worker else Store(cache_root()))
        reference_future = pool.submit(build_reference, backend=backend, arch=arch,
                                       exercise_kernels=exercise.kernels) if worker else None
        inputs = draw_inputs(draws, rubric, exercise, backend, store) if worker else {}
        # Each case's float64 answers as soon as its inputs are drawn: on a first grade (or one
        # with nothing drawn ahead) they are computed beside the builds, not after them. Queued
        # after every draw, so a thread waiting on a draw never holds up one that is yet to start.
        references = {c.name: draws.submit(_answers, c, rubric, exercise, inputs[c.name], store)
                      for c in run_cases(rubric, backend, store.secret)} if worker else {}
        guard_future = pool.submit(build_guard) if worker else None
        built = build_and_screen(p, sub, rubric, backend, arch, result, say)
        phases["build_s"] = round(time.perf_counter() - clock, 3)
        if built is None:
            return
        build, gpu_build = built
        sass_future = pool.submit(_analyse_sass, gpu_build, sub, rubric) if gpu_build else None
        if worker is None:
            raise InfrastructureError(
                f"{p.name} compiled for {arch}, but grading on the cuda backend needs an NVIDIA GPU and none is "
                "visible. Run on a GPU machine, or use --backend emulator to check correctness on the CPU.")
        job, cases = child_job(rubric, backend=backend, build=build, reference=reference_future.result(),
                               guard=guard_future.result(), guard_mode=guard_mode, has_launcher=sub.has_launcher,
                               emulator_threads=emulator_threads, store=store)
        if store.secret is not None:
            result.sandbox["inputs"] = {"private": True, "drawn_ahead": store.drawn_ahead, "batch": store.keep,
                                        "about": "random cases drawn from a seed chosen for this run, never shown "
                                                 "to a process that runs the submission's code"}
        if backend.on_gpu:
            result.device["before"] = reading
        # The inputs are on disk before the child is told to start; the answers may still be
        # being computed while it runs.
        wait = time.perf_counter()
        for f in inputs.values():
            f.result()
        phases["inputs_wait_s"] = round(time.perf_counter() - wait, 3)

        # The count the verdict will report: every case whose output comes back, and each check's chain.
        checks = len(cases) + sum(1 for cj in job.cases if cj.chain is not None)
        say(f"running {checks} checks{' and the timing' if backend.times else ''}"
            f"{' in two child processes' if backend.records_then_replays else ' in a child process'}")
        device_code = pool.submit(_device_code, build) if backend.records_then_replays else None
        # The children's start-up (imports, CUDA context) stays out of the GPU's lane.
        waited = worker.wait_ready(timeout_s=rubric.limits.time_limit_s)
        if recorder is not None:
            waited = max(waited, recorder.wait_ready(timeout_s=rubric.limits.time_limit_s))
        phases["child_start_wait_s"] = round(waited, 3)
        with lanes.gpu_lane(device) if backend.on_gpu else contextlib.nullcontext() as lane:
            phases["lane_wait_s"] = round(lane.waited, 3) if lane else 0.0
            clock = time.perf_counter()
            # The lane is handed on once the child has sent everything, not when it has exited.
            def handed_on() -> None:
                lane.release()
                phases["lane_s"] = round(time.perf_counter() - clock, 3)

            if recorder is not None:
                both = record_then_replay(recorder, worker, job, device_code=device_code.result(),
                                          time_limit_s=rubric.limits.time_limit_s, on_sent=handed_on,
                                          launcher=rubric.kernel.launcher_name if sub.has_launcher else None)
                phases["record_s"] = round(both.recorder.seconds, 3)
                run = both.judged
            else:
                both = None
                run = worker.run(job, time_limit_s=rubric.limits.time_limit_s, on_sent=handed_on if lane else None)
            phases["child_s"] = round(time.perf_counter() - clock, 3)
        if backend.on_gpu:
            result.device["gpu"] = device
            result.device["after"] = gpuinfo.snapshot()
        result.output = _output_of([both.recorder] + ([both.measurer] if both.measurer else []) if both else [run])
        clock = time.perf_counter()
        if both is not None and both.refusals:
            _refused_by_replay(both.refusals, p, result)
            return
        if both is not None and both.measurer is not None:
            _recorder_sandbox(both.recorder, result)
        verdict.read_run(run, cases, references, rubric, exercise, build, p, result)
        _note_lowered_limits(rubric, worker, result)
        log, timed_shape = launches.pick_log([f.data for f in run.frames], {c.name for c in cases if c.timed})
        result.launches = launches.resolve(log, timed_shape=timed_shape, library=build.library,
                                           resources=(gpu_build or build).resources, arch=arch)
        phases["check_s"] = round(time.perf_counter() - clock, 3)
        _add_findings(result, sass_future, rubric, arch)
        result.device.setdefault("nvcc" if backend.on_gpu else "compiler", build.compiler)
    finally:
        for child in (recorder, worker):
            if child is not None:
                child.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        draws.shutdown(wait=False, cancel_futures=True)
        if store is not None and not store.keep:          # a batch's store is the batch's to close
            store.close()


def _note_lowered_limits(rubric: Rubric, worker: Worker, result: Result) -> None:
    """result.sandbox['lowered_limits']: the grader's limits an inherited hard limit lowered (each
    only stricter: grader/core/limits.py)."""
    import resource

    from grader.core.limits import lowered

    found = {**lowered({resource.RLIMIT_AS: rubric.limits.build_memory_mib << 20}), **worker.lowered}
    if "host_memory_lowered_to_mib" in result.sandbox:         # the child's own cap, clamped where it is set
        found["private memory (the child)"] = {"wanted_mib": rubric.limits.host_memory_mib,
                                               "got_mib": result.sandbox["host_memory_lowered_to_mib"]}
    if found:
        result.sandbox["lowered_limits"] = found


def _device_code(build: BuildResult) -> list[str]:
    from grader.toolchain.build import device_code

    return [str(p) for p in device_code(build.library)]


def _output_of(runs: list) -> dict:
    """What the submission printed: the recorder's (its host code) then the measuring process's
    (device printf)."""
    return {"stdout": "".join(r.stdout.text() for r in runs), "stderr": "".join(r.stderr.text() for r in runs),
            "stdout_bytes": sum(r.stdout.total for r in runs), "stderr_bytes": sum(r.stderr.total for r in runs),
            "dropped_bytes": sum(r.stdout.dropped + r.stderr.dropped for r in runs)}


def _recorder_sandbox(run, result: Result) -> None:
    """The recorder's sandbox as result.sandbox['recorder'] (the measuring process's is the main one)."""
    from grader.core.contract import HelloFrame

    hello = next((f.data for f in run.frames if isinstance(f.data, HelloFrame)), None)
    if hello is not None and isinstance(hello.sandbox, dict):
        result.sandbox["recorder"] = {k: hello.sandbox[k] for k in ("seccomp", "privileges", "host_memory_mib")
                                      if k in hello.sandbox}


def _refused_by_replay(reasons: list[str], p: Path, result: Result) -> None:
    """A recording the grader will not replay: the launches it holds cannot be timed fairly."""
    result.stop("rejected", "\n".join(f"{p.name}: {r}" for r in reasons))
    result.flags.append("refused_by_replay")
    result.notes += [SourceNote(str(p), None, "not accepted for grading", r) for r in reasons]


def _analyse_sass(build: BuildResult, sub: Submission, rubric: Rubric):
    from grader.analysis import sass

    return sass.analyse(build.object, launcher=rubric.kernel.launcher_name if sub.has_launcher else None,
                        default_kernel=rubric.kernel.name, resources=[vars(r) for r in build.resources])


def _add_findings(result: Result, sass_future, rubric: Rubric, arch: str) -> None:
    """The rubric's findings from the compiled code, with this run's figures; for graded kernels."""
    from grader.analysis import findings

    if sass_future is None or result.status != "graded":
        return
    kernels = sass_future.result()
    if isinstance(kernels, str):
        result.build["sass"] = f"unavailable: {kernels}"
        return
    kernels = findings.with_launches(kernels, result.launches,
                                     launches.sm_count(arch, result.device))
    result.build["sass"] = {k.name: dict(k.facts, launched=k.launched) for k in kernels}
    result.findings = findings.explain(kernels, rubric, result.timing, result.device.get("name", ""))


