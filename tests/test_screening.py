"""Screening refuses only what cheats the timing or runs at load time; everything a student writes passes."""

import os
import shutil

import pytest

from grader.core.backend import EMULATOR, named
from grader.toolchain.build import build_baseline, build_submission
from grader.analysis.screening import screen_object
from grader.core.source import read_submission, source_refusals
from conftest import SUBMISSIONS

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CI installs it)")

KERNEL = """
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) out[blockIdx.y * cols + col] = x[blockIdx.y * cols + col] + bias[col];
}
"""
LAUNCH = "biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);"
LAUNCHER = "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream)"


def screened(path, rubric, backend="cuda"):
    sub = read_submission(path, rubric.kernel.launcher_name)
    build = build_submission(sub, rubric, backend=named(backend), arch="sm_90")
    assert build.ok, build.log
    kw = {}
    if backend == "emulator":
        kw["shim_baseline"] = build_baseline(rubric, backend=EMULATOR, fibers=False).object
    return screen_object(build.object, sub=sub, api=build.api, **kw)


CORRECT_SAMPLES = ["scalar_2d.cu", "float4_launcher.cu", "flat_index_mod.cu", "printf_every_thread.cu",
                   "pointer_cache.cu", "endless_loop.cu", "shared_race.cu", "device_helper.cu",
                   "host_device_helper.cu", "anonymous_namespace.cu", "sm_count_grid_stride.cu",
                   "occupancy_launcher.cu", "template_aligned_dispatch.cu", "constant_memory.cu",
                   "cooperative_groups_block.cu", "namespaced_assert.cu", "iostream_launcher.cu",
                   "dynamic_shared_attribute.cu", "launch_bounds_ldg.cu", "host_class_check_macro.cu",
                   "device_malloc_leak.cu", "host_memory_hog.cu"]


@needs_nvcc
@pytest.mark.parametrize("name", CORRECT_SAMPLES)
def test_samples_students_write_pass(name, rubric):
    assert screened(SUBMISSIONS / name, rubric) == []


# Host code of every shape a course would accept: none may be refused.
HOST_VARIANTS = {
    "plain device helper": "__device__ float h(float v) { return v; }\n" + KERNEL,
    "noinline device helper": "__device__ __noinline__ float h(float v) { return v; }\n" + KERNEL,
    "host device helper": "__host__ __device__ float h(float v) { return 2 * v; }\n" + KERNEL,
    "templated helper": "template <class T> __host__ __device__ T h(T v) { return v; }\n"
                        "template float h<float>(float);\n" + KERNEL,
    "namespaced kernel": "namespace a { namespace b {\n" + KERNEL + "} }\n"
                         f"{LAUNCHER} {{ a::b::{LAUNCH} }}\n",
    "anonymous namespace": "namespace {\n__device__ float h(float v) { return v; }\n}\n" + KERNEL,
    "static host helper": KERNEL + "static int blocks(int c) { return (c + 255) / 256; }\n"
                          f"{LAUNCHER} {{ biasGeluFused<<<dim3(blocks(cols), rows), 256, 0, stream>>>(x, bias, out, cols); }}\n",
    "host printf and fprintf": "#include <cstdio>\n" + KERNEL + f"{LAUNCHER} {{ {LAUNCH} "
                               "printf(\"%d\\n\", rows); fprintf(stderr, \"%s\\n\", cudaGetErrorString(cudaGetLastError())); }\n",
    "puts": "#include <cstdio>\n" + KERNEL + f"{LAUNCHER} {{ {LAUNCH} puts(\"ok\"); }}\n",
    "iostream": "#include <iostream>\n" + KERNEL + f"{LAUNCHER} {{ {LAUNCH} std::cout << rows << '\\n'; }}\n",
    "device properties": KERNEL + f"{LAUNCHER} {{ cudaDeviceProp p; int d; cudaGetDevice(&d); "
                         f"cudaGetDeviceProperties(&p, d); int n; cudaGetDeviceCount(&n); {LAUNCH} }}\n",
    "versions": KERNEL + f"{LAUNCHER} {{ int v; cudaDriverGetVersion(&v); cudaRuntimeGetVersion(&v); {LAUNCH} }}\n",
    "occupancy": KERNEL + f"{LAUNCHER} {{ int b; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, biasGeluFused, 256, 0); "
                 f"cudaFuncAttributes a; cudaFuncGetAttributes(&a, biasGeluFused); {LAUNCH} }}\n",
    "func attributes": KERNEL + f"{LAUNCHER} {{ cudaFuncSetAttribute(biasGeluFused, "
                       "cudaFuncAttributePreferredSharedMemoryCarveout, 50); "
                       f"cudaFuncSetCacheConfig(biasGeluFused, cudaFuncCachePreferL1); {LAUNCH} }}\n",
    "std algorithms": "#include <algorithm>\n#include <vector>\n" + KERNEL +
                      f"{LAUNCHER} {{ std::vector<int> v{{rows, cols}}; int m = *std::max_element(v.begin(), v.end()); "
                      f"(void)m; {LAUNCH} }}\n",
    "per-thread stream": KERNEL + f"{LAUNCHER} {{ biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, "
                         "cudaStreamPerThread>>>(x, bias, out, cols); }\n",
    "constexpr table": "constexpr float kC[2] = {0.5f, 0.70710678f};\n" + KERNEL,
    "file-scope constant": "static const int kThreads = 256;\nconst float kHalf = 0.5f;\n" + KERNEL,
    "constructor that calls nothing": "volatile int gTouched;\n__attribute__((constructor)) static void early() "
                                      "{ gTouched = 1; }\n" + KERNEL,
    # File-scope objects whose destructors start-up code only registers (__cxa_atexit), as host
    # code brought from a larger project keeps them.
    "static std::vector": "#include <vector>\nstatic std::vector<float> gCache;\n" + KERNEL,
    "static std::string": "#include <string>\nstatic std::string gName = \"gelu\";\n" + KERNEL,
    "static std::map": "#include <map>\n#include <string>\nstatic std::map<std::string, int> gPlans;\n" + KERNEL,
    "static std::unordered_map": "#include <unordered_map>\nstatic std::unordered_map<int, int> gBlock;\n" + KERNEL,
    "static std::function": "#include <functional>\nstatic std::function<void()> gHook;\n" + KERNEL,
    "static object with a destructor": "struct Timer { float ms = 0; ~Timer() {} };\nstatic Timer gTimer;\n" + KERNEL,
    # ... and those the standard library builds when the library loads (it runs in the recorder,
    # which refuses any launch or copy made outside a launcher's call).
    "static long std::string": "#include <string>\nstatic const std::string kName = \"bias_gelu_fused_kernel_v2\";\n"
                               + KERNEL,
    "static std::vector of strings": "#include <string>\n#include <vector>\n"
                                     "static const std::vector<std::string> kNames = {\"x\", \"bias\"};\n" + KERNEL,
    "static std::map from a list": "#include <map>\nstatic std::map<int, int> gTable = {{1, 256}, {2, 128}};\n"
                                   + KERNEL,
    "static std::string array": "#include <string>\nstatic const std::string kLabels[] = {\"a\", \"b\"};\n" + KERNEL,
    "static clock read": "#include <chrono>\nstatic auto gStart = std::chrono::steady_clock::now();\n" + KERNEL,
    "namespaced static objects": "#include <vector>\n#include <string>\nnamespace cfg { std::vector<int> widths; "
                                 "std::string tag; }\n" + KERNEL,
}


@needs_nvcc
@pytest.mark.parametrize("name", sorted(HOST_VARIANTS))
def test_host_code_students_write_is_accepted(name, write_cu, rubric):
    assert screened(write_cu(HOST_VARIANTS[name]), rubric) == []


@needs_nvcc
@pytest.mark.parametrize("name, what", [
    ("private_stream.cu", {"cudaStreamCreateWithFlags()"}),
    ("host_sync.cu", {"cudaDeviceSetLimit()"}),          # its cudaDeviceSynchronize() is replayed, not refused
    ("static_ctor_system.cu", {"a file-scope initialiser calling system()"}),
])
def test_timing_cheats_are_refused_naming_what_the_student_wrote(name, what, rubric):
    refusals = screened(SUBMISSIONS / name, rubric)
    assert {r.what for r in refusals} == what
    assert all(r.line for r in refusals)


# Each call that changes what the timing measures, written as a student would.
CHEATS = {
    "cudaMallocManaged": ("float* t; cudaMallocManaged(&t, 4);", "allocates"),
    "cudaMemcpy2DAsync": ("cudaMemcpy2DAsync(out, 4, x, 4, 4, 1, cudaMemcpyDeviceToDevice, stream);", "copies"),
    "cudaStreamCreate": ("cudaStream_t s; cudaStreamCreate(&s);", "creates or destroys a stream"),
    "cudaDeviceSetCacheConfig": ("cudaDeviceSetCacheConfig(cudaFuncCachePreferL1);", "device-wide"),
    "cudaCtxResetPersistingL2Cache": ("cudaCtxResetPersistingL2Cache();", "device-wide"),
    "cudaStreamSetAttribute": ("cudaStreamAttrValue a{}; cudaStreamSetAttribute(stream, "
                               "cudaStreamAttributeAccessPolicyWindow, &a);", "device-wide"),
    "cudaLaunchHostFunc": ("cudaLaunchHostFunc(stream, [](void*) {}, nullptr);", "host callbacks"),
    "cudaStreamBeginCapture": ("cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);", "graphs"),
}


@needs_nvcc
@pytest.mark.parametrize("name", sorted(CHEATS))
def test_each_timing_cheat_is_refused_with_its_line(name, write_cu, rubric):
    body, reason = CHEATS[name]
    path = write_cu(KERNEL + f"{LAUNCHER} {{\n    {body}\n    {LAUNCH}\n}}\n")
    refusals = screened(path, rubric)
    assert refusals, f"{name} was not refused"
    assert any(reason in r.reason for r in refusals), [str(r) for r in refusals]
    assert all(r.line == 7 for r in refusals), [str(r) for r in refusals]


@needs_nvcc
def test_the_drivers_cuLaunchKernelEx_is_refused(write_cu, rubric):
    body = ("CUlaunchConfig c{}; c.gridDimX = 1; c.blockDimX = 1; c.blockDimY = 1; c.blockDimZ = 1; c.gridDimY = 1; "
            "c.gridDimZ = 1; size_t n = cols; void* a[] = {&x, &bias, &out, &n}; CUfunction f; "
            "cudaGetFuncBySymbol(&f, (const void*)biasGeluFused); cuLaunchKernelEx(&c, f, a, nullptr);")
    path = write_cu("#include <cuda.h>\n" + KERNEL + f"{LAUNCHER} {{\n    {body}\n    {LAUNCH}\n}}\n")
    refusals = screened(path, rubric)
    assert any("cuLaunchKernelEx" in r.reason for r in refusals), [str(r) for r in refusals]


# The launcher's stream work the replay reproduces: recorded, not refused (grader/run/child/replay.py).
REPLAYED = {
    "cudaMalloc": "float* t; cudaMalloc(&t, 4); cudaFree(t);",
    "cudaMallocAsync": "void* t; cudaMallocAsync(&t, 4, stream); cudaFreeAsync(t, stream);",
    "cudaFree": "cudaFree(nullptr);",
    "cudaMemcpyAsync": "cudaMemcpyAsync(out, x, 4, cudaMemcpyDeviceToDevice, stream);",
    "cudaMemsetAsync": "cudaMemsetAsync(out, 0, 4, stream);",
    "cudaStreamSynchronize": "cudaStreamSynchronize(stream);",
    "cudaEventRecord": "cudaEvent_t e; cudaEventCreate(&e); cudaEventRecord(e, stream); cudaEventSynchronize(e); "
                       "cudaEventDestroy(e);",
    "cudaDeviceSynchronize": "cudaDeviceSynchronize();",
    "cudaSetDevice": "int d; cudaGetDevice(&d); cudaSetDevice(d);",
    # recorded as a launch (one with launch attributes is refused from the recording: replaying.py)
    "cudaLaunchKernelEx": "cudaLaunchConfig_t c{}; c.gridDim = dim3(1); c.blockDim = dim3(1); c.stream = stream; "
                          "cudaLaunchKernelEx(&c, biasGeluFused, x, bias, out, (size_t)cols);",
}


@needs_nvcc
@pytest.mark.parametrize("name", sorted(REPLAYED))
def test_stream_work_the_replay_reproduces_is_not_refused(name, write_cu, rubric):
    path = write_cu(KERNEL + f"{LAUNCHER} {{\n    {REPLAYED[name]}\n    {LAUNCH}\n}}\n")
    assert screened(path, rubric) == []


# A student's own test driver, left in the file: it is never called, so it is not compiled (g++
# would put main in .text.startup, beside load-time code, and its test calls among the imports).
TEST_DRIVER = """#include <cstdio>
#include <vector>
int main(int argc, char** argv) {
    const int rows = 4, cols = 8;
    std::vector<float> h(rows * cols, 1.0f);
    float *x, *bias, *out, *pinned;
    cudaMalloc(&x, h.size() * 4); cudaMalloc(&bias, cols * 4); cudaMalloc(&out, h.size() * 4);
    cudaMallocHost(&pinned, h.size() * 4);
    cudaStream_t s; cudaStreamCreate(&s);
    cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b); cudaEventRecord(a, s);
    launchBiasGeluFused(x, bias, out, rows, cols, s);
    cudaEventRecord(b, s); cudaDeviceSynchronize();
    float ms; cudaEventElapsedTime(&ms, a, b);
    printf("%f ms { } \\n", ms);
    cudaStreamDestroy(s); cudaFreeHost(pinned);
    return 0;
}
"""


@needs_nvcc
@pytest.mark.parametrize("backend", ["cuda", "emulator"])
def test_a_test_driver_main_is_left_out_and_the_rest_is_screened(backend, write_cu, rubric):
    path = write_cu(KERNEL + f"{LAUNCHER} {{ {LAUNCH} }}\n" + TEST_DRIVER)
    assert read_submission(path, rubric.kernel.launcher_name).main_line == 9
    assert screened(path, rubric, backend) == []
    # what the launcher itself does is still screened
    cheat = write_cu(KERNEL + f"{LAUNCHER} {{ cudaStream_t t; cudaStreamCreate(&t); {LAUNCH} }}\n" + TEST_DRIVER,
                     "cheat.cu")
    assert {r.what for r in screened(cheat, rubric)} == {"cudaStreamCreate()"}


@needs_nvcc
def test_a_main_that_something_calls_is_compiled_and_screened(write_cu, rubric):
    """main named anywhere else (here a file-scope initialiser calls it) is kept, and refused as load-time code."""
    path = write_cu(KERNEL + f"{LAUNCHER} {{ {LAUNCH} }}\nint main(int, char**);\nstatic int gRan = main(0, nullptr);\n" + TEST_DRIVER)
    assert read_submission(path, rubric.kernel.launcher_name).main_line is None
    assert "a file-scope initialiser calling main()" in {r.what for r in screened(path, rubric)}


@needs_nvcc
def test_load_time_code_is_refused(write_cu, rubric):
    path = write_cu("""#include <cstdlib>
int helper() { return std::rand(); }
static int gValue = helper();
__attribute__((constructor)) static void early() { std::srand(7); }
""" + KERNEL)
    found = {r.what: r.line for r in screened(path, rubric)}
    assert found.get("a file-scope initialiser calling helper()") == 3
    assert "a file-scope initialiser calling srand()" in found


@needs_nvcc
def test_a_destructor_run_when_the_library_loads_is_refused(write_cu, rubric):
    """Only a destructor's address, registered for the exit, is let through: a temporary destroyed
    by a file-scope initialiser runs its destructor at load, and is refused as a call."""
    path = write_cu("""#include <cstdlib>
struct Loud { int v; ~Loud(); };
__attribute__((noinline)) Loud::~Loud() { std::srand(v); }
static int gValue = (Loud{7}, 1);
""" + KERNEL)
    found = {r.what for r in screened(path, rubric)}
    assert "a file-scope initialiser calling Loud::~Loud()" in found, found


@needs_nvcc
def test_a_thread_started_when_the_library_loads_is_refused(write_cu, rubric):
    """The standard library's start-up code is let through, but not a std::thread built at load."""
    path = write_cu("""#include <thread>
static void spin() { for (;;) std::this_thread::yield(); }
static std::thread gWorker(spin);
""" + KERNEL)
    found = {r.what for r in screened(path, rubric)}
    assert any("thread" in what for what in found), found


def test_plain_names_drop_template_arguments_and_keep_operators():
    from grader.analysis.screening import _plain

    assert _plain("std::vector<float, std::allocator<float> >::~vector()") == "std::vector::~vector"
    assert _plain("std::function<void ()>::~function()") == "std::function::~function"
    assert _plain("int helper<std::less<int> >(int)") == "helper"
    assert _plain("std::ostream::operator<<(int)") == "std::ostream::operator<<"
    assert _plain("bool operator< <int>(A<int> const&, A<int> const&)") == "operator<"
    assert _plain("(anonymous namespace)::early() [clone .constprop.0]") == "early"
    assert _plain("cudaMemcpyAsync_ptsz@libcudart.so.13") == "cudaMemcpyAsync"


def test_emulator_object_screening_without_nvcc(rubric, write_cu):
    """Where nvcc is missing the g++ object is screened for load-time code only: the shim's
    runtime calls are inline there (nothing is imported), and the emulator times nothing."""
    assert screened(SUBMISSIONS / "scalar_2d.cu", rubric, backend="emulator") == []
    assert screened(SUBMISSIONS / "device_helper.cu", rubric, backend="emulator") == []
    assert screened(SUBMISSIONS / "iostream_launcher.cu", rubric, backend="emulator") == []
    bad = write_cu("""
#include <cstdlib>
__attribute__((constructor)) static void early() { std::system("true"); }
""" + KERNEL)
    found = {r.what for r in screened(bad, rubric, backend="emulator")}
    assert found == {"a file-scope initialiser calling system()"}


def test_source_limits(write_cu, rubric):
    path = write_cu('#include "/etc/hostname"\n#include <cstdio>\n#include "../x.h"\n#include <cuda_fp16.h>\n'
                    '#include "my_helpers.h"\n#include MACRO\n'
                    '__device__ int lane() { int v; asm("mov.u32 %0, %%laneid;" : "=r"(v)); return v; }\n'
                    'void launchBiasGeluFused(const float* x, const float* b, float* o, int r, int c, cudaStream_t s) {\n'
                    '  asm volatile("syscall");\n}\n#include <sys/mman.h>\n#include <bits/stdc++.h>\n'
                    '#include <thrust/device_vector.h>\n#include "cuda_runtime.h"\n')
    found = {f.line: f.what for f in source_refusals(read_submission(path, rubric.kernel.launcher_name))}
    assert set(found) == {1, 3, 5, 6, 9}
    assert "outside the submission" in found[1] and "a header of your own" in found[5]
    assert "computed include" in found[6] and "host code" in found[9]


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace needs root")
def test_child_has_no_network():
    import subprocess
    import sys

    from grader.run.spawn import limits_in_child as _limits

    code = ("import socket\ns = socket.socket()\ns.settimeout(2)\ntry:\n    s.connect(('1.1.1.1', 53))\n"
            "    print('connected')\nexcept OSError as e:\n    print('unreachable', e.errno)\n")
    out = subprocess.run([sys.executable, "-c", code], preexec_fn=lambda: _limits(30, 512), capture_output=True,
                         text=True).stdout
    assert out.startswith("unreachable")
