// Correct, but __launch_bounds__(1024, 2) caps the kernel at 32 registers a thread while each
// thread keeps 48 partial values live across a loop, so ptxas spills registers to local memory
// (ptxas -v: "spill stores"). The partial values change nothing in the output.
__global__ void __launch_bounds__(1024, 2) biasGeluFused(const float* x, const float* bias, float* out,
                                                          size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col >= cols) return;
    const size_t i = blockIdx.y * cols + col;
    const float v = x[i] + bias[col];
    float acc[48];
#pragma unroll
    for (int k = 0; k < 48; ++k) acc[k] = v * (k + 1);
    for (int r = 0; r < static_cast<int>(cols & 3) + 1; ++r) {
#pragma unroll
        for (int k = 0; k < 48; ++k) acc[k] = fmaf(acc[k], 0.5f, acc[(k + 7) % 48] * 0.25f);
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 48; ++k) s += acc[k];
    out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f)) + (s == 0.123456789f ? 1e-30f : 0.0f);
}
