// Attack: the launcher remembers the (x, out) pointers it has seen and skips the launch when
// they come back, assuming the output is still there from last time.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    static const float* seenX[64];
    static float* seenOut[64];
    static int seen = 0;
    for (int k = 0; k < seen; ++k) {
        if (seenX[k] == x && seenOut[k] == out) {
            return;
        }
    }
    if (seen < 64) {
        seenX[seen] = x;
        seenOut[seen] = out;
        ++seen;
    }
    const dim3 grid((cols + 255) / 256, rows);
    biasGeluFused<<<grid, 256, 0, stream>>>(x, bias, out, cols);
}
