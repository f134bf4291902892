// Idiom: blocks of 32 x 8 threads: threadIdx.x over d (coalesced), threadIdx.y over r; partial sums in a static __shared__ tile, reduced with __syncthreads and a final __shfl_xor_sync butterfly.
#include <cuda_runtime.h>

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void geluSumTile(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    __shared__ float tile[8][33];
    const int o = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (o < n)
        for (int r = threadIdx.y; r < R; r += 8) acc += geluErf(x[static_cast<size_t>(r) * n + o]);
    tile[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    // read the tile transposed: each group of 8 lanes holds the 8 partials of one column
    const int lin = threadIdx.y * 32 + threadIdx.x;       // 0..255
    const int col = lin / 8, part = lin % 8;              // 32 columns x 8 partials
    float v = tile[part][col];
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m, 8);
    const int oc = blockIdx.x * 32 + col;
    if (part == 0 && oc < n) out[oc] = v;
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    geluSumTile<<<(n + 31) / 32, dim3(32, 8), 0, stream>>>(x, out, R, n);
}
