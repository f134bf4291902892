// GELU's constants in __constant__ memory.
__constant__ float kGelu[2] = {0.5f, 0.70710678f};

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = kGelu[0] * v * (1.0f + erff(v * kGelu[1]));
    }
}
