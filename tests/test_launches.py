"""The launch configuration each kernel got, and its occupancy: the rules, the emulator's log,
and the findings they feed."""

import dataclasses
import shutil

import pytest

from grader.core.backend import CUDA, EMULATOR
from grader.analysis import findings, launches
from grader.toolchain.build import build_submission
from grader.analysis.launches import ARCH_LIMITS, blocks_per_sm
from grader.core.results import Launch
from grader.run.replaying import run_worker
from grader.analysis.sass import KernelCode
from grader.core.source import read_submission

H200 = ARCH_LIMITS["sm_90"]


# The first four were measured on an H200 with cudaOccupancyMaxActiveBlocksPerMultiprocessor
# (kernels of 10 and 64 registers); the others follow the occupancy calculator's rules.
@pytest.mark.parametrize("threads, registers, shared, expected", [
    (64, 10, 0, 32),            # the 32-blocks-per-SM limit
    (32, 10, 0, 32),
    (96, 10, 0, 21),            # 3 warps a block: 64 // 3
    (1024, 64, 0, 1),           # 64 registers x 32 warps: the register file holds one block
    (256, 128, 0, 2),           # 4 warps per sub-partition at 128 registers
    (256, 16, 48 * 1024, 4),    # 48 KiB of shared memory (plus 1 KiB reserved) a block
    (256, 0, 0, 8),             # registers unknown: the warp limit
    (1024, 255, 0, 0),          # does not fit at all
])
def test_blocks_per_sm(threads, registers, shared, expected):
    assert blocks_per_sm(H200, threads=threads, registers=registers, shared_bytes=shared) == expected


def test_pick_log_prefers_the_timed_launches_then_the_timed_shape_then_the_largest_check():
    from grader.core.contract import CaseFrame, LaunchRecord, TimingFrame

    small = CaseFrame("a", launches=[LaunchRecord(grid=[1, 3, 1], block=[256, 1, 1], launches=1)])
    big = CaseFrame("b", launches=[LaunchRecord(grid=[4, 300, 1], block=[256, 1, 1], launches=1)])
    timed = TimingFrame(launches=[LaunchRecord(grid=[8, 1, 1], block=[32, 1, 1], launches=90)])
    assert launches.pick_log([small, big, small], set()) == (big.launches, False)
    assert launches.pick_log([big, small], {"a"}) == (small.launches, True)
    assert launches.pick_log([small, big, timed], set()) == (timed.launches, True)
    # A kernel that skipped its timed launches (a pointer cache) shows none, not a check's.
    assert launches.pick_log([small, big, TimingFrame()], set()) == ([], True)
    assert launches.pick_log([CaseFrame("c"), None], set()) == ([], False)


def _launch(**kw):
    base = dict(kernel="k", mangled="_Z1kv", grid=[100, 1, 1], block=[256, 1, 1], shared_bytes=0, launches=1,
                registers=16, blocks_per_sm=8, occupancy=1.0, occupancy_source="computed", timed_shape=True)
    return Launch(**{**base, **kw})


def test_launch_facts_take_the_configuration_launched_most():
    logged = [_launch(grid=[5, 1, 1], launches=1), _launch(grid=[1000, 1, 1], launches=40),
              _launch(kernel="other", grid=[1, 1, 1])]
    facts = launches.launch_facts(logged, "k", sms=132)
    assert facts == {"threads_per_block": 256, "blocks": 1000, "launch_configs": 2, "blocks_per_sm": 8,
                     "gpu_fill": round(1000 / (8 * 132), 4), "occupancy": 1.0}
    assert launches.launch_facts(logged, "missing", sms=132) == {}
    at_a_check = [dataclasses.replace(lc, timed_shape=False) for lc in logged]
    assert "gpu_fill" not in launches.launch_facts(at_a_check, "k", sms=132)    # a check's grid is small


def test_a_launch_fact_a_kernel_lacks_holds_no_rule(rubric):
    """A kernel the run never launched has no occupancy: low_occupancy (occupancy <= 0.5) must not hold."""
    k = KernelCode("_Z1kv", "k", True, {"global_loads": 2, "max_load_bytes": 16, "min_load_bytes": 16}, [])
    assert findings.explain([k], rubric, None, "") == []
    low = findings.with_launches([k], [_launch(block=[32, 1, 1], blocks_per_sm=32, occupancy=0.5)], sms=132)
    assert [f.code for f in findings.explain(low, rubric, None, "")] == ["low_occupancy"]


def _emulated_log(path, rubric, n_cases=3):
    """The launch logs the emulator's child sends for the first checks, resolved."""
    from tests.jobs import child_job

    sub = read_submission(path, rubric.kernel.launcher_name)
    gpu = build_submission(sub, rubric, backend=CUDA, arch="sm_90")
    emu = build_submission(sub, rubric, backend=EMULATOR)
    assert emu.ok, emu.log
    job, cases = child_job(rubric, backend=EMULATOR, build=emu, has_launcher=sub.has_launcher, draw=True)
    job.cases, job.verify_cases, job.reverse_check = job.cases[:n_cases], [], False
    cases = cases[:n_cases]
    run = run_worker(job, time_limit_s=60, output_cap=4096)
    from grader.core.contract import CaseFrame

    frames = [f.data for f in run.frames if isinstance(f.data, CaseFrame)]
    assert len(frames) == n_cases, [f.header for f in run.frames]
    log, timed_shape = launches.pick_log(frames, set())
    assert not timed_shape
    return launches.resolve(log, timed_shape=timed_shape, library=emu.library,
                            resources=gpu.resources if gpu.ok else [], arch="sm_90"), cases


# Launch shapes students write: each kernel must be named and its configuration recorded.
VARIANTS = {
    "chosen_by_pointer": ("""
__global__ void fast(const float* x, const float* bias, float* out, size_t cols) {
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (c < cols) { float v = x[blockIdx.y * cols + c] + bias[c]; out[blockIdx.y * cols + c] = 0.5f * v * (1.0f + erff(v * 0.70710678f)); }
}
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (c < cols) { float v = x[blockIdx.y * cols + c] + bias[c]; out[blockIdx.y * cols + c] = 0.5f * v * (1.0f + erff(v * 0.70710678f)); }
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    auto k = cols > 1 ? fast : biasGeluFused;
    k<<<dim3((cols + 127) / 128, rows), 128, 0, s>>>(x, bias, out, cols);
}
""", {"fast"}, 128),
    "anonymous_namespace_template": ("""
namespace {
template <int B> __global__ void kern(const float* x, const float* bias, float* out, size_t cols) {
    size_t c = blockIdx.x * (size_t)B + threadIdx.x;
    if (c < cols) { float v = x[blockIdx.y * cols + c] + bias[c]; out[blockIdx.y * cols + c] = 0.5f * v * (1.0f + erff(v * 0.70710678f)); }
}
}
__global__ void biasGeluFused(const float*, const float*, float*, size_t) {}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    kern<64><<<dim3((cols + 63) / 64, rows), dim3(64), 0, s>>>(x, bias, out, cols);
}
""", {"kern"}, 64),
    "static_kernel_2d_block_dynamic_shared": ("""
static __global__ void body(const float* x, const float* bias, float* out, int rows, int cols) {
    extern __shared__ float b[];
    int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y * 8 + threadIdx.y;
    if (threadIdx.y == 0 && c < cols) b[threadIdx.x] = bias[c];
    __syncthreads();
    if (r < rows && c < cols) { float v = x[(size_t)r * cols + c] + b[threadIdx.x]; out[(size_t)r * cols + c] = 0.5f * v * (1.0f + erff(v * 0.70710678f)); }
}
__global__ void biasGeluFused(const float*, const float*, float*, size_t) {}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    body<<<dim3((cols + 31) / 32, (rows + 7) / 8), dim3(32, 8), 32 * sizeof(float), s>>>(x, bias, out, rows, cols);
}
""", {"body"}, 256),
    "template_deduced_from_a_functor": ("""
struct Gelu { __device__ float operator()(float v) const { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); } };
template <typename F>
__global__ void mapBias(const float* x, const float* bias, float* out, size_t cols, F f) {
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (c < cols) out[blockIdx.y * cols + c] = f(x[blockIdx.y * cols + c] + bias[c]);
}
__global__ void biasGeluFused(const float*, const float*, float*, size_t) {}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    const size_t n = cols;
    mapBias<<<dim3((cols + 127) / 128, rows), 128, 0, s>>>(x, bias, out, n, Gelu{});
}
""", {"mapBias"}, 128),
    "default_launch": ("""
__device__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (c < cols) out[blockIdx.y * cols + c] = gelu(x[blockIdx.y * cols + c] + bias[c]);
}
""", {"biasGeluFused"}, None),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_emulator_logs_and_names_every_launch(variant, write_cu, rubric):
    text, names, threads = VARIANTS[variant]
    logged, cases = _emulated_log(write_cu(text), rubric)
    assert {lc.kernel for lc in logged} == names, logged
    (lc,) = logged
    expected_threads = threads or int(rubric.kernel.block[0])
    assert lc.block[0] * lc.block[1] * lc.block[2] == expected_threads
    assert lc.launches == 1 and lc.mangled
    if variant == "static_kernel_2d_block_dynamic_shared":
        assert lc.block[:2] == [32, 8] and lc.shared_bytes == 128
    if shutil.which("nvcc"):           # nvcc's ptxas says how many registers: the occupancy follows
        assert lc.registers and lc.occupancy_source == "computed" and 0 < lc.occupancy <= 1
        assert lc.blocks_per_sm == blocks_per_sm(H200, threads=expected_threads, registers=lc.registers,
                                                 shared_bytes=lc.shared_bytes)


def test_two_kernels_and_two_configurations_are_logged_apart(write_cu, rubric):
    path = write_cu("""
__global__ void vec(const float4* x, const float4* bias, float4* out, int c4) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < c4) { float4 a = x[blockIdx.y * (size_t)c4 + c], b = bias[c];
        out[blockIdx.y * (size_t)c4 + c] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
}
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (c < cols) out[blockIdx.y * cols + c] = x[blockIdx.y * cols + c] + bias[c];
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    for (int r = 0; r < rows; ++r)      // one launch per row: the log counts them
        biasGeluFused<<<(cols + 255) / 256, 256, 0, s>>>(x + (size_t)r * cols, bias, out + (size_t)r * cols, cols);
    if (cols % 4 == 0) vec<<<dim3(1, 1), 32, 0, s>>>((const float4*)x, (const float4*)bias, (float4*)out, 0);
}
""")
    logged, cases = _emulated_log(path, rubric)
    by_kernel = {lc.kernel: lc for lc in logged}
    assert by_kernel["biasGeluFused"].launches > 1
    biggest = max(cases, key=lambda c: c.dims["rows"] * c.dims["cols"])
    assert by_kernel["biasGeluFused"].launches == biggest.dims["rows"]
    if biggest.dims["cols"] % 4 == 0:
        assert by_kernel["vec"].launches == 1


def test_findings_name_the_weakest_launch_together(rubric):
    """Submission-scope rules see the launched kernels together: the least occupancy speaks for them."""
    a = KernelCode("_Z1av", "a", True, {"registers": 10}, [])
    b = KernelCode("_Z1bv", "b", True, {"registers": 10}, [])
    logged = [_launch(kernel="a", occupancy=1.0), _launch(kernel="b", block=[32, 1, 1], blocks_per_sm=32, occupancy=0.5)]
    together = findings._combined(findings.with_launches([a, b], logged, sms=132))
    assert together["occupancy"] == 0.5 and together["threads_per_block"] == 32
    mine = dataclasses.replace(rubric, findings=[dataclasses.replace(rubric.findings[0], scope="submission",
                                                                      when=[dataclasses.replace(rubric.findings[0].when[0],
                                                                                                fact="occupancy", op="<", value=0.6)])])
    assert len(findings.explain(findings.with_launches([a, b], logged, sms=132), mine, None, "")) == 1


def test_auto_is_decided_in_one_place(monkeypatch):
    """gpuinfo.resolve_backend: 'auto' is the GPU where one is visible, else the emulator; a named
    backend is kept (a cuda run without a GPU is then said as such, never silently emulated)."""
    from grader.toolchain import gpuinfo

    monkeypatch.setattr(gpuinfo, "cuda_available", lambda: False)
    assert [gpuinfo.resolve_backend(b).name for b in ("auto", "cuda", "emulator")] == ["emulator", "cuda", "emulator"]
    monkeypatch.setattr(gpuinfo, "cuda_available", lambda: True)
    assert gpuinfo.resolve_backend("auto").name == "cuda"
    assert gpuinfo.resolve_backend("auto", has_gpu=False).name == "emulator"
