import pytest
from pathlib import Path

from grader.core.source import (SourceProblem, blank_comments_and_strings, missing_kernel_message, read_submission,
                                signature_problem)

from grader.core.emulation import emulator_blockers, rewrite_for_emulator, spreads_over_cores, uses_collectives

LAUNCHER = "launchBiasGeluFused"


def test_finds_kernels_with_qualifiers_and_ignores_comments(write_cu):
    p = write_cu(
        "// __global__ void biasGeluFused(int) in a comment\n"
        "template <int N> __global__ __launch_bounds__(256) void k1(float* a) {}\n"
        "extern \"C\" __global__ void biasGeluFused(const float* __restrict__ x,\n"
        "    const float* bias, float* out, int cols) {}\n")
    sub = read_submission(p, LAUNCHER)
    assert [k.name for k in sub.kernels] == ["k1", "biasGeluFused"]
    k = sub.kernel("biasGeluFused")
    assert k.line == 3 and k.params[-1] == "int cols"
    assert not sub.has_launcher


def test_launcher_is_detected_only_when_defined(write_cu):
    declared = read_submission(write_cu("void launchBiasGeluFused(const float*, const float*, float*, int, int, cudaStream_t);\n"), LAUNCHER)
    assert not declared.has_launcher
    defined = read_submission(write_cu("void launchBiasGeluFused(const float* x, const float* b, float* o, int r, int c,\n cudaStream_t s) {\n}\n"), LAUNCHER)
    assert defined.has_launcher


def test_missing_kernel_names_what_was_found(write_cu, rubric):
    sub = read_submission(write_cu("__global__ void biasGeluFuse(const float* x) {}\n"), LAUNCHER)
    msg = missing_kernel_message(sub, rubric.kernel)
    assert "'biasGeluFuse' (line 1)" in msg and rubric.kernel.signature in msg
    assert "Your 'biasGeluFuse' is close: should it be named 'biasGeluFused'?" in msg
    assert "Without a launcher the grader launches the kernel by its name" in msg
    assert "Or define the launcher" not in msg        # bias+GELU asks for the name: no way round it is offered
    empty = read_submission(write_cu("int main() { return 0; }\n"), LAUNCHER)
    assert "defines no __global__ kernel" in missing_kernel_message(empty, rubric.kernel)


def test_a_python_file_is_told_it_is_python_and_keeps_its_own_report_folder(write_cu):
    from grader.report.files import default_report_dir

    plain = read_submission(write_cu("def f(x):\n    return x * 2\n", name="helper.py"), LAUNCHER)
    assert isinstance(plain, SourceProblem) and "helper.py is a Python file" in plain.message
    assert default_report_dir(Path("/c/inline_ext.py")).name == "inline_ext.py-report"
    assert default_report_dir(Path("/c/inline_ext.cu")).name == "inline_ext-report"


def _load(name):
    from grader.exercises.rubric import load_rubric
    from grader.core.locations import rubrics_dir
    return load_rubric(rubrics_dir() / f"{name}.yaml")


GELU_SUM_BODY = """
__global__ void gelu_sum_forward(const float* x, float* out, int R, int B, int D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * D) return;
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) { float v = x[r * B * D + i]; acc += 0.5f * v * (1.0f + erff(v * 0.70710678f)); }
    out[i] = acc;
}
"""
GELU_SUM_LAUNCHER = """
void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    gelu_sum_forward<<<(B * D + 255) / 256, 256, 0, stream>>>(x, out, R, B, D);
}
"""


def test_a_launcher_is_the_contract_where_the_rubric_does_not_ask_for_the_name(write_cu):
    from grader.grade.steps import vet_source

    rubric = _load("gelu_sum")
    assert rubric.kernel.name_required is False
    p = write_cu(GELU_SUM_BODY + GELU_SUM_LAUNCHER)
    sub = read_submission(p, rubric.kernel.launcher_name)
    assert sub.has_launcher and sub.kernel("geluSum") is None
    assert vet_source(p, sub, rubric) is None
    # without the launcher the kernel is needed by name, and the way round it is named
    p = write_cu(GELU_SUM_BODY, "nolauncher.cu")
    stop = vet_source(p, read_submission(p, rubric.kernel.launcher_name), rubric)
    assert stop.status == "rejected"
    assert "Or define the launcher and launch your own kernels from it" in stop.message
    assert "void launchGeluSum(" in stop.message


def test_a_launcher_does_not_excuse_the_name_where_the_rubric_asks_for_it(write_cu, rubric):
    from grader.grade.steps import vet_source

    assert rubric.kernel.name_required is True
    p = write_cu("__global__ void bias_gelu(const float* x, const float* b, float* o, int r, int c) {}\n"
                 "void launchBiasGeluFused(const float* x, const float* b, float* o, int r, int c, cudaStream_t s) {\n"
                 "  bias_gelu<<<1, 1, 0, s>>>(x, b, o, r, c);\n}\n")
    stop = vet_source(p, read_submission(p, LAUNCHER), rubric)
    assert stop.status == "rejected"
    assert "This exercise asks for its kernel by that name" in stop.message
    assert "The grader calls" not in stop.message and "bias_gelu' (line 1)" in stop.message


@pytest.mark.parametrize("include", ["<torch/extension.h>", '"torch/extension.h"', "<ATen/ATen.h>",
                                     "<c10/cuda/CUDAStream.h>", "<pybind11/pybind11.h>", "<Python.h>",
                                     "<torch/types.h>"])
def test_a_pytorch_extension_header_is_answered_by_name(include, write_cu):
    from grader.core.source import source_refusals

    p = write_cu(f"#include <cuda_runtime.h>\n#include {include}\n" + GELU_SUM_BODY + GELU_SUM_LAUNCHER)
    sig = _load("gelu_sum").kernel.launcher
    found = source_refusals(read_submission(p, "launchGeluSum"), launcher=sig)
    assert [f.line for f in found] == [2]
    what = found[0].what
    assert what.startswith(f"#include {include}: a PyTorch extension header")
    assert "drop the PyTorch wrapper" in what and sig in what


@pytest.mark.parametrize("text, line", [
    ('import torch\nfrom torch.utils.cpp_extension import load_inline\ncuda_src = """\n__global__ void k() {}\n"""\n', 1),
    ('# the answer\n\nfrom torch.utils.cpp_extension import load_inline\nsrc = r\'\'\'\n__global__ void k() {}\n\'\'\'\n'
     'mod = load_inline(name="m", cpp_sources="", cuda_sources=src)\n', 3),
    ('import torch.nn as nn\nkernel = """\n__global__ void k() {}\n"""\n', 1),
])
def test_python_around_a_cuda_string_is_answered_by_line(text, line, write_cu):
    found = read_submission(write_cu(text), "launchGeluSum")
    assert isinstance(found, SourceProblem) and found.line == line
    assert "is Python, not CUDA" in found.message and "(launchGeluSum)" in found.message
    assert found.message.startswith(f"k.cu:{line}: `")


@pytest.mark.parametrize("text", [
    # Python quoted in a comment is a comment
    "/*\nimport torch\nfrom torch.utils.cpp_extension import load_inline\nsrc = \"\"\"\n*/\n__global__ void k() {}\n",
    "// import torch\n// from torch import nn\n__global__ void k() {}\n",
    # C++ that only looks alike
    "#include <cuda_runtime.h>\nconst char* from = \"torch\";\n__global__ void k() {}\n",
])
def test_cuda_that_mentions_python_is_read_as_cuda(text, write_cu):
    assert not isinstance(read_submission(write_cu(text), "launchGeluSum"), SourceProblem)


# Parameter lists students write that the default launch can call: accepted, whatever the spelling.
CALLABLE = [
    "const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out, size_t cols",
    "const float* x, const float* bias, float* out, int cols",
    "float* x, float* bias, float* out, int cols",                         # inputs without const
    "const float *x, const float *b, float *y, unsigned int n",           # other names, star on the name
    "const float* const x, const float* const bias, float* const out, const size_t cols",
    "const float * __restrict x, const float * __restrict bias, float * __restrict out, long cols",
    "const float* x, const float* bias, float* out, unsigned long long cols",
    "const float x[], const float bias[], float out[], size_t cols",          # C's array parameters
    "float const* __restrict__ x, float const* __restrict__ bias, float* __restrict__ out, std::size_t const cols",
]
NOT_CALLABLE = [
    ("const float* x, const float* bias, float* out, int rows, int cols", "takes 5 parameters"),
    ("const float4* x, const float* bias, float* out, int cols", "const float* x"),
    ("const float* x, const float* bias, const float* out, size_t cols", "pointer to const, for the output out"),
    ("const float* x, const float* bias, float* out, float cols", "the integer cols"),
    ("const float* x, const float* bias, float* out, int* cols", "size_t cols"),
]


@pytest.mark.parametrize("params", CALLABLE)
def test_a_kernel_the_default_launch_can_call_is_accepted(params, write_cu, rubric):
    sub = read_submission(write_cu(f"__global__ void biasGeluFused({params}) {{}}\n"), LAUNCHER)
    assert signature_problem(sub.kernel("biasGeluFused"), rubric.kernel) is None


@pytest.mark.parametrize("params,words", NOT_CALLABLE)
def test_a_kernel_it_cannot_call_is_told_why_and_about_the_launcher(params, words, write_cu, rubric):
    sub = read_submission(write_cu(f"__global__ void biasGeluFused({params}) {{}}\n"), LAUNCHER)
    problem = signature_problem(sub.kernel("biasGeluFused"), rubric.kernel)
    assert problem and words in problem and "launchBiasGeluFused" in problem, problem


def test_unreadable_sources_are_problems_not_exceptions(tmp_path):
    empty = tmp_path / "e.cu"
    empty.write_text("  \n")
    assert "is empty" in read_submission(empty, LAUNCHER).message
    binary = tmp_path / "b.cu"
    binary.write_bytes(b"\x7fELF\x00\x01")
    assert "binary" in read_submission(binary, LAUNCHER).message
    latin = tmp_path / "l.cu"
    latin.write_bytes(b"// caf\xe9\n__global__ void k() {}\n")
    r = read_submission(latin, LAUNCHER)
    assert isinstance(r, SourceProblem) and "UTF-8" in r.message and r.line == 1
    big = tmp_path / "big.cu"
    big.write_text("//" + "x" * 300_000)
    assert "KiB" in read_submission(big, LAUNCHER).message


def test_blanking_keeps_lines():
    text = 'a /* x\n y */ b "s//t" // c\nd'
    out = blank_comments_and_strings(text)
    assert out.count("\n") == text.count("\n") and "s//t" not in out and out.endswith("d")


def test_emulator_blockers_name_the_line(write_cu):
    sub = read_submission(write_cu("__global__ void biasGeluFused(float* o) {\n  int v;\n  asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(v));\n}\n"), LAUNCHER)
    found = emulator_blockers(sub)
    assert found and found[0].line == 3 and "inline PTX" in found[0].what
    dyn = read_submission(write_cu("__global__ void c() {}\n__global__ void p() {\n  c<<<1, 1>>>();\n}\n"), LAUNCHER)
    assert any("dynamic parallelism" in f.what for f in emulator_blockers(dyn))
    plain = read_submission(Path(__file__).parent.parent / "submissions" / "bias_gelu_fused" / "scalar_2d.cu", LAUNCHER)
    assert emulator_blockers(plain) == [] and not uses_collectives(plain)


@pytest.mark.parametrize("line", [
    "const size_t half = halfDim;",
    "int half2 = 2 * halfDim;",
    "float half = 0.5f;",
    "auto halfway = [](int half) { return half / 2; };",
])
def test_a_variable_named_half_is_not_a_half_type(line, write_cu):
    """RoPE rotates the two halves of a head: `half` is the word students use for it."""
    sub = read_submission(write_cu(f"__global__ void k(float* o, int halfDim) {{\n  {line}\n}}\n"), LAUNCHER)
    assert emulator_blockers(sub) == []


@pytest.mark.parametrize("text", ["#include <cuda_fp16.h>\n__global__ void k(float* o) {}\n",
                                  "__global__ void k(__half* o) {}\n", "__global__ void k(__nv_bfloat16* o) {}\n"])
def test_half_types_still_need_a_gpu(text, write_cu):
    found = emulator_blockers(read_submission(write_cu(text), LAUNCHER))
    assert found and "half or bfloat16" in found[0].what


def test_rewrite_keeps_line_numbers_and_rewrites_launches():
    src = ("#include <cuda_runtime.h>\n"
           "extern __shared__ float smem[];\n"
           "void go(float* p, cudaStream_t s) {\n"
           "  k<<<dim3(2, 3),\n      256, 0, s>>>(p, 4);\n"
           "  t<float><<<1, 32>>>(p);\n}\n")
    out = rewrite_for_emulator(src)
    assert out.count("\n") == src.count("\n")
    assert "GRADER_NAMED_LAUNCH(k, dim3(2, 3),\n      256, 0, s)(p, 4);" in out
    assert "::grader::launch(t<float>, 1, 32)(p)" in out
    assert "float* smem = static_cast<float*>(::grader::dynamic_shared());" in out
    assert "cuda_runtime.h" not in out
    lines = out.splitlines()
    assert lines[5].strip().startswith("::grader::launch(t<float>")


def test_rewrite_reads_nested_template_arguments_and_a_global_qualifier():
    src = ("void go(float* p) {\n"
           "  kern<Vec<4>, 128><<<1, 32>>>(p);\n"
           "  ::ns::k<<<1, 32>>>(p);\n"
           "  k2<Pair<Vec<2>>> <<<1, 32>>>(p);\n}\n")
    out = rewrite_for_emulator(src)
    assert "::grader::launch(kern<Vec<4>, 128>, 1, 32)(p);" in out
    assert "GRADER_NAMED_LAUNCH(::ns::k, 1, 32)(p);" in out
    assert "::grader::launch(k2<Pair<Vec<2>>>, 1, 32)(p);" in out
    assert "<<<" not in out


SAMPLES = Path(__file__).parent.parent / "submissions"


@pytest.mark.parametrize("text", [
    # the shapes students write, each sharing nothing between threads but global memory
    "__global__ void k(const float* x, float* o, size_t n) { size_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = x[i]; }",
    "static __device__ float g(float v) { return v; }\n__global__ void k(float* o) { o[threadIdx.x] = g(1.0f); }",
    "__host__ __device__ inline float g(float v) { return v; }\n__global__ void k(float* o) { o[0] = g(2.0f); }",
    "namespace { __device__ float g(float v) { return v; } }\n__global__ void k(float* o) { o[0] = g(1.0f); }",
    "template <int V> __global__ void k(float4* o) { o[threadIdx.x] = make_float4(V, V, V, V); }",
    "__global__ void k(float* o, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x * gridDim.x) o[i] = 0; }",
    "__constant__ float c[4];\n__global__ void k(float* o) { o[0] = c[0]; }",
    "__global__ void k(float* o) { static const float half = 0.5f; o[0] = half; }",
    "// atomicAdd would race here, __shared__ would not help, printf(\"...\")\n__global__ void k(float* o) { o[0] = 1; }",
    "__global__ void k(float* o) { const char* s = \"__syncthreads atomicAdd malloc\"; o[0] = s[0]; }",
    "__global__ void k(float* atomicity, float* freedom) { atomicity[0] = freedom[0]; }",
    # a register accumulator, a grid-stride step and loop counters are not memory
    "__global__ void k(const float* x, float* o, int r, int n) { float acc = 0; for (int k = 0; k < r; ++k) acc += x[k * n]; o[0] = acc; }",
    "__global__ void k(float* o, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x * gridDim.x) { o[i] = 2 * o[i]; } }",
    "__global__ void k(const float* x, float* o) { float v = x[threadIdx.x] * -1; v *= 2; o[threadIdx.x] = v; }",
    # a __device__ variable only read, and a local named like nothing global, updated
    "__device__ float gScale = 2.0f;\n__device__ float sc(float v) { return v * gScale; }\n"
    "__global__ void k(const float* x, float* o) { int n = 0; n++; o[threadIdx.x] = sc(x[threadIdx.x]) + n; }",
    # a launcher's own printf, malloc and error check run before or after the launch, on one thread
    "__global__ void k(float* o) { o[0] = 1; }\nvoid launchK(float* o, cudaStream_t s) {\n  float* h = (float*)malloc(4); free(h);\n"
    "  k<<<1, 1, 0, s>>>(o);\n  if (cudaGetLastError() != cudaSuccess) printf(\"failed\\n\");\n  int total = 0; total += 1;\n}",
])
def test_kernels_that_share_nothing_spread_over_cores(text, write_cu):
    assert spreads_over_cores(read_submission(write_cu(text + "\n"), LAUNCHER))


@pytest.mark.parametrize("text", [
    "__global__ void k(float* o) { __shared__ float t[32]; t[threadIdx.x] = 1; o[threadIdx.x] = t[31 - threadIdx.x]; }",
    "__global__ void k(float* o) { extern __shared__ float t[]; o[0] = t[0]; }",
    "__global__ void k(float* o) { o[threadIdx.x] = 1; __syncthreads(); }",
    "__global__ void k(float* o) { atomicAdd(o, 1.0f); }",
    "__global__ void k(unsigned* o) { atomicCAS(o, 0u, 1u); }",
    "__global__ void k(int* o) { atomicAdd_block(o, 1); }",
    "__global__ void k(float* o) { float* p = (float*)malloc(4); o[0] = p ? 1 : 0; free(p); }",
    "__global__ void k(float* o) { printf(\"%f\\n\", o[0]); }",
    "__global__ void k(long long* o) { o[0] = clock64(); }",
    "__global__ void k(float* o) { float v = __shfl_down_sync(0xffffffffu, o[0], 1); o[0] = v; }",
    "#include <cooperative_groups.h>\n__global__ void k(float* o) { cooperative_groups::this_thread_block().sync(); }",
    # a read-modify-write of memory: a race where two threads' elements coincide
    "__global__ void k(const float* x, float* o, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; o[i % n] += x[i]; }",
    "__global__ void k(int* count, const int* key) { count[key[threadIdx.x]]++; }",
    "__global__ void k(int* count, const int* key) { ++count[key[threadIdx.x]]; }",
    "__global__ void k(float* o, float v) {\n  *o -= v;\n}",
    "__global__ void k(float* o, float v) { (*o) *= v; }",
    "__global__ void k(const float* x, float* o, int n) { int i = threadIdx.x; o[i % n] = o[i % n] + x[i]; }",
    "__global__ void k(const float* x, float* o, int n) { int i = threadIdx.x; o[ i%n ] = x[i] * 2.0f + o[i % n]; }",
    "__global__ void k(const float* x, float* o, int n) { int i = threadIdx.x; int r = i % n; o[r] = o[r] + x[i]; }",
    "struct Acc { float s; };\n__global__ void k(Acc* a, float v) { a->s += v; }",
    "__device__ void add(float* o, float v) { o[0] += v; }\n__global__ void k(float* o) { add(o, 1.0f); }",
    # a __device__ variable every thread sees, updated in place
    "__device__ unsigned gLaunches = 0;\n__global__ void k(float* o) { gLaunches++; o[0] = 1; }",
    "__device__ volatile int gSeen;\n__global__ void k(float* o) { ++gSeen; o[0] = gSeen; }",
    "__device__ float gSum, gMax = 0;\n__global__ void k(const float* x) { gMax += x[threadIdx.x]; }",
])
def test_kernels_that_share_state_stay_on_one_thread(text, write_cu):
    assert not spreads_over_cores(read_submission(write_cu(text + "\n"), LAUNCHER))


@pytest.mark.parametrize("exercise, name, spreads", [
    ("bias_gelu_fused", "scalar_2d.cu", True), ("bias_gelu_fused", "device_helper.cu", True),
    ("bias_gelu_fused", "float4_launcher.cu", True), ("bias_gelu_fused", "skipped_rows.cu", True),
    ("bias_gelu_fused", "shared_race.cu", False), ("bias_gelu_fused", "repeat_skip_flag.cu", False),
    ("bias_gelu_fused", "printf_every_thread.cu", False), ("bias_gelu_fused", "device_malloc_leak.cu", False),
    ("gelu_sum", "atomic_add.cu", False), ("gelu_sum", "racy_accumulate.cu", False),
    ("gelu_sum", "thread_per_output.cu", True), ("bias_gelu_fused", "occupancy_launcher.cu", True),
    ("bias_gelu_fused", "iostream_launcher.cu", True), ("rope_half_split", "lesson_half_split.cu", True),
])
def test_samples_spread_only_where_nothing_is_shared(exercise, name, spreads):
    sub = read_submission(SAMPLES / exercise / name, LAUNCHER)
    assert spreads_over_cores(sub) is spreads


@pytest.mark.parametrize("text, kept", [
    ("int main() { return 0; }\n", False),
    ("static inline int main(void)\n{\n  if (1) { }\n  return 0;\n}\n", False),
    ("extern \"C\" int main(int argc, char** argv) { return argc; }\n", False),
    ("namespace t { int main() { return 0; } }\n", True),                    # not the program's main
    ("int main();\nint f() { return main(); }\nint main() { return 1; }\n", True),   # something calls it
    ("int domain(int v) { return v; }\nint main_loop() { return 0; }\n", True),         # no main at all
])
def test_only_a_file_scope_main_nothing_calls_is_left_out(text, kept, write_cu):
    body = "__global__ void k(float* o) { o[0] = 1; }\n" + text
    sub = read_submission(write_cu(body), LAUNCHER)
    assert (sub.compiled == sub.text) == kept
    assert sub.compiled.count("\n") == sub.text.count("\n")
    if not kept:
        assert "main" not in sub.compiled and sub.main_line == 2 and "__global__ void k" in sub.compiled


@pytest.mark.parametrize("text, device", [
    ("auto f = [] __device__ (float v) { return v; };", True),
    ("auto f = [=] __host__ __device__ (float v) mutable { return v; };", True),
    ("auto f = [&]__device__(float v) { return v; };", True),
    ("auto f = [] (float v) { return v; };", False),                           # a plain lambda
    ("__device__ float g(float v) { return v; }\nfloat a[2]; __device__ int b;", False),
    ("// [] __device__ (float v) in a comment\nint x;", False),
])
def test_a_device_lambda_is_told_from_the_rest(text, device):
    from grader.core.source import uses_device_lambdas

    assert uses_device_lambdas(blank_comments_and_strings(text)) == device


@pytest.mark.parametrize("text", [
    "void __global__ biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {}\n",
    "#define KERNEL __global__ __launch_bounds__(256)\n#define RESTRICT __restrict__\n"
    "KERNEL void biasGeluFused(const float* RESTRICT x, const float* RESTRICT bias, float* RESTRICT out, size_t cols) {}\n",
    "#define GLOBAL \\\n    __global__\n\nGLOBAL void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {}\n",
])
def test_a_kernel_written_another_way_nvcc_reads_is_found(text, write_cu, rubric):
    """The specifiers in another order, or behind an object-like macro (code from elsewhere)."""
    sub = read_submission(write_cu(text), LAUNCHER)
    kernel = sub.kernel("biasGeluFused")
    assert kernel is not None and kernel.line == text.count("\n", 0, text.index("biasGeluFused")) + 1
    assert signature_problem(kernel, rubric.kernel) is None


def test_a_launcher_behind_an_object_like_macro_is_found(write_cu):
    text = "#define API extern \"C\" void\nAPI launchBiasGeluFused(const float* x, const float* b, float* o, int r, int c, cudaStream_t s) {\n}\n"
    assert read_submission(write_cu(text), LAUNCHER).has_launcher


# -- the scan reads what the compiler compiles (helper-14's fairness findings) -------------------

def test_the_scan_blanks_raw_strings_and_dead_code_and_keeps_digit_separators():
    from grader.core.source import blank_comments_and_strings as blank

    raw = 'printf(R"msg(no "asm("trap;")" here)msg"); int n = 65\'535; char c = \'a\'; asm("x");'
    out = blank(raw)
    assert "asm(\"trap" not in out and out.count("asm") == 1 and "65'535" in out and "'a'" not in out, out
    assert len(out) == len(raw)
    dead = '#if 0\nasm("trap;");\n#else\nint live;\n#endif\nint after;'
    assert blank(dead).split("\n") == ["#if 0", " " * 13, "#else", "int live;", "#endif", "int after;"]
    nested = "#if 0\n#if 1\nasm(x);\n#endif\nasm(y);\n#endif\nz;"
    assert "asm" not in blank(nested) and blank(nested).endswith("z;")
    assert blank("L'a' u8'b' 0xFF'FF") == "L' ' u8' ' 0xFF'FF"


def test_a_kernel_with_a_parenthesised_macro_in_its_launch_bounds_is_found():
    from grader.core.source import blank_comments_and_strings, find_kernels

    code = blank_comments_and_strings(
        "#define BLOCK (256)\n__global__ void __launch_bounds__(BLOCK) biasGeluFused(const float* x) {}\n"
        "__global__ __launch_bounds__((2 * (64)), 2) void other(int n) {}\n")
    assert [(k.name, k.params, k.line) for k in find_kernels(code)] == [
        ("biasGeluFused", ["const float* x"], 2), ("other", ["int n"], 3)]


def test_an_include_the_compiler_may_skip_is_left_to_it(tmp_path):
    """A header of one's own under a condition the file does not settle (#ifdef of a name it never
    defines) may never be compiled: not refused ahead of the compiler. One under an include guard,
    or outside any condition, is."""
    from grader.core.source import source_refusals

    body = ('#ifndef MY_KERNEL_CU\n#define MY_KERNEL_CU\n#include "mine.h"\n#ifdef USE_HELPER_CUDA\n'
            '#include "helper_cuda.h"\n#endif\n#if __CUDACC_VER_MAJOR__ >= 12\n#include "/etc/passwd"\n#endif\n#endif\n'
            '__global__ void geluSum(const float* x, float* out, int R, int C) {}\n')
    p = tmp_path / "k.cu"
    p.write_text(body)
    found = [f.what if hasattr(f, "what") else str(f) for f in source_refusals(read_submission(p, "launchGeluSum"))]
    assert len(found) == 1 and "mine.h" in found[0], found
