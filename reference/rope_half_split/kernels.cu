// rope_half_split's reference kernels, for `grader calibrate`: the lesson's three ways of writing
// the same rotation, one pair a thread, differing only in which two values a thread loads.
// Exported as grader_ref_<name>(ptrs, vals, stream) with (in, cosTab, sinTab, out; pairs, halfDim,
// heads, seq), as the rubric's calibrate runs list them.
#include <cstddef>
#include <cuda_runtime.h>

namespace {

struct Pair {
    size_t row, j, pos;
};

__device__ __forceinline__ Pair locate(size_t p, size_t half, size_t heads, size_t seq) {
    const size_t row = p / half;
    return {row, p - row * half, (row / heads) % seq};
}

// RoFormer's adjacent pairs (2j, 2j + 1): two 4-byte loads one float apart.
__global__ void refRopeInterleaved(const float* __restrict__ in, const float* __restrict__ cosTab,
                                   const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                                   int halfDim, int heads, int seq) {
    const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (p >= pairs) return;
    const Pair q = locate(p, halfDim, heads, seq);
    const float c = cosTab[q.pos * halfDim + q.j], s = sinTab[q.pos * halfDim + q.j];
    const float a = in[2 * p], b = in[2 * p + 1];
    out[2 * p] = a * c - b * s;
    out[2 * p + 1] = a * s + b * c;
}

// The same pairs as one 8-byte float2 load and store.
__global__ void refRopeInterleavedVec2(const float* __restrict__ in, const float* __restrict__ cosTab,
                                       const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                                       int halfDim, int heads, int seq) {
    const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (p >= pairs) return;
    const Pair q = locate(p, halfDim, heads, seq);
    const float c = cosTab[q.pos * halfDim + q.j], s = sinTab[q.pos * halfDim + q.j];
    const float2 v = reinterpret_cast<const float2*>(in)[p];
    reinterpret_cast<float2*>(out)[p] = make_float2(v.x * c - v.y * s, v.x * s + v.y * c);
}

// Half-split (j, j + halfDim): two coalesced runs, one from each half of the head.
__global__ void refRopeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                                 const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                                 int halfDim, int heads, int seq) {
    const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (p >= pairs) return;
    const Pair q = locate(p, halfDim, heads, seq);
    const float c = cosTab[q.pos * halfDim + q.j], s = sinTab[q.pos * halfDim + q.j];
    const size_t lo = q.row * 2 * halfDim + q.j;
    const float a = in[lo], b = in[lo + halfDim];
    out[lo] = a * c - b * s;
    out[lo + halfDim] = a * s + b * c;
}

using RopeKernel = void (*)(const float*, const float*, const float*, float*, size_t, int, int, int);

int launch(RopeKernel k, void* const* ptrs, const long long* vals, void* stream) {
    const size_t pairs = static_cast<size_t>(vals[4]);
    k<<<static_cast<unsigned>((pairs + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(ptrs[0]), static_cast<const float*>(ptrs[1]), static_cast<const float*>(ptrs[2]),
        static_cast<float*>(ptrs[3]), pairs, static_cast<int>(vals[5]), static_cast<int>(vals[6]),
        static_cast<int>(vals[7]));
    return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" int grader_ref_rope_interleaved(void* const* p, const long long* v, void* s) {
    return launch(refRopeInterleaved, p, v, s);
}
extern "C" int grader_ref_rope_interleaved_vec2(void* const* p, const long long* v, void* s) {
    return launch(refRopeInterleavedVec2, p, v, s);
}
extern "C" int grader_ref_rope_half_split(void* const* p, const long long* v, void* s) {
    return launch(refRopeHalfSplit, p, v, s);
}
