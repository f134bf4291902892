import pytest
from pathlib import Path

from grader.source import (SourceProblem, blank_comments_and_strings, emulator_blockers,
                           missing_kernel_message, read_submission, rewrite_for_emulator, signature_problem,
                           uses_collectives)

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


def test_missing_kernel_names_what_was_found(write_cu):
    sub = read_submission(write_cu("__global__ void biasGeluFuse(const float* x) {}\n"), LAUNCHER)
    msg = missing_kernel_message(sub, "biasGeluFused", "SIG")
    assert "'biasGeluFuse' (line 1)" in msg and "Did you mean" in msg and "SIG" in msg
    empty = read_submission(write_cu("int main() { return 0; }\n"), LAUNCHER)
    assert "defines no __global__ kernel" in missing_kernel_message(empty, "biasGeluFused", "SIG")


# Parameter lists students write that the default launch can call: accepted, whatever the spelling.
CALLABLE = [
    "const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out, size_t cols",
    "const float* x, const float* bias, float* out, int cols",
    "float* x, float* bias, float* out, int cols",                         # inputs without const
    "const float *x, const float *b, float *y, unsigned int n",           # other names, star on the name
    "const float* const x, const float* const bias, float* const out, const size_t cols",
    "const float * __restrict x, const float * __restrict bias, float * __restrict out, long cols",
    "const float* x, const float* bias, float* out, unsigned long long cols",
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
    assert "::grader::launch(k, dim3(2, 3),\n      256, 0, s)(p, 4);" in out
    assert "::grader::launch(t<float>, 1, 32)(p)" in out
    assert "float* smem = static_cast<float*>(::grader::dynamic_shared());" in out
    assert "cuda_runtime.h" not in out
    lines = out.splitlines()
    assert lines[5].strip().startswith("::grader::launch(t<float>")
