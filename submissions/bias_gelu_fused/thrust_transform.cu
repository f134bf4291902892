// No hand-written launch: thrust::transform over a counting iterator on the given stream, with a
// functor holding the pointers (thrust's host side asks for the device and its attributes, and
// calls cudaSetDevice on the current one).
#include <cuda_runtime.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                              size_t cols) {
    // the exercise names this kernel; the launcher below uses thrust instead
    const size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (c < cols) {
        const float v = x[blockIdx.y * cols + c] + bias[c];
        out[blockIdx.y * cols + c] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

struct BiasGelu {
    const float* x;
    const float* bias;
    int cols;
    __device__ float operator()(long long i) const {
        const float v = x[i] + bias[i % cols];
        return 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
};

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    const long long n = static_cast<long long>(rows) * cols;
    thrust::transform(thrust::cuda::par_nosync.on(stream), thrust::counting_iterator<long long>(0),
                      thrust::counting_iterator<long long>(n), out, BiasGelu{x, bias, cols});
}
