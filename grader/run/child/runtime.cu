// What the child needs of the CUDA runtime, and nothing more: allocate, copy, fill, launch
// on the legacy default stream, time with events, synchronise, describe the device.
//
// Built into the reference library for the cuda backend only (build.build_reference), so the
// child drives the GPU through ctypes and this library instead of importing torch: that import
// took 2 to 3.5 s of every submission. Every function returns the cudaError_t it got.
#include <cstddef>
#include <cstring>
#include <cuda_runtime.h>

namespace {

__global__ void fill32(unsigned* __restrict__ p, unsigned value, size_t n) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        p[i] = value;
    }
}

// A checksum of n 32-bit words, added into *sum: each word mixed with its index (so a moved
// word changes it too), the mixes summed. The measuring process takes one of every grader buffer
// a kernel must not change, before and after, and of each timed output after every timed launch.
__global__ void checksum32(const unsigned* __restrict__ p, size_t n, unsigned long long* sum) {
    unsigned long long mine = 0;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        unsigned long long x = (static_cast<unsigned long long>(i) << 32) | p[i];
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 33;
        x *= 0xc4ceb9fe1a85ec53ULL;
        x ^= x >> 33;
        mine += x;
    }
    for (int d = 16; d > 0; d >>= 1) mine += __shfl_down_sync(0xffffffffu, mine, d);
    if ((threadIdx.x & 31) == 0) atomicAdd(sum, mine);
}


// The device heap's free memory poisoned (what in-kernel malloc hands out), for a submission whose
// device code calls malloc: every block the heap will give is taken (large blocks first, then
// smaller ones, down to 256 bytes), filled with the poison and freed again, and the bytes taken
// are counted. A block a kernel malloc'd and freed comes back as poison on the next call; a block
// it never freed is missing from the count, so a call that keeps heap memory for the next shows.
struct HeapSlot {
    unsigned* p;
    unsigned long long words;
};
constexpr unsigned kHeapSlots = 32768;

__global__ void heapTake(HeapSlot* slots, unsigned* count, unsigned long long* total) {
    // Largest first, halving from 64 MiB: a freed block may be handed out only to requests near its
    // size (on the H200 a memo in a freed 4 MiB block survived a pass that asked for 256 KiB and
    // less), so every size a block may have is asked for before the small ones.
    const unsigned long long sizes[] = {64ull << 20, 32ull << 20, 16ull << 20, 8ull << 20, 4ull << 20, 2ull << 20,
                                        1ull << 20, 512ull << 10, 256ull << 10, 64ull << 10, 16ull << 10,
                                        4ull << 10, 1ull << 10, 256ull};
    for (unsigned long long s : sizes) {
        for (;;) {
            void* p = malloc(s);
            if (p == nullptr) break;
            const unsigned k = atomicAdd(count, 1u);
            if (k >= kHeapSlots) {          // the table is full: what is left stays unpoisoned
                free(p);
                return;
            }
            slots[k] = HeapSlot{static_cast<unsigned*>(p), s / 4};
            atomicAdd(total, s);
        }
    }
}

__global__ void heapFill(const HeapSlot* slots, const unsigned* count, unsigned value) {
    const unsigned n = min(*count, kHeapSlots);
    for (unsigned k = blockIdx.x; k < n; k += gridDim.x) {
        for (unsigned long long i = threadIdx.x; i < slots[k].words; i += blockDim.x) slots[k].p[i] = value;
    }
}

__global__ void heapGive(const HeapSlot* slots, const unsigned* count) {
    const unsigned n = min(*count, kHeapSlots);
    for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x) free(slots[k].p);
}

// One thread that holds the legacy default stream until the host sets *flag (or timeout_ns of the
// GPU's global timer pass: the host may block before it releases, and must never wait on this):
// the timing enqueues a batch of rounds behind it, so every timed region's start event and its
// launch are queued before the GPU reaches them, and no region can count the host's time to
// launch (a busier host, as in a batch, made the submission's first sample of each batch wait).
// *timed_out counts the holds that ended by the timer instead.
__global__ void holdStream(const volatile int* flag, unsigned long long timeout_ns, int* timed_out) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*flag == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) {
            *timed_out += 1;
            return;
        }
    }
}

int* g_hold = nullptr;         // mapped host memory: [0] the release flag, [1] the holds timed out

}  // namespace

struct GraderDeviceInfo {
    char name[256];
    int major, minor, sms, runtime_version, driver_version;
    size_t l2_bytes, memory_bytes;
};

extern "C" int grader_rt_init() { return static_cast<int>(cudaFree(nullptr)); }

extern "C" int grader_rt_malloc(void** p, size_t bytes) { return static_cast<int>(cudaMalloc(p, bytes)); }

extern "C" int grader_rt_free(void* p) { return static_cast<int>(cudaFree(p)); }

extern "C" int grader_rt_copy_in(void* device, const void* host, size_t bytes) {
    return static_cast<int>(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
}

extern "C" int grader_rt_copy_out(void* host, const void* device, size_t bytes) {
    return static_cast<int>(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

// Host memory the outputs are copied into, page-locked so that a copy goes straight there (a
// timed shape's 64 MB output: 20 ms through pageable memory, 1.3 ms once registered in 2.5 ms, on
// an H100). A failure is not kept as the last error: the copy then goes the pageable way.
extern "C" int grader_rt_host_register(void* host, size_t bytes) {
    const cudaError_t err = cudaHostRegister(host, bytes, cudaHostRegisterDefault);
    if (err != cudaSuccess) cudaGetLastError();
    return static_cast<int>(err);
}

// The legacy default stream held until grader_rt_release (holdStream); the first call allocates the
// mapped flag.
extern "C" int grader_rt_hold(unsigned long long timeout_ns) {
    if (g_hold == nullptr) {
        void* p = nullptr;
        const cudaError_t err = cudaHostAlloc(&p, 2 * sizeof(int), cudaHostAllocMapped);
        if (err != cudaSuccess) return static_cast<int>(err);
        g_hold = static_cast<int*>(p);
        g_hold[1] = 0;
    }
    int* device = nullptr;
    cudaError_t err = cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), g_hold, 0);
    if (err != cudaSuccess) return static_cast<int>(err);
    __atomic_store_n(&g_hold[0], 0, __ATOMIC_SEQ_CST);
    holdStream<<<1, 1>>>(device, timeout_ns, device + 1);
    return static_cast<int>(cudaGetLastError());
}

// Release the held stream; the holds that timed out so far (exact once the stream is synchronised).
extern "C" int grader_rt_release() {
    if (g_hold == nullptr) return 0;
    __atomic_store_n(&g_hold[0], 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&g_hold[1], __ATOMIC_SEQ_CST);
}

// n 32-bit words set to value, on the legacy default stream (asynchronously).
extern "C" int grader_rt_fill32(void* p, unsigned value, size_t n) {
    if (n == 0) return 0;
    size_t blocks = (n + 255) / 256;
    if (blocks > 65535) blocks = 65535;
    fill32<<<static_cast<unsigned>(blocks), 256>>>(static_cast<unsigned*>(p), value, n);
    return static_cast<int>(cudaGetLastError());
}

// The checksum of n words at p into the device word at sum (set to zero first), on the legacy
// default stream (asynchronously).
extern "C" int grader_rt_checksum32(const void* p, size_t n, void* sum) {
    cudaError_t err = cudaMemsetAsync(sum, 0, sizeof(unsigned long long), nullptr);
    if (err != cudaSuccess || n == 0) return static_cast<int>(err);
    size_t blocks = (n + 255) / 256;
    if (blocks > 1024) blocks = 1024;
    checksum32<<<static_cast<unsigned>(blocks), 256>>>(static_cast<const unsigned*>(p), n,
                                                        static_cast<unsigned long long*>(sum));
    return static_cast<int>(cudaGetLastError());
}

// The device heap's free memory set to value (heapTake, heapFill, heapGive above), on the legacy
// default stream; *taken is the bytes it could take (synchronises to read it). scratch: device
// memory of grader_rt_heap_scratch_bytes() bytes.
extern "C" size_t grader_rt_heap_scratch_bytes() { return kHeapSlots * sizeof(HeapSlot) + 16; }

extern "C" int grader_rt_poison_heap(void* scratch, unsigned value, unsigned long long* taken) {
    auto* slots = static_cast<HeapSlot*>(scratch);
    auto* tail = reinterpret_cast<unsigned long long*>(slots + kHeapSlots);
    auto* count = reinterpret_cast<unsigned*>(tail + 1);
    cudaError_t err = cudaMemsetAsync(tail, 0, 16, nullptr);
    if (err != cudaSuccess) return static_cast<int>(err);
    heapTake<<<1, 256>>>(slots, count, tail);
    heapFill<<<512, 256>>>(slots, count, value);
    heapGive<<<32, 256>>>(slots, count);
    err = cudaGetLastError();
    if (err != cudaSuccess) return static_cast<int>(err);
    return static_cast<int>(cudaMemcpy(taken, tail, sizeof(*taken), cudaMemcpyDeviceToHost));
}

extern "C" int grader_rt_synchronize() { return static_cast<int>(cudaDeviceSynchronize()); }

extern "C" int grader_rt_last_error() { return static_cast<int>(cudaGetLastError()); }

extern "C" const char* grader_rt_error_string(int code) {
    return cudaGetErrorString(static_cast<cudaError_t>(code));
}

extern "C" int grader_rt_event_create(void** event) {
    return static_cast<int>(cudaEventCreate(reinterpret_cast<cudaEvent_t*>(event)));
}

extern "C" int grader_rt_event_record(void* event) {
    return static_cast<int>(cudaEventRecord(static_cast<cudaEvent_t>(event), nullptr));
}

extern "C" int grader_rt_event_elapsed(void* start, void* end, float* ms) {
    return static_cast<int>(cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
}

extern "C" int grader_rt_memory(size_t* free_bytes, size_t* total_bytes) {
    return static_cast<int>(cudaMemGetInfo(free_bytes, total_bytes));
}

extern "C" int grader_rt_device_info(GraderDeviceInfo* info) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return static_cast<int>(err);
    cudaDeviceProp p;
    err = cudaGetDeviceProperties(&p, device);
    if (err != cudaSuccess) return static_cast<int>(err);
    std::memset(info, 0, sizeof(*info));
    std::strncpy(info->name, p.name, sizeof(info->name) - 1);
    info->major = p.major;
    info->minor = p.minor;
    info->sms = p.multiProcessorCount;
    info->l2_bytes = static_cast<size_t>(p.l2CacheSize);
    info->memory_bytes = p.totalGlobalMem;
    cudaRuntimeGetVersion(&info->runtime_version);
    cudaDriverGetVersion(&info->driver_version);
    return 0;
}
