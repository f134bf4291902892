// Dynamic shared memory for the bias, with cudaFuncSetAttribute on the student's own kernel.
__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    extern __shared__ float sBias[];
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    sBias[threadIdx.x] = col < cols ? bias[col] : 0.0f;
    __syncthreads();
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + sBias[threadIdx.x];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const int threads = 256;
    const size_t shared = threads * sizeof(float);
    cudaFuncSetAttribute(biasGeluFused, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    cudaFuncSetCacheConfig(biasGeluFused, cudaFuncCachePreferL1);
    biasGeluFused<<<dim3((cols + threads - 1) / threads, rows), threads, shared, stream>>>(x, bias, out, cols);
}
