"""Screening reads the compiled object and refuses host code, static constructors and imports."""

import os
import shutil

import pytest

from grader.build import build_baseline, build_submission
from grader.screening import screen_object
from grader.source import read_submission, source_refusals
from conftest import SUBMISSIONS

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CI installs it)")


def screened(path, rubric, backend="cuda"):
    sub = read_submission(path, rubric.kernel.launcher)
    build = build_submission(sub, rubric, backend=backend, arch="sm_90")
    assert build.ok, build.log
    kw = {}
    if backend == "emulator":
        kw["baseline"] = build_baseline(rubric, fibers=False).object
    return screen_object(build.object, kernels=[k.name for k in sub.kernels], launcher=rubric.kernel.launcher,
                         toolchain="nvcc" if backend == "cuda" else "g++", **kw)


@needs_nvcc
@pytest.mark.parametrize("name", ["scalar_2d.cu", "float4_launcher.cu", "flat_index_mod.cu", "printf_every_thread.cu",
                                  "pointer_cache.cu", "endless_loop.cu", "shared_race.cu"])
def test_honest_host_code_passes(name, rubric):
    assert screened(SUBMISSIONS / name, rubric) == []


@needs_nvcc
@pytest.mark.parametrize("name, symbols", [
    ("static_ctor_system.cu", {"static constructor", "system()"}),
    ("private_stream.cu", {"cudaStreamCreateWithFlags()"}),
    ("host_sync.cu", {"cudaDeviceSetLimit()", "cudaDeviceSynchronize()"}),
    ("forge_channel.cu", {"write()"}),
])
def test_attacks_are_refused_naming_the_symbol(name, symbols, rubric):
    assert {r.symbol for r in screened(SUBMISSIONS / name, rubric)} == symbols


@needs_nvcc
def test_extra_host_functions_and_constructors(write_cu, rubric):
    path = write_cu("""
#include <cmath>
__global__ void biasGeluFused(const float* x, const float* b, float* o, size_t c) {}
float helper(float v) { return std::sqrt(v); }
volatile int gTouched;
__attribute__((constructor)) static void early() { gTouched = 1; }
void launchBiasGeluFused(const float* x, const float* b, float* o, int r, int c, cudaStream_t s) {
    biasGeluFused<<<1, 1, 0, s>>>(x, b, o, static_cast<size_t>(helper(4.0f)));
}
""")
    found = {r.symbol: r.reason for r in screened(path, rubric)}
    assert "helper" in found and "early" in found and "static constructor" in found
    assert "sqrt()" not in found and "sqrtf()" not in found


def test_emulator_object_screening_without_nvcc(rubric, write_cu):
    good = screened(SUBMISSIONS / "scalar_2d.cu", rubric, backend="emulator")
    assert good == []
    bad = write_cu("""
extern "C" int system(const char*);
__attribute__((constructor)) static void early() { system("true"); }
__global__ void biasGeluFused(const float* x, const float* b, float* o, size_t c) {}
""")
    assert {r.symbol for r in screened(bad, rubric, backend="emulator")} == {"static constructor", "system()"}


def test_source_limits(write_cu, rubric):
    path = write_cu('#include "/etc/hostname"\n#include <cstdio>\n#include "../x.h"\n#include <cuda_fp16.h>\n'
                    '#include <sys/mman.h>\n#include MACRO\n'
                    '__device__ int lane() { int v; asm("mov.u32 %0, %%laneid;" : "=r"(v)); return v; }\n'
                    'void launchBiasGeluFused(const float* x, const float* b, float* o, int r, int c, cudaStream_t s) {\n'
                    '  asm volatile("syscall");\n}\n')
    found = {f.line: f.what for f in source_refusals(read_submission(path, rubric.kernel.launcher))}
    assert set(found) == {1, 3, 5, 6, 9}
    assert "outside the submission" in found[1] and "not a CUDA or standard header" in found[5]
    assert "computed include" in found[6] and "host code" in found[9]


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace needs root")
def test_child_has_no_network():
    import subprocess
    import sys

    from grader.sandbox import _limits

    code = ("import socket\ns = socket.socket()\ns.settimeout(2)\ntry:\n    s.connect(('1.1.1.1', 53))\n"
            "    print('connected')\nexcept OSError as e:\n    print('unreachable', e.errno)\n")
    out = subprocess.run([sys.executable, "-c", code], preexec_fn=lambda: _limits(30, 512), capture_output=True,
                         text=True).stdout
    assert out.startswith("unreachable")
