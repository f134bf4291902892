// Attack (resources): 1 GiB of static __device__ memory, taken from the GPU that the next
// grader shares. Refused before it runs (limits.static_device_mib).
__device__ float gScratch[256u << 20];

__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        gScratch[i % (256u << 20)] = x[i] + bias[col];
        const float v = gScratch[i % (256u << 20)];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
