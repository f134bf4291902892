"""grade/steps.build_and_screen on the emulator, with the CUDA compiler there to judge the file first
and without it (the object then screened against the shim's baseline): what each path returns."""

import shutil

import pytest

from grader.core.backend import EMULATOR
from grader.core.handin import read_file
from grader.exercises import load_exercise
from grader.grade import steps

KERNEL = """
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) out[blockIdx.y * cols + col] = x[blockIdx.y * cols + col] + bias[col];
}
"""
# what a student writes to run host code at load time: a constructor calling system(), a static
# object whose constructor calls popen()
AT_LOAD = {
    "constructor": '#include <cstdlib>\n__attribute__((constructor)) static void early() { std::system("true"); }\n',
    "static object": '#include <cstdio>\nstruct Ahead { Ahead() { popen("true", "r"); } };\nstatic Ahead ahead;\n',
}


def _built(path, *, nvcc: bool, monkeypatch):
    rubric = load_exercise("bias_gelu_fused")
    if not nvcc:
        real = steps.tools.locate
        monkeypatch.setattr(steps.tools, "locate", lambda name: None if name == "nvcc" else real(name))
    sub = steps.read_source(read_file(path), rubric)
    said = []
    return steps.build_and_screen(path, sub, rubric, EMULATOR, (EMULATOR.checked_by or EMULATOR).default_arch,
                                  said.append), said


@pytest.mark.parametrize("nvcc", [False, pytest.param(True, marks=pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc is not installed (CI installs it)"))])
def test_build_and_screen_refuses_host_code_at_load_and_builds_a_plain_kernel(tmp_path, monkeypatch, nvcc):
    plain = tmp_path / "plain.cu"
    plain.write_text(KERNEL)
    built, _ = _built(plain, nvcc=nvcc, monkeypatch=monkeypatch)
    assert built.stop is None and built.build.ok and built.summary.ok
    assert (built.gpu_build is not None) == nvcc           # nvcc's build is the one whose GPU code is read

    for shape, code in AT_LOAD.items():
        bad = tmp_path / f"{shape.replace(' ', '_')}.cu"
        bad.write_text(code + KERNEL)
        built, _ = _built(bad, nvcc=nvcc, monkeypatch=monkeypatch)
        assert built.stop is not None and built.stop.status == "rejected", (shape, nvcc, built.stop)
        assert "screened_out" in built.stop.flags, shape

    broken = tmp_path / "broken.cu"
    broken.write_text(KERNEL.replace("bias[col];", "bias[col]"))
    built, said = _built(broken, nvcc=nvcc, monkeypatch=monkeypatch)
    assert built.stop.status == "compile_error" and built.summary is not None and not built.summary.ok
    assert any(n.line is not None for n in built.stop.notes), built.stop.notes
