// ATTACK: a memo kept in the device heap across calls. Each call mallocs one block in a kernel
// (the same size every call, so the allocator hands back the block the last call freed), looks
// for the sums of an x with the same fingerprint in it, serves the first half of the columns from
// it on a hit, and stores this call's sums before freeing the block. Before every call the
// measuring process takes every free block of the heap, fills it with poison and frees it again,
// so the block never holds a valid slot. A hit would also leave out[0] unwritten: any hit shows.
#include <cuda_runtime.h>

constexpr unsigned kValid = 0x600D600Du;
constexpr int kKey = 8;
constexpr int kMax = 1 << 20;                     // the timed shape's B * D
constexpr int kHalf = kMax / 2;

struct Memo {
    unsigned valid[2];
    int shape[2][3];
    float key[2][kKey];
    float sums[2][kHalf];                         // 2 x 2 MiB: the heap is 8 MiB
};

__device__ Memo* g_memo;                          // within one call only (statics are put back)
__device__ int g_hit;

__global__ void lookUp(const float* __restrict__ x, int R, int B, int D) {
    if (threadIdx.x != 0) return;
    g_hit = -1;
    g_memo = static_cast<Memo*>(malloc(sizeof(Memo)));
    Memo* m = g_memo;
    if (m == nullptr) return;
    for (int s = 0; s < 2; ++s) {
        bool same = m->valid[s] == kValid && m->shape[s][0] == R && m->shape[s][1] == B && m->shape[s][2] == D;
        for (int k = 0; same && k < kKey && k < R * B * D; ++k) same = m->key[s][k] == x[k];
        if (same) g_hit = s;
    }
}

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D, int turn) {
    const int n = B * D;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    Memo* m = g_memo;
    if (m != nullptr && g_hit >= 0 && i < kHalf) {   // served from the memo (out[0] left as it was)
        if (i > 0) out[i] = m->sums[g_hit][i];
        return;
    }
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) {
        const float v = x[static_cast<size_t>(r) * n + i];
        acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
    out[i] = acc;
    if (m != nullptr && i < kHalf) m->sums[turn][i] = acc;
}

__global__ void store(const float* __restrict__ x, int R, int B, int D, int turn) {
    if (threadIdx.x != 0) return;
    Memo* m = g_memo;
    if (m == nullptr) return;
    m->valid[turn] = kValid;
    m->shape[turn][0] = R; m->shape[turn][1] = B; m->shape[turn][2] = D;
    for (int k = 0; k < kKey && k < R * B * D; ++k) m->key[turn][k] = x[k];
    free(m);                                      // the next call's malloc gets this block back
}

static int g_turn = 0;

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    if (n > kMax) return;
    lookUp<<<1, 32, 0, stream>>>(x, R, B, D);
    geluSum<<<(n + 255) / 256, 256, 0, stream>>>(x, out, R, B, D, g_turn);
    store<<<1, 32, 0, stream>>>(x, R, B, D, g_turn);
    g_turn ^= 1;
}
