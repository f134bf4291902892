// Idiom: the CUDA samples' SharedMemory<T> struct (extern __shared__ inside a templated operator T*), a kernel templated on the rows of threads, partial sums over r reduced in dynamic shared memory.
#include <cuda_runtime.h>

template <class T>
struct SharedMemory {
    __device__ inline operator T*() {
        extern __shared__ int __smem[];
        return (T*)__smem;
    }
};

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

template <unsigned ROWS>
__global__ void geluSumRows(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    float* sdata = SharedMemory<float>();
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.f;
    if (o < n)
        for (int r = threadIdx.y; r < R; r += ROWS) acc += geluErf(x[static_cast<size_t>(r) * n + o]);
    sdata[threadIdx.y * blockDim.x + threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < n) {
        float s = 0.f;
#pragma unroll
        for (unsigned k = 0; k < ROWS; ++k) s += sdata[k * blockDim.x + threadIdx.x];
        out[o] = s;
    }
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    constexpr unsigned kRows = 4;
    const dim3 block(64, kRows);
    geluSumRows<kRows><<<(n + 63) / 64, block, block.x * block.y * sizeof(float), stream>>>(x, out, R, n);
}
