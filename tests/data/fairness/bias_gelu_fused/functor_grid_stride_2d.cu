// Idiom: a functor struct with operator() applied in a 2-D grid-stride loop (y over rows, x over columns), blockDim-agnostic, small fixed grid from the launcher.
#include <cuda_runtime.h>

struct BiasGelu {
    __device__ __forceinline__ float operator()(float v, float b) const {
        const float t = v + b;
        return 0.5f * t * (1.0f + erff(t * 0.7071067811865476f));
    }
};

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                              size_t cols, int rows) {
    BiasGelu op;
    for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += gridDim.y * blockDim.y) {
        for (size_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            const size_t i = static_cast<size_t>(r) * cols + c;
            out[i] = op(x[i], bias[c]);
        }
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    dim3 block(32, 8);
    dim3 grid(4, 16);
    biasGeluFused<<<grid, block, 0, stream>>>(x, bias, out, static_cast<size_t>(cols), rows);
}
