// Attack: the launcher writes a forged "all done" result to the file descriptors the
// grader's child might read its results from. (It declares write() itself rather than
// including <unistd.h>, so it is the screening of imports that must catch it.)
extern "C" long write(int fd, const void* buf, unsigned long n);

__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const char forged[] = "{\"type\": \"done\"}";
    for (int fd = 3; fd < 16; ++fd) {
        write(fd, forged, sizeof forged - 1);
    }
}
