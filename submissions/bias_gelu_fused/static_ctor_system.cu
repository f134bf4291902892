// Attack: a file-scope initialiser that runs a command when the library is loaded.
// Screening must refuse it before anything loads it: the marker file must never appear.
#include <cstdlib>

static int gPayload = std::system("touch /tmp/grader-attack-static-ctor-ran");

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
