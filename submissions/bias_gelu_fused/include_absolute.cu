// Attack: pulls a file from outside the submission into the build (and its compile errors
// into the report).
#include "/etc/hostname"

__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {}
