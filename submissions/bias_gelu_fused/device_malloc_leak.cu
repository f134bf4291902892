// Attack (resources): every thread mallocs 1 MiB on the device heap and never frees it.
// The heap is capped (limits.device_heap_mib, 8 MiB): malloc returns NULL past the cap, on
// the GPU and on the emulator alike, and this kernel then falls back to registers; the
// machine's memory is never at stake.
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        float* scratch = static_cast<float*>(malloc(1 << 20));
        float v = x[i] + bias[col];
        if (scratch) {
            scratch[0] = v;
            v = scratch[0];
        }
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
