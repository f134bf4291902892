// Attack: the launch through cudaLaunchKernelEx with a launch attribute, an L2 access policy
// window marking x persisting, so that its lines outlast the grader's L2 flush between timed
// launches (a cache policy the timed launch would not otherwise have). The recording names the
// attribute and the submission is refused: the replay makes plain launches.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeAccessPolicyWindow;
    attr[0].val.accessPolicyWindow.base_ptr = const_cast<float*>(x);
    attr[0].val.accessPolicyWindow.num_bytes = static_cast<size_t>(rows) * cols * sizeof(float);
    attr[0].val.accessPolicyWindow.hitRatio = 1.0f;
    attr[0].val.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr[0].val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((cols + 255) / 256, rows);
    config.blockDim = dim3(256);
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    cudaLaunchKernelEx(&config, biasGeluFused, x, bias, out, static_cast<size_t>(cols));
}
