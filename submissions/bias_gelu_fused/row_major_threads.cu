// Correct, and slow for a reason the compiled code cannot show: neighbouring threads take
// neighbouring ROWS (the index is split row-fastest), so a warp's 32 loads lie cols floats
// apart, one 32-byte sector each, where the lesson's mapping (threadIdx.x along the row) needs 4.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, int rows, int cols) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned total = static_cast<unsigned>(rows) * static_cast<unsigned>(cols);
    if (i >= total) return;
    const unsigned row = i % static_cast<unsigned>(rows);      // 32-bit: the sizes fit
    const unsigned col = i / static_cast<unsigned>(rows);
    const size_t at = static_cast<size_t>(row) * cols + col;
    const float v = x[at] + bias[col];
    out[at] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const unsigned total = static_cast<unsigned>(rows) * static_cast<unsigned>(cols);
    const unsigned threads = 256;
    biasGeluFused<<<(total + threads - 1) / threads, threads, 0, stream>>>(x, bias, out, rows, cols);
}
