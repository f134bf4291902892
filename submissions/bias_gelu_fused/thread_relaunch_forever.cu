// Attack: the launcher launches nothing itself. The first call starts a std::thread that keeps
// launching the whole output, every 2 ms, for as long as the process lives, with the pointers of
// the latest call: the work happens, but never inside a call the grader can time.
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <cuda_runtime.h>

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        out[i] = geluErf(x[i] + bias[col]);
    }
}

namespace {
struct Latest {
    const float* x = nullptr;
    const float* bias = nullptr;
    float* out = nullptr;
    int rows = 0, cols = 0;
};
std::mutex g_lock;
Latest g_latest;
std::atomic<bool> g_started{false};
}  // namespace

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    {
        std::lock_guard<std::mutex> hold(g_lock);
        g_latest = Latest{x, bias, out, rows, cols};
    }
    if (g_started.exchange(true)) return;
    std::thread([] {
        for (;;) {
            Latest now;
            {
                std::lock_guard<std::mutex> hold(g_lock);
                now = g_latest;
            }
            biasGeluFused<<<dim3((now.cols + 255) / 256, now.rows), 256>>>(now.x, now.bias, now.out, now.cols);
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    }).detach();
}
