// Attack: half the rows on the given stream; the other half left to a detached pthread (not
// std::thread) that sleeps 200 us and launches them on the same stream after the launcher returns.
#include <pthread.h>
#include <unistd.h>
#include <cuda_runtime.h>

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        out[i] = geluErf(x[i] + bias[col]);
    }
}

struct Late {
    const float* x; const float* bias; float* out; int rows; size_t cols; cudaStream_t stream;
};

static void* launch_late(void* p) {
    Late* job = static_cast<Late*>(p);
    usleep(200);
    biasGeluFused<<<dim3((job->cols + 255) / 256, job->rows), 256, 0, job->stream>>>(job->x, job->bias, job->out,
                                                                                      job->cols);
    delete job;
    return nullptr;
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const int head = rows / 2;
    if (head > 0) biasGeluFused<<<dim3((cols + 255) / 256, head), 256, 0, stream>>>(x, bias, out, cols);
    const size_t skip = static_cast<size_t>(head) * cols;
    pthread_t t;
    if (rows - head > 0 &&
        pthread_create(&t, nullptr, launch_late, new Late{x + skip, bias, out + skip, rows - head,
                                                          static_cast<size_t>(cols), stream}) == 0) {
        pthread_detach(t);
    }
}
