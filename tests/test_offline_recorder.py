"""The recorder without a GPU (run/child/recorder.py's OfflineRecordingBackend), run for real on
this machine: nvcc builds the submission for the GPU, and the recorder, which never opens the
device, records its launcher's stream (launches, memsets, copies, workspace, syncs). What it
cannot answer without a GPU sends the grade to the GPU's recorder (replaying.needs_gpu); its wall
lets no driver call through. On a GPU, test_gpu.py compares its recordings with the GPU's."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.core.backend import CUDA
from grader.core.contract import OfflinePart, RecordingFrame
from grader.core.source import read_submission
from grader.run.replaying import needs_gpu, record, recording_refusals
from grader.run.sandbox import CappedOutput, ChildRun, ChildSpec, Worker
from grader.toolchain.build import (build_driver_stand_in, build_guard, build_submission, device_code,
                                    kernel_parameters)
from tests.test_wall import KERNEL as WALL_KERNEL, MARK, payload_source

pytestmark = pytest.mark.skipif(not shutil.which("nvcc") or not (shutil.which("cc") or shutil.which("gcc")),
                                reason="needs nvcc and a C compiler")

KERNEL = """
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>
""" + WALL_KERNEL
LAUNCH = "    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);\n"


def launcher(body: str, launch: str = LAUNCH, extra: str = "") -> str:
    return (KERNEL + extra + "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, "
            "int cols, cudaStream_t stream) {\n" + body + "\n" + launch + "}\n")


def record_offline(rubric, write_cu, text: str, name: str = "offline.cu") -> tuple[ChildRun, object]:
    """Build text for the GPU and record its launcher without one: the run and its recording."""
    from tests.jobs import child_job

    path = write_cu(text, name)
    sub = read_submission(path, rubric.kernel.launcher_name, rubric.kernel.signature)
    build = build_submission(sub, rubric, backend=CUDA, arch="sm_90")
    assert build.ok, build.log
    params = kernel_parameters(device_code(build.library))
    # The recorder without a GPU never loads the reference library: no path of one is needed.
    job, _ = child_job(rubric, backend=CUDA, build=build, has_launcher=sub.has_launcher,
                       reference=SimpleNamespace(library=Path("/nonexistent/reference.so")), guard=build_guard())
    with Worker(ChildSpec(backend=CUDA, output_cap=1 << 16, cpu_limit_s=30, device="0", gpu=False)) as recorder:
        run = record(recorder, job, time_limit_s=30, offline=OfflinePart(params, str(build_driver_stand_in())))
    recording = next((f.data.recording for f in run.frames if isinstance(f.data, RecordingFrame)), None)
    return run, recording


def _ops(recording) -> list:
    return [op for ops in recording.ops for op in ops]


def test_a_launchers_whole_stream_is_recorded_without_a_gpu(rubric, write_cu):
    body = """
    int device = -1, count = 0;
    cudaGetDevice(&device);
    cudaSetDevice(0);
    cudaGetDeviceCount(&count);
    if (device != 0 || count != 1) return;
    float* scratch = nullptr;
    if (cudaMalloc(&scratch, 4096) != cudaSuccess) return;
    cudaMemsetAsync(scratch, 0, 4096, stream);
    static const float host[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    cudaMemcpyAsync(scratch, host, sizeof host, cudaMemcpyHostToDevice, stream);
    cudaStreamSynchronize(stream);
    cudaDeviceSynchronize();
    if (cudaGetLastError() != cudaSuccess || cudaPeekAtLastError() != cudaSuccess) return;
    cudaFree(scratch);"""
    run, recording = record_offline(rubric, write_cu, launcher(body))
    assert needs_gpu(run) == "" and run.returncode != 96 and not run.blocked
    assert recording is not None and recording_refusals(recording, "launchBiasGeluFused", api=CUDA.api) == []
    kinds = [op.kind for op in recording.ops[0]]
    assert kinds == ["alloc", "memset", "copy", "free", "launch"], kinds
    launch = recording.ops[0][4]
    assert launch.kernel == "_Z13biasGeluFusedPKfS0_Pfm" and launch.block == [256, 1, 1]
    assert launch.thread == "caller" and launch.stream == "given" and not launch.error
    # the parameters as the kernel sees them: three stand-in pointers and the column count
    x, bias, out, cols = struct.unpack("<QQQQ", bytes.fromhex(launch.args))
    assert all(0x7E0000000000 <= p < 0x7E0000000000 + (1 << 40) for p in (x, bias, out))
    assert launch.grid[0] == (cols + 255) // 256
    copy = recording.ops[0][2]
    assert copy.direction == "h2d" and bytes.fromhex(copy.args) == struct.pack("<4f", 1, 2, 3, 4)


def test_every_launch_form_names_its_kernel_and_copies_its_parameters(rubric, write_cu):
    extra = """
struct Shape { int rows; double scale; char tag; size_t cols; };
__global__ void touch(Shape s, float* out) { if (threadIdx.x == 0 && s.tag == 'x') out[0] = s.scale; }
template <int N> __global__ void nothing() {}
"""
    launch = """    Shape s{rows, 0.5, 'x', (size_t)cols};
    void* args[] = {&s, &out};
    cudaLaunchKernel((const void*)touch, dim3(1), dim3(32), args, 0, stream);
    nothing<3><<<1, 1, 0, stream>>>();
""" + LAUNCH
    run, recording = record_offline(rubric, write_cu, launcher("", launch=launch, extra=extra), "forms.cu")
    assert needs_gpu(run) == "", run.stderr.text()
    ops = recording.ops[0]
    assert [op.kernel for op in ops] == ["_Z5touch5ShapePf", "_Z7nothingILi3EEvv", "_Z13biasGeluFusedPKfS0_Pfm"]
    shape = bytes.fromhex(ops[0].args)
    assert len(shape) == 40              # Shape (32 bytes, aligned to 8) then the pointer
    assert struct.unpack_from("<i", shape, 0)[0] > 0 and struct.unpack_from("<d", shape, 8)[0] == 0.5
    assert shape[16:17] == b"x" and ops[1].args == ""


def test_cudaLaunchKernelEx_is_recorded_as_a_launch_and_refused_only_with_attributes(rubric, write_cu):
    """The C++ cudaLaunchKernelEx (its C form underneath), on the given stream and per thread: a
    plain launch with no attribute; with one (an L2 access policy window here) a launch the
    replay cannot make, refused with the attribute named."""
    config = """    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((cols + 255) / 256, rows);
    config.blockDim = dim3(256);
    config.stream = stream;
"""
    plain = config + "    cudaLaunchKernelEx(&config, biasGeluFused, x, bias, out, (size_t)cols);\n"
    run, recording = record_offline(rubric, write_cu, launcher("", launch=plain), "ex.cu")
    assert needs_gpu(run) == "", run.stderr.text()
    [op] = recording.ops[0]                   # the first call's one launch
    assert all(len(ops) == 1 for ops in recording.ops)
    assert (op.kind, op.kernel, op.stream, op.block) == ("launch", "_Z13biasGeluFusedPKfS0_Pfm", "given", [256, 1, 1])
    assert op.grid[1] > 1 and recording_refusals(recording, "launchBiasGeluFused", api=CUDA.api) == []
    x, bias, out, cols = struct.unpack("<QQQQ", bytes.fromhex(op.args))
    assert op.grid[0] == (cols + 255) // 256

    window = config + """    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeAccessPolicyWindow;
    attr[0].val.accessPolicyWindow.base_ptr = (void*)x;
    attr[0].val.accessPolicyWindow.num_bytes = 1 << 20;
    attr[0].val.accessPolicyWindow.hitRatio = 1.0f;
    attr[0].val.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr[0].val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    config.attrs = attr;
    config.numAttrs = 1;
    cudaLaunchKernelEx(&config, biasGeluFused, x, bias, out, (size_t)cols);
"""
    run, recording = record_offline(rubric, write_cu, launcher("", launch=window), "ex_attr.cu")
    assert needs_gpu(run) == "", run.stderr.text()
    [op] = recording.ops[0]
    assert op.kind == "launch_attributes" and op.value == 1
    assert op.attribute == 1             # cudaLaunchAttributeAccessPolicyWindow
    [reason] = recording_refusals(recording, "launchBiasGeluFused", api=CUDA.api)
    assert "cudaLaunchKernelEx and 1 launch attribute (the first: cudaLaunchAttributeID 1)" in reason
    assert "numAttrs 0" in reason


@pytest.mark.parametrize("body, call", [
    ("    cudaFuncSetAttribute((const void*)biasGeluFused, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024);",
     "cudaFuncSetAttribute"),
    ("    cudaFuncSetCacheConfig((const void*)biasGeluFused, cudaFuncCachePreferL1);", "cudaFuncSetCacheConfig"),
    ("    cudaSetDevice(1);", "cudaSetDevice"),
    ("    cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(0x1234));", "cudaStreamSynchronize on a stream"),
])
def test_what_only_the_gpu_answers_sends_the_launcher_to_the_gpus_recorder(rubric, write_cu, body, call):
    run, recording = record_offline(rubric, write_cu, launcher(body), f"gpu-{call.split()[0]}.cu")
    assert run.returncode == 96 and recording is None
    why = needs_gpu(run)
    assert call in why and "only on the GPU" in why


def test_the_recorders_wall_lets_no_driver_call_through(rubric, write_cu):
    # Every request to the GPU's driver is an ioctl: one on any descriptor is trapped, and the
    # grade goes to the GPU's recorder (in its lane), which judges the launcher as before.
    body = '    int fd = open("/dev/null", O_RDONLY); if (fd >= 0) ioctl(fd, 0xC020462A, nullptr);'
    run, _ = record_offline(rubric, write_cu, launcher(body), "ioctl.cu")
    assert [b.name for b in run.blocked] == ["ioctl"]
    assert "ioctl" in needs_gpu(run) and "driver" in needs_gpu(run)


def test_a_terminals_questions_still_pass_the_recorders_wall(rubric, write_cu):
    body = '    if (isatty(1)) printf("a terminal\\n"); int n = 0; ioctl(0, FIONREAD, &n); printf("asked\\n");'
    run, recording = record_offline(rubric, write_cu, launcher(body), "tty.cu")
    assert not run.blocked and needs_gpu(run) == "" and recording is not None
    assert "asked" in run.stdout.text()


@pytest.mark.parametrize("payload", ["system", "fork", "socket", "write a file", "raw syscall", "replace the guard"])
def test_the_recorder_without_a_gpu_keeps_the_whole_wall(rubric, write_cu, payload):
    run, recording = record_offline(rubric, write_cu, payload_source(payload), f"wall-{payload.replace(' ', '-')}.cu")
    # reported and ended by the wall's handler (system() traps inside its vfork: SIGSYS, no report);
    # recorded again on the GPU, whose wall stops it the same way and judges it as before
    assert (run.blocked or run.signal_name == "SIGSYS") and recording is None
    assert needs_gpu(run) != ""
    assert not Path(MARK.format(payload.replace(" ", "-"))).exists()


def _run(**kw) -> ChildRun:
    base = dict(frames=[], returncode=0, timed_out=False, seconds=0.1, stdout=CappedOutput(64), stderr=CappedOutput(256))
    base.update(kw)
    return ChildRun(**base)


def test_only_what_the_gpu_could_answer_otherwise_is_recorded_again():
    said = CappedOutput(256)
    said.feed(b"grader: the launcher called cudaFuncSetAttribute, which the recorder answers only on the GPU\n")
    assert needs_gpu(_run(returncode=96, stderr=said)).startswith("the launcher called cudaFuncSetAttribute")
    assert needs_gpu(_run(returncode=96)) == "the launcher called what only the GPU answers"
    assert "SIGSEGV" in needs_gpu(_run(returncode=-11, signal_name="SIGSEGV"))
    piled = CappedOutput(256)
    piled.feed(b"terminate called after throwing an instance of 'std::system_error'\n"
               b"  what():  Resource temporarily unavailable\n")
    assert needs_gpu(_run(returncode=-6, signal_name="SIGABRT", stderr=piled)) == ""     # THREADS_RAN_OUT's
    assert "SIGSYS" in needs_gpu(_run(returncode=-31, signal_name="SIGSYS"))
    # the parent's kill (a forged frame), a launcher that never returns and a clean run stand
    for run in (_run(returncode=-9, signal_name="SIGKILL"), _run(returncode=None, timed_out=True), _run()):
        assert needs_gpu(run) == ""


def _nv_info(params: list[tuple[int, int, int]], bank: int | None) -> bytes:
    """A .nv.info.<kernel> section: KPARAM_INFO records (ordinal, offset, size), a half-word
    record, and the parameter bank's size."""
    out = struct.pack("<BBH", 3, 0x1B, 0xFF)
    for ordinal, offset, size in params:
        out += struct.pack("<BBHIHHI", 4, 0x17, 12, 0, ordinal, offset, (size << 18) | 0x1F000)
    if bank is not None:
        out += struct.pack("<BBHIHH", 4, 0x0A, 8, 9, 0x210, bank)
    return out


def test_a_kernels_parameter_layout_is_read_only_where_it_adds_up():
    from grader.toolchain.build import _nv_info_layout

    assert _nv_info_layout(_nv_info([(1, 8, 4), (0, 0, 8)], 12)) == [[0, 8], [8, 4]]
    assert _nv_info_layout(_nv_info([], None)) == []
    assert _nv_info_layout(_nv_info([(0, 0, 8), (1, 8, 4)], 16)) is None       # not the bank's size
    assert _nv_info_layout(_nv_info([(0, 0, 8), (2, 8, 4)], 12)) is None       # an ordinal missing
    assert _nv_info_layout(b"\x09\x17\x00\x00") is None                        # a format it does not know


def test_the_parameter_layouts_come_from_the_built_device_code(rubric, write_cu):
    extra = "struct Big { double d[40]; int n; };\n__global__ void big(Big b, const float* p, char c) {}\n"
    path = write_cu(launcher("", extra=extra), "layouts.cu")
    sub = read_submission(path, rubric.kernel.launcher_name, rubric.kernel.signature)
    build = build_submission(sub, rubric, backend=CUDA, arch="sm_90")
    layouts = kernel_parameters(device_code(build.library))
    assert layouts["_Z13biasGeluFusedPKfS0_Pfm"] == [[0, 8], [8, 8], [16, 8], [24, 8]]
    assert layouts["_Z3big3BigPKfc"] == [[0, 328], [328, 8], [336, 1]]


@pytest.mark.parametrize("opener, said", [
    ("dlopen", "dlopen of the CUDA driver"),
    # a dlopen the link does not see finds the stand-in driver, whose every entry point says so
    ("reinterpret_cast<void* (*)(const char*, int)>(dlsym(RTLD_DEFAULT, \"dlopen\"))",
     "the driver's cuStreamCreateWithPriority"),
])
@pytest.mark.parametrize("open_mode", ["RTLD_NOW | RTLD_NOLOAD", "RTLD_NOW"])
def test_a_launcher_that_finds_the_driver_itself_is_recorded_on_the_gpu(rubric, write_cu, open_mode, opener, said):
    # driver_stream_priority.cu's way: libcuda found with dlopen (already loaded, on the GPU), a
    # stream made with the driver. Without a GPU that sends the launcher to the GPU's recorder
    # (where that stream is refused).
    body = f"""
    auto opening = {opener};
    if (void* cu = opening("libcuda.so.1", {open_mode})) {{
        using Create = int (*)(void**, unsigned, int);
        if (auto create = reinterpret_cast<Create>(dlsym(cu, "cuStreamCreateWithPriority"))) {{
            void* s = nullptr;
            create(&s, 1, -5);
        }}
    }}"""
    run, recording = record_offline(rubric, write_cu, "#include <dlfcn.h>\n" + launcher(body), "driver.cu")
    assert run.returncode == 96 and recording is None
    assert said in needs_gpu(run), run.stderr.text()


def test_the_stand_in_driver_has_every_entry_point_the_headers_name():
    from grader.toolchain.build import driver_entry_points

    header = """
CUresult CUDAAPI cuInit(unsigned int Flags);
#define cuMemAlloc cuMemAlloc_v2
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);
    #define cuLaunchKernel __CUDA_API_PTSZ(cuLaunchKernel)
    #define cuMemcpy __CUDA_API_PTDS(cuMemcpy)
typedef struct CUctx_st *CUcontext;
"""
    assert driver_entry_points([header]) == ["cuInit", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuMemAlloc",
                                             "cuMemAlloc_v2", "cuMemcpy", "cuMemcpy_ptds"]
    built = build_driver_stand_in()
    assert built is not None and built.name == "libcuda.so.1"


def test_a_device_lambda_handed_to_a_deduced_template_kernel_is_recorded_without_a_gpu(rubric, write_cu):
    """Code brought from elsewhere (tests/test_build.py's BROUGHT: nvcc's --extended-lambda): the
    closure is the kernel's last parameter, one byte, and the kernel is named as nvcc registers it."""
    from tests.test_build import BROUGHT

    run, recording = record_offline(rubric, write_cu, BROUGHT, "brought.cu")
    assert needs_gpu(run) == "", run.stderr.text()
    (launch,) = recording.ops[0]
    assert launch.kernel.startswith("_Z7mapBiasIZ19launchBiasGeluFused") and launch.block == [256, 1, 1]
    x, bias, out, rows, cols = struct.unpack_from("<QQQii", bytes.fromhex(launch.args))
    assert len(bytes.fromhex(launch.args)) == 33 and launch.grid == [(cols + 255) // 256, rows, 1]


def test_host_memory_never_lies_in_the_stand_in_window_so_an_upload_from_it_is_a_host_copy(rubric, write_cu):
    """Where address randomisation put a launcher's host memory inside the stand-in window (seen on
    an H200 host: a static's copy was refused as 'outside every buffer'), its upload was taken for
    device memory. The recorder maps the window's free stretches to nothing before the library
    loads, so memory the launcher gets lands elsewhere: here it asks for an address inside the
    window, as randomisation could give it, and its table's upload is a host-to-device copy."""
    extra = "#include <sys/mman.h>\n"
    body = """
    static float* table = nullptr;
    if (!table) {
        void* at = mmap((void*)0x7E8000000000ULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (at == MAP_FAILED) return;
        table = static_cast<float*>(at);
        table[0] = 1.0f; table[1] = 2.0f;
    }
    static char where[32];
    snprintf(where, sizeof where, "table at %p\\n", (void*)table);
    write(2, where, strlen(where));
    float* scratch = nullptr;
    if (cudaMalloc(&scratch, 4096) != cudaSuccess) return;
    cudaMemcpyAsync(scratch, table, 2 * sizeof(float), cudaMemcpyHostToDevice, stream);"""
    run, recording = record_offline(rubric, write_cu, launcher(body, extra=extra), "window.cu")
    assert needs_gpu(run) == "", run.stderr.text()
    at = int(run.stderr.text().split("table at ")[1].split()[0], 16)
    assert not (0x7E0000000000 <= at < 0x7E0000000000 + (1 << 40)), hex(at)      # put elsewhere
    assert recording_refusals(recording, "launchBiasGeluFused", api=CUDA.api) == []
    copy = next(op for op in _ops(recording) if op.kind == "copy")
    assert copy.direction == "h2d" and bytes.fromhex(copy.args) == struct.pack("<2f", 1, 2)


def test_the_windows_free_stretches_are_read_from_the_maps():
    from grader.run.child.replay import STAND_IN_BASE as B, STAND_IN_SPAN as S, window_gaps

    maps = (f"{B - 0x1000:x}-{B + 0x2000:x} r-xp 0 00:00 0 /lib/a.so\n"
            f"{B + 0x10000:x}-{B + 0x20000:x} rw-p 0 00:00 0\n"
            f"{B + S:x}-{B + S + 0x1000:x} rw-p 0 00:00 0\n")
    assert window_gaps(maps) == [(B + 0x2000, B + 0x10000), (B + 0x20000, B + S)]
    assert window_gaps("") == [(B, B + S)]
