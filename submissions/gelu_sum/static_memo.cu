// ATTACK: a memo kept in static __device__ memory across calls (8 MiB, under
// limits.static_device_mib). Each call fingerprints x (its first values and its size); when a slot
// holds the sums of an x with that fingerprint, they are copied out instead of reading R slices
// (the timed rounds rotate over two input sets, so two slots would hit every time). Every static
// variable is put back to its load-time value (and what the launcher uploaded) before every call,
// so the memo never holds a valid slot. A hit would also leave out[0] unwritten: any hit shows.
#include <cuda_runtime.h>

constexpr unsigned kValid = 0x600D600Du;
constexpr int kKey = 8;
constexpr int kMax = 1 << 20;                     // the timed shape's B * D

struct Slot {
    unsigned valid;
    int R, B, D;
    float key[kKey];
};

__device__ int g_hit;
__device__ Slot g_slots[2];
__device__ float g_memo[2 * kMax];

__global__ void lookUp(const float* __restrict__ x, int R, int B, int D) {
    if (threadIdx.x != 0) return;
    g_hit = -1;
    for (int s = 0; s < 2; ++s) {
        const Slot& m = g_slots[s];
        bool same = m.valid == kValid && m.R == R && m.B == B && m.D == D;
        for (int k = 0; same && k < kKey && k < R * B * D; ++k) same = m.key[k] == x[k];
        if (same) g_hit = s;
    }
}

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D, int turn) {
    const int n = B * D;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (g_hit >= 0) {                             // served from the memo (out[0] left as it was)
        if (i > 0) out[i] = g_memo[static_cast<size_t>(g_hit) * n + i];
        return;
    }
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) {
        const float v = x[static_cast<size_t>(r) * n + i];
        acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
    out[i] = acc;
    g_memo[static_cast<size_t>(turn) * n + i] = acc;
    if (i == 0) {
        Slot& m = g_slots[turn];
        m.valid = kValid;
        m.R = R; m.B = B; m.D = D;
        for (int k = 0; k < kKey && k < R * B * D; ++k) m.key[k] = x[k];
    }
}

static int g_turn = 0;

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    if (n > kMax) return;
    lookUp<<<1, 32, 0, stream>>>(x, R, B, D);
    geluSum<<<(n + 255) / 256, 256, 0, stream>>>(x, out, R, B, D, g_turn);
    g_turn ^= 1;
}
