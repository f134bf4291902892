// Host code as a larger project writes it: <memory> (whose shared_ptr writes
// __attribute__((__noinline__)) in GCC 12's library), a smart pointer in the launcher, and a
// __noinline__ device helper.
#include <cuda_runtime.h>
#include <algorithm>
#include <memory>
#include <vector>

__device__ __noinline__ float geluErf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) out[blockIdx.y * cols + col] = geluErf(x[blockIdx.y * cols + col] + bias[col]);
}

struct LaunchPlan {
    unsigned threads;
    unsigned blocksAcross;
};

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const std::vector<unsigned> choices = {128, 256, 512};
    const unsigned threads = *std::min_element(choices.begin() + 1, choices.end());
    auto plan = std::make_shared<LaunchPlan>(LaunchPlan{threads, (cols + threads - 1) / threads});
    biasGeluFused<<<dim3(plan->blocksAcross, rows), plan->threads, 0, stream>>>(x, bias, out, cols);
}
