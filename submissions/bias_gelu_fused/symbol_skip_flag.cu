// ATTACK: a __device__ flag set with cudaMemcpyToSymbol once the launcher has been called 40
// times (past the checks, inside the timing): from then on the kernel writes nothing. The replay
// repeats every copy where the recording has it, so the timed launches skip as recorded and
// their outputs are wrong.
#include <cuda_runtime.h>

__device__ int g_skip;

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                              size_t cols) {
    if (g_skip) return;
    const size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (c >= cols) return;
    const size_t i = blockIdx.y * cols + c;
    const float v = x[i] + bias[c];
    out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    static int calls = 0;
    const int skip = ++calls > 40 ? 1 : 0;
    cudaMemcpyToSymbolAsync(g_skip, &skip, sizeof skip, 0, cudaMemcpyHostToDevice, stream);
    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);
}
