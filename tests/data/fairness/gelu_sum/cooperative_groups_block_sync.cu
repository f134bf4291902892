// Idiom: cooperative_groups' this_thread_block() and block.sync() (a block-level sync only) around a static __shared__ reduction over r; 32 outputs a block, 4 rows of threads.
#include <cuda_runtime.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void geluSumCg(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    cg::thread_block block = cg::this_thread_block();
    __shared__ float part[4][32];
    const int o = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (o < n)
        for (int r = threadIdx.y; r < R; r += 4) acc += geluErf(x[static_cast<size_t>(r) * n + o]);
    part[threadIdx.y][threadIdx.x] = acc;
    block.sync();
    if (threadIdx.y == 0 && o < n) out[o] = part[0][threadIdx.x] + part[1][threadIdx.x] + part[2][threadIdx.x] + part[3][threadIdx.x];
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    geluSumCg<<<(n + 31) / 32, dim3(32, 4), 0, stream>>>(x, out, R, n);
}
