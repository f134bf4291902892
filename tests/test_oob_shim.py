"""The emulator's fault on a launch spread over OS threads (issue 71): the one reported is the
earliest block's, the fault a launch on one core meets first, whichever OS thread faulted first in
time; and it carries the faulting thread's block and thread and the launch's shape."""

from __future__ import annotations

import ctypes

import torch

from grader.run.child.backends import _FaultInfo
from test_shim import build, run

# Blocks from row LATE on write through a wild pointer at an address that says their row; row EARLY
# does too, but only once a later row has faulted on another OS thread (it waits SPIN iterations at
# most): in time, a later block's fault comes first.
RACE = r"""
static std::atomic<int> gLater{0};
__global__ void rows(const float* x, float* out, int cols) {
    if (blockIdx.y == EARLY && threadIdx.x == 3) {
        for (long k = 0; k < SPIN && !gLater; ++k) {}
        reinterpret_cast<float*>(0x1000)[blockIdx.y] = 1.0f;
    }
    if (blockIdx.y >= LATE && threadIdx.x == 5) {
        gLater = 1;
        reinterpret_cast<float*>(0x1000)[blockIdx.y] = 1.0f;
    }
    const size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (c < static_cast<size_t>(cols)) out[blockIdx.y * static_cast<size_t>(cols) + c] = x[blockIdx.y * static_cast<size_t>(cols) + c];
}
void launchAll(const float* in, float* out, int n) {
    gLater = 0;
    const int cols = 1000;
    rows<<<dim3((cols + 255) / 256, n / cols), 256>>>(in, out, cols);
}
""".replace("EARLY", "100").replace("LATE", "101").replace("SPIN", "2000000000L")


def _fault(dll) -> _FaultInfo:
    dll.grader_emu_fault.restype = ctypes.POINTER(_FaultInfo)
    return dll.grader_emu_fault().contents


def test_a_spread_launch_reports_the_earliest_blocks_fault_with_its_thread(tmp_path):
    dll = build(tmp_path, RACE, fibers=False, spread=True)
    dll.grader_emu_set_threads(4)
    x = torch.zeros(1000 * 1000)
    for _ in range(3):
        code, _ = run(dll, x, x.numel())
        f = _fault(dll)
        assert code == -1 and f.signal == 11 and f.is_write == 1
        assert f.address == 0x1000 + 4 * 100, hex(f.address)        # row 100's, not a later row's
        assert f.in_kernel == 1 and list(f.block) == [0, 100, 0] and list(f.thread) == [3, 0, 0]
        assert list(f.block_dim) == [256, 1, 1] and list(f.grid_dim) == [4, 1000, 1]
    (tmp_path / "one").mkdir()
    one = build(tmp_path / "one", RACE, fibers=False)                # the same file on one OS thread
    assert run(one, x, x.numel())[0] == -1 and _fault(one).address == 0x1000 + 4 * 100


def test_a_fault_in_host_code_carries_no_thread(tmp_path):
    dll = build(tmp_path, RACE.replace("    gLater = 0;", "    gLater = 0; reinterpret_cast<float*>(0x2000)[0] = 1.0f;"),
                fibers=False, spread=True)
    assert run(dll, torch.zeros(1000 * 1000), 1000 * 1000)[0] == -1
    f = _fault(dll)
    assert f.address == 0x2000 and f.in_kernel == 0
