"""Building a submission (and the reference kernels) into a shared library.

The translation unit and a build.ninja are generated from templates into a
cache directory named by a hash of everything that decides the output:
the source, the generated harness, the compiler and its version, the flags
and the target. A second build of the same inputs is a cache hit and runs
no compiler. nvcc builds for the GPU; g++ with the shim header builds the
same source for the CPU emulator.

Beside this module: the flags (flags.py), the cache's keys and kept outputs (cache.py), whether
the machine failed a build (faults.py), what the parent reads from the device code
(devicecode.py) and the grader's own C libraries (hostlibs.py). Their names that the grade's
steps and children, and the tests, import from here are re-exported below.
"""

from __future__ import annotations

import dataclasses
import fcntl
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader import __version__
from grader.core import sealed
from grader.core.backend import Backend
from grader.core.emulation import rewrite_for_emulator, spreads_over_cores, uses_collectives
from grader.core.errors import InfrastructureError
from grader.core.locations import PACKAGE_DIR, cache_root, reference_dir
from grader.core.source import Submission, blank_comments_and_strings, find_kernels, uses_device_lambdas
from grader.exercises.rubric import Rubric
from grader.toolchain import tools
from grader.toolchain.cache import cached_build, digest, keep, keep_record, keep_text, touch

# Re-exported where they were before the split: grade/children.py, grade/calibration.py and
# run/replaying.py import device_code, device_variables, kernel_parameters, uses_device_heap,
# build_guard and build_driver_stand_in from here, and the tests the rest.
from grader.toolchain.devicecode import (  # noqa: F401
    FATBIN_MAGIC,
    _nv_info_layout,
    device_code,
    device_variables,
    elf_symbols,
    kernel_parameters,
    uses_device_heap,
)
from grader.toolchain.faults import check_scratch_folder, disk_fault, known_good_fault, machine_fault
from grader.toolchain.flags import (
    SHIM_HEADER,
    compile_flags,
    emulator_flags,  # noqa: F401
    recorder_link_flags,
    shim_text,
)
from grader.toolchain.hostlibs import build_driver_stand_in, build_guard, driver_entry_points  # noqa: F401
from grader.toolchain.outcome import (
    BuildResult,
    CompilerMessage,
    KernelResources,
    parse_alone,
    parse_gmem,
    parse_messages,
    parse_ptxas,
)
from grader.toolchain.render import render, template_digest
from grader.toolchain.running import BuildLimits, Ran, Room, build_room, run_limited

REFERENCE_SOURCE = reference_dir() / "kernels.cu"
RUNTIME_SOURCE = PACKAGE_DIR / "run" / "child" / "runtime.cu"


def build_submission(sub: Submission, rubric: Rubric, *, backend: Backend, arch: str = "sm_90") -> BuildResult:
    """Build the submission with the backend's toolchain (nvcc for arch, or g++ against the shim),
    within the rubric's build limits."""
    tc = backend.toolchain
    context = dict(version=__version__, backend=backend.name, records=backend.records_then_replays,
                   launcher=rubric.kernel.parsed_launcher if sub.has_launcher else None, kernel=rubric.kernel.parsed,
                   workspace_bytes=rubric.limits.workspace_mib << 20)
    # Keyed on the template and its context (their reprs are their fields'), rendered only to build.
    template = f"{tc.templates}/harness.cu.j2"          # the backend's own (grader/templates/cuda/, emulator/)
    harness = (template_digest(template), repr(sorted(context.items())))
    source = rewrite_for_emulator(sub.compiled) if tc.shim else sub.compiled
    lambdas = tc.lambda_flags if uses_device_lambdas(sub.code) else ()
    flags = compile_flags(tc, tc.flags + lambdas, arch=arch, fibers=uses_collectives(sub), spread=spreads_over_cores(sub))
    shim = shim_text() if tc.shim else ""
    # the recorder sees the launcher's launches and stream work through the wrapped entry points
    link_flags = recorder_link_flags(backend.api) if backend.records_then_replays else ()
    key = digest(__version__, backend.name, source, *harness, " ".join(flags), " ".join(link_flags),
                 tools.version(tc.compiler), backend.target(arch), shim)
    linked = recorder_object(backend, workspace_bytes=context["workspace_bytes"]) if context["records"] else None
    key = digest(key, linked.key if linked else "")
    return _build(Plan(
        key=f"sub-{key}",
        link_flags=link_flags,
        files={"submission.cu": source, "harness.cu": lambda: render(template, **context)},
        main="harness.cu",
        flags=flags,
        linked=linked,
        user_path=str(sub.path),
        limits=submission_limits(rubric),
    ), backend)


def submission_limits(rubric: Rubric) -> BuildLimits:
    """What a submission's build may take: the rubric's limits.build_*."""
    lim = rubric.limits
    return BuildLimits(lim.build_time_s, lim.build_memory_mib, require_wall=lim.require_read_wall,
                       file_mib=lim.build_file_mib)


@dataclass(frozen=True)
class LinkedObject:
    """An object the grader builds once per machine and links into every library of a backend (the
    recorder): its cache key, where it lies once made, and how it is made (or found made)."""

    key: str
    path: Path
    make: Callable[[], None]


def recorder_object(backend: Backend, *, workspace_bytes: int) -> LinkedObject:
    """The recorder (its templates' recorder.cpp.j2) as an object of its own: host code only, the same for every
    submission of an exercise, so it is compiled once per machine, not in each submission's build
    (its host compile was about 0.7 s of every nvcc build of the harness, on 2 cores)."""
    tc = backend.toolchain
    context = dict(version=__version__, workspace_bytes=workspace_bytes)
    flags = list(tc.host_flags)
    template = f"{tc.templates}/recorder.cpp.j2"
    key = digest(__version__, template_digest(template), repr(sorted(context.items())), " ".join(flags),
                 tools.version(tc.compiler))
    directory = cache_root() / f"rec-{key}"
    obj = directory / "recorder.o"

    def make() -> None:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)      # builds of one batch wait for the one compile
            if obj.exists():
                problem = sealed.check(obj, full=True)
                if not problem:
                    touch(directory)
                    return
                if "no valid seal" not in problem:
                    sealed.say_healed(f"the recorder {directory.name}", problem)
                sealed.unlink_with_seal(obj)
            text = render(template, **context)
            (directory / "recorder.cpp").write_text(text)          # kept beside its object, to read
            check_scratch_folder()
            with build_room() as room:
                (room.path / "recorder.cpp").write_text(text)
                args = [tools.require(tc.compiler), *flags, "-c", "-o", "recorder.o", "recorder.cpp"]
                ran = run_limited(args, BuildLimits(), room)
                log = ran.proc.stdout + ran.proc.stderr
                made = room.path / "recorder.o"
                if ran.proc.returncode != 0 or ran.over or not made.exists():
                    fault = machine_fault(log) or disk_fault(log, room.path) or ran.over
                    raise InfrastructureError(f"the grader's recorder ({directory / 'recorder.cpp'}) did not build"
                                              f"{': ' + fault if fault else ''}: check the compiler runs "
                                              f"(`{Path(args[0]).name} --version`) and the free space of TMPDIR and "
                                              f"GRADER_CACHE_DIR\n{' '.join(args)}\n{log[-1500:]}")
                keep(made, obj)
            sealed.seal(obj)

    return LinkedObject(key=key, path=obj, make=make)



def baseline_source(rubric: Rubric) -> str:
    """A trivial kernel of the exercise's signature: it copies its first input to its first output."""
    sig = rubric.kernel.parsed
    src = next((p.name for p in sig.params if p.pointer and p.const_data), None)
    dst = next((p.name for p in sig.params if p.pointer and not p.const_data), None)
    body = (f"    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;\n"
            f"    if (i < 1) {dst}[i] = {src}[i];\n") if src and dst else ""
    params = ", ".join(f"{p.ctype} {p.name}" for p in sig.params)
    return f"__global__ void {sig.name}({params}) {{\n{body}}}\n"


def build_baseline(rubric: Rubric, *, backend: Backend, fibers: bool) -> BuildResult:
    """The harness around a trivial kernel, built as backend builds (against the shim): what the
    shim alone puts in an object, for screening a g++-built submission where nvcc is missing."""
    text = baseline_source(rubric) + ("__global__ void grader_baseline_sync() { __syncthreads(); }\n" if fibers else "")
    code = blank_comments_and_strings(text)
    sub = Submission(path=Path("baseline.cu"), text=text, sha256="", code=code, kernels=find_kernels(code))
    result = build_submission(sub, rubric, backend=backend)
    if not result.ok:
        raise InfrastructureError(f"the emulator's baseline did not build:\n{result.log}")
    return result


def build_reference(*, backend: Backend, arch: str = "sm_90", exercise_kernels: str = "") -> BuildResult:
    """Build the grader's reference kernels (reference/kernels.cu: the copies) with an exercise's
    own (reference/<exercise>/kernels.cu), once per backend, architecture and exercise."""
    tc = backend.toolchain
    files = {"kernels.cu": REFERENCE_SOURCE.read_text()}
    if exercise_kernels.strip():
        files["exercise.cu"] = exercise_kernels
    if tc.runtime:
        # the child's runtime helpers (allocation, copies, events): how it drives the GPU without torch
        files["runtime.cu"] = RUNTIME_SOURCE.read_text()
    if tc.shim:
        # the shim defines its entry points in its header: one translation unit
        files = {k: rewrite_for_emulator(v) for k, v in files.items()}
        files["reference.cu"] = "".join(f'#include "{name}"\n' for name in files)
        main, also = "reference.cu", ()
    else:
        # each file compiled on its own and at once (ninja runs them side by side), then linked into
        # one library: on a fresh machine this build, not the student's, was a first grade's longest
        main, also = "kernels.cu", tuple(name for name in files if name != "kernels.cu")
    flags = compile_flags(tc, tc.reference_flags, arch=arch)
    extra = shim_text() if tc.shim else ""
    key = digest(__version__, backend.name, *files.values(), " ".join(flags), tools.version(tc.compiler),
                 backend.target(arch), extra)
    result = _build(Plan(key=f"ref-{key}", files=files, main=main, flags=flags, user_path=str(REFERENCE_SOURCE),
                         also=also), backend)
    if not result.ok:
        raise InfrastructureError(f"the reference kernels did not build ({result.command}):\n{result.log}")
    return result


def ninja_text_of(text: str) -> str:
    """text as a value in a ninja file: `$` is ninja's escape (`k$(b).cu` broke the build file, and a
    correct kernel became a compile_error), and a line break would end the value."""
    return "".join("$$" if c == "$" else (" " if c in "\r\n" else c) for c in text)



@dataclass(frozen=True)
class Plan:
    """One build: its cache key, its files (a callable: a text made only when it is built), the file
    compiled into main.o (the others it includes) and those compiled on their own beside it (also),
    the flags, what the link adds (flags; an object built once, LinkedObject), the file named in the
    student's messages and the limits the compiler runs under."""

    key: str
    files: dict[str, str | Callable[[], str]]
    main: str
    flags: list[str]
    user_path: str
    also: tuple[str, ...] = ()
    link_flags: tuple[str, ...] = ()
    linked: LinkedObject | None = None
    limits: BuildLimits = BuildLimits()


def _build(plan: Plan, backend: Backend) -> BuildResult:
    """plan built in a room of its own behind the build's wall (toolchain/running.py), its library
    and object kept in the cache, or found there; the compilers never see the cache."""
    directory = cache_root() / plan.key
    directory.mkdir(parents=True, exist_ok=True)
    library, obj, meta = directory / "lib.so", directory / "main.o", directory / "build.json"
    tc = backend.toolchain
    compiler = tools.require(tc.compiler)
    start = time.perf_counter()
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # two graders building the same file wait for each other
        if library.exists() and meta.exists():
            cached = cached_build(directory, library, obj, meta)
            if cached is not None:
                touch(directory)
                return BuildResult(ok=True, library=library, object=obj, cached=True,
                                   seconds=time.perf_counter() - start, command=_command(compiler, plan),
                                   log=cached["log"], resources=[KernelResources(**r) for r in cached["resources"]],
                                   compiler=cached["compiler"], static_device_bytes=parse_gmem(cached["log"]),
                                   confined=cached.get("confined", False), wall=cached.get("wall", ""),
                                   api=backend.api)
        check_scratch_folder()
        with build_room(read=(str(SHIM_HEADER.parent),) if tc.shim else ()) as room:
            _write_files(plan, backend, compiler, room, directory)
            ran = _compile_and_link(room, plan.linked, plan.limits)
            result = _result_of(plan, backend, compiler, room, ran, start)
            if not result.ok:
                return result
            keep(result.library, library)
            keep(result.object, obj)
        sealed.seal(library)
        sealed.seal(obj)
        keep_record(meta, log=result.log, resources=result.resources, compiler=result.compiler,
                    confined=result.confined, wall=result.wall)
        return dataclasses.replace(result, library=library, object=obj, seconds=time.perf_counter() - start)


def _command(compiler: str, plan: Plan) -> str:
    """The build's compile of its main file, as a result shows it."""
    return " ".join([compiler, *plan.flags, "-c", "-o", "main.o", plan.main])


def _write_files(plan: Plan, backend: Backend, compiler: str, room: Room, directory: Path) -> None:
    """The plan's files (a callable's text made now, only to build) and its build.ninja, written in
    the room, and beside the build's outputs in the cache, to read."""
    tc = backend.toolchain
    # -nodlink: whole-program device code (no -rdc) needs no device link; nvcc's would only add an
    # empty fatbinary, and took 0.3 s of a 1 s build.
    compiles = [(plan.main, "main.o"), *((name, f"{Path(name).stem}.o") for name in plan.also)]
    objects = [obj for _, obj in compiles] + ([LINKED_NAME] if plan.linked else [])
    link = " ".join([compiler, "-shared", *tc.library_flags, *plan.link_flags])
    made = {name: text() if callable(text) else text for name, text in plan.files.items()}
    made["build.ninja"] = render("build.ninja.j2", version=__version__, compile=" ".join([compiler, *plan.flags]),
                                 link=link, description=ninja_text_of(f"{backend.name} build of "
                                                                      f"{Path(plan.user_path).name}"),
                                 compiles=compiles, objects=objects,
                                 included=[name for name in plan.files if name != plan.main and name not in plan.also])
    for name, text in made.items():
        _write_text(room.path / name, text)
        keep_text(directory / name, text.encode("utf-8", "surrogateescape"))      # the student's source: 0600


def _result_of(plan: Plan, backend: Backend, compiler: str, room: Room, ran: Ran, start: float) -> BuildResult:
    """What the compilers in room gave: the student's failed build (a limit reached, or an error,
    with the file compiled alone), or the built one (its library and object still in the room).
    A build the machine failed raises InfrastructureError (faults.py)."""
    tc = backend.toolchain
    proc, over = ran.proc, ran.over
    log = _strip_ninja(proc.stdout + proc.stderr)
    said = dict(cached=False, command=_command(compiler, plan), confined=ran.confined, wall=ran.wall,
                wall_ms=ran.wall_ms, api=backend.api)
    if proc.returncode != 0 and not over:
        fault = machine_fault(log) or disk_fault(log, room.path) or \
            known_good_fault(compiler, plan.flags, [*tc.library_flags, *plan.link_flags], plan.limits)
        if fault:
            raise InfrastructureError(f"the build of {Path(plan.user_path).name} failed for a reason of this "
                                      f"machine, not of the code: {fault}\n{log[-1500:]}")
    if over:
        messages = [CompilerMessage(file=plan.user_path, line=None, severity="error", text=over, in_submission=True)]
        return BuildResult(ok=False, library=None, object=None, seconds=time.perf_counter() - start,
                           log=over + "\n" + log, messages=messages, compiler=tools.version(tc.compiler),
                           over_limit=True, timed_out=ran.timed_out, **said)
    messages = parse_messages(log, room.path, plan.user_path)
    resources = parse_ptxas(log) if tc.resources else []
    version = tools.version(tc.compiler)
    too_large = outputs_over_limit(room, plan.limits) if proc.returncode == 0 else ""
    if too_large:
        messages = [CompilerMessage(file=plan.user_path, line=None, severity="error", text=too_large, in_submission=True)]
        return BuildResult(ok=False, library=None, object=None, seconds=time.perf_counter() - start,
                           log=too_large + "\n" + log, messages=messages, compiler=version, over_limit=True, **said)
    if proc.returncode != 0 or not (room.path / "lib.so").exists():
        alone = _alone(room, compiler, plan.flags, backend, plan) if "submission.cu" in plan.files else ""
        return BuildResult(ok=False, library=None, object=None, seconds=time.perf_counter() - start, log=log,
                           messages=messages, resources=resources, compiler=version, alone_log=alone,
                           alone_messages=parse_alone(alone, plan.user_path) if alone else [], **said)
    return BuildResult(ok=True, library=room.path / "lib.so", object=room.path / "main.o",
                       seconds=time.perf_counter() - start, log=log, messages=messages, resources=resources,
                       compiler=version, static_device_bytes=parse_gmem(log) if tc.resources else 0, **said)


KEPT = ("lib.so", "main.o")      # what a build's room gives the cache (_build keeps them)


def outputs_over_limit(room: Room, limits: BuildLimits) -> str:
    """Why the outputs a build would keep in the cache are too large together (each file is held to
    limits.file_mib as it is written, RLIMIT_FSIZE), or "": checked before anything is cached, so the
    cache holds its cap whatever a source declares."""
    total = sum((room.path / name).stat().st_size for name in KEPT if (room.path / name).exists())
    if total <= limits.file_mib << 20:
        return ""
    return (f"the build's outputs take {total / 2**20:.0f} MiB together, over its limit of {limits.file_mib} MiB "
            "(limits.build_file_mib); a large initialised array (static or __device__) is written whole into the "
            "object and the library: fill it at run time instead, and submit again")


def _write_text(path: Path, text: str) -> None:
    """A generated file of the build: the student's text as it was read (a name or a byte that is not
    UTF-8 kept as its surrogate escape, written back as the same byte)."""
    path.write_bytes(text.encode("utf-8", "surrogateescape"))



LINKED_NAME = "linked.o"      # the once-built object (LinkedObject), copied beside main.o for the link


def _compile_and_link(room: Room, linked: LinkedObject | None, limits: BuildLimits) -> Ran:
    """ninja in the room: the compile and the link; with an object built once (the recorder), that
    object is made (or found) while the submission compiles, and copied in for the link."""
    ninja = tools.require("ninja")
    if linked is None:
        return run_limited([ninja, "--quiet"], limits, room)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="linked-object") as pool:
        made = pool.submit(linked.make)
        compiled = run_limited([ninja, "--quiet", "main.o"], limits, room)
        if compiled.proc.returncode != 0 or compiled.over:
            return compiled
        made.result()                   # the grader's own object failed: InfrastructureError, the machine's
    shutil.copyfile(linked.path, room.path / LINKED_NAME)
    linked_run = run_limited([ninja, "--quiet"], limits, room)
    both = subprocess.CompletedProcess(linked_run.proc.args, linked_run.proc.returncode,
                                       compiled.proc.stdout + linked_run.proc.stdout,
                                       compiled.proc.stderr + linked_run.proc.stderr)
    return dataclasses.replace(linked_run, proc=both, wall_ms=round(compiled.wall_ms + linked_run.wall_ms, 3))



def _alone(room: Room, compiler: str, flags: list[str], backend: Backend, plan: Plan) -> str:
    """The student's file compiled on its own, with the build's flags and without the harness
    (nvcc to no output; g++ checking the syntax only): its output with the cache's copy named as
    the student's file, or "" where it compiles so (the error is in how the harness calls it).
    Only after a failed build: a missing brace otherwise swallows the harness and the student
    sees only errors in system headers."""
    source = room.path / "submission.cu"
    quiet = [f for i, f in enumerate(flags) if not (f == "-Xptxas" and flags[i + 1: i + 2] == ["-v"])
             and not (f == "-v" and flags[i - 1: i] == ["-Xptxas"])]         # ptxas's resource lines: not here
    args = [compiler, *quiet, *backend.toolchain.alone_flags, str(source)]
    ran = run_limited(args, plan.limits, room)
    if ran.over or ran.proc.returncode == 0:
        return ""
    name = Path(plan.user_path).name
    return (ran.proc.stdout + ran.proc.stderr).replace(str(source), name).replace(str(room.path) + "/", "")



def _strip_ninja(log: str) -> str:
    lines = [ln for ln in log.splitlines() if not ln.startswith(("FAILED: ", "ninja: ", "["))]
    return "\n".join(lines)


# nvcc:  dir/submission.cu(12): error: identifier "foo" is undefined
# g++:   dir/submission.cu:12:5: error: 'foo' was not declared in this scope
