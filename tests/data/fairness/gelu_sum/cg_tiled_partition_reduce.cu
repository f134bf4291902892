// Idiom: cooperative groups' tiled_partition<32> and cg::reduce for a warp per output. Tiles are documented (docs/design.md) as needing a GPU: the emulator must say so, never call it incorrect.
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

__global__ void geluSumTiles(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    const int o = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (o >= n) return;
    float acc = 0.f;
    for (int r = warp.thread_rank(); r < R; r += 32) {
        const float v = x[static_cast<size_t>(r) * n + o];
        acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
    acc = cg::reduce(warp, acc, cg::plus<float>());
    if (warp.thread_rank() == 0) out[o] = acc;
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    geluSumTiles<<<(n + 7) / 8, 256, 0, stream>>>(x, out, R, n);
}
