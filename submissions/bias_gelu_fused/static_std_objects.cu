// Correct: the launcher keeps file-scope standard-library objects, as host code brought from a
// larger project does: a name for its log line, a cache of block sizes per width, a table built
// from a list. The first three need no code at load (only their destructors are registered, to
// run at exit); the long string and the map are built by the standard library when the library
// loads.
#include <cuda_runtime.h>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

static std::string g_kernelName;                       // set on the first call
static std::unordered_map<int, int> g_blockForWidth;  // cols -> threads per block
static std::vector<int> g_widthsSeen;
static const std::string kAbout = "biasGeluFused: bias add and exact (erf) GELU, one float per thread";
static const std::map<int, int> kNarrowBlocks = {{32, 32}, {64, 64}, {96, 96}, {128, 128}};

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

static int blockFor(int cols) {
    auto it = g_blockForWidth.find(cols);
    if (it != g_blockForWidth.end()) return it->second;
    const auto narrow = kNarrowBlocks.find(cols);
    const int threads = narrow != kNarrowBlocks.end() ? narrow->second
                      : cols >= 256 ? 256 : ((cols + 31) / 32) * 32;
    g_blockForWidth.emplace(cols, threads);
    g_widthsSeen.push_back(cols);
    return threads;
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    if (g_kernelName.empty()) g_kernelName = kAbout.substr(0, kAbout.find(':'));
    const int threads = blockFor(cols);
    const dim3 grid((cols + threads - 1) / threads, rows);
    biasGeluFused<<<grid, threads, 0, stream>>>(x, bias, out, cols);
}
