"""Findings from the compiled code: facts read from SASS, rules from the rubric, the explain command."""

import dataclasses
import shutil

import pytest
from click.testing import CliRunner

from grader.core.backend import CUDA
from grader.analysis import findings, sass
from grader.toolchain import tools
from grader.toolchain.build import build_submission
from grader.cli import cli
from grader.core.errors import RubricError
from grader.core.results import CopyTiming, TimingResult
from grader.exercises.rubric import load_rubric
from grader.core.source import read_submission
from conftest import ROOT, SUBMISSIONS

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CI installs it)")


def kernels_of(path, rubric):
    sub = read_submission(path, rubric.kernel.launcher_name)
    build = build_submission(sub, rubric, backend=CUDA, arch="sm_90")
    assert build.ok, build.log
    found = sass.analyse(build.object, launcher=rubric.kernel.launcher_name if sub.has_launcher else None,
                         default_kernel=rubric.kernel.name, resources=build.resources)
    assert not isinstance(found, str), found      # the disassemblers come with the test extras
    return found


def launched(path, rubric):
    return [k for k in kernels_of(path, rubric) if k.launched]


def test_the_disassemblers_are_found():
    assert tools.locate("cuobjdump") and tools.locate("nvdisasm")


@pytest.mark.parametrize("name, fact, at_least", [
    ("flat_index_mod.cu", "div64", 1), ("double_math.cu", "double_ops", 1), ("spilling_kernel.cu", "local_ops", 1),
    ("cooperative_groups_block.cu", "barriers", 1), ("cooperative_groups_block.cu", "shared_ops", 2),
    ("scalar_2d.cu", "global_loads", 2), ("register_spill.cu", "spill_bytes", 1), ("register_spill.cu", "local_ops", 1),
])
def test_facts_read_from_sass(name, fact, at_least, rubric):
    (k,) = launched(SUBMISSIONS / name, rubric)
    assert k.facts[fact] >= at_least, k.facts


def test_widths_and_source_lines(rubric):
    (k,) = launched(SUBMISSIONS / "scalar_2d.cu", rubric)
    assert k.facts["max_load_bytes"] == 4 and k.facts["max_store_bytes"] == 4 and k.facts["registers"] > 0
    loads = [ins for what, ins in k.costly if what == "4-byte global load"]
    source = (SUBMISSIONS / "scalar_2d.cu").read_text().splitlines()
    assert loads and all("x[" in source[ins.line - 1] or "bias[" in source[ins.line - 1] for ins in loads)
    vec = {k.name: k.facts for k in launched(SUBMISSIONS / "float4_launcher.cu", rubric)}
    assert vec["biasGeluFused4"]["max_load_bytes"] == 16 and vec["biasGeluFused4"]["max_store_bytes"] == 16


def test_only_kernels_the_launcher_reaches_are_judged(write_cu, rubric):
    path = write_cu("""
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) out[blockIdx.y * cols + col] = x[blockIdx.y * cols + col] + bias[col];
}
__global__ void unused(double* d) { d[threadIdx.x] = d[threadIdx.x] * 2.0; }
__global__ void vec4(const float4* x, const float4* bias, float4* out, int cols4) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols4) { float4 a = x[blockIdx.y * (size_t)cols4 + c], b = bias[c];
        out[blockIdx.y * (size_t)cols4 + c] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
}
static void go(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    vec4<<<dim3((cols / 4 + 255) / 256, rows), 256, 0, s>>>((const float4*)x, (const float4*)bias, (float4*)out, cols / 4);
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    go(x, bias, out, rows, cols, s);
}
""")
    state = {k.name: k.launched for k in kernels_of(path, rubric)}
    assert state == {"biasGeluFused": False, "unused": False, "vec4": True}
    assert findings.explain(kernels_of(path, rubric), rubric, None, "") == []


@pytest.mark.parametrize("name, codes", [
    ("float4_launcher.cu", set()), ("template_aligned_dispatch.cu", set()), ("scalar_2d.cu", {"scalar_loads"}),
    ("flat_index_mod.cu", {"div64", "scalar_loads"}), ("double_math.cu", {"double_math", "scalar_loads"}),
    ("spilling_kernel.cu", {"local_memory", "scalar_loads"}), ("register_spill.cu", {"local_memory", "scalar_loads"}),
    # Launch findings need a run: `grader explain` runs nothing, so the compiled code alone speaks.
    ("small_blocks.cu", {"scalar_loads"}), ("tiny_grid.cu", {"div64", "scalar_loads"}),
    ("cooperative_groups_block.cu", {"needless_barrier", "scalar_loads"}),
])
def test_findings_for_each_shape(name, codes, rubric):
    found = findings.explain(kernels_of(SUBMISSIONS / name, rubric), rubric, None, "")
    assert {f.code for f in found} == codes
    for f in found:
        assert f.evidence and f.advice and "?" not in f.message.replace("?)", ""), f


def test_findings_quote_the_copies_measured_in_the_run(rubric):
    t = TimingResult(shape=[16384, 1024], kernel="biasGeluFused", byte_model="2 floats per element", bytes_moved=1, samples=100, stop_reason="converged",
                     seconds=1, submission_ms=0.06, submission_gbps=2200, floor_kind="memcpy", floor_gbps=3700.0,
                     copies=[CopyTiming("copy_scalar", 0.054, 2442.0), CopyTiming("copy_vec4", 0.036, 3681.5),
                             CopyTiming("memcpy", 0.0359, 3700.0)], fraction=0.59, fraction_ci=[0.58, 0.6],
                     informational_kind="copy_scalar", informational_fraction=0.89, chain_ms=None, chain_gbps=None,
                     chain_bytes=335544320, chain_title="biasGeluFused + addResidual")
    (f,) = findings.explain(kernels_of(SUBMISSIONS / "scalar_2d.cu", rubric), rubric, t, "NVIDIA H200")
    assert "On this NVIDIA H200 the lesson's 4-byte copy reached 0.66 of the floor and a 16-byte copy 0.99" in f.message


def test_finding_rules_are_validated(tmp_path):
    text = (ROOT / "rubrics" / "bias_gelu_fused.yaml").read_text()
    bad = tmp_path / "r.yaml"
    bad.write_text(text.replace("[{fact: div64, op:", "[{fact: divisions, op:"))
    with pytest.raises(RubricError, match=r"findings\[0\]\.when\[0\]\.fact.*unknown fact 'divisions'"):
        load_rubric(bad)


def test_a_rubric_brings_its_own_findings(rubric):
    from grader.exercises.rubric import Condition, FindingRule

    mine = dataclasses.replace(rubric, findings=[FindingRule(
        "few_registers", [Condition("registers", "<=", 64)], "`{kernel}` uses {registers} registers.", "Fine.")])
    (f,) = findings.explain(kernels_of(SUBMISSIONS / "scalar_2d.cu", rubric), mine, None, "")
    assert f.code == "few_registers" and f.message.startswith("`biasGeluFused` uses ")


def test_explain_command(write_cu):
    r = CliRunner().invoke(cli, ["explain", str(SUBMISSIONS / "flat_index_mod.cu")])
    assert r.exit_code == 0, r.output
    assert "flat_index_mod.cu:8  const float v = x[i] + bias[i % cols];" in r.output
    assert "64-bit division subroutine" in r.output and "- div64:" in r.output
    r = CliRunner().invoke(cli, ["explain", str(SUBMISSIONS / "float4_launcher.cu")])
    assert r.exit_code == 0 and "Nothing in the compiled code stands out" in r.output
    r = CliRunner().invoke(cli, ["explain", str(SUBMISSIONS / "compile_error.cu")])
    assert r.exit_code == 3 and "did not compile" in r.output


def test_without_objdump_the_findings_say_why_and_the_grade_goes_on(rubric, monkeypatch, tmp_path):
    sub = read_submission(SUBMISSIONS / "scalar_2d.cu", rubric.kernel.launcher_name)
    build = build_submission(sub, rubric, backend=CUDA, arch="sm_90")
    obj = tmp_path / "main.o"                      # a copy, so no cached analysis answers
    obj.write_bytes(build.object.read_bytes())
    real_which = shutil.which
    monkeypatch.setattr(tools.shutil, "which", lambda name: None if name == "objdump" else real_which(name))
    why = sass.analyse(obj, launcher=None, default_kernel="biasGeluFused", resources=[])
    assert isinstance(why, str) and "objdump" in why
