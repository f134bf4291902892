"""The steps of a grade before anything runs: read the source, build it, screen the object.

Each returns what it built, or None with the Result stopped (a student's problem is a result,
never an exception). Below grading, which calls them in order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from grader.core.backend import CUDA, Backend
from grader.toolchain import tools
from grader.toolchain.outcome import BuildResult, compile_message
from grader.toolchain.build import build_baseline, build_submission
from grader.core.results import Result, SourceNote
from grader.exercises.rubric import Rubric
from grader.analysis.screening import refusal_message, screen_object
from grader.core.source import (Submission, SourceProblem, missing_kernel_message, read_submission, signature_problem,
                                source_refusals)
from grader.core.emulation import emulator_blockers, uses_collectives

Progress = Callable[[str], None]


def vet_source(p: Path, rubric: Rubric, result: Result) -> Submission | None:
    """Read the file and check what can be checked on its text; None (and result stopped) if refused."""
    scanned = read_submission(p, rubric.kernel.launcher_name, rubric.kernel.signature)
    if isinstance(scanned, SourceProblem):
        result.stop("rejected", scanned.message)
        result.notes.append(SourceNote(str(p), scanned.line, "not a gradable source file", scanned.message))
        return None
    sub: Submission = scanned
    result.submission["sha256"] = sub.sha256
    refused = source_refusals(sub)
    if refused:
        result.stop("rejected", "\n".join(f"{p.name}:{f.line}: {f.what}" for f in refused))
        result.notes += [SourceNote(str(p), f.line, "not accepted for grading", f.what) for f in refused]
        return None
    kernel = sub.kernel(rubric.kernel.name)
    if kernel is None:
        result.stop("rejected", missing_kernel_message(sub, rubric.kernel.name, rubric.kernel.signature))
        result.notes.append(SourceNote(str(p), None, f"no kernel named {rubric.kernel.name}", result.message))
        return None
    problem = None if sub.has_launcher else signature_problem(kernel, rubric.kernel)
    if problem:
        result.stop("rejected", problem)
        result.notes.append(SourceNote(str(p), kernel.line, "the kernel's parameters", problem))
        return None
    return sub


def build_and_screen(p: Path, sub: Submission, rubric: Rubric, backend: Backend, arch: str, result: Result,
                      say: Progress) -> tuple[BuildResult, BuildResult | None] | None:
    """Compile for backend and screen the object: the build to run, and nvcc's build (whose GPU
    code the findings read; None where nvcc is missing). None (and result stopped) on an error
    or a refusal."""
    nvcc_build = None
    has_nvcc = tools.locate("nvcc") is not None
    if not backend.on_gpu and has_nvcc:
        # nvcc judges the CUDA (g++ would accept host-only code in a kernel and miss CUDA's own
        # errors), and its object is what gets screened, before the CPU build.
        say(f"compiling {p.name} with nvcc ({arch}) to check it as CUDA")
        nvcc_build = build_submission(sub, rubric, backend=CUDA, arch=arch)
        if not nvcc_build.ok:
            result.build = _build_summary(nvcc_build)
            _stop_compile_error(nvcc_build, p, result)
            return None
        if _refused(nvcc_build, sub, rubric, "nvcc", p, result) or _too_much_device_memory(nvcc_build, rubric, p, result):
            return None
    if not backend.on_gpu:
        blockers = emulator_blockers(sub)
        if blockers:
            b = blockers[0]
            result.stop("rejected", f"{p.name}:{b.line}: {b.what}: the CPU emulator cannot run this, so this check "
                        "needs a GPU; run `grader submit` on a machine with an NVIDIA GPU.")
            result.notes.append(SourceNote(str(p), b.line, "needs a GPU", f"{b.what}: the CPU emulator cannot run this"))
            return None
    say(f"building {p.name} for {'the GPU (' + arch + ')' if backend.on_gpu else 'the CPU emulator'}")
    build = build_submission(sub, rubric, backend=backend, arch=arch)
    result.build = _build_summary(build)
    if not build.ok:
        _stop_compile_error(build, p, result)
        return None
    if backend.on_gpu and _refused(build, sub, rubric, "nvcc", p, result):
        return None
    if _too_much_device_memory(build, rubric, p, result):
        return None
    if not backend.on_gpu and not has_nvcc:
        baseline = build_baseline(rubric, fibers=uses_collectives(sub))
        if _refused(build, sub, rubric, "g++", p, result, baseline=baseline.object):
            return None
    return build, (build if backend.on_gpu else nvcc_build)


def _too_much_device_memory(build: BuildResult, rubric: Rubric, p: Path, result: Result) -> bool:
    """Refuse static __device__ memory beyond the rubric's limit (it would take the GPU's memory
    from the next grader); True when refused."""
    limit = rubric.limits.static_device_mib << 20
    if build.static_device_bytes <= limit:
        return False
    result.stop("rejected", f"{p.name} declares {build.static_device_bytes / 2**20:.1f} MiB of static __device__ "
                f"memory; a submission may declare at most {rubric.limits.static_device_mib} MiB "
                "(limits.static_device_mib). This exercise needs none: work in the buffers you are given.")
    result.notes.append(SourceNote(str(p), None, "too much static device memory", result.message))
    result.flags.append("screened_out")
    return True


def _refused(build: BuildResult, sub: Submission, rubric: Rubric, toolchain: str, p: Path, result: Result,
             baseline: Path | None = None) -> bool:
    """Screen the compiled object; refuse the submission (status rejected) when it would cheat the
    timing or cannot be graded."""
    refusals = screen_object(build.object, sub=sub, toolchain=toolchain, baseline=baseline)
    if refusals:
        result.stop("rejected", refusal_message(p.name, refusals))
        result.flags.append("screened_out")
        result.notes += [SourceNote(str(p), r.line, "not accepted for grading", f"{r.what} {r.reason}")
                         for r in refusals]
    return bool(refusals)


def _build_summary(build: BuildResult) -> dict:
    return {
        "ok": build.ok, "cached": build.cached, "seconds": round(build.seconds, 3), "compiler": build.compiler,
        "resources": [vars(r) for r in build.resources],
        "messages": [vars(m) for m in build.messages],
    }


def _stop_compile_error(build: BuildResult, p: Path, result: Result) -> None:
    result.stop("compile_error", compile_message(build, p))
    errors = [m for m in build.messages if m.severity == "error"]
    result.notes += [SourceNote(str(p), m.line, "compile error", m.text) for m in errors if m.in_submission][:10]
    if not result.notes:
        result.notes.append(SourceNote(str(p), None, "did not compile", result.message[:2000]))
