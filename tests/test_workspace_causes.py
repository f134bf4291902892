"""Memory of the student's own that a kernel adds into and nothing resets (verdict/workspace.py):
the corpus's two kernels are found with their line, and the same kernels made right (the workspace
zeroed with cudaMemsetAsync, the __device__ array reset by a kernel, or written with =) are not."""

from __future__ import annotations

from pathlib import Path

from grader.core.source import read_submission
from grader.verdict.workspace import stale_workspace, unzeroed_workspace

DATA = Path(__file__).resolve().parent / "data" / "mistakes" / "gelu_sum"


def _sub(tmp_path: Path, text: str):
    path = tmp_path / "k.cu"
    path.write_text(text)
    return read_submission(path, launcher="")


def test_a_cudamalloc_workspace_never_zeroed_is_found_at_its_allocation(tmp_path):
    text = (DATA / "workspace_never_zeroed.cu").read_text()
    found = unzeroed_workspace(_sub(tmp_path, text))
    assert found is not None and found.code == "unzeroed_workspace" and found.line == 21
    assert "g_acc is never zeroed" in found.text and "line 14" in found.text
    zeroed = text.replace("    const size_t total", "    cudaMemsetAsync(g_acc, 0, n * sizeof(float), stream);\n"
                                                    "    const size_t total")
    assert unzeroed_workspace(_sub(tmp_path, zeroed)) is None
    assert stale_workspace(_sub(tmp_path, text)) is None


def test_a_device_array_never_reset_is_found_at_the_addition():
    sub = read_submission(DATA / "static_workspace_not_reset.cu", launcher="")
    found = stale_workspace(sub)
    assert found is not None and found.code == "stale_workspace" and found.line == 17
    assert "carried over between calls" in found.text and "race" not in found.text
    assert unzeroed_workspace(sub) is None


def test_a_device_array_reset_or_assigned_is_not_stale(tmp_path):
    text = (DATA / "static_workspace_not_reset.cu").read_text()
    assigned = text.replace("g_sum[i] += acc;", "g_sum[i] = acc;")
    assert stale_workspace(_sub(tmp_path, assigned)) is None
    reset = text.replace("__global__ void copyOut", "__global__ void zero(int n) {\n"
                         "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                         "    if (i < n) g_sum[i] = 0.0f;\n}\n\n__global__ void copyOut")
    assert stale_workspace(_sub(tmp_path, reset)) is None
