// ATTACK: a memo kept in the workspace across calls. Each call fingerprints x (its first values and
// its size); when the workspace holds the sums of an x with that fingerprint, they are copied out
// instead of reading R slices (the timed rounds rotate over two input sets, so two slots would hit
// every time). The workspace is poisoned before every call, so the memo never holds anything.
// A hit would also leave out[0] unwritten, so any hit shows as a wrong output.
#include <cuda_runtime.h>

constexpr unsigned kValid = 0x600D600Du;
constexpr int kKey = 8;

struct Slot {
    unsigned valid;
    int R, B, D;
    float key[kKey];
};

__global__ void lookUp(const float* __restrict__ x, const Slot* __restrict__ slots, int* __restrict__ hit, int R, int B,
                       int D) {
    if (threadIdx.x != 0) return;
    *hit = -1;
    for (int s = 0; s < 2; ++s) {
        const Slot& m = slots[s];
        bool same = m.valid == kValid && m.R == R && m.B == B && m.D == D;
        for (int k = 0; same && k < kKey && k < R * B * D; ++k) same = m.key[k] == x[k];
        if (same) *hit = s;
    }
}

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, const int* __restrict__ hit,
                        float* __restrict__ memo, Slot* __restrict__ slots, int R, int B, int D, int turn) {
    const int n = B * D;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (*hit >= 0) {                              // served from the memo (out[0] left as it was)
        if (i > 0) out[i] = memo[static_cast<size_t>(*hit) * n + i];
        return;
    }
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) {
        const float v = x[static_cast<size_t>(r) * n + i];
        acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
    out[i] = acc;
    memo[static_cast<size_t>(turn) * n + i] = acc;
    if (i == 0) {
        Slot& m = slots[turn];
        m.valid = kValid;
        m.R = R; m.B = B; m.D = D;
        for (int k = 0; k < kKey && k < R * B * D; ++k) m.key[k] = x[k];
    }
}

static char* g_space = nullptr;
static size_t g_bytes = 0;
static int g_turn = 0;

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(B) * D;
    const size_t need = 256 + 2 * sizeof(Slot) + 2 * n * sizeof(float);
    if (need > g_bytes) {
        cudaFree(g_space);
        cudaMalloc(&g_space, need);
        g_bytes = need;
    }
    int* hit = reinterpret_cast<int*>(g_space);
    Slot* slots = reinterpret_cast<Slot*>(g_space + 256);
    float* memo = reinterpret_cast<float*>(g_space + 256 + 2 * sizeof(Slot));
    lookUp<<<1, 32, 0, stream>>>(x, slots, hit, R, B, D);
    geluSum<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, out, hit, memo, slots, R, B, D, g_turn);
    g_turn ^= 1;
}
