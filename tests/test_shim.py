"""The CPU shim on small kernels of our own, built exactly as the emulator builds a submission."""

import ctypes
import subprocess
import sys

import torch

from grader.core.backend import EMULATOR
from grader.toolchain.build import emulator_flags
from grader.core.emulation import rewrite_for_emulator

COMMON = r"""
extern "C" int run(const float* in, float* out, int n, int reverse) {
    grader_emu_set_reverse(reverse);
    return ::grader::guarded([&] { launchAll(in, out, n); });
}
"""


def build(tmp_path, body: str, fibers: bool, spread: bool = False) -> ctypes.CDLL:
    src = tmp_path / "k.cu"
    src.write_text(rewrite_for_emulator(body + COMMON))
    lib = tmp_path / "k.so"
    proc = subprocess.run(["g++", *emulator_flags(EMULATOR.toolchain.flags, fibers=fibers, spread=spread), "-shared", "-o", str(lib), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    dll = ctypes.CDLL(str(lib))
    dll.run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    return dll


def run(dll, inp: torch.Tensor, n_out: int, reverse: bool = False) -> tuple[int, torch.Tensor]:
    out = torch.full((n_out,), float("nan"))
    code = dll.run(inp.data_ptr(), out.data_ptr(), inp.numel(), int(reverse))
    return code, out


SHARED_TILE = r"""
// Reverses each block's 64 values through shared memory: needs the barrier.
__global__ void reverseTile(const float* in, float* out, int n) {
    __shared__ float tile[64];
    int i = blockIdx.x * 64 + threadIdx.x;
    tile[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = tile[63 - threadIdx.x];
}
void launchAll(const float* in, float* out, int n) { reverseTile<<<n / 64, 64>>>(in, out, n); }
"""


def test_shared_tile_with_barrier_in_both_orders(tmp_path):
    dll = build(tmp_path, SHARED_TILE, fibers=True)
    x = torch.arange(256, dtype=torch.float32)
    want = x.view(4, 64).flip(1).flatten()
    for reverse in (False, True):
        code, out = run(dll, x, 256, reverse)
        assert code == 0 and torch.equal(out, want)


def test_missing_barrier_shows_up_as_order_dependence(tmp_path):
    dll = build(tmp_path, SHARED_TILE.replace("__syncthreads();", ""), fibers=False)
    x = torch.arange(256, dtype=torch.float32)
    _, forward = run(dll, x, 256, False)
    _, backward = run(dll, x, 256, True)
    assert not torch.equal(forward.nan_to_num(-1), backward.nan_to_num(-1))


REDUCE = r"""
// Block sum: warp shuffles, then shared memory across warps, then one atomicAdd per block.
__global__ void blockSum(const float* in, float* out, int n) {
    __shared__ float warpSums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0) warpSums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float w = threadIdx.x < blockDim.x / 32 ? warpSums[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) w += __shfl_xor_sync(0xffffffffu, w, off);
        if (threadIdx.x == 0) atomicAdd(out, w);
    }
    unsigned any = __ballot_sync(0xffffffffu, i < n);
    if (threadIdx.x == 0 && blockIdx.x == 0) out[1] = static_cast<float>(__popc(any));
}
void launchAll(const float* in, float* out, int n) {
    out[0] = 0.0f;
    blockSum<<<(n + 255) / 256, 256>>>(in, out, n);
}
"""


def test_block_reduction_with_shuffles_ballot_and_atomics(tmp_path):
    dll = build(tmp_path, REDUCE, fibers=True)
    x = torch.arange(1000, dtype=torch.float32) % 7
    code, out = run(dll, x, 2)
    assert code == 0
    assert float(out[0]) == float(x.sum())
    assert float(out[1]) == 32.0


FLOAT4 = r"""
__global__ void scale4(const float4* in, float4* out, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) { float4 v = __ldg(&in[i]); out[i] = make_float4(2 * v.x, 2 * v.y, 2 * v.z, 2 * v.w); }
}
void launchAll(const float* in, float* out, int n) {
    scale4<<<(n / 4 + 127) / 128, 128>>>(reinterpret_cast<const float4*>(in), reinterpret_cast<float4*>(out), n / 4);
}
"""


def test_float4_loads(tmp_path):
    dll = build(tmp_path, FLOAT4, fibers=False)
    x = torch.randn(512)
    code, out = run(dll, x, 512)
    assert code == 0 and torch.equal(out, 2 * x)


def test_launch_configuration_errors_are_reported(tmp_path):
    dll = build(tmp_path, FLOAT4.replace("128>>>", "2048>>>"), fibers=False)
    code, _ = run(dll, torch.zeros(64), 64)
    assert code == 9          # cudaErrorInvalidConfiguration


def test_wild_pointer_is_caught_not_fatal(tmp_path):
    dll = build(tmp_path, r"""
__global__ void wild(const float* in, float* out, int n) { reinterpret_cast<float*>(0x40)[threadIdx.x] = 1.0f; }
void launchAll(const float* in, float* out, int n) { wild<<<1, 32>>>(in, out, n); }
""", fibers=False)
    code, _ = run(dll, torch.zeros(32), 32)
    assert code == -1
    dll.grader_emu_fault.restype = ctypes.POINTER(ctypes.c_int * 2)
    sig, is_write = dll.grader_emu_fault().contents
    assert sig == 11 and is_write == 1


def test_dynamic_shared_memory(tmp_path):
    dll = build(tmp_path, r"""
__global__ void viaDyn(const float* in, float* out, int n) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = in[threadIdx.x] + 1.0f;
    __syncthreads();
    out[threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
}
void launchAll(const float* in, float* out, int n) { viaDyn<<<1, n, n * sizeof(float)>>>(in, out, n); }
""", fibers=True)
    x = torch.arange(64, dtype=torch.float32)
    code, out = run(dll, x, 64, reverse=True)
    assert code == 0 and torch.equal(out, torch.roll(x + 1, -1))



# ---------------------------------------------------------------------------
# A large launch spread over OS threads (builds with spread=True)
# ---------------------------------------------------------------------------

# Each block writes, into out[block], which OS thread ran it (its thread id less the process id:
# 0 for the main thread). Block 0 waits (SPIN iterations at most) until some block has run on
# another OS thread, so a launch that spreads at all shows two ids whatever the scheduling.
WHO = r"""
#include <sys/syscall.h>
static std::atomic<long> gFirst{0};
static std::atomic<int> gOther{0};
__global__ void who(const float* in, float* out, int n) {
    const long me = syscall(SYS_gettid);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        gFirst = me;
        for (long k = 0; k < SPIN && !gOther; ++k) {}
    } else if (gFirst != 0 && gFirst != me) {
        gOther = 1;
    }
    if (threadIdx.x == 0) out[blockIdx.x] = static_cast<float>(me - getpid());
}
void launchAll(const float* in, float* out, int n) {
    gFirst = 0; gOther = 0;
    who<<<n, 1024>>>(in, out, n);
}
"""


def who(spin: int) -> str:
    return WHO.replace("SPIN", f"{spin}L")


def os_threads(out: torch.Tensor) -> int:
    return len(set(out.tolist()))


def test_a_large_launch_runs_on_several_os_threads(tmp_path):
    dll = build(tmp_path, who(3_000_000_000), fibers=False, spread=True)
    dll.grader_emu_set_threads(4)
    assert dll.grader_emu_spread_threads() == 4
    code, out = run(dll, torch.zeros(1024), 1024)          # 1024 blocks of 1024 threads
    assert code == 0 and 2 <= os_threads(out) <= 4


def test_small_reverse_and_one_core_launches_stay_on_one_thread(tmp_path):
    dll = build(tmp_path, who(30_000_000), fibers=False,
                spread=True)
    dll.grader_emu_set_threads(4)
    assert os_threads(run(dll, torch.zeros(128), 128)[1]) == 1        # 128 x 1024 threads: below 2^18
    assert os_threads(run(dll, torch.zeros(1024), 1024, reverse=True)[1]) == 1
    dll.grader_emu_set_threads(1)
    assert dll.grader_emu_spread_threads() == 1
    assert os_threads(run(dll, torch.zeros(1024), 1024)[1]) == 1


def test_a_file_built_without_spread_ignores_the_thread_count(tmp_path):
    dll = build(tmp_path, who(30_000_000), fibers=False)
    dll.grader_emu_set_threads(4)
    assert dll.grader_emu_spread_threads() == 1
    assert os_threads(run(dll, torch.zeros(1024), 1024)[1]) == 1


GELU_ROWS = r"""
__device__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }
__global__ void rows(const float* x, float* out, int cols) {
    const size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (c < static_cast<size_t>(cols)) out[blockIdx.y * static_cast<size_t>(cols) + c] = gelu(x[blockIdx.y * static_cast<size_t>(cols) + c]);
}
void launchAll(const float* in, float* out, int n) {
    const int cols = 1000;
    rows<<<dim3((cols + 255) / 256, n / cols), 256>>>(in, out, cols);
}
"""


def test_a_spread_launch_gives_the_same_bits_as_one_thread(tmp_path):
    (tmp_path / "one").mkdir()
    one = build(tmp_path / "one", GELU_ROWS, fibers=False)
    many = build(tmp_path, GELU_ROWS, fibers=False, spread=True)
    many.grader_emu_set_threads(3)
    x = torch.randn(1000 * 1000) * 4
    code1, want = run(one, x, x.numel())
    code2, got = run(many, x, x.numel())
    assert code1 == code2 == 0 and torch.equal(got, want)
    assert not torch.isnan(got).any()


def fault_of(dll) -> tuple[int, int, int]:
    """(signal, is_write, address) of the last fault."""
    class Info(ctypes.Structure):
        _fields_ = [("signal", ctypes.c_int), ("is_write", ctypes.c_int), ("address", ctypes.c_size_t)]
    dll.grader_emu_fault.restype = ctypes.POINTER(Info)
    f = dll.grader_emu_fault().contents
    return f.signal, f.is_write, f.address


def test_a_fault_on_another_thread_is_caught_and_the_next_launch_runs(tmp_path):
    # blocks from 700 on write through a wild pointer: whichever OS thread runs them faults
    dll = build(tmp_path, GELU_ROWS.replace("if (c < static_cast<size_t>(cols))",
                                            "if (blockIdx.y >= 700) reinterpret_cast<float*>(0x1000)[c] = 1.0f; if (c < static_cast<size_t>(cols))"),
                fibers=False, spread=True)
    dll.grader_emu_set_threads(4)
    x = torch.randn(1000 * 1000)
    code, out = run(dll, x, x.numel())
    sig, is_write, address = fault_of(dll)
    assert code == -1 and sig == 11 and is_write == 1 and 0x1000 <= address < 0x1000 + 4 * 1000
    (tmp_path / "good").mkdir()
    good = build(tmp_path / "good", GELU_ROWS, fibers=False, spread=True)
    good.grader_emu_set_threads(4)
    assert run(good, x, x.numel())[0] == 0
    # the same library launches again after its fault, and faults again the same way
    assert run(dll, x, x.numel())[0] == -1 and fault_of(dll)[0] == 11


def test_every_thread_faulting_at_once_reports_one_fault(tmp_path):
    dll = build(tmp_path, GELU_ROWS.replace("if (c < static_cast<size_t>(cols))",
                                            "reinterpret_cast<float*>(0x40)[threadIdx.x] = 1.0f; if (c < 0)"),
                fibers=False, spread=True)
    dll.grader_emu_set_threads(8)
    for _ in range(3):
        code, _ = run(dll, torch.zeros(1000 * 1000), 1000 * 1000)
        assert code == -1 and fault_of(dll)[:2] == (11, 1)


def test_a_stack_overflow_on_a_spread_thread_is_caught(tmp_path):
    dll = build(tmp_path, GELU_ROWS.replace("__global__ void rows", """
__device__ int deep(int k) { volatile char pad[4096]; pad[0] = static_cast<char>(k); return k ? deep(k - 1) + pad[0] : 0; }
__global__ void rows""").replace("if (c < static_cast<size_t>(cols))", "if (blockIdx.y >= 500 && deep(1 << 20) == 1) return; if (c < static_cast<size_t>(cols))"),
                fibers=False, spread=True)
    dll.grader_emu_set_threads(4)
    code, _ = run(dll, torch.zeros(1000 * 1000), 1000 * 1000)
    assert code == -1 and fault_of(dll)[0] == 11


SPREAD_UNDER_A_CAP = r"""
import ctypes, resource, sys
dll = ctypes.CDLL(sys.argv[1])
dll.run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
n = 1024
inp, out = (ctypes.c_float * n)(), (ctypes.c_float * n)()
dll.grader_emu_set_threads(8)
with open("/proc/self/status") as f:
    data = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmData:"))
cap = data + (4 << 20)              # room for no 8 MiB thread stack
resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
code = dll.run(inp, out, n, 0)
print(code, len(set(out)))
"""


def test_threads_that_cannot_start_leave_the_launch_to_one(tmp_path):
    """Under a memory cap no thread stack can be mapped: the launch still runs, on the calling thread."""
    dll_path = tmp_path / "k.so"
    build(tmp_path, who(30_000_000), fibers=False, spread=True)
    script = tmp_path / "cap.py"
    script.write_text(SPREAD_UNDER_A_CAP)
    proc = subprocess.run([sys.executable, str(script), str(dll_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "1"]


# The ways students name the kernel they launch: a function template whose arguments the launch
# deduces (a functor, a type), one with its template arguments written (nested), an overload set,
# a function-pointer variable, a name qualified from the global namespace.
LAUNCH_FORMS = r"""
#include <cstdint>
struct Twice { __device__ float operator()(float v) const { return 2.0f * v; } };
template <int N> struct Vec { float v[N]; };
namespace ops {
template <typename Op>
__global__ void apply(const float* in, float* out, int64_t n, Op op) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = op(in[i]);
}
template <typename V, int B>
__global__ void plusWidth(const float* in, float* out, int n) {
    int i = blockIdx.x * B + threadIdx.x;
    if (i < n) out[n + i] = in[i] + sizeof(V) / sizeof(float);
}
}
template <typename T>
__global__ void addOne(const T* in, T* out, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[2 * n + i] = in[i] + T(1);
}
__global__ void negate(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[3 * n + i] = -in[i];
}
__global__ void negate(const float4* in, float4* out, int n4) {}
__global__ void square(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[4 * n + i] = in[i] * in[i];
}
void launchAll(const float* in, float* out, int n) {
    const int64_t n64 = n;
    ops::apply<<<(n + 63) / 64, 64>>>(in, out, n64, Twice{});
    ::ops::plusWidth<Vec<4>, 64><<<(n + 63) / 64, 64>>>(in, out, n);
    addOne<<<(n + 63) / 64, 64>>>(in, out, n);
    negate<<<(n + 63) / 64, 64>>>(in, out, n);
    auto k = &square;
    k<<<(n + 63) / 64, 64>>>(in, out, n);
}
"""


def test_every_way_of_naming_the_launched_kernel(tmp_path):
    dll = build(tmp_path, LAUNCH_FORMS, fibers=False)
    x = torch.arange(100, dtype=torch.float32)
    code, out = run(dll, x, 500)
    assert code == 0
    twice, plus4, plus1, neg, sq = out.view(5, 100)
    assert torch.equal(twice, 2 * x) and torch.equal(plus4, x + 4) and torch.equal(plus1, x + 1)
    assert torch.equal(neg, -x) and torch.equal(sq, x * x)


class _Record(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_char * 256), ("offset", ctypes.c_ulonglong), ("grid", ctypes.c_uint * 3),
                ("block", ctypes.c_uint * 3), ("shared_bytes", ctypes.c_ulonglong), ("launches", ctypes.c_longlong),
                ("blocks_per_sm", ctypes.c_int)]


def test_a_deduced_template_launch_is_logged_under_its_kernel(tmp_path):
    """The launch log names each launch: by its address where the deduced specialization's
    parameters are the arguments' types, else by the name the source launches it by."""
    dll = build(tmp_path, LAUNCH_FORMS, fibers=False)
    run(dll, torch.arange(100, dtype=torch.float32), 500)
    records = (_Record * 32)()
    n = dll.grader_launch_log(records, 32)
    assert n == 5
    named = [r.kernel.decode() for r in records[:n]]
    # addOne<float> takes size_t n and is passed an int: no address; its name from the source
    assert named.count("addOne") == 1 and named.count("") == 4
    assert all(r.offset for r in records[:n] if not r.kernel)
    assert all(r.launches == 1 and list(r.grid) == [2, 1, 1] for r in records[:n])


# The C++ library's own headers write __attribute__((__noinline__)) (GCC 12's <memory>), which a
# __noinline__ macro broke ("'noinline' was not declared"): the student's __noinline__ is rewritten
# instead, and every standard header builds beside it.
NOINLINE_AND_MEMORY = r"""
#include <memory>
#include <vector>
__device__ __noinline__ float twice(float v) { return 2.0f * v; }
__attribute__((__noinline__)) static float thrice(float v) { return 3.0f * v; }
__global__ void scale(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = twice(in[i]) + thrice(0.0f);
}
void launchAll(const float* in, float* out, int n) {
    auto keep = std::make_shared<std::vector<int>>(1, n);
    scale<<<(n + 63) / 64, 64>>>(in, out, (*keep)[0]);
}
"""


def test_noinline_beside_the_standard_librarys_headers(tmp_path):
    dll = build(tmp_path, NOINLINE_AND_MEMORY, fibers=False)
    x = torch.arange(100, dtype=torch.float32)
    code, out = run(dll, x, 100)
    assert code == 0 and torch.equal(out, 2 * x)


FAST_INTRINSICS = r"""
// The fast intrinsics CUDA documents beside __sinf: each must build and run on the emulator as on a GPU.
__global__ void fast(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s, c;
    __sincosf(in[i], &s, &c);
    double ds, dc;
    sincos((double)in[i], &ds, &dc);
    out[i] = s * s + c * c + (float)(ds * ds + dc * dc) + __log2f(4.0f) + __log10f(100.0f) + __exp10f(0.0f);
}
void launchAll(const float* in, float* out, int n) { fast<<<(n + 63) / 64, 64>>>(in, out, n); }
"""


def test_the_fast_intrinsics_a_gpu_builds_are_there_on_the_emulator(tmp_path):
    """A correct kernel that calls __sincosf was graded `crashed` ("undefined symbol: __sincosf")
    on the emulator: a fault of the emulator's, never the student's."""
    dll = build(tmp_path, FAST_INTRINSICS, fibers=False)
    x = torch.randn(100)
    code, out = run(dll, x, 100)
    assert code == 0 and torch.allclose(out, torch.full((100,), 7.0), atol=1e-5)
