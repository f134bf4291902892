// grader's CPU emulation of the CUDA C++ that elementwise kernels use.
//
// The grader compiles a student's .cu with `g++ -x c++ -include cuda_shim.h`
// after rewriting `kernel<<<grid, block, shmem, stream>>>(args)` into
// `GRADER_NAMED_LAUNCH(kernel, grid, block, shmem, stream)(args)` (a kernel
// written with its template arguments: `::grader::launch(kernel, ...)(args)`) and
// `extern __shared__ T name[];` into a pointer to the block's dynamic shared
// memory. Everything else is provided here.
//
// Execution model. Blocks run one after another on one OS thread, except in
// a large launch of a file that shares nothing between threads but global
// memory (see Spreading, below). When the
// file uses no block or warp collective (the grader scans for them and
// defines GRADER_EMU_FIBERS otherwise), each thread of a block is a plain
// call of the kernel body. With collectives, each thread of a block is a
// fiber: a stack of its own, entered once through makecontext/swapcontext
// and switched afterwards with _setjmp/_longjmp (no signal-mask system call
// per switch). A barrier marks the fiber waiting and yields to the
// scheduler, which resumes fibers round-robin until every live thread has
// arrived. Threads that have returned do not count towards a barrier.
//
// The order of blocks and of threads inside a block can be reversed
// (grader_emu_set_reverse), so that a result that depends on the order
// (a missing barrier, a race) shows up as two different outputs.
//
// Faults. grader_guarded() installs SIGSEGV/SIGBUS/SIGFPE handlers on an
// alternate stack; a fault inside a launch records the faulting address,
// whether it was a write and the program counter, and jumps back out, so
// the launch returns an error and the Python side decides what the address
// was (past an input, past the output, or wild).
//
// Spreading. A build with GRADER_EMU_PARALLEL (the grader defines it when the
// file has no barrier, warp collective, __shared__ array, atomic, device
// malloc, printf or clock: nothing that lets one thread see another but the
// global memory a correct kernel writes once) runs a launch of at least
// kSpreadFrom threads, in order, on up to grader_emu_set_threads() OS threads:
// each takes chunks of consecutive blocks from a shared counter. The thread
// and block indices are then thread_local, and each OS thread has its own
// fault recovery; each records its own first fault, and the one reported is the fault in the
// earliest block in launch order: the one a launch on one OS thread meets first, so that the
// verdict never depends on how many cores ran it (every block before it was taken, and runs to
// its chunk's end or its own fault, before the others stop).
#pragma once

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <csetjmp>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// ---------------------------------------------------------------------------
// Qualifiers
// ---------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
// __noinline__ is no macro here: the C++ library's own headers write __attribute__((__noinline__))
// (GCC 12's <memory>), which such a macro would break; the rewrite turns the student's into
// __attribute__((noinline)) (core/emulation.py).
// A __shared__ variable is a function static in a section of its own, so that the shim finds every
// one (the linker's __start_/__stop_ symbols) and fills them with kSharedPoisonBits before each block:
// what a block reads of its shared memory before writing it is NaN, as it is garbage on a GPU, never
// the zeros of a static or the last block's values.
#define __shared__ static __attribute__((section("grader_shared")))
#define __constant__
#define __managed__
#define __launch_bounds__(...)
// A GNU attribute, not alignas: `__shared__ __align__(16) float t[64];` puts it after `static`, where
// g++ refuses a standard attribute ("standard attributes in middle of decl-specifiers").
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
#define __CUDACC_EMULATED__ 1

// ---------------------------------------------------------------------------
// Built-in types
// ---------------------------------------------------------------------------
struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define GRADER_VEC2(T, N) struct alignas(2 * sizeof(T)) N { T x, y; }; \
    inline N make_##N(T a, T b) { return N{a, b}; }
#define GRADER_VEC3(T, N) struct N { T x, y, z; }; \
    inline N make_##N(T a, T b, T c) { return N{a, b, c}; }
#define GRADER_VEC4(T, N) struct alignas(4 * sizeof(T) > 16 ? 16 : 4 * sizeof(T)) N { T x, y, z, w; }; \
    inline N make_##N(T a, T b, T c, T d) { return N{a, b, c, d}; }
GRADER_VEC2(float, float2) GRADER_VEC3(float, float3) GRADER_VEC4(float, float4)
GRADER_VEC2(int, int2) GRADER_VEC3(int, int3) GRADER_VEC4(int, int4)
GRADER_VEC2(unsigned int, uint2) GRADER_VEC4(unsigned int, uint4)
GRADER_VEC2(double, double2)
inline uint3 make_uint3(unsigned a, unsigned b, unsigned c) { return uint3{a, b, c}; }
#undef GRADER_VEC2
#undef GRADER_VEC3
#undef GRADER_VEC4

// ---------------------------------------------------------------------------
// Runtime API subset
// ---------------------------------------------------------------------------
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorLaunchFailure = 719,
};
typedef cudaError_t cudaError;

// The indices are thread_local only where a launch may be spread over OS threads (the build
// then selects TLS descriptors, -mtls-dialect=gnu2: a few instructions an access).
#ifdef GRADER_EMU_PARALLEL
#define GRADER_EMU_TLS thread_local
#else
#define GRADER_EMU_TLS
#endif

namespace grader {
GRADER_EMU_TLS inline uint3 g_threadIdx, g_blockIdx;
inline dim3 g_blockDim, g_gridDim;
inline cudaError_t g_last_error = cudaSuccess;
inline bool g_reverse = false;
inline unsigned char* g_dynamic_shared = nullptr;
inline size_t g_dynamic_shared_size = 0;
inline void* dynamic_shared() { return g_dynamic_shared; }
[[noreturn]] void emu_abort(const char* why);
}  // namespace grader

#define threadIdx (::grader::g_threadIdx)
#define blockIdx (::grader::g_blockIdx)
#define blockDim (::grader::g_blockDim)
#define gridDim (::grader::g_gridDim)
constexpr int warpSize = 32;

inline cudaError_t cudaGetLastError() {
    cudaError_t e = grader::g_last_error;
    grader::g_last_error = cudaSuccess;
    return e;
}
inline cudaError_t cudaPeekAtLastError() { return grader::g_last_error; }
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        default: return "unspecified launch failure";
    }
}
inline const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        default: return "cudaErrorLaunchFailure";
    }
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
#define cudaStreamLegacy (reinterpret_cast<cudaStream_t>(0x1))
#define cudaStreamPerThread (reinterpret_cast<cudaStream_t>(0x2))

// ---------------------------------------------------------------------------
// Device queries: one emulated device shaped like an H200 (132 SMs, compute
// capability 9.0, 1024 threads a block, 2048 a multiprocessor, 228 KiB of
// shared memory a multiprocessor, 60 MiB of L2), so a launcher that sizes its
// grid from the hardware gets the grid it would get on the course's GPU.
// ---------------------------------------------------------------------------
namespace grader {
constexpr int kEmuSMs = 132, kEmuThreadsPerSM = 2048, kEmuMaxBlocksPerSM = 32;
}
enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxBlockDimX = 2, cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4, cudaDevAttrMaxGridDimX = 5, cudaDevAttrMaxGridDimY = 6, cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrMaxSharedMemoryPerBlock = 8, cudaDevAttrTotalConstantMemory = 9, cudaDevAttrWarpSize = 10,
    cudaDevAttrMaxRegistersPerBlock = 12, cudaDevAttrClockRate = 13, cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrConcurrentKernels = 31, cudaDevAttrMemoryClockRate = 36, cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrL2CacheSize = 38, cudaDevAttrMaxThreadsPerMultiProcessor = 39, cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76, cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxRegistersPerMultiprocessor = 82, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
    cudaDevAttrMaxBlocksPerMultiprocessor = 106, cudaDevAttrMaxPersistingL2CacheSize = 108,
};
struct cudaDeviceProp {
    char name[256] = "grader CPU emulator (H200-like)";
    size_t totalGlobalMem = 141ull << 30, sharedMemPerBlock = 48 << 10, sharedMemPerMultiprocessor = 228 << 10;
    size_t sharedMemPerBlockOptin = 227 << 10, totalConstMem = 64 << 10, memPitch = 2147483647;
    int regsPerBlock = 65536, regsPerMultiprocessor = 65536, warpSize = 32, maxThreadsPerBlock = 1024;
    int maxThreadsDim[3] = {1024, 1024, 64}, maxGridSize[3] = {2147483647, 65535, 65535};
    int clockRate = 1980000, memoryClockRate = 3201000, memoryBusWidth = 6144, l2CacheSize = 60 << 20;
    int persistingL2CacheMaxSize = 0, major = 9, minor = 0, multiProcessorCount = grader::kEmuSMs;
    int maxThreadsPerMultiProcessor = grader::kEmuThreadsPerSM, maxBlocksPerMultiProcessor = grader::kEmuMaxBlocksPerSM;
    int concurrentKernels = 1, ECCEnabled = 1, integrated = 0, canMapHostMemory = 1, computeMode = 0;
    int asyncEngineCount = 2, unifiedAddressing = 1, managedMemory = 1, cooperativeLaunch = 1;
};
struct cudaFuncAttributes {
    size_t sharedSizeBytes = 0, constSizeBytes = 0, localSizeBytes = 0;
    int maxThreadsPerBlock = 1024, numRegs = 32, ptxVersion = 90, binaryVersion = 90, cacheModeCA = 0;
    int maxDynamicSharedSizeBytes = 48 << 10, preferredShmemCarveout = -1;
};
enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
enum cudaFuncCache { cudaFuncCachePreferNone = 0, cudaFuncCachePreferShared = 1, cudaFuncCachePreferL1 = 2,
                     cudaFuncCachePreferEqual = 3 };
#define cudaOccupancyDefault 0x00
#define cudaOccupancyDisableCachingOverride 0x01
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) { *p = cudaDeviceProp{}; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
    const cudaDeviceProp p{};
    switch (a) {
        case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: *v = p.maxThreadsDim[0]; break;
        case cudaDevAttrMaxBlockDimY: *v = p.maxThreadsDim[1]; break;
        case cudaDevAttrMaxBlockDimZ: *v = p.maxThreadsDim[2]; break;
        case cudaDevAttrMaxGridDimX: *v = p.maxGridSize[0]; break;
        case cudaDevAttrMaxGridDimY: *v = p.maxGridSize[1]; break;
        case cudaDevAttrMaxGridDimZ: *v = p.maxGridSize[2]; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = static_cast<int>(p.sharedMemPerBlock); break;
        case cudaDevAttrTotalConstantMemory: *v = static_cast<int>(p.totalConstMem); break;
        case cudaDevAttrWarpSize: *v = p.warpSize; break;
        case cudaDevAttrMaxRegistersPerBlock: *v = p.regsPerBlock; break;
        case cudaDevAttrMaxRegistersPerMultiprocessor: *v = p.regsPerMultiprocessor; break;
        case cudaDevAttrClockRate: *v = p.clockRate; break;
        case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
        case cudaDevAttrConcurrentKernels: *v = 1; break;
        case cudaDevAttrMemoryClockRate: *v = p.memoryClockRate; break;
        case cudaDevAttrGlobalMemoryBusWidth: *v = p.memoryBusWidth; break;
        case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p.maxThreadsPerMultiProcessor; break;
        case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = static_cast<int>(p.sharedMemPerMultiprocessor); break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = static_cast<int>(p.sharedMemPerBlockOptin); break;
        case cudaDevAttrMaxBlocksPerMultiprocessor: *v = p.maxBlocksPerMultiProcessor; break;
        case cudaDevAttrMaxPersistingL2CacheSize: *v = 0; break;
        default: *v = 0; return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int* v) { *v = 13000; return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int* v) { *v = 13000; return cudaSuccess; }
template <class F> inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F) {
    *a = cudaFuncAttributes{};
    return cudaSuccess;
}
template <class F> inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
template <class F> inline cudaError_t cudaFuncSetCacheConfig(F, cudaFuncCache) { return cudaSuccess; }
// Occupancy as the GPU would answer for a light elementwise kernel: limited by threads a
// multiprocessor (2048) and blocks a multiprocessor (32), not by registers or shared memory.
template <class F> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        int* blocks, F, int blockSize, size_t = 0, unsigned = 0) {
    if (blockSize <= 0 || blockSize > 1024) { *blocks = 0; return cudaErrorInvalidValue; }
    const int warps = (blockSize + 31) / 32;
    *blocks = std::min(grader::kEmuThreadsPerSM / (warps * 32), grader::kEmuMaxBlocksPerSM);
    return cudaSuccess;
}
template <class F> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, F f, int blockSize,
                                                                                    size_t smem = 0) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, blockSize, smem, 0);
}
template <class F> inline cudaError_t cudaOccupancyMaxPotentialBlockSize(int* minGrid, int* blockSize, F, size_t = 0,
                                                                         int limit = 0) {
    const int b = (limit > 0 && limit < 1024) ? limit / 32 * 32 : 1024;
    *blockSize = b > 0 ? b : limit;
    *minGrid = grader::kEmuSMs * std::min(grader::kEmuThreadsPerSM / *blockSize, grader::kEmuMaxBlocksPerSM);
    return cudaSuccess;
}
template <class F, class S> inline cudaError_t cudaOccupancyMaxPotentialBlockSizeVariableSMem(
        int* minGrid, int* blockSize, F f, S, int limit = 0) {
    return cudaOccupancyMaxPotentialBlockSize(minGrid, blockSize, f, 0, limit);
}

// ---------------------------------------------------------------------------
// Math and intrinsics
// ---------------------------------------------------------------------------
// The constants of math_constants.h that kernels use (the rewrite drops its #include).
#define CUDART_INF_F __int_as_float(0x7f800000)
#define CUDART_NAN_F __int_as_float(0x7fffffff)
#define CUDART_INF (static_cast<double>(CUDART_INF_F))
#define CUDART_NAN (static_cast<double>(CUDART_NAN_F))
#define CUDART_MAX_NORMAL_F FLT_MAX
#define CUDART_MIN_DENORM_F __int_as_float(0x00000001)
#define CUDART_ZERO_F 0.0f
#define CUDART_ONE_F 1.0f
#define CUDART_ZERO 0.0
#define CUDART_ONE 1.0
#define CUDART_SQRT_HALF 0.70710678118654752440
#define CUDART_SQRT_TWO 1.41421356237309504880
#define CUDART_THIRD 0.33333333333333333333
#define CUDART_TWOTHIRD 0.66666666666666666667
#define CUDART_PI 3.14159265358979323846
#define CUDART_PIO2 1.57079632679489661923
#define CUDART_PIO4 0.78539816339744830962
#define CUDART_3PIO4 2.35619449019234492885
#define CUDART_2_OVER_PI 0.63661977236758134308
#define CUDART_SQRT_2OPI 0.79788456080286535588
#define CUDART_SQRT_2PI 2.50662827463100050242
#define CUDART_SQRT_PIO2 1.25331413731550025121
#define CUDART_L2E 1.44269504088896340736
#define CUDART_L2T 3.32192809488736234787
#define CUDART_LG2 0.30102999566398119521
#define CUDART_LGE 0.43429448190325182765
#define CUDART_LN2 0.69314718055994530942
#define CUDART_LNT 2.30258509299404568402
#define CUDART_LNPI 1.14472988584940017414
#define CUDART_SQRT_HALF_F 0.70710678118654752440f
#define CUDART_SQRT_TWO_F 1.41421356237309504880f
#define CUDART_THIRD_F 0.33333333333333333333f
#define CUDART_PI_F 3.14159265358979323846f
#define CUDART_PIO2_F 1.57079632679489661923f
#define CUDART_PIO4_F 0.78539816339744830962f
#define CUDART_3PIO4_F 2.35619449019234492885f
#define CUDART_2_OVER_PI_F 0.63661977236758134308f
#define CUDART_SQRT_2_OVER_PI_F 0.79788456080286535588f
#define CUDART_L2E_F 1.44269504088896340736f
#define CUDART_L2T_F 3.32192809488736234787f
#define CUDART_LG2_F 0.30102999566398119521f
#define CUDART_LGE_F 0.43429448190325182765f
#define CUDART_LN2_F 0.69314718055994530942f
#define CUDART_LNT_F 2.30258509299404568402f
#define CUDART_LNPI_F 1.14472988584940017414f
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rz(float a, float b) { return a + b; }
inline float __fmul_rz(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float normcdff(float x) { return 0.5f * std::erfc(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752); }
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
// The fast intrinsics CUDA's math API documents beside __sinf and __expf (a kernel using one was
// graded `crashed`, "undefined symbol: __sincosf", on the emulator while it compiles for a GPU).
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline void sincos(double x, double* s, double* c) { *s = std::sin(x); *c = std::cos(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __mulhi(int a, int b) { return static_cast<int>((static_cast<long long>(a) * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) {
    return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline long long __mul64hi(long long a, long long b) {
    return static_cast<long long>((static_cast<__int128>(a) * b) >> 64);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline float rhypotf(float x, float y) { return 1.0f / std::hypot(x, y); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline float sinpif(float x) { return static_cast<float>(std::sin(CUDART_PI * static_cast<double>(x))); }
inline float cospif(float x) { return static_cast<float>(std::cos(CUDART_PI * static_cast<double>(x))); }
inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
// exp(x^2) erfc(x), in double; past where exp(x^2) overflows, its asymptotic series.
inline double erfcx(double x) {
    if (x < 26.0) return std::exp(x * x) * std::erfc(x);
    const double r = 1.0 / (x * x);
    return (1.0 - 0.5 * r + 0.75 * r * r) / (x * 1.7724538509055160273);
}
inline float erfcxf(float x) { return static_cast<float>(erfcx(x)); }
#define __builtin_assume(cond) ((void)0)
using std::min;
using std::max;
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
inline void __nanosleep(unsigned) {}
inline long long clock64() { static long long t = 0; return t += 1; }
inline unsigned __activemask() { return 0xffffffffu; }

// ---------------------------------------------------------------------------
// Atomics: a file that uses one is never spread over OS threads (see Spreading),
// so blocks and threads never run at the same time and these are plain
// read-modify-writes, through volatile so that (as on a GPU) each one is an
// observable side effect the compiler cannot merge, hoist or delete.
// ---------------------------------------------------------------------------
#define GRADER_RMW(name, expr)                                                   \
    template <class T, class U> inline T name(T* p, U v) {                      \
        volatile T* vp = p;                                                      \
        T o = *vp;                                                               \
        *vp = static_cast<T>(expr);                                              \
        return o;                                                                \
    }
GRADER_RMW(atomicAdd, o + v)
GRADER_RMW(atomicSub, o - v)
GRADER_RMW(atomicExch, v)
GRADER_RMW(atomicMax, o > static_cast<T>(v) ? o : static_cast<T>(v))
GRADER_RMW(atomicMin, o < static_cast<T>(v) ? o : static_cast<T>(v))
GRADER_RMW(atomicAnd, o & v)
GRADER_RMW(atomicOr, o | v)
GRADER_RMW(atomicXor, o ^ v)
#undef GRADER_RMW
template <class T, class U, class V> inline T atomicCAS(T* p, U cmp, V v) {
    volatile T* vp = p;
    T o = *vp;
    if (o == static_cast<T>(cmp)) *vp = static_cast<T>(v);
    return o;
}
inline unsigned atomicInc(unsigned* p, unsigned lim) {
    volatile unsigned* vp = p;
    unsigned o = *vp;
    *vp = (o >= lim) ? 0 : o + 1;
    return o;
}
inline unsigned atomicDec(unsigned* p, unsigned lim) {
    volatile unsigned* vp = p;
    unsigned o = *vp;
    *vp = (o == 0 || o > lim) ? lim : o - 1;
    return o;
}
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd

// ---------------------------------------------------------------------------
// Fibers, barriers and warp collectives
// ---------------------------------------------------------------------------
namespace grader {

constexpr size_t kFiberStack = 128 * 1024;

struct Fiber {
    jmp_buf ctx;
    ucontext_t boot;
    char* stack = nullptr;
    unsigned tid = 0;     // linear thread index in the block
    bool done = false;
    int waiting = 0;      // 0 running, 1 block barrier, 2 warp barrier
    unsigned long gen = 0;
    bool booted = false;
};

struct Sched {
    std::vector<Fiber> fibers;
    jmp_buf home;
    Fiber* current = nullptr;
    Fiber* booting = nullptr;
    void (*body)(void*) = nullptr;
    void* body_ctx = nullptr;
    unsigned live = 0;
    unsigned arrived = 0;
    unsigned long block_gen = 0;
    std::vector<unsigned> warp_live, warp_arrived;
    std::vector<unsigned long> warp_gen;
    std::vector<unsigned long long> slots;   // one per thread, for shuffles and votes
};
inline Sched g_sched;
inline bool g_fiber_mode =
#ifdef GRADER_EMU_FIBERS
    true;
#else
    false;
#endif

inline void set_thread(unsigned tid) {
    g_threadIdx.x = tid % g_blockDim.x;
    g_threadIdx.y = (tid / g_blockDim.x) % g_blockDim.y;
    g_threadIdx.z = tid / (g_blockDim.x * g_blockDim.y);
}

inline void yield_to_scheduler() {
    Fiber* f = g_sched.current;
    if (_setjmp(f->ctx) == 0) _longjmp(g_sched.home, 1);
}

[[noreturn]] inline void fiber_loop() {
    Fiber* f = g_sched.booting;
    if (_setjmp(f->ctx) == 0) _longjmp(g_sched.home, 1);
    for (;;) {
        g_sched.body(g_sched.body_ctx);
        f = g_sched.current;
        f->done = true;
        Sched& s = g_sched;
        --s.live;
        unsigned w = f->tid / 32;
        --s.warp_live[w];
        if (s.arrived > 0 && s.arrived == s.live) { ++s.block_gen; s.arrived = 0; }
        if (s.warp_arrived[w] > 0 && s.warp_arrived[w] == s.warp_live[w]) { ++s.warp_gen[w]; s.warp_arrived[w] = 0; }
        yield_to_scheduler();
    }
}

inline void ensure_fibers(unsigned n) {
    Sched& s = g_sched;
    if (s.fibers.size() < n) s.fibers.resize(n);
    for (unsigned i = 0; i < n; ++i) {
        Fiber& f = s.fibers[i];
        if (!f.stack) {
            void* m = mmap(nullptr, kFiberStack, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED) emu_abort("could not map a fiber stack");
            mprotect(m, 4096, PROT_NONE);  // stack overflow faults instead of corrupting
            f.stack = static_cast<char*>(m);
        }
        if (!f.booted) {
            getcontext(&f.boot);
            f.boot.uc_stack.ss_sp = f.stack;
            f.boot.uc_stack.ss_size = kFiberStack;
            f.boot.uc_link = nullptr;
            makecontext(&f.boot, reinterpret_cast<void (*)()>(&fiber_loop), 0);
            s.booting = &f;
            ucontext_t here;
            if (_setjmp(s.home) == 0) swapcontext(&here, &f.boot);
            f.booted = true;
        }
    }
}

// After a fault the fibers' stacks hold abandoned frames: boot them again.
inline void reset_fibers() {
    for (auto& f : g_sched.fibers) f.booted = false;
}

inline void run_block_fibers(unsigned n) {
    Sched& s = g_sched;
    ensure_fibers(n);
    unsigned warps = (n + 31) / 32;
    s.live = n;
    s.arrived = 0;
    s.warp_live.assign(warps, 0);
    s.warp_arrived.assign(warps, 0);
    s.warp_gen.assign(warps, 0);
    s.slots.assign(static_cast<size_t>(warps) * 32, 0);
    for (unsigned i = 0; i < n; ++i) {
        Fiber& f = s.fibers[i];
        f.tid = i; f.done = false; f.waiting = 0; f.gen = 0;
        ++s.warp_live[i / 32];
    }
    for (;;) {
        bool progress = false, all_done = true;
        for (unsigned k = 0; k < n; ++k) {
            unsigned i = g_reverse ? n - 1 - k : k;
            Fiber& f = s.fibers[i];
            if (f.done) continue;
            all_done = false;
            if (f.waiting == 1 && f.gen == s.block_gen) continue;
            if (f.waiting == 2 && f.gen == s.warp_gen[i / 32]) continue;
            f.waiting = 0;
            s.current = &f;
            set_thread(i);
            if (_setjmp(s.home) == 0) _longjmp(f.ctx, 1);
            progress = true;
        }
        if (all_done) break;
        if (!progress) emu_abort("barrier deadlock: threads wait at a barrier that can never complete");
    }
}

inline void sync_block() {
    if (!g_fiber_mode) {
        if (g_blockDim.x * g_blockDim.y * g_blockDim.z == 1) return;
        emu_abort("__syncthreads reached in a kernel the grader did not scan as using barriers");
    }
    Sched& s = g_sched;
    Fiber* f = s.current;
    f->waiting = 1;
    f->gen = s.block_gen;
    if (++s.arrived == s.live) { ++s.block_gen; s.arrived = 0; }
    yield_to_scheduler();
}

inline void sync_warp() {
    if (!g_fiber_mode) emu_abort("a warp collective reached in a kernel the grader did not scan as using one");
    Sched& s = g_sched;
    Fiber* f = s.current;
    unsigned w = f->tid / 32;
    f->waiting = 2;
    f->gen = s.warp_gen[w];
    if (++s.warp_arrived[w] == s.warp_live[w]) { ++s.warp_gen[w]; s.warp_arrived[w] = 0; }
    yield_to_scheduler();
}

template <class T> inline unsigned long long to_slot(T v) {
    static_assert(sizeof(T) <= 8, "shuffles of types wider than 8 bytes are not emulated");
    unsigned long long u = 0;
    std::memcpy(&u, &v, sizeof(T));
    return u;
}
template <class T> inline T from_slot(unsigned long long u) {
    T v;
    std::memcpy(&v, &u, sizeof(T));
    return v;
}

// Every lane publishes its value, the warp meets, each lane reads its source,
// the warp meets again so that no slot is overwritten before it was read.
template <class T, class Src> inline T exchange(T v, Src src_of_lane) {
    Sched& s = g_sched;
    unsigned tid = s.current->tid;
    unsigned base = tid / 32 * 32;
    s.slots[tid] = to_slot(v);
    sync_warp();
    int src = src_of_lane(static_cast<int>(tid - base));
    T r = (base + src < s.slots.size() && !s.fibers[base + src].done) ? from_slot<T>(s.slots[base + src]) : v;
    sync_warp();
    return r;
}

template <class Op> inline unsigned vote(bool pred, Op) {
    Sched& s = g_sched;
    unsigned tid = s.current->tid;
    unsigned base = tid / 32 * 32;
    s.slots[tid] = pred ? 1 : 0;
    sync_warp();
    unsigned bits = 0;
    for (unsigned l = 0; l < 32 && base + l < s.slots.size(); ++l)
        if (!s.fibers[base + l].done && s.slots[base + l]) bits |= 1u << l;
    sync_warp();
    return bits;
}

}  // namespace grader

#define __syncthreads() ::grader::sync_block()
inline void __syncwarp(unsigned = 0xffffffffu) {
    if (grader::g_fiber_mode) grader::sync_warp();
}
inline int __syncthreads_count(int p) {
    static int count = 0;
    static unsigned long gen = ~0ul;
    if (gen != grader::g_sched.block_gen) { gen = grader::g_sched.block_gen; count = 0; }
    count += p != 0;
    grader::sync_block();
    int r = count;
    grader::sync_block();
    return r;
}
inline int __syncthreads_or(int p) { return __syncthreads_count(p) != 0; }
inline int __syncthreads_and(int p) {
    return __syncthreads_count(p) == static_cast<int>(grader::g_sched.live);
}

// Cooperative groups at block level: a block's sync is __syncthreads. (Grid groups,
// tiles and clusters are refused before the build: they need a GPU.)
namespace cooperative_groups {
struct thread_block {
    void sync() const { __syncthreads(); }
    unsigned thread_rank() const {
        return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    }
    unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
    unsigned num_threads() const { return size(); }
    dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    dim3 group_dim() const { return blockDim; }
    dim3 dim_threads() const { return blockDim; }
};
inline thread_block this_thread_block() { return thread_block{}; }
inline void sync(const thread_block& b) { b.sync(); }
}  // namespace cooperative_groups
template <class T> inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
    return grader::exchange(v, [&](int lane) { return (lane & ~(width - 1)) + (src & (width - 1)); });
}
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
    return grader::exchange(v, [&](int lane) {
        return (lane % width) + static_cast<int>(d) < width ? lane + static_cast<int>(d) : lane;
    });
}
template <class T> inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
    return grader::exchange(v, [&](int lane) {
        return (lane % width) >= static_cast<int>(d) ? lane - static_cast<int>(d) : lane;
    });
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
    return grader::exchange(v, [&](int lane) {
        int t = lane ^ mask;
        return (t / width == lane / width) ? t : lane;
    });
}
inline unsigned __ballot_sync(unsigned, int p) { return grader::vote(p != 0, 0); }
inline int __any_sync(unsigned, int p) { return grader::vote(p != 0, 0) != 0; }
inline int __all_sync(unsigned m, int p) {
    (void)m;
    grader::Sched& s = grader::g_sched;
    unsigned base = s.current->tid / 32 * 32;
    unsigned bits = grader::vote(p != 0, 0);
    unsigned live = 0;
    for (unsigned l = 0; l < 32 && base + l < s.slots.size(); ++l)
        if (!s.fibers[base + l].done) live |= 1u << l;
    return (bits & live) == live;
}

namespace grader {

// ---------------------------------------------------------------------------
// Fault capture
// ---------------------------------------------------------------------------
struct FaultInfo {
    int signal;          // 0 none, else the signal number; -1 an emulator abort
    int is_write;        // 1 write, 0 read, -1 unknown
    uintptr_t address;   // faulting data address
    uintptr_t pc_offset; // program counter relative to the library's base, 0 if unknown
    char message[256];
    int in_kernel;       // 1: a kernel's thread faulted, and the coordinates below are its
    unsigned block[3], thread[3], block_dim[3], grid_dim[3];
    unsigned long long block_seq;   // the block's place in launch order (x fastest)
};
inline FaultInfo g_fault;
inline sigjmp_buf g_fault_jmp;                       // guarded()'s recovery point
GRADER_EMU_TLS inline volatile sig_atomic_t g_in_guarded = 0;
GRADER_EMU_TLS inline sigjmp_buf* g_fault_target = nullptr;   // a spreading thread's own; else g_fault_jmp
inline std::atomic<int> g_fault_claimed{0};          // set by the first fault (or abort) of a launch
inline std::atomic<bool> g_stop{false};              // a fault happened: spreading threads stop
inline uintptr_t g_fault_pc = 0;
GRADER_EMU_TLS inline int g_in_kernel = 0;                    // inside a kernel's body (its coordinates mean something)
GRADER_EMU_TLS inline unsigned long long g_block_seq = 0;     // the running block's place in launch order
GRADER_EMU_TLS inline FaultInfo* g_fault_slot = nullptr;      // a spreading thread's own record; else g_fault

// The first access to a thread_local on an OS thread (of a spreading build) may take the dynamic
// linker's slow path, which some C libraries run without saving the vector registers compiled
// code keeps live: it is made here, where nothing is live, first thing on every thread.
__attribute__((noinline)) inline void touch_thread_locals() {
    g_threadIdx = uint3{0, 0, 0};
    g_blockIdx = uint3{0, 0, 0};
    g_in_guarded = 0;
    g_fault_target = nullptr;
    g_in_kernel = 0;
    g_block_seq = 0;
    g_fault_slot = nullptr;
}

// Where the faulting thread was: its block and thread, the launch's shape, the block's place.
inline void note_coordinates(FaultInfo& f) {
    f.in_kernel = g_in_kernel;
    if (!g_in_kernel) return;
    const uint3 b = g_blockIdx, t = g_threadIdx;
    f.block[0] = b.x; f.block[1] = b.y; f.block[2] = b.z;
    f.thread[0] = t.x; f.thread[1] = t.y; f.thread[2] = t.z;
    f.block_dim[0] = g_blockDim.x; f.block_dim[1] = g_blockDim.y; f.block_dim[2] = g_blockDim.z;
    f.grid_dim[0] = g_gridDim.x; f.grid_dim[1] = g_gridDim.y; f.grid_dim[2] = g_gridDim.z;
    f.block_seq = g_block_seq;
}

// Whether this fault is the launch's first (and so the one g_fault describes).
inline bool claim_fault() {
    int none = 0;
    return g_fault_claimed.compare_exchange_strong(none, 1);
}

[[noreturn]] inline void leave_after_fault() {
    g_stop.store(true, std::memory_order_relaxed);
    g_in_guarded = 0;
    siglongjmp(g_fault_target ? *g_fault_target : g_fault_jmp, 1);
}

inline void fault_handler(int sig, siginfo_t* info, void* uctx) {
    if (!g_in_guarded) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    FaultInfo* const own = g_fault_slot;      // a spreading thread records its own first fault
    if (own != nullptr ? own->signal == 0 : claim_fault()) {
        FaultInfo& f = own != nullptr ? *own : g_fault;
        f.signal = sig;
        f.address = reinterpret_cast<uintptr_t>(info->si_addr);
        f.is_write = -1;
#if defined(__x86_64__)
        auto* uc = static_cast<ucontext_t*>(uctx);
        if (sig == SIGSEGV) f.is_write = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
        const uintptr_t pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
        if (own != nullptr) own->pc_offset = pc; else g_fault_pc = pc;   // a slot keeps its raw pc
#else
        (void)uctx;
#endif
        note_coordinates(f);
    }
    leave_after_fault();
}

// The handlers are the process's, but each library has its own copy of this shim (its own
// g_fault, g_in_guarded): they are installed again whenever another library's are in place.
inline void install_handlers() {
    static bool stack_done = false;
    if (!stack_done) {
        stack_done = true;
        static std::vector<char> alt(256 * 1024);
        stack_t ss{};
        ss.ss_sp = alt.data();
        ss.ss_size = alt.size();
        sigaltstack(&ss, nullptr);
    }
    struct sigaction now{};
    if (sigaction(SIGSEGV, nullptr, &now) == 0 && (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == fault_handler)
        return;
    struct sigaction sa{};
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    sigaction(SIGFPE, &sa, nullptr);
}

[[noreturn]] inline void emu_abort(const char* why) {
    FaultInfo* const own = g_fault_slot;
    if (own != nullptr ? own->signal == 0 : claim_fault()) {
        FaultInfo& f = own != nullptr ? *own : g_fault;
        f.signal = -1;
        std::snprintf(f.message, sizeof f.message, "%s", why);
        note_coordinates(f);
    }
    leave_after_fault();
}

// Runs f with faults captured. Returns 0, a cudaError_t from the launch,
// or -1 when a fault or an emulator abort stopped it (see g_fault).
template <class F> inline int guarded(F&& f) {
#ifdef GRADER_EMU_PARALLEL
    touch_thread_locals();
#endif
    install_handlers();
    std::memset(&g_fault, 0, sizeof g_fault);
    g_fault_pc = 0;
    g_fault_claimed.store(0);
    g_stop.store(false);
    g_fault_target = nullptr;
    g_last_error = cudaSuccess;
    if (sigsetjmp(g_fault_jmp, 1) != 0) {
        g_in_kernel = 0;
        reset_fibers();
        g_dynamic_shared = nullptr;
        if (g_fault_pc) {
            Dl_info di;
            if (dladdr(reinterpret_cast<void*>(g_fault_pc), &di) && di.dli_fbase)
                g_fault.pc_offset = g_fault_pc - reinterpret_cast<uintptr_t>(di.dli_fbase);
        }
        return -1;
    }
    g_in_guarded = 1;
    f();
    g_in_guarded = 0;
    return static_cast<int>(cudaGetLastError());
}

}  // namespace grader

// ---------------------------------------------------------------------------
// Launch
// ---------------------------------------------------------------------------
namespace grader {

inline void set_block(unsigned long long b, dim3 grid) {
    g_blockIdx.x = static_cast<unsigned>(b % grid.x);
    g_blockIdx.y = static_cast<unsigned>((b / grid.x) % grid.y);
    g_blockIdx.z = static_cast<unsigned>(b / (1ull * grid.x * grid.y));
}

// A block's threads, x fastest, as set_thread numbers them, without its divisions (a launch of
// the timed shape calls the body four million times).
template <class Body> inline void run_threads_forward(Body& body, dim3 block) {
    for (unsigned z = 0; z < block.z; ++z)
        for (unsigned y = 0; y < block.y; ++y)
            for (unsigned x = 0; x < block.x; ++x) {
                g_threadIdx = uint3{x, y, z};
                body();
            }
}

template <class Body> inline void run_threads_reverse(Body& body, dim3 block) {
    for (unsigned z = block.z; z-- > 0;)
        for (unsigned y = block.y; y-- > 0;)
            for (unsigned x = block.x; x-- > 0;) {
                g_threadIdx = uint3{x, y, z};
                body();
            }
}

// ---------------------------------------------------------------------------
// Spreading a large launch over OS threads (GRADER_EMU_PARALLEL builds only)
// ---------------------------------------------------------------------------
constexpr int kMaxThreads = 256;
constexpr unsigned long long kSpreadFrom = 1ull << 18;   // threads in a launch worth spreading
constexpr size_t kSpreadStack = 8u << 20;                // each OS thread's stack, as the main thread's
inline int g_threads = 1;                                 // set by the child: the cores it may use
// Launches since the last grader_emu_set_spans (the start of a launcher's call) that g_threads could
// change: each would run on several OS threads where g_threads allowed it (the child's thread check,
// emulator.py, runs such a call on one thread and on several and compares).
inline int g_spreadable = 0;

#ifdef GRADER_EMU_PARALLEL
template <class Body> struct Spread {
    Body* body;
    dim3 grid, block;
    unsigned long long blocks, chunk;
    std::atomic<unsigned long long> next{0};
};

// Takes chunks of consecutive blocks until none is left or a fault stops the launch. A fault in
// this thread's blocks comes back here (claimed in g_fault if first), not to guarded()'s point.
template <class Body> inline void take_chunks(Spread<Body>& s, FaultInfo* slot) {
    sigjmp_buf here;
    sigjmp_buf* const outer = g_fault_target;
    const sig_atomic_t was_guarded = g_in_guarded;
    g_fault_target = &here;
    g_fault_slot = slot;
    if (sigsetjmp(here, 1) == 0) {
        g_in_guarded = 1;
        g_in_kernel = 1;
        while (!g_stop.load(std::memory_order_relaxed)) {
            const unsigned long long from = s.next.fetch_add(s.chunk, std::memory_order_relaxed);
            if (from >= s.blocks) break;
            const unsigned long long to = std::min(from + s.chunk, s.blocks);
            for (unsigned long long b = from; b < to; ++b) {
                set_block(b, s.grid);
                g_block_seq = b;
                run_threads_forward(*s.body, s.block);
            }
        }
    }
    g_in_kernel = 0;
    g_fault_slot = nullptr;
    g_in_guarded = was_guarded;
    g_fault_target = outer;
}

template <class Body> struct SpreadSeat {
    Spread<Body>* spread;
    FaultInfo fault;            // this OS thread's first fault, if any
};

template <class Body> inline void* spread_thread(void* arg) {
    touch_thread_locals();
    // An alternate signal stack of its own (sigaltstack is per thread), so that a kernel that
    // overflows this thread's stack is still caught.
    alignas(16) char alt[64 * 1024];
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    auto* seat = static_cast<SpreadSeat<Body>*>(arg);
    take_chunks(*seat->spread, &seat->fault);
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
    return nullptr;
}

// Every block of the launch, over up to g_threads OS threads, this one among them. A thread that
// cannot be started (a memory cap, a thread limit) leaves its share to the others: at worst,
// this one runs every block, as an unspread launch does.
template <class Body> inline void spread(Body& body, dim3 grid, dim3 block, unsigned long long blocks) {
    Spread<Body> s;
    s.body = &body;
    s.grid = grid;
    s.block = block;
    s.blocks = blocks;
    const unsigned long long threads = std::min<unsigned long long>(static_cast<unsigned long long>(g_threads), blocks);
    s.chunk = std::max<unsigned long long>(1, blocks / (threads * 16));
    pthread_t started[kMaxThreads];
    std::vector<SpreadSeat<Body>> seats(threads);      // seat 0 is this thread's
    for (auto& seat : seats) {
        seat.spread = &s;
        std::memset(&seat.fault, 0, sizeof seat.fault);
    }
    int count = 0;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kSpreadStack);
    for (unsigned long long i = 1; i < threads; ++i) {
        if (pthread_create(&started[count], &attr, &spread_thread<Body>, &seats[i]) != 0) break;
        ++count;
    }
    pthread_attr_destroy(&attr);
    take_chunks(s, &seats[0].fault);
    for (int i = 0; i < count; ++i) pthread_join(started[i], nullptr);
    // The fault reported is the earliest block's: the one a launch on one OS thread meets first.
    const FaultInfo* first = nullptr;
    for (const auto& seat : seats)
        if (seat.fault.signal != 0 && (first == nullptr || seat.fault.block_seq < first->block_seq))
            first = &seat.fault;
    if (first != nullptr && claim_fault()) {
        g_fault = *first;
        g_fault_pc = first->pc_offset;                  // a slot kept its raw pc
        g_fault.pc_offset = 0;
    }
    if (first != nullptr || g_fault_claimed.load()) leave_after_fault();     // some thread faulted: the launch did
}
#endif

// The linker's bounds of this library's grader_shared section (every __shared__ variable), hidden so
// that each library finds its own; null where the file declares none.
extern "C" unsigned char __start_grader_shared[] __attribute__((weak, visibility("hidden")));
extern "C" unsigned char __stop_grader_shared[] __attribute__((weak, visibility("hidden")));
constexpr unsigned kSharedPoisonBits = 0x7FD5A4EDu;    // a quiet NaN whose payload says "shared, never written"

inline void poison_words(unsigned char* p, size_t n) {
    const unsigned w = kSharedPoisonBits;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) std::memcpy(p + i, &w, 4);
    for (; i < n; ++i) p[i] = static_cast<unsigned char>(w >> (8 * (i % 4)));
}

// Before each block: its static and dynamic shared memory hold the poison, not what the last block left.
inline void poison_shared() {
    if (__start_grader_shared != nullptr && __stop_grader_shared > __start_grader_shared)
        poison_words(__start_grader_shared, static_cast<size_t>(__stop_grader_shared - __start_grader_shared));
    if (g_dynamic_shared != nullptr && g_dynamic_shared_size > 0) poison_words(g_dynamic_shared, g_dynamic_shared_size);
}

inline bool has_shared(size_t shmem) {
    return shmem > 0 || (__start_grader_shared != nullptr && __stop_grader_shared > __start_grader_shared);
}

template <class Body> inline void run_grid(dim3 grid, dim3 block, size_t shmem, Body& body) {
    unsigned n = block.x * block.y * block.z;
    if (n == 0 || n > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535 || shmem > 227 * 1024) {
        g_last_error = cudaErrorInvalidConfiguration;
        return;
    }
    std::vector<unsigned char> dyn(shmem + 256);
    g_dynamic_shared = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<uintptr_t>(dyn.data()) + 255) & ~static_cast<uintptr_t>(255));
    g_dynamic_shared_size = shmem;
    g_gridDim = grid;
    g_blockDim = block;
    const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
#ifdef GRADER_EMU_PARALLEL
    const bool spreadable = !g_fiber_mode && !g_reverse && g_in_guarded && blocks > 1 && blocks * n >= kSpreadFrom;
    g_spreadable += spreadable ? 1 : 0;
    if (spreadable && g_threads > 1) {
        spread(body, grid, block, blocks);
        g_dynamic_shared = nullptr;
        return;
    }
#endif
    g_sched.body = [](void* ctx) { (*static_cast<Body*>(ctx))(); };
    g_sched.body_ctx = &body;
    g_in_kernel = 1;
    const bool shared = has_shared(shmem);
    for (unsigned long long k = 0; k < blocks; ++k) {
        g_block_seq = g_reverse ? blocks - 1 - k : k;
        set_block(g_block_seq, grid);
        if (shared) poison_shared();
        if (g_fiber_mode)
            run_block_fibers(n);
        else if (!g_reverse)
            run_threads_forward(body, block);
        else
            run_threads_reverse(body, block);
    }
    g_in_kernel = 0;
    g_dynamic_shared = nullptr;
}

}  // namespace grader

// The launch log (shared with the CUDA harness): a kernel is named by its address relative to
// its library's base, and the parent finds the symbol there.
#include "launch_log.h"

namespace grader {

inline void note_launch(const void* fn, dim3 grid, dim3 block, size_t shmem) {
    grader_launches::note(fn, grid, block, shmem, [fn](grader_launches::Record& r) {
        Dl_info di;
        if (dladdr(fn, &di) && di.dli_fbase)
            r.offset = reinterpret_cast<uintptr_t>(fn) - reinterpret_cast<uintptr_t>(di.dli_fbase);
    });
}

template <class... P> struct Launch {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t shmem;
    template <class... A> void operator()(A&&... args) const {
        note_launch(reinterpret_cast<const void*>(kernel), grid, block, shmem);
        // Convert the arguments to the kernel's parameter types once, as a
        // real launch copies them into the parameter buffer.
        auto call = [k = kernel, tup = std::make_tuple(static_cast<P>(args)...)]() mutable {
            std::apply(k, tup);
        };
        run_grid(grid, block, shmem, call);
    }
};

template <class... P>
inline Launch<P...> launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem = 0,
                           cudaStream_t = nullptr) {
    return Launch<P...>{kernel, grid, block, shmem};
}

// A launch of a kernel by its name, `k<<<...>>>(args)` with no template arguments written: k
// may name one function (its pointer is taken, and the launch is Launch's, the arguments
// converted to its parameter types once) or a function template whose template arguments the
// call deduces (`template <class F> __global__ void k(const float*, F)` launched as
// `k<<<g, b>>>(x, Gelu{})`), or an overload set: then every thread calls k as the launch would,
// with copies of the arguments. GRADER_NAMED_LAUNCH builds its three helpers from the name:
// pick (the pointer, where k names one function), call (k called with the arguments), and
// address (the specialization whose parameters are the arguments' decayed types, where there
// is one: the launch log's name of the kernel; else the log shows it unnamed).
template <class T, class... P>
constexpr auto kernel_pointer(T, void (*kernel)(P...)) { return kernel; }

template <class Pick, class Call, class Address>
struct NamedLaunch {
    Pick pick;
    Call call;
    Address address;
    const char* name;           // the kernel's name as the source writes it
    dim3 grid, block;
    size_t shmem;
    template <class... A> void operator()(A&&... args) const {
        if constexpr (std::is_invocable_v<const Pick&, int>) {
            launch(pick(0), grid, block, shmem)(std::forward<A>(args)...);
        } else {
            if constexpr (std::is_invocable_v<const Address&, std::decay_t<A>*...>) {
                note_launch(reinterpret_cast<const void*>(address(static_cast<std::decay_t<A>*>(nullptr)...)),
                            grid, block, shmem);
            } else {
                // No address to name it by: the log keys it by this launch site and its argument
                // types, and names it as the source does.
                static const char site = 0;
                grader_launches::note(&site, grid, block, shmem, [n = name](grader_launches::Record& r) {
                    std::strncpy(r.kernel, n, sizeof r.kernel - 1);
                });
            }
            auto run = [c = call, tup = std::make_tuple(std::decay_t<A>(std::forward<A>(args))...)]() mutable {
                std::apply(c, tup);
            };
            run_grid(grid, block, shmem, run);
        }
    }
};

template <class Pick, class Call, class Address>
inline NamedLaunch<Pick, Call, Address> named_launch(Pick pick, Call call, Address address, const char* name,
                                                     dim3 grid, dim3 block, size_t shmem = 0, cudaStream_t = nullptr) {
    return NamedLaunch<Pick, Call, Address>{pick, call, address, name, grid, block, shmem};
}

// What the rewrite (core/emulation.py) writes for `K<<<config>>>(`: GRADER_NAMED_LAUNCH(K, config)(
#define GRADER_NAMED_LAUNCH(K, ...)                                                                        \
    ::grader::named_launch(                                                                              \
        [&](auto tag__) -> decltype(::grader::kernel_pointer(tag__, K)) {                                 \
            return ::grader::kernel_pointer(tag__, K);                                                   \
        },                                                                                               \
        [&](auto&&... a__) { K(static_cast<decltype(a__)&&>(a__)...); },                                 \
        [&](auto*... t__) -> decltype(static_cast<void (*)(::std::remove_pointer_t<decltype(t__)>...)>(K)) { \
            return static_cast<void (*)(::std::remove_pointer_t<decltype(t__)>...)>(K);                  \
        },                                                                                               \
        #K, __VA_ARGS__)

// A launch with an argument array (cudaLaunchKernel, cudaLaunchCooperativeKernel): each args[i]
// points to the kernel's i-th parameter, of the type the kernel declares.
template <class... P, size_t... I>
inline void launch_packed(void (*kernel)(P...), dim3 grid, dim3 block, void** args, size_t shmem,
                          std::index_sequence<I...>) {
    note_launch(reinterpret_cast<const void*>(kernel), grid, block, shmem);
    auto call = [k = kernel, tup = std::make_tuple(*static_cast<std::decay_t<P>*>(args[I])...)]() mutable {
        std::apply(k, tup);
    };
    run_grid(grid, block, shmem, call);
}

}  // namespace grader

// The runtime's launch with an argument array. The rewrite (source.rewrite_for_emulator) drops
// the `(const void*)` cast students write before the kernel, so its parameter types are known here.
template <class... P>
inline cudaError_t cudaLaunchKernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args, size_t shmem = 0,
                                    cudaStream_t = nullptr) {
    grader::launch_packed(kernel, grid, block, args, shmem, std::index_sequence_for<P...>{});
    return cudaSuccess;
}
template <class... P>
inline cudaError_t cudaLaunchCooperativeKernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args,
                                               size_t shmem = 0, cudaStream_t = nullptr) {
    grader::launch_packed(kernel, grid, block, args, shmem, std::index_sequence_for<P...>{});
    return cudaSuccess;
}

// cudaLaunchKernelEx (CUDA 12's extensible launch): the configuration's grid, block and shared
// bytes, the arguments converted to the kernel's parameter types. A configuration that sets
// launch attributes is refused before the build (core/emulation.py), as the GPU's recorder refuses
// it (run/replaying.py): the attributes are declared here only so that such code compiles.
enum cudaLaunchAttributeID {
    cudaLaunchAttributeIgnore = 0,
    cudaLaunchAttributeAccessPolicyWindow = 1,
    cudaLaunchAttributeCooperative = 2,
    cudaLaunchAttributeSynchronizationPolicy = 3,
    cudaLaunchAttributeClusterDimension = 4,
    cudaLaunchAttributeClusterSchedulingPolicyPreference = 5,
    cudaLaunchAttributeProgrammaticStreamSerialization = 6,
    cudaLaunchAttributeProgrammaticEvent = 7,
    cudaLaunchAttributePriority = 8,
};
struct cudaLaunchAttribute {
    cudaLaunchAttributeID id;
    union { char pad[64]; int priority; } val;
};
struct cudaLaunchConfig_t {          // gridDim and blockDim, renamed by the rewrite (they are macros here)
    dim3 grader_gridDim;
    dim3 grader_blockDim;
    size_t dynamicSmemBytes = 0;
    cudaStream_t stream = nullptr;
    cudaLaunchAttribute* attrs = nullptr;
    unsigned int numAttrs = 0;
};
template <class... P, class... A>
inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(P...), A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "cudaLaunchKernelEx: one argument for each of the kernel's parameters");
    if (!config) return cudaErrorInvalidValue;
    grader::note_launch(reinterpret_cast<const void*>(kernel), config->grader_gridDim, config->grader_blockDim,
                        config->dynamicSmemBytes);
    auto call = [k = kernel, tup = std::tuple<std::decay_t<P>...>(static_cast<std::decay_t<P>>(args)...)]() mutable {
        std::apply(k, tup);
    };
    grader::run_grid(config->grader_gridDim, config->grader_blockDim, config->dynamicSmemBytes, call);
    return cudaSuccess;
}

// Entry points every emulated library exports, whatever it holds. Each
// library is one translation unit, so these are defined here, once.
extern "C" void grader_emu_set_reverse(int reverse) { grader::g_reverse = reverse != 0; }
extern "C" void grader_emu_set_threads(int n) {
    grader::g_threads = n < 1 ? 1 : (n > grader::kMaxThreads ? grader::kMaxThreads : n);
}
// The OS threads a large launch of this library runs on (1: it shares state between threads).
extern "C" int grader_emu_spread_threads() {
#ifdef GRADER_EMU_PARALLEL
    return grader::g_fiber_mode ? 1 : grader::g_threads;
#else
    return 1;
#endif
}
// The launches of the launcher's call so far that the thread count could change (g_spreadable).
extern "C" int grader_emu_spreadable_launches() { return grader::g_spreadable; }
extern "C" const grader::FaultInfo* grader_emu_fault() { return &grader::g_fault; }
extern "C" int grader_emu_uses_fibers() { return grader::g_fiber_mode ? 1 : 0; }

// ---------------------------------------------------------------------------
// The launcher's stream-ordered work, as the GPU's replay reproduces it (grader/run/child/replay.py):
// memsets, copies, copies to __device__ and __constant__ variables, a workspace from cudaMalloc
// (capped by limits.workspace_mib, poisoned before every call), events and synchronisation (no-ops
// here: the emulator runs everything at once, in order). Each is checked against the call's buffers
// before it runs (the emulator backend gives them: grader_emu_set_spans) and logged; the backend
// reads the log after the call (grader_emu_stream_ops) and refuses what the replay would refuse.
// ---------------------------------------------------------------------------
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
namespace grader {
struct StreamOp {                     // emulator.py's _StreamOp
    int kind;                         // 5 memset, 6 copy, 7 copy to a symbol, 8 allocation, 9 free
    int direction;                    // copies: 1 host to device, 2 device to host, 3 device to device
    int refused;                      // 0 it ran; 1 an address outside what it may touch; 2 over the workspace cap
    int value;
    unsigned long long dst, src, nbytes;
    char call[36];
};
struct Span { unsigned long long lo, hi; int access; };     // access: 0 the grader's, not this call's; 1 read; 2 write
constexpr int kStreamOps = 256, kSpans = 256, kWorkspaces = 256;
inline StreamOp g_stream_ops[kStreamOps];
inline int g_stream_op_count = 0;
inline Span g_spans[kSpans];
inline int g_span_count = 0;
inline void* g_workspace[kWorkspaces];
inline size_t g_workspace_bytes[kWorkspaces];
inline size_t g_workspace_cap = 256u << 20, g_workspace_used = 0;
constexpr unsigned kPoisonBits = 0x7FC0DEADu;     // contract.POISON_BITS

inline void poison(void* p, size_t n) {
    unsigned char* b = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(kPoisonBits >> (8 * (i % 4)));
}
// Before every call of the launcher: the workspace holds nothing from the last call.
inline void begin_call() {
    for (int i = 0; i < kWorkspaces; ++i)
        if (g_workspace[i]) poison(g_workspace[i], g_workspace_bytes[i]);
}
inline StreamOp& log_op(int kind, const char* call) {
    static StreamOp spare;
    StreamOp& op = g_stream_op_count < kStreamOps ? g_stream_ops[g_stream_op_count++] : spare;
    std::memset(&op, 0, sizeof op);
    op.kind = kind;
    std::strncpy(op.call, call, sizeof op.call - 1);
    return op;
}
// 2: [p, p + n) lies in an output or the workspace; 1: in an input; 0: in a grader's buffer of
// another call, or straddling one; -1: in none of them (host memory of the launcher's own).
inline int reach(const void* p, size_t n) {
    const auto lo = reinterpret_cast<unsigned long long>(p), hi = lo + n;
    for (int i = 0; i < kWorkspaces; ++i) {
        const auto w = reinterpret_cast<unsigned long long>(g_workspace[i]);
        if (g_workspace[i] && lo >= w && hi <= w + g_workspace_bytes[i]) return 2;
    }
    int found = -1;
    for (int i = 0; i < g_span_count; ++i) {
        const Span& s = g_spans[i];
        if (lo < s.hi && hi > s.lo) {
            if (lo < s.lo || hi > s.hi) return 0;
            found = s.access > found ? s.access : found;
        }
    }
    return found;
}
inline cudaError_t memset_op(const char* call, void* p, int value, size_t n) {
    StreamOp& op = log_op(5, call);
    op.dst = reinterpret_cast<unsigned long long>(p);
    op.value = value;
    op.nbytes = n;
    if (reach(p, n) != 2) { op.refused = 1; return cudaErrorInvalidValue; }
    std::memset(p, value, n);
    return cudaSuccess;
}
inline cudaError_t copy_op(const char* call, void* dst, const void* src, size_t n) {
    const int to = reach(dst, n), from = reach(src, n);
    if (to == -1 && from == -1) {                 // host to host: nothing the replay needs
        if (n && dst != src) std::memmove(dst, src, n);
        return cudaSuccess;
    }
    StreamOp& op = log_op(6, call);
    op.dst = reinterpret_cast<unsigned long long>(dst);
    op.src = reinterpret_cast<unsigned long long>(src);
    op.nbytes = n;
    op.direction = to != -1 ? (from != -1 ? 3 : 1) : 2;
    if (to != 2 || from == 0) { op.refused = 1; return cudaErrorInvalidValue; }
    if (n && dst != src) std::memmove(dst, src, n);
    return cudaSuccess;
}
}  // namespace grader

inline cudaError_t cudaMemset(void* p, int v, size_t n) { return grader::memset_op("cudaMemset", p, v, n); }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t = nullptr) {
    return grader::memset_op("cudaMemsetAsync", p, v, n);
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
    return grader::copy_op("cudaMemcpy", d, s, n);
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t = nullptr) {
    return grader::copy_op("cudaMemcpyAsync", d, s, n);
}
// A __device__ or __constant__ variable is a host variable here: the copy writes it.
template <class T> inline cudaError_t grader_symbol_copy(const char* call, T& symbol, const void* src, size_t n,
                                                         size_t offset, cudaMemcpyKind kind) {
    grader::StreamOp& op = grader::log_op(7, call);
    op.dst = offset;
    op.src = reinterpret_cast<unsigned long long>(src);
    op.nbytes = n;
    const int from = grader::reach(src, n);
    op.direction = from == -1 ? 1 : 3;
    if (kind == cudaMemcpyDeviceToHost || from == 0 || offset + n > sizeof(T)) {
        op.refused = 1;
        return cudaErrorInvalidValue;
    }
    std::memcpy(reinterpret_cast<unsigned char*>(const_cast<std::remove_cv_t<T>*>(&symbol)) + offset, src, n);
    return cudaSuccess;
}
template <class T> inline cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t n, size_t offset = 0,
                                                         cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    return grader_symbol_copy("cudaMemcpyToSymbol", symbol, src, n, offset, kind);
}
template <class T> inline cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* src, size_t n, size_t offset = 0,
                                                              cudaMemcpyKind kind = cudaMemcpyHostToDevice,
                                                              cudaStream_t = nullptr) {
    return grader_symbol_copy("cudaMemcpyToSymbolAsync", symbol, src, n, offset, kind);
}
inline cudaError_t grader_workspace_alloc(const char* call, void** p, size_t n) {
    grader::StreamOp& op = grader::log_op(8, call);
    op.nbytes = n;
    if (!p) return cudaErrorInvalidValue;
    *p = nullptr;
    int slot = -1;
    for (int i = 0; i < grader::kWorkspaces && slot < 0; ++i)
        if (!grader::g_workspace[i]) slot = i;
    if (n > grader::g_workspace_cap - grader::g_workspace_used || slot < 0) {
        op.refused = 2;
        return cudaErrorMemoryAllocation;
    }
    void* q = std::aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (!q) return cudaErrorMemoryAllocation;
    grader::poison(q, n);
    grader::g_workspace[slot] = q;
    grader::g_workspace_bytes[slot] = n;
    grader::g_workspace_used += n;
    op.dst = reinterpret_cast<unsigned long long>(q);
    *p = q;
    return cudaSuccess;
}
inline cudaError_t grader_workspace_free(const char* call, void* p) {
    if (!p) return cudaSuccess;               // cudaFree(0): the idiom that starts the runtime
    for (int i = 0; i < grader::kWorkspaces; ++i) {
        if (grader::g_workspace[i] == p) {
            std::free(p);
            grader::g_workspace[i] = nullptr;
            grader::g_workspace_used -= grader::g_workspace_bytes[i];
            return cudaSuccess;
        }
    }
    grader::StreamOp& op = grader::log_op(9, call);
    op.dst = reinterpret_cast<unsigned long long>(p);
    op.refused = 1;
    return cudaErrorInvalidValue;
}
inline cudaError_t cudaMalloc(void** p, size_t n) { return grader_workspace_alloc("cudaMalloc", p, n); }
template <class T> inline cudaError_t cudaMalloc(T** p, size_t n) {
    return grader_workspace_alloc("cudaMalloc", reinterpret_cast<void**>(p), n);
}
inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) {
    return grader_workspace_alloc("cudaMallocAsync", p, n);
}
template <class T> inline cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t) {
    return grader_workspace_alloc("cudaMallocAsync", reinterpret_cast<void**>(p), n);
}
inline cudaError_t cudaFree(void* p) { return grader_workspace_free("cudaFree", p); }
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return grader_workspace_free("cudaFreeAsync", p); }
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
struct CUevent_st { int unused; };
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { static CUevent_st one; *e = &one; return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
inline cudaError_t cudaEventRecordWithFlags(cudaEvent_t, cudaStream_t = nullptr, unsigned = 0) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) { *ms = 0.0f; return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }
inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaThreadSynchronize() { return cudaSuccess; }

extern "C" void grader_emu_set_spans(const unsigned long long* lo, const unsigned long long* hi, const int* access,
                                     int n, size_t workspace_cap) {
    grader::g_span_count = n < grader::kSpans ? n : grader::kSpans;
    for (int i = 0; i < grader::g_span_count; ++i) grader::g_spans[i] = {lo[i], hi[i], access[i]};
    grader::g_workspace_cap = workspace_cap;
    grader::g_stream_op_count = 0;
    grader::g_spreadable = 0;
    grader::begin_call();
}
extern "C" int grader_emu_stream_ops(grader::StreamOp* out, int max) {
    const int n = grader::g_stream_op_count < max ? grader::g_stream_op_count : max;
    std::memcpy(out, grader::g_stream_ops, sizeof(grader::StreamOp) * static_cast<size_t>(n > 0 ? n : 0));
    return n;
}
extern "C" int grader_emu_stream_op_size() { return static_cast<int>(sizeof(grader::StreamOp)); }

// ---------------------------------------------------------------------------
// malloc and free, in kernels (and in a launcher, which the emulator cannot tell
// apart), draw from a heap capped like the GPU's device heap (rubric
// limits.device_heap_mib): past the cap malloc returns NULL, as on a GPU.
// ---------------------------------------------------------------------------
namespace grader {
inline size_t g_heap_cap = 8u << 20, g_heap_used = 0;
}
inline void* grader_device_malloc(size_t n) {
    if (n > grader::g_heap_cap - grader::g_heap_used) return nullptr;
    auto* p = static_cast<size_t*>(std::malloc(n + 16));
    if (!p) return nullptr;
    grader::g_heap_used += n;
    p[0] = n;
    return p + 2;
}
inline void grader_device_free(void* q) {
    if (!q) return;
    auto* p = static_cast<size_t*>(q) - 2;
    grader::g_heap_used -= p[0];
    std::free(p);
}
namespace std {
using ::grader_device_free;
using ::grader_device_malloc;
}  // namespace std
#define malloc(n) grader_device_malloc(n)
#define free(p) grader_device_free(p)
extern "C" void grader_emu_set_heap(size_t cap) { grader::g_heap_cap = cap; }
