"""The steps of a grade before anything runs: read the source, build it, screen the object.

Each returns what it built, or a Stop saying why the grade ends there (a student's problem is a
result, never an exception); the pipeline (grade/pipeline.py) calls them in order and puts what
they return into the Result.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from grader.analysis.screening import refusal_message, screen_object, unresolved_calls
from grader.core.backend import Backend
from grader.core.emulation import emulator_blockers, uses_collectives
from grader.core.errors import InfrastructureError
from grader.core.handin import SourceFile
from grader.core.outcomes import Outcome
from grader.core.progress import Phase, Progress, Said
from grader.core.results import BuildSummary, SourceNote, Stop
from grader.core.scan import defines_function
from grader.core.source import (
    SourceProblem,
    Submission,
    missing_kernel_message,
    read_submission,
    signature_problem,
    source_refusals,
)
from grader.exercises import exercise_files, load_exercise
from grader.exercises.rubric import Rubric
from grader.toolchain import tools
from grader.toolchain.build import build_baseline, build_submission
from grader.toolchain.outcome import BuildResult, compile_message


def read_source(source: SourceFile, rubric: Rubric) -> Submission | Stop:
    """The file as read (once: the request's source), split into what the checks need; a Stop when
    it is no source at all."""
    scanned = read_submission(source, rubric.kernel.launcher_name, rubric.kernel.signature)
    if isinstance(scanned, SourceProblem):
        return Stop(Outcome.REJECTED, scanned.message,
                    [SourceNote(str(source.path), scanned.line, "not a gradable source file", scanned.message)])
    return scanned


def _other_exercise(sub: Submission, rubric: Rubric) -> Rubric | None:
    """Another exercise whose kernel or launcher the file defines by name (a file handed in to the
    wrong exercise), or None."""
    for name in exercise_files():
        if name == rubric.exercise:
            continue
        other = load_exercise(name)
        if _what_defines(sub, other):
            return other
    return None


def _what_defines(sub: Submission, other: Rubric) -> str:
    """'launchGeluSum, that exercise's launcher' or 'geluSum, that exercise's kernel': what of the
    other exercise the file defines ("" where nothing)."""
    if other.kernel.launcher and defines_function(sub.code, other.kernel.launcher_name):
        return f"{other.kernel.launcher_name}, that exercise's launcher"
    if sub.kernel(other.kernel.name) is not None:
        return f"{other.kernel.name}, that exercise's kernel"
    return ""


def vet_source(p: Path, sub: Submission, rubric: Rubric) -> Stop | None:
    """What can be checked on the text: nothing it may not do, the kernel there with the right
    parameters. A Stop when refused."""
    refused = source_refusals(sub, launcher=rubric.kernel.launcher)
    if refused:
        return Stop(Outcome.REJECTED, "\n".join(f"{p.name}:{f.line}: {f.what}" for f in refused),
                    [SourceNote(str(p), f.line, "not accepted for grading", f.what) for f in refused])
    kernel = sub.kernel(rubric.kernel.name)
    if sub.has_launcher and not rubric.kernel.name_required:
        return None                 # the launcher is the contract: its kernels may have any name
    if kernel is None:
        other = _other_exercise(sub, rubric)
        message = (f"{p.name} is a {other.exercise} file (it defines {_what_defines(sub, other)}), and this is "
                   f"{rubric.exercise}, whose kernel is {rubric.kernel.name}: hand in your {rubric.exercise} file, or "
                   f"grade this one against its own exercise (`grader submit {p.name} --exercise {other.exercise}`)"
                   if other is not None else missing_kernel_message(sub, rubric.kernel))
        return Stop(Outcome.REJECTED, message, [SourceNote(str(p), None, f"no kernel named {rubric.kernel.name}", message)])
    problem = None if sub.has_launcher else signature_problem(kernel, rubric.kernel)
    if problem:
        return Stop(Outcome.REJECTED, problem, [SourceNote(str(p), kernel.line, "the kernel's parameters", problem)])
    return None


@dataclass
class Built:
    """What building and screening produced: the build's summary for result.json, the build to run
    and nvcc's build (whose GPU code the findings read; None where nvcc is missing), or the Stop
    that ends the grade (a compile error, a refusal: summary kept where a build was made)."""

    summary: BuildSummary | None = None
    build: BuildResult | None = None
    gpu_build: BuildResult | None = None
    stop: Stop | None = None


def build_and_screen(p: Path, sub: Submission, rubric: Rubric, backend: Backend, arch: str,
                     say: Progress) -> Built:
    """Compile with the backend's toolchain and screen the object; first with the toolchain of the
    backend that checks it (backend.checked_by: nvcc for the emulator), where that is installed."""
    if sub.main_line is not None:
        say(f"leaving out main() (line {sub.main_line}): the grader calls your "
            f"{rubric.kernel.launcher_name if sub.has_launcher else 'kernel'}, never main")
    judge = backend.checked_by
    has_judge = judge is not None and tools.locate(judge.toolchain.compiler) is not None
    judge_build = _judged(p, sub, rubric, judge, arch, say) if has_judge else None
    if isinstance(judge_build, Built):
        return judge_build
    blocker = _emulator_blocker(p, sub) if backend.toolchain.shim else None
    if blocker is not None:
        return Built(stop=blocker)
    say(Said(f"building {p.name} for {'the GPU (' + arch + ')' if backend.on_gpu else 'the CPU emulator'}",
             Phase.BUILDING))
    build = build_submission(sub, rubric, backend=backend, arch=arch)
    if not build.ok and judge_build is not None and not build.over_limit:
        build = _built_twice(build, sub, rubric, backend, arch)
    out = Built(summary(build), build, build if backend.toolchain.device_code else judge_build)
    out.stop = (_failed(build, p, sub, rubric, judge.toolchain.compiler if judge_build is not None else None)
                or _screened(build, p, sub, rubric, backend, has_judge))
    return out


def _judged(p: Path, sub: Submission, rubric: Rubric, judge: Backend, arch: str, say: Progress) -> BuildResult | Built:
    """The judge's build (nvcc judges the CUDA: g++ would accept host-only code in a kernel and miss
    CUDA's own errors), screened before the CPU build; a Built with its Stop where it ends the grade."""
    say(Said(f"compiling {p.name} with {judge.toolchain.compiler} ({arch}) to check it as CUDA", Phase.BUILDING))
    judge_build = build_submission(sub, rubric, backend=judge, arch=arch)
    if not judge_build.ok:
        return Built(summary(judge_build), stop=_compile_error(judge_build, p, sub, rubric))
    stop = _refused(judge_build, sub, p) or _too_much_device_memory(judge_build, rubric, p)
    return Built(stop=stop) if stop else judge_build


def _emulator_blocker(p: Path, sub: Submission) -> Stop | None:
    """What the CPU emulator cannot run, found on the text (the file then needs a GPU)."""
    blockers = emulator_blockers(sub)
    return _needs_gpu(p, blockers[0].line, blockers[0].what) if blockers else None


def _failed(build: BuildResult, p: Path, sub: Submission, rubric: Rubric, judged_by: str | None) -> Stop | None:
    """A build that failed (judged_by: the compiler that built the file first, None where none did),
    or a launcher whose parameters the grader's call does not find, as the grade's Stop."""
    if not build.ok and judged_by is not None and not build.over_limit:
        # nvcc built it: it is CUDA, and only the emulator's own build of it failed (a construct its
        # shim lacks), which is never the student's compile error. (A build past its time or memory
        # limit is the file's cost, said as the compile error it is.)
        first = next((m for m in build.messages if m.severity == "error"), None)
        said = f" (its compiler said: {first.text.split('; did you mean')[0]})" if first is not None else ""
        return _needs_gpu(p, first.line if first is not None and first.in_submission else None,
                          f"{judged_by} compiles this file, but the CPU emulator could not build it{said}")
    if not build.ok:
        return _compile_error(build, p, sub, rubric)
    return _launcher_mismatch(build, p, sub, rubric) if sub.has_launcher else None


def _screened(build: BuildResult, p: Path, sub: Submission, rubric: Rubric, backend: Backend,
              has_judge: bool) -> Stop | None:
    """The built object screened: its refusals (a GPU build's here; the emulator's against its shim's
    baseline where no judge screened it first) and its static device memory."""
    stop = None if backend.toolchain.shim else _refused(build, sub, p)
    stop = stop or _too_much_device_memory(build, rubric, p)
    if stop is None and backend.toolchain.shim and not has_judge:
        baseline = build_baseline(rubric, backend=backend, fibers=uses_collectives(sub))
        stop = _refused(build, sub, p, shim_baseline=baseline.object)
    return stop


def _built_twice(failed: BuildResult, sub: Submission, rubric: Rubric, backend: Backend, arch: str) -> BuildResult:
    """The emulator's build of a file nvcc built, once more after it failed: a construct the shim
    lacks fails the same way again, and the file then needs a GPU; a build that fails otherwise, or
    builds, failed for the machine (a correct kernel once read as unbuildable on a machine whose
    cores a batch held), never for the student."""
    again = build_submission(sub, rubric, backend=backend, arch=arch)
    if again.ok or again.over_limit or _errors(again) == _errors(failed):
        return again
    raise InfrastructureError(f"the CPU emulator's build of {sub.path.name} failed twice, each time otherwise "
                              f"(first: {_errors(failed)[:1]}; then: {_errors(again)[:1]}): the machine, not the code; "
                              "check its free memory and disk, and grade again")


def _errors(build: BuildResult) -> list[str]:
    return [m.text for m in build.messages if m.severity == "error"]


def _needs_gpu(p: Path, line: int | None, what: str) -> Stop:
    """What the CPU emulator cannot run or build: the check needs a GPU (not the student's fault)."""
    where = f"{p.name}:{line}" if line else p.name
    return Stop(Outcome.REJECTED, f"{where}: {what}: the CPU emulator cannot run this, so this check needs a GPU; run "
                "`grader submit` on a machine with an NVIDIA GPU.",
                [SourceNote(str(p), line, "needs a GPU", f"{what}: the CPU emulator cannot run this")])


def _launcher_mismatch(build: BuildResult, p: Path, sub: Submission, rubric: Rubric) -> Stop | None:
    """A launcher defined with other parameter types than the one the grader calls compiles (C++
    takes it for an overload) and fails only when the library is loaded ("undefined symbol"):
    said as the compile error it is, with both signatures."""
    name = rubric.kernel.launcher_name
    try:
        defined, missing = unresolved_calls(build.object, name)
    except (OSError, subprocess.CalledProcessError, InfrastructureError):
        return None                                 # no nm: the load says it, later
    if not missing:
        return None
    yours = "; ".join(defined) or "none with that name"
    message = (f"{p.name} defines {yours}, but the grader calls {missing[0]}:\n    {rubric.kernel.launcher}\n"
               "Give your launcher exactly these parameter types, in this order (the names are yours): C++ takes a "
               "function with other types for a different one, and the grader's call finds nothing.")
    line = next((i for i, text in enumerate(sub.text.splitlines(), 1)
                 if re.search(rf"\b{re.escape(name)}\s*\(", text)), None)
    return Stop(Outcome.COMPILE_ERROR, message, [SourceNote(str(p), line, "the launcher's parameters", message)])


def _too_much_device_memory(build: BuildResult, rubric: Rubric, p: Path) -> Stop | None:
    """Refuse static __device__ memory beyond the rubric's limit (it would take the GPU's memory
    from the next grader)."""
    limit = rubric.limits.static_device_mib << 20
    if build.static_device_bytes <= limit:
        return None
    message = (f"{p.name} declares {build.static_device_bytes / 2**20:.1f} MiB of static __device__ memory; a "
               f"submission may declare at most {rubric.limits.static_device_mib} MiB (limits.static_device_mib). "
               "This exercise needs none: work in the buffers you are given.")
    return Stop(Outcome.REJECTED, message, [SourceNote(str(p), None, "too much static device memory", message)],
                ["screened_out"])


def _refused(build: BuildResult, sub: Submission, p: Path, shim_baseline: Path | None = None) -> Stop | None:
    """Screen the compiled object: a refusal (status rejected) when it would cheat the timing or
    cannot be graded (shim_baseline: screening.screen_object's)."""
    refusals = screen_object(build.object, sub=sub, api=build.api, shim_baseline=shim_baseline)
    if not refusals:
        return None
    return Stop(Outcome.REJECTED, refusal_message(p.name, refusals),
                [SourceNote(str(p), r.line, "not accepted for grading", f"{r.what} {r.reason}") for r in refusals],
                ["screened_out"])


def summary(build: BuildResult) -> BuildSummary:
    """A build as result.json's `build`."""
    return BuildSummary(ok=build.ok, cached=build.cached, seconds=round(build.seconds, 3), compiler=build.compiler,
                        resources=[vars(r) for r in build.resources], messages=[vars(m) for m in build.messages],
                        reads_confined=build.confined, wall=build.wall)


def _compile_error(build: BuildResult, p: Path, sub: Submission, rubric: Rubric) -> Stop:
    """A failed build as the student's result: their own file's errors first (compile_message),
    what the grader calls where only the call fails, a note at each error in their file."""
    expected = rubric.kernel.parsed_launcher if sub.has_launcher and rubric.kernel.parsed_launcher else rubric.kernel.parsed
    message = compile_message(build, sub, expected=expected)
    errors = [m for m in (build.alone_messages or build.messages) if m.severity == "error"]
    notes = [SourceNote(str(p), m.line, "compile error", m.text) for m in errors if m.in_submission][:10]
    # a build stopped at its time limit is the file's `timeout` (running.py names the stage; a machine too
    # busy to give it the CPU was the machine's, raised before this)
    return Stop(Outcome.TIMEOUT if build.timed_out else Outcome.COMPILE_ERROR, message,
                notes or [SourceNote(str(p), None, "did not compile", message[:2000])])
