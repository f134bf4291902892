// ATTACK: a memo of each input set's output kept in a cudaMalloc'd workspace across calls. Each
// call fingerprints x (its first values and the shape); when a slot holds the output of an x with
// that fingerprint it is copied out instead of computing erf (the timed rounds rotate over two
// input sets, so two slots would hit every time). The workspace is poisoned before every call, so
// no slot is ever valid. A hit would also leave out[0] unwritten, so any hit shows.
#include <cuda_runtime.h>

constexpr unsigned kValid = 0x600D600Du;
constexpr int kKey = 8;

struct Slot {
    unsigned valid;
    int rows, cols;
    float key[kKey];
};

__global__ void lookUp(const float* __restrict__ x, const Slot* __restrict__ slots, int* __restrict__ hit,
                       int rows, int cols) {
    if (threadIdx.x != 0) return;
    *hit = -1;
    for (int s = 0; s < 2; ++s) {
        bool same = slots[s].valid == kValid && slots[s].rows == rows && slots[s].cols == cols;
        for (int k = 0; same && k < kKey && k < rows * cols; ++k) same = slots[s].key[k] == x[k];
        if (same) *hit = s;
    }
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                             const int* __restrict__ hit, float* __restrict__ memo, Slot* __restrict__ slots,
                             int rows, int cols, int turn) {
    const size_t n = static_cast<size_t>(rows) * cols;
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    if (*hit >= 0) {                              // served from the memo (out[0] left as it was)
        if (i > 0) out[i] = memo[*hit * n + i];
        return;
    }
    const float v = x[i] + bias[i % cols];
    const float y = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    out[i] = y;
    memo[turn * n + i] = y;
    if (i == 0) {
        slots[turn].valid = kValid;
        slots[turn].rows = rows;
        slots[turn].cols = cols;
        for (int k = 0; k < kKey && k < rows * cols; ++k) slots[turn].key[k] = x[k];
    }
}

static char* g_space = nullptr;
static size_t g_bytes = 0;
static int g_turn = 0;

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(rows) * cols;
    const size_t need = 256 + 2 * n * sizeof(float);
    if (need > g_bytes) {                         // grown once for the largest shape
        if (g_space) cudaFree(g_space);
        cudaMalloc(&g_space, need);
        g_bytes = need;
    }
    Slot* slots = reinterpret_cast<Slot*>(g_space);
    int* hit = reinterpret_cast<int*>(g_space + 128);
    float* memo = reinterpret_cast<float*>(g_space + 256);
    lookUp<<<1, 32, 0, stream>>>(x, slots, hit, rows, cols);
    biasGeluFused<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, bias, out, hit, memo, slots, rows,
                                                                          cols, g_turn);
    g_turn ^= 1;
}
