// A hand-written kernel with a CUB block reduction: a block per output column d-range, its threads
// over r (eight rows of threads), the eight shares of each column summed with cub::BlockReduce;
// 32 columns a block, so consecutive threads of a warp read consecutive d.
#include <cub/block/block_reduce.cuh>
#include <cuda_runtime.h>

constexpr int kCols = 32, kRows = 8;

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    using Reduce = cub::BlockReduce<float, kCols, cub::BLOCK_REDUCE_WARP_REDUCTIONS, kRows>;
    __shared__ float partial[kRows][kCols];
    const int n = B * D;
    const int i = blockIdx.x * kCols + threadIdx.x;
    float acc = 0.0f;
    if (i < n) {
        for (int r = threadIdx.y; r < R; r += kRows) {
            const float v = x[static_cast<size_t>(r) * n + i];
            acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
        }
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    __shared__ typename Reduce::TempStorage temp;
    for (int c = 0; c < kCols; ++c) {
        const float mine = threadIdx.x == c ? partial[threadIdx.y][c] : 0.0f;
        const float sum = Reduce(temp).Sum(mine);
        __syncthreads();
        if (threadIdx.x == 0 && threadIdx.y == 0 && blockIdx.x * kCols + c < n) out[blockIdx.x * kCols + c] = sum;
    }
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    geluSum<<<(n + kCols - 1) / kCols, dim3(kCols, kRows), 0, stream>>>(x, out, R, B, D);
}
