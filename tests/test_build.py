import shutil

import pytest

from grader.core.backend import CUDA, EMULATOR, named
from grader.toolchain.build import build_reference, build_submission
from grader.toolchain.outcome import demangle, parse_ptxas
from grader.core.source import read_submission

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CI installs it)")
GOOD = """#include <cuda_runtime.h>
__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) { const size_t i = blockIdx.y * cols + col; out[i] = x[i] + bias[col]; }
}
"""


@needs_nvcc
@pytest.mark.own_cache                    # its first build is a miss whatever ran before, on any worker
def test_nvcc_build_reports_resources_and_is_cached(write_cu, rubric):
    sub = read_submission(write_cu(GOOD), rubric.kernel.launcher_name)
    first = build_submission(sub, rubric, backend=CUDA, arch="sm_90")
    assert first.ok and not first.cached and first.library.exists()
    k = next(r for r in first.resources if r.name == "biasGeluFused")
    assert k.registers and k.registers > 0 and k.spill_stores == 0
    again = build_submission(sub, rubric, backend=CUDA, arch="sm_90")
    assert again.cached and again.library == first.library
    other_arch = build_submission(sub, rubric, backend=CUDA, arch="sm_80")
    assert other_arch.library != first.library


@needs_nvcc
def test_nvcc_errors_come_back_as_the_students_file_and_line(write_cu, rubric):
    text = GOOD.replace("out[i] = x[i] + bias[col];", "out[i] = x[i] + bias[col] + missing;")
    path = write_cu(text, "student.cu")
    result = build_submission(read_submission(path, rubric.kernel.launcher_name), rubric, backend=CUDA, arch="sm_90")
    assert not result.ok
    err = next(m for m in result.messages if m.severity == "error")
    assert err.file == str(path) and err.line == 5 and "missing" in err.text and err.in_submission


def test_gpp_emulator_build_and_error_lines(write_cu, rubric):
    sub = read_submission(write_cu(GOOD), rubric.kernel.launcher_name)
    assert build_submission(sub, rubric, backend=EMULATOR).ok
    bad = write_cu(GOOD.replace("out[i] = x[i]", "out[i] = y[i]"), "bad.cu")
    result = build_submission(read_submission(bad, rubric.kernel.launcher_name), rubric, backend=EMULATOR)
    err = next(m for m in result.messages if m.severity == "error")
    assert not result.ok and err.line == 5 and err.file == str(bad)


def test_reference_library_builds_for_the_emulator_with_the_exercises_kernels(rubric):
    from grader.exercises import load_reference

    lib = build_reference(backend=EMULATOR, exercise_kernels=load_reference(rubric).kernels).library
    assert lib.exists() and "grader_ref_add_residual" in lib.read_bytes().decode("latin-1")


@needs_nvcc
@pytest.mark.parametrize("exercise", ["bias_gelu_fused", "rope_half_split", "gelu_sum"])
def test_the_gpu_reference_compiles_each_file_apart_and_links_every_entry_point(exercise):
    """For the GPU the reference's files are compiled side by side (a first grade waited on their one
    compile): the library still defines every entry point the child calls and needs nothing of its
    own files that another file held."""
    import re
    import subprocess

    from grader.exercises import load_exercise, load_reference

    kernels = load_reference(load_exercise(exercise)).kernels
    lib = build_reference(backend=CUDA, exercise_kernels=kernels).library
    edges = [ln for ln in (lib.parent / "build.ninja").read_text().splitlines() if ln.startswith("build ")]
    assert len(edges) == 4 and any("exercise.o: compile exercise.cu" in e for e in edges)
    defined = set(subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout.split())
    wanted = set(re.findall(r'extern "C" \w+\s+(grader_\w+)\(', kernels + (lib.parent / "kernels.cu").read_text()
                            + (lib.parent / "runtime.cu").read_text()))
    assert len(wanted) > 10 and wanted <= defined
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True).stdout
    assert not [ln for ln in undefined.splitlines() if "grader_" in ln or "ref" in ln.lower()]


@pytest.mark.parametrize("backend", ["emulator", pytest.param("cuda", marks=needs_nvcc)])
def test_every_parameter_spelling_the_screen_accepts_compiles_in_the_harness(backend, write_cu, rubric):
    """Fairness: what signature_problem lets through, the generated default launch must call."""
    from test_source import CALLABLE

    for i, params in enumerate(CALLABLE):
        body = f"__global__ void biasGeluFused({params}) {{}}\n"
        result = build_submission(read_submission(write_cu(body, f"v{i}.cu"), rubric.kernel.launcher_name), rubric,
                                  backend=named(backend), arch="sm_90")
        assert result.ok, (params, result.log[-1500:])


def test_ptxas_parsing():
    log = ("ptxas info    : Compiling entry function '_Z13biasGeluFusedPKfS0_Pfm' for 'sm_90'\n"
           "ptxas info    : Function properties for _Z13biasGeluFusedPKfS0_Pfm\n"
           "    16 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]\n")
    (k,) = parse_ptxas(log)
    assert (k.name, k.registers, k.stack_bytes, k.spill_stores, k.spill_loads, k.shared_bytes) == (
        "biasGeluFused", 40, 16, 4, 8, 1024)
    assert demangle("_Z13biasGeluFusedPKfS0_Pfm") == "biasGeluFused"


def test_every_tool_is_found_in_one_place_and_cuda_home_is_honoured_everywhere(tmp_path, monkeypatch):
    """grader/toolchain/tools.py: a CUDA tool under $CUDA_HOME wins over PATH, for the builds (build._nvcc),
    the SASS reader and the emulator's check that nvcc is there (grading) alike; a
    missing tool is an InfrastructureError that says how to install it."""
    import os

    import pytest

    from grader.toolchain import tools
    from grader.core.errors import InfrastructureError

    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    for name in ("nvcc", "cuobjdump"):
        exe = home / "bin" / name
        exe.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 99.9, V99.9.1'\n")
        exe.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(home))
    tools.version.cache_clear()
    assert tools.require("nvcc") == str(home / "bin" / "nvcc") == tools.locate("nvcc")
    assert tools.locate("cuobjdump") == str(home / "bin" / "cuobjdump")
    assert tools.version("nvcc") == "Cuda compilation tools, release 99.9, V99.9.1"
    tools.version.cache_clear()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(InfrastructureError, match="'g\\+\\+' was not found on PATH: install g\\+\\+"):
        tools.require("g++")
    assert tools.locate("nvcc") == str(home / "bin" / "nvcc")           # still found: not on PATH
    monkeypatch.delenv("CUDA_HOME")
    assert os.environ["PATH"] and tools.locate("definitely-not-a-tool") is None


# Code brought from elsewhere: a __device__ lambda handed to a template kernel whose arguments
# the launch deduces, and a constexpr host function (std::numeric_limits) called in a kernel.
# nvcc builds both only with --extended-lambda and --expt-relaxed-constexpr.
BROUGHT = """#include <cuda_runtime.h>
#include <limits>
template <typename Op>
__global__ void mapBias(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                        int rows, int cols, Op op) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols) y[(size_t)blockIdx.y * cols + c] = op(x[(size_t)blockIdx.y * cols + c] + b[c]);
}
__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    mapBias<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, rows, cols, [] __device__ (float v) {
        const float lowest = std::numeric_limits<float>::lowest();
        return v < lowest ? lowest : 0.5f * v * (1.0f + erff(v * 0.70710678f));
    });
}
"""


@needs_nvcc
def test_code_brought_from_elsewhere_is_graded(write_cu, rubric):
    from grader.grade.pipeline import grade_submission

    result = grade_submission(write_cu(BROUGHT, "brought.cu"), rubric=rubric, backend="emulator")
    assert result.status == "graded" and result.correct, result.message


@needs_nvcc
def test_what_only_the_emulator_cannot_build_needs_a_gpu_and_is_no_compile_error(write_cu, rubric):
    """nvcc accepts the file: a failure of the emulator's own build is its shim's gap, said as such."""
    from grader.grade.pipeline import grade_submission

    text = BROUGHT.replace("    mapBias<<<", "    size_t free_bytes, total_bytes;\n"
                           "    cudaMemGetInfo(&free_bytes, &total_bytes);\n    mapBias<<<")
    path = write_cu(text, "asks_memory.cu")
    result = grade_submission(path, rubric=rubric, backend="emulator")
    assert result.status == "rejected", (result.status, result.message)
    assert "asks_memory.cu:13: nvcc compiles this file, but the CPU emulator could not build it" in result.message
    assert "cudaMemGetInfo" in result.message and "needs a GPU" in result.message
    assert "did you mean" not in result.message
    assert any(n.line == 13 and n.title == "needs a GPU" for n in result.notes)


@needs_nvcc
def test_an_emulator_build_past_its_limit_is_still_the_files_compile_error(write_cu, rubric, monkeypatch):
    """Only a failure of the emulator's shim is the emulator's: a build stopped at its time or memory
    limit is what the file costs, whichever compiler it was in."""
    from grader.grade import steps
    from grader.grade.pipeline import grade_submission
    from grader.toolchain.outcome import BuildResult, CompilerMessage

    real = steps.build_submission
    said = "the build ran out of its time limit of 1 s (in cc1plus)"

    def stopped_on_the_cpu(sub, rubric, *, backend, arch="sm_90"):
        if backend.toolchain.shim:
            return BuildResult(ok=False, library=None, object=None, cached=False, seconds=1.0, command="g++",
                               log=said, messages=[CompilerMessage(str(sub.path), None, "error", said, True)],
                               over_limit=True)
        return real(sub, rubric, backend=backend, arch=arch)

    monkeypatch.setattr(steps, "build_submission", stopped_on_the_cpu)
    result = grade_submission(write_cu(GOOD, "slow.cu"), rubric=rubric, backend="emulator")
    assert result.status == "compile_error" and said in result.message and "needs a GPU" not in result.message


def test_a_cached_build_renders_no_harness_and_a_changed_harness_or_rubric_builds_anew(write_cu, rubric, monkeypatch):
    """The harness is keyed on its template and its context and rendered only to build: a warm
    grade's cache hit rendered it for its key (65 ms, jinja's environment with it). Whatever the
    harness would say differently (its template, the workspace the rubric allows, a launcher or
    none) is another build."""
    import dataclasses

    from grader.toolchain import build, render

    sub = read_submission(write_cu(GOOD), rubric.kernel.launcher_name)
    first = build_submission(sub, rubric, backend=EMULATOR, arch="sm_90")
    assert first.ok and "grader_submission_launch" in (first.library.parent / "harness.cu").read_text()
    renders = []
    real = render.render
    monkeypatch.setattr(build, "render", lambda name, **kw: renders.append(name) or real(name, **kw))
    again = build_submission(sub, rubric, backend=EMULATOR, arch="sm_90")
    assert again.cached and again.library == first.library and renders == []
    roomier = dataclasses.replace(rubric, limits=dataclasses.replace(rubric.limits,
                                                                      workspace_mib=rubric.limits.workspace_mib + 1))
    assert build_submission(sub, roomier, backend=EMULATOR, arch="sm_90").library != first.library
    monkeypatch.setattr(build, "template_digest", lambda name: "another template")
    changed = build_submission(sub, rubric, backend=EMULATOR, arch="sm_90")
    assert not changed.cached and changed.library != first.library and "emulator/harness.cu.j2" in renders


def _exported(library) -> set[str]:
    import subprocess

    listing = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout
    return {line.split()[-1] for line in listing.splitlines() if line.strip()}


@needs_nvcc
def test_the_recorder_is_compiled_once_and_linked_into_every_gpu_build(write_cu, rubric, monkeypatch, tmp_path):
    """The recorder is host code the same for every submission of an exercise: one object per
    machine (rec-*), made while the first submission compiles and linked into each library, so the
    recording child finds its entry points in every build."""
    from grader.toolchain import build, render

    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "cache"))       # a machine's first builds
    renders = []
    real = render.render
    monkeypatch.setattr(build, "render", lambda name, **kw: renders.append(name) or real(name, **kw))
    first = build_submission(read_submission(write_cu(GOOD, "a.cu"), rubric.kernel.launcher_name), rubric,
                             backend=CUDA, arch="sm_90")
    other = GOOD.replace("x[i] + bias[col]", "x[i] * 2.0f + bias[col]")
    second = build_submission(read_submission(write_cu(other, "b.cu"), rubric.kernel.launcher_name), rubric,
                              backend=CUDA, arch="sm_90")
    assert first.ok and second.ok and first.library != second.library
    assert renders.count("cuda/recorder.cpp.j2") == 1 and renders.count("cuda/harness.cu.j2") == 2
    recorders = list(first.library.parent.parent.glob("rec-*/recorder.o"))
    assert len(recorders) == 1
    for library in (first.library, second.library):
        names = _exported(library)
        assert {"grader_record_take", "grader_record_go_offline", "__wrap_cudaLaunchKernel",
                "grader_submission_launch"} <= names
    # the submission's own object holds none of it: what screening reads is the student's code
    assert b"grader_record_take" not in first.object.read_bytes()
    # the emulator records nothing and links no recorder
    emulated = build_submission(read_submission(write_cu(GOOD, "c.cu"), rubric.kernel.launcher_name), rubric,
                                backend=EMULATOR, arch="sm_90")
    assert emulated.ok and "grader_record_take" not in _exported(emulated.library)


@needs_nvcc
def test_a_recorder_object_that_fails_its_seal_is_built_again(write_cu, rubric, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "cache"))
    first = build_submission(read_submission(write_cu(GOOD, "a.cu"), rubric.kernel.launcher_name), rubric,
                             backend=CUDA, arch="sm_90")
    recorder = next(first.library.parent.parent.glob("rec-*/recorder.o"))
    recorder.write_bytes(b"not an object")             # a disk fault, or a hand in the cache
    other = GOOD.replace("x[i] + bias[col]", "x[i] - bias[col]")
    second = build_submission(read_submission(write_cu(other, "b.cu"), rubric.kernel.launcher_name), rubric,
                              backend=CUDA, arch="sm_90")
    assert second.ok and "grader_record_take" in _exported(second.library)
    assert recorder.read_bytes()[:4] == b"\x7fELF" and "recorder" in capsys.readouterr().err


@needs_nvcc
def test_a_recorder_that_does_not_build_is_the_machines_fault_not_the_students(write_cu, rubric):
    import dataclasses

    from grader.core.errors import InfrastructureError

    broken = dataclasses.replace(CUDA, toolchain=dataclasses.replace(
        CUDA.toolchain, host_flags=("-x", "c++", "-Xcompiler", "-fPIC", "--no-such-flag")))
    with pytest.raises(InfrastructureError, match="recorder.*did not build"):
        build_submission(read_submission(write_cu(GOOD), rubric.kernel.launcher_name), rubric, backend=broken,
                         arch="sm_90")


@needs_nvcc
def test_an_emulator_build_that_fails_once_is_built_again_and_a_correct_kernel_is_graded(write_cu, rubric, monkeypatch):
    """nvcc built the file and the emulator's build failed: built once more before the file is said
    to need a GPU. A failure that does not repeat (the machine's: a compiler starved or killed while
    a batch held the cores) grades the kernel; one that repeats otherwise is infrastructure."""
    from dataclasses import replace

    from grader.grade import steps
    from grader.grade.pipeline import grade_submission
    from grader.toolchain.outcome import CompilerMessage

    real = steps.build_submission
    calls = []

    def flaky(sub, rubric, *, backend, arch="sm_90", says=("g++: fatal error: cannot execute 'cc1plus'",)):
        calls.append(backend.name)
        built = real(sub, rubric, backend=backend, arch=arch)
        emulator_calls = calls.count(backend.name) if backend.toolchain.shim else 0
        if 0 < emulator_calls <= len(says):
            msg = CompilerMessage(file=str(sub.path), line=None, severity="error", text=says[emulator_calls - 1],
                                  in_submission=False)
            return replace(built, ok=False, library=None, object=None, messages=[msg])
        return built

    monkeypatch.setattr(steps, "build_submission", flaky)
    result = grade_submission(write_cu(BROUGHT, "brought.cu"), rubric=rubric, backend="emulator")
    assert result.status == "graded" and result.correct, result.message

    calls.clear()
    monkeypatch.setattr(steps, "build_submission",
                        lambda *a, **k: flaky(*a, **k, says=("g++: fatal error: cannot execute 'cc1plus'",
                                                              "g++: internal compiler error: Segmentation fault")))
    result = grade_submission(write_cu(BROUGHT, "brought2.cu"), rubric=rubric, backend="emulator")
    assert result.status == "infrastructure_error", (result.status, result.message)
    assert "failed twice, each time otherwise" in result.message
