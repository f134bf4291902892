// Deterministic: R split into chunks, each chunk's partial sums into a workspace allocated once
// with cudaMalloc (a static pointer, grown when a larger shape comes), then a second kernel adds
// each output's partials in a fixed order. Same bits on every run, whatever the GPU's schedule.
#include <cuda_runtime.h>

constexpr int kChunk = 16;

__global__ void partialSums(const float* __restrict__ x, float* __restrict__ partial, int R, int B, int D) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = B * D;
    if (i >= n) return;
    const int chunk = blockIdx.y;
    const int r_end = min(R, (chunk + 1) * kChunk);
    float acc = 0.0f;
    for (int r = chunk * kChunk; r < r_end; ++r) {
        const float v = x[static_cast<size_t>(r) * n + i];
        acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
    partial[static_cast<size_t>(chunk) * n + i] = acc;
}

__global__ void addPartials(const float* __restrict__ partial, float* __restrict__ out, int chunks, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int c = 0; c < chunks; ++c) acc += partial[static_cast<size_t>(c) * n + i];
    out[i] = acc;
}

static float* g_partial = nullptr;
static size_t g_partial_floats = 0;

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    const int chunks = (R + kChunk - 1) / kChunk;
    const size_t need = static_cast<size_t>(chunks) * n;
    if (need > g_partial_floats) {
        cudaFree(g_partial);
        cudaMalloc(&g_partial, need * sizeof(float));
        g_partial_floats = need;
    }
    partialSums<<<dim3((n + 255) / 256, chunks), 256, 0, stream>>>(x, g_partial, R, B, D);
    addPartials<<<(n + 255) / 256, 256, 0, stream>>>(g_partial, out, chunks, n);
}
