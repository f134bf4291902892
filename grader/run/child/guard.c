// The grading child's wall: a seccomp filter installed on every thread of the
// child (SECCOMP_FILTER_FLAG_TSYNC) after the CUDA context exists and before
// the submission's library is loaded.
//
// Policy: a list of system calls a kernel launch, CUDA, PyTorch and the
// worker need (reading, memory, threads, time, futexes, ioctls on the
// device files already open), some with their arguments checked (a clone
// must make a thread; an open must not write, create or truncate; a signal
// may only go to this process). Everything else traps: starting programs,
// new processes, sockets, writing or deleting files, ptrace, signals to
// other processes, io_uring, mount, bpf and the rest.
//
// A trapped call never runs. The SIGSYS handler writes one line naming it to
// the report pipe the parent reads and ends the process, so the parent can
// tell the student what their code tried ("tried to start a program").
//
// Profile mode (the counters' process, run under Nsight Compute: no host code
// of the submission runs there, only its device code) is the enforced policy
// plus what ncu's injected library was measured to call once the wall is up
// (scripts/gpu-check's audit of it on the H200): its socket to the ncu front
// end, and the files it keeps in the child's own folder. Starting programs,
// new processes, ptrace and signals to other processes stay trapped.
//
// Offline mode (the recorder without a GPU, which may run beside another student's timing) is the
// enforced policy with ioctl narrowed to what a terminal or a plain descriptor answers (TCGETS,
// the window size, FIONREAD, FIONBIO, close-on-exec): every request to the GPU's driver is an
// ioctl, so none reaches it, and the process never makes a context. A trapped driver call there
// is how the recorder learns the launcher needs the GPU (the parent records it again, in its lane).
//
// No-memfd flag (GUARD_NO_MEMFD, or'd into any enforcing mode): memfd_create traps too. Set where
// no control group holds the child's memory and RLIMIT_AS stands in (walls.py): a memory file
// written and never mapped is no address space, so nothing would count it. The other ways to
// shared memory are held already: a file under /dev/shm (shm_open) is an open that creates (it
// traps), shmget traps, and a shared anonymous mapping is address space (RLIMIT_AS counts it).
//
// Audit mode (measurement only, never used to grade) traps every call,
// writes a line for each and then makes the call itself from a stub the
// filter lets through by its address: the list of what a real run needs.
//
// Built once per host into the grader's cache with the host C compiler;
// loaded by grader/run/child/guard.py through ctypes.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__x86_64__)
#define GUARD_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define GUARD_ARCH AUDIT_ARCH_AARCH64
#else
#error "the grader's guard supports x86-64 and aarch64"
#endif

#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS 0x80000000U
#endif
#ifndef SECCOMP_FILTER_FLAG_TSYNC
#define SECCOMP_FILTER_FLAG_TSYNC 1
#endif
#ifndef __O_TMPFILE
#define __O_TMPFILE 020000000
#endif
#define PR_SET_MM_ 35
#define PR_SET_PTRACER_ 0x59616d61
#define TIOCSTI_ 0x5412
#define TIOCLINUX_ 0x541C
#define GUARD_EXIT_CODE 97   // the child's exit status after a blocked call (guard.py: EXIT_CODE)
#define GUARD_NO_MEMFD 16    // a flag or'd into the mode: memfd_create traps (guard.py: NO_MEMFD)

enum rule {
    R_ALLOW,         // always
    R_CLONE,         // only with CLONE_THREAD (threads, not processes)
    R_OPEN_FLAGS1,   // open(path, flags): flags must not write, create or truncate
    R_OPEN_FLAGS2,   // openat(dir, path, flags): likewise
    R_SELF0,         // arg0 is 0 or this process (sched_setaffinity, tgkill, ...)
    R_SELF1,         // arg1 is 0 or this process (setpriority)
    R_KILL,          // kill(pid, sig): pid is this process, or sig is 0 (a liveness check)
    R_SIGACTION,     // rt_sigaction: anything but SIGSYS (the guard's own handler)
    R_IOCTL,         // ioctl: anything but pushing characters into a terminal
    R_PRLIMIT,       // prlimit64: read only (new limit NULL)
    R_PRCTL,         // prctl: anything but PR_SET_MM and PR_SET_PTRACER
    R_ENOSYS,        // answered ENOSYS, so the C library falls back (clone3 -> clone, openat2)
};

struct entry {
    long nr;
    const char* name;
    enum rule rule;
};

#define E(n, r) {SYS_##n, #n, r}
// Allowed in profile mode only, checked before kPolicy (an open there may write).
static const struct entry kProfile[] = {
    E(socket, R_ALLOW), E(connect, R_ALLOW), E(bind, R_ALLOW), E(getsockname, R_ALLOW),
    E(getpeername, R_ALLOW), E(getsockopt, R_ALLOW), E(setsockopt, R_ALLOW), E(sendto, R_ALLOW),
    E(recvfrom, R_ALLOW), E(sendmsg, R_ALLOW), E(recvmsg, R_ALLOW), E(shutdown, R_ALLOW),
    E(openat, R_ALLOW), E(unlinkat, R_ALLOW), E(symlinkat, R_ALLOW), E(fchmodat, R_ALLOW), E(fchmod, R_ALLOW),
    E(ftruncate, R_ALLOW), E(mkdirat, R_ALLOW), E(renameat, R_ALLOW),
#if defined(__x86_64__)
    E(open, R_ALLOW), E(unlink, R_ALLOW), E(symlink, R_ALLOW), E(chmod, R_ALLOW), E(mkdir, R_ALLOW),
    E(rename, R_ALLOW),
#endif
};
static const struct entry kPolicy[] = {
    // reading and writing descriptors already open
    E(read, R_ALLOW), E(write, R_ALLOW), E(readv, R_ALLOW), E(writev, R_ALLOW), E(pread64, R_ALLOW),
    E(pwrite64, R_ALLOW), E(preadv, R_ALLOW), E(pwritev, R_ALLOW), E(preadv2, R_ALLOW), E(pwritev2, R_ALLOW),
    E(close, R_ALLOW), E(lseek, R_ALLOW), E(fstat, R_ALLOW), E(newfstatat, R_ALLOW), E(statx, R_ALLOW),
    E(fstatfs, R_ALLOW), E(statfs, R_ALLOW), E(getdents64, R_ALLOW), E(getcwd, R_ALLOW), E(readlinkat, R_ALLOW),
    E(faccessat, R_ALLOW), E(faccessat2, R_ALLOW), E(fcntl, R_ALLOW), E(dup, R_ALLOW), E(dup3, R_ALLOW),
    E(pipe2, R_ALLOW), E(ppoll, R_ALLOW), E(pselect6, R_ALLOW), E(epoll_create1, R_ALLOW), E(epoll_ctl, R_ALLOW),
    E(epoll_pwait, R_ALLOW), E(eventfd2, R_ALLOW), E(getxattr, R_ALLOW), E(lgetxattr, R_ALLOW),
    E(fgetxattr, R_ALLOW), E(flistxattr, R_ALLOW), E(chdir, R_ALLOW), E(fchdir, R_ALLOW), E(umask, R_ALLOW),
    E(timerfd_create, R_ALLOW), E(timerfd_settime, R_ALLOW), E(timerfd_gettime, R_ALLOW), E(memfd_create, R_ALLOW),
    E(openat, R_OPEN_FLAGS2), E(ioctl, R_IOCTL),
    // memory
    E(mmap, R_ALLOW), E(munmap, R_ALLOW), E(mprotect, R_ALLOW), E(mremap, R_ALLOW), E(madvise, R_ALLOW),
    E(brk, R_ALLOW), E(msync, R_ALLOW), E(mincore, R_ALLOW), E(mlock, R_ALLOW), E(munlock, R_ALLOW),
    E(membarrier, R_ALLOW), E(get_mempolicy, R_ALLOW), E(mbind, R_ALLOW), E(set_mempolicy, R_ALLOW),
    // threads, signals to itself, time
    E(clone, R_CLONE), E(clone3, R_ENOSYS), E(futex, R_ALLOW), E(set_robust_list, R_ALLOW),
    E(get_robust_list, R_ALLOW), E(set_tid_address, R_ALLOW), E(rseq, R_ALLOW), E(exit, R_ALLOW),
    E(exit_group, R_ALLOW), E(wait4, R_ALLOW), E(waitid, R_ALLOW), E(restart_syscall, R_ALLOW),
    E(rt_sigreturn, R_ALLOW), E(rt_sigprocmask, R_ALLOW), E(rt_sigaction, R_SIGACTION), E(sigaltstack, R_ALLOW),
    E(rt_sigpending, R_ALLOW), E(rt_sigtimedwait, R_ALLOW), E(rt_sigsuspend, R_ALLOW), E(kill, R_KILL),
    E(tgkill, R_SELF0), E(rt_sigqueueinfo, R_SELF0), E(rt_tgsigqueueinfo, R_SELF0),
    E(sched_yield, R_ALLOW), E(sched_getaffinity, R_ALLOW), E(sched_setaffinity, R_SELF0),
    E(sched_getparam, R_ALLOW), E(sched_getscheduler, R_ALLOW), E(sched_get_priority_max, R_ALLOW),
    E(sched_get_priority_min, R_ALLOW), E(sched_getattr, R_ALLOW), E(sched_setscheduler, R_SELF0),
    E(sched_setparam, R_SELF0), E(sched_setattr, R_SELF0), E(getpriority, R_ALLOW), E(setpriority, R_SELF1),
    E(clock_gettime, R_ALLOW), E(clock_getres, R_ALLOW), E(gettimeofday, R_ALLOW), E(nanosleep, R_ALLOW),
    E(clock_nanosleep, R_ALLOW), E(getitimer, R_ALLOW), E(setitimer, R_ALLOW), E(times, R_ALLOW),
    // who and where it is
    E(getpid, R_ALLOW), E(gettid, R_ALLOW), E(getppid, R_ALLOW), E(getuid, R_ALLOW), E(geteuid, R_ALLOW),
    E(getgid, R_ALLOW), E(getegid, R_ALLOW), E(getgroups, R_ALLOW), E(getresuid, R_ALLOW), E(getresgid, R_ALLOW),
    E(getpgid, R_ALLOW), E(getsid, R_ALLOW), E(getrlimit, R_ALLOW), E(prlimit64, R_PRLIMIT), E(getrusage, R_ALLOW),
    E(uname, R_ALLOW), E(sysinfo, R_ALLOW), E(getrandom, R_ALLOW), E(capget, R_ALLOW), E(prctl, R_PRCTL),
    E(getcpu, R_ALLOW),
#if defined(__x86_64__)
    E(open, R_OPEN_FLAGS1), E(stat, R_ALLOW), E(lstat, R_ALLOW), E(access, R_ALLOW), E(readlink, R_ALLOW),
    E(getdents, R_ALLOW), E(pipe, R_ALLOW), E(dup2, R_ALLOW), E(poll, R_ALLOW), E(select, R_ALLOW),
    E(epoll_create, R_ALLOW), E(epoll_wait, R_ALLOW), E(eventfd, R_ALLOW), E(arch_prctl, R_ALLOW),
    E(time, R_ALLOW), E(alarm, R_ALLOW), E(getpgrp, R_ALLOW),
#endif
#ifdef SYS_epoll_pwait2
    E(epoll_pwait2, R_ALLOW),
#endif
#ifdef SYS_futex_waitv
    E(futex_waitv, R_ALLOW),
#endif
#ifdef SYS_openat2
    E(openat2, R_ENOSYS),
#endif
};
#undef E

// Names of calls the policy traps, for the report (the handler has only the number).
#define N(n) {SYS_##n, #n, R_ALLOW}
static const struct entry kNames[] = {
    N(execve), N(execveat), N(socket), N(socketpair), N(connect), N(bind), N(listen), N(sendto), N(sendmsg),
    N(ptrace), N(process_vm_readv), N(process_vm_writev), N(unlinkat), N(renameat), N(mkdirat), N(fchmodat),
    N(fchownat), N(fchmod), N(fchown), N(linkat), N(symlinkat), N(mknodat), N(truncate), N(ftruncate),
    N(tkill), N(setrlimit), N(mount), N(umount2), N(unshare), N(setns), N(bpf), N(perf_event_open),
    N(io_uring_setup), N(io_uring_enter), N(pidfd_open), N(pidfd_send_signal), N(pidfd_getfd), N(userfaultfd),
    N(shmget), N(shmat), N(msgget), N(semget), N(keyctl), N(add_key), N(setuid), N(setgid), N(setresuid),
    N(init_module), N(finit_module), N(reboot), N(chroot), N(pivot_root), N(name_to_handle_at),
    N(open_by_handle_at), N(kcmp), N(seccomp), N(fallocate), N(renameat2), N(copy_file_range), N(sendfile),
    N(splice), N(inotify_init1), N(fanotify_init), N(utimensat), N(syncfs), N(sync), N(fsync), N(fdatasync),
#ifdef SYS_memfd_secret
    N(memfd_secret),
#endif
#if defined(__x86_64__)
    N(fork), N(vfork), N(creat), N(unlink), N(rename), N(mkdir), N(rmdir), N(chmod), N(chown), N(lchown),
    N(link), N(symlink), N(mknod), N(iopl), N(ioperm), N(utime), N(utimes),
#endif
};
#undef N

static int g_report_fd = -1;
static int g_audit = 0;
static int g_offline = 0;
static int g_no_memfd = 0;
static long g_self = 0;

// ---------------------------------------------------------------------------
// Raw system calls: async-signal-safe, and (in audit mode) the one place the
// filter lets anything through by address.
// ---------------------------------------------------------------------------
long grader_guard_raw(long nr, long a, long b, long c, long d, long e, long f);
#if defined(__x86_64__)
__asm__(
    ".text\n.globl grader_guard_raw\n.type grader_guard_raw,@function\n"
    "grader_guard_raw:\n"
    "  mov %rdi, %rax\n  mov %rsi, %rdi\n  mov %rdx, %rsi\n  mov %rcx, %rdx\n"
    "  mov %r8, %r10\n  mov %r9, %r8\n  mov 8(%rsp), %r9\n"
    ".globl grader_guard_raw_site\ngrader_guard_raw_site:\n"
    "  syscall\n"
    ".globl grader_guard_raw_end\ngrader_guard_raw_end:\n"
    "  ret\n");
#else
__asm__(
    ".text\n.globl grader_guard_raw\n.type grader_guard_raw,%function\n"
    "grader_guard_raw:\n"
    "  mov x8, x0\n  mov x0, x1\n  mov x1, x2\n  mov x2, x3\n  mov x3, x4\n  mov x4, x5\n  mov x5, x6\n"
    ".globl grader_guard_raw_site\ngrader_guard_raw_site:\n"
    "  svc #0\n"
    ".globl grader_guard_raw_end\ngrader_guard_raw_end:\n"
    "  ret\n");
#endif
extern char grader_guard_raw_site[], grader_guard_raw_end[];

static size_t put_str(char* buf, size_t at, size_t cap, const char* s) {
    while (*s && at + 1 < cap) buf[at++] = *s++;
    return at;
}

static size_t put_hex(char* buf, size_t at, size_t cap, unsigned long v) {
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v && n < 16);
    at = put_str(buf, at, cap, "0x");
    while (n && at + 1 < cap) buf[at++] = tmp[--n];
    return at;
}

static size_t put_dec(char* buf, size_t at, size_t cap, long v) {
    char tmp[24];
    int n = 0;
    unsigned long u = v < 0 ? -(unsigned long)v : (unsigned long)v;
    if (v < 0 && at + 1 < cap) buf[at++] = '-';
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u && n < 20);
    while (n && at + 1 < cap) buf[at++] = tmp[--n];
    return at;
}

static const char* name_of(long nr) {
    for (size_t i = 0; i < sizeof kPolicy / sizeof kPolicy[0]; ++i)
        if (kPolicy[i].nr == nr) return kPolicy[i].name;
    for (size_t i = 0; i < sizeof kNames / sizeof kNames[0]; ++i)
        if (kNames[i].nr == nr) return kNames[i].name;
    return "?";
}

// One line: "<audit|blocked> <nr> <name> <arg0> <arg1> <arg2> [path]\n", written in one write().
static void report(const char* what, long nr, const unsigned long* args, const char* path) {
    char line[512];
    size_t at = 0;
    at = put_str(line, at, sizeof line, what);
    at = put_str(line, at, sizeof line, " ");
    at = put_dec(line, at, sizeof line, nr);
    at = put_str(line, at, sizeof line, " ");
    at = put_str(line, at, sizeof line, name_of(nr));
    for (int i = 0; i < 3; ++i) {
        at = put_str(line, at, sizeof line, " ");
        at = put_hex(line, at, sizeof line, args[i]);
    }
    if (path) {
        at = put_str(line, at, sizeof line, " ");
        for (size_t i = 0; path[i] && i < 200 && at + 2 < sizeof line; ++i)
            line[at++] = (path[i] == '\n' || path[i] == ' ') ? '_' : path[i];
    }
    line[at++] = '\n';
    grader_guard_raw(SYS_write, g_report_fd, (long)line, (long)at, 0, 0, 0);
}

static const char* path_arg(long nr, const unsigned long* a) {
#if defined(__x86_64__)
    if (nr == SYS_open || nr == SYS_creat || nr == SYS_unlink || nr == SYS_mkdir || nr == SYS_rename ||
        nr == SYS_execve || nr == SYS_chmod)
        return (const char*)a[0];
#endif
    if (nr == SYS_openat || nr == SYS_unlinkat || nr == SYS_mkdirat || nr == SYS_execveat) return (const char*)a[1];
    return 0;
}

static void on_sigsys(int sig, siginfo_t* info, void* uctx) {
    (void)sig;
    ucontext_t* uc = (ucontext_t*)uctx;
    unsigned long a[6];
    long nr = info->si_syscall;
#if defined(__x86_64__)
    greg_t* g = uc->uc_mcontext.gregs;
    a[0] = g[REG_RDI]; a[1] = g[REG_RSI]; a[2] = g[REG_RDX]; a[3] = g[REG_R10]; a[4] = g[REG_R8]; a[5] = g[REG_R9];
#else
    for (int i = 0; i < 6; ++i) a[i] = uc->uc_mcontext.regs[i];
#endif
    if (g_audit) {
        report("audit", nr, a, path_arg(nr, a));
        long r = grader_guard_raw(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
#if defined(__x86_64__)
        g[REG_RAX] = r;
#else
        uc->uc_mcontext.regs[0] = r;
#endif
        return;
    }
    report("blocked", nr, a, path_arg(nr, a));
    grader_guard_raw(SYS_exit_group, GUARD_EXIT_CODE, 0, 0, 0, 0, 0);
}

// ---------------------------------------------------------------------------
// The filter
// ---------------------------------------------------------------------------
#define MAX_INSNS 1024
struct builder {
    struct sock_filter insn[MAX_INSNS];
    unsigned n;
    int overflow;
};

static void emit(struct builder* b, unsigned short code, unsigned k, unsigned char jt, unsigned char jf) {
    if (b->n >= MAX_INSNS) {
        b->overflow = 1;
        return;
    }
    b->insn[b->n++] = (struct sock_filter)BPF_JUMP(code, k, jt, jf);
}

#define LD(off) emit(b, BPF_LD | BPF_W | BPF_ABS, (off), 0, 0)
#define RET(v) emit(b, BPF_RET | BPF_K, (v), 0, 0)
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))
#define ARG_HI(i) (offsetof(struct seccomp_data, args) + 8 * (i) + 4)
#define ALLOW SECCOMP_RET_ALLOW
#define TRAP SECCOMP_RET_TRAP

// arg i (64 bits) equals v (32 bits, zero-extended): ALLOW; else fall through to TRAP.
static void allow_if_arg_is(struct builder* b, int i, unsigned v) {
    LD(ARG_HI(i));
    emit(b, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3);
    LD(ARG_LO(i));
    emit(b, BPF_JMP | BPF_JEQ | BPF_K, v, 0, 1);
    RET(ALLOW);
}

// The low 32 bits of arg i equal one of values: TRAP; else ALLOW.
static void trap_if_arg_is_one_of(struct builder* b, int i, const unsigned* values, int n) {
    LD(ARG_LO(i));
    for (int k = 0; k < n; ++k)
        emit(b, BPF_JMP | BPF_JEQ | BPF_K, values[k], (unsigned char)(n - 1 - k), k == n - 1 ? 1 : 0);
    RET(TRAP);
    RET(ALLOW);
}

// The checks of one rule, for a call whose number matched; ends in a return.
static void rule_body(struct builder* b, enum rule r) {
    switch (r) {
        case R_ALLOW:
            RET(ALLOW);
            break;
        case R_ENOSYS:
            RET(SECCOMP_RET_ERRNO | ENOSYS);
            break;
        case R_CLONE:
            LD(ARG_LO(0));
            emit(b, BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1);
            RET(ALLOW);
            RET(TRAP);
            break;
        case R_OPEN_FLAGS1:
        case R_OPEN_FLAGS2:
            LD(ARG_LO(r == R_OPEN_FLAGS1 ? 1 : 2));
            emit(b, BPF_JMP | BPF_JSET | BPF_K, O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | __O_TMPFILE, 0, 1);
            RET(TRAP);
            RET(ALLOW);
            break;
        case R_SELF0:
        case R_SELF1: {
            int i = r == R_SELF0 ? 0 : 1;
            allow_if_arg_is(b, i, 0);
            allow_if_arg_is(b, i, (unsigned)g_self);
            RET(TRAP);
            break;
        }
        case R_KILL:
            allow_if_arg_is(b, 0, (unsigned)g_self);
            allow_if_arg_is(b, 1, 0);
            RET(TRAP);
            break;
        case R_SIGACTION: {
            static const unsigned guarded[] = {SIGSYS};
            trap_if_arg_is_one_of(b, 0, guarded, 1);
            break;
        }
        case R_IOCTL: {
            if (g_offline) {
                // TCGETS, TIOCGPGRP, TIOCGWINSZ, FIONREAD, FIONBIO, FIONCLEX, FIOCLEX: nothing else
                static const unsigned plain[] = {0x5401, 0x540F, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451};
                for (unsigned k = 0; k < sizeof plain / sizeof plain[0]; ++k) allow_if_arg_is(b, 1, plain[k]);
                RET(TRAP);
                break;
            }
            static const unsigned terminal[] = {TIOCSTI_, TIOCLINUX_};
            trap_if_arg_is_one_of(b, 1, terminal, 2);
            break;
        }
        case R_PRLIMIT:
            allow_if_arg_is(b, 2, 0);
            RET(TRAP);
            break;
        case R_PRCTL: {
            static const unsigned other_process[] = {PR_SET_MM_, PR_SET_PTRACER_};
            trap_if_arg_is_one_of(b, 0, other_process, 2);
            break;
        }
    }
}

static void build(struct builder* b, int audit, int profile) {
    b->n = 0;
    b->overflow = 0;
    LD(offsetof(struct seccomp_data, arch));
    emit(b, BPF_JMP | BPF_JEQ | BPF_K, GUARD_ARCH, 1, 0);
    RET(SECCOMP_RET_KILL_PROCESS);                       // another ABI (int 0x80): no
    if (audit) {
        // Only the raw stub passes: it is how the handler makes each call after reporting it.
        uintptr_t lo = (uintptr_t)grader_guard_raw_site, hi = (uintptr_t)grader_guard_raw_end + 1;
        LD(offsetof(struct seccomp_data, instruction_pointer) + 4);
        emit(b, BPF_JMP | BPF_JEQ | BPF_K, (unsigned)(lo >> 32), 0, 4);
        LD(offsetof(struct seccomp_data, instruction_pointer));
        emit(b, BPF_JMP | BPF_JGE | BPF_K, (unsigned)lo, 0, 2);
        emit(b, BPF_JMP | BPF_JGT | BPF_K, (unsigned)hi, 1, 0);
        RET(ALLOW);
        // rt_sigreturn ends the handler itself; a clone made again from the handler would
        // start the new thread on a stack with nowhere to return to, so threads pass unrecorded.
        LD(offsetof(struct seccomp_data, nr));
        emit(b, BPF_JMP | BPF_JEQ | BPF_K, SYS_rt_sigreturn, 2, 0);
        emit(b, BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 1, 0);
        emit(b, BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
        RET(ALLOW);
        RET(TRAP);
        return;
    }
    LD(offsetof(struct seccomp_data, nr));
#if defined(__x86_64__)
    emit(b, BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1);          // the x32 ABI
    RET(TRAP);
#endif
    if (g_no_memfd) {                                              // before kPolicy, which allows it
        emit(b, BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 0, 1);
        RET(TRAP);
    }
    if (profile) {
        for (size_t i = 0; i < sizeof kProfile / sizeof kProfile[0]; ++i) {
            emit(b, BPF_JMP | BPF_JEQ | BPF_K, (unsigned)kProfile[i].nr, 0, 1);
            RET(ALLOW);
        }
    }
    for (size_t i = 0; i < sizeof kPolicy / sizeof kPolicy[0]; ++i) {
        static struct builder body;
        body.n = 0;
        body.overflow = 0;
        rule_body(&body, kPolicy[i].rule);
        if (body.n > 250) {
            b->overflow = 1;
            return;
        }
        emit(b, BPF_JMP | BPF_JEQ | BPF_K, (unsigned)kPolicy[i].nr, 0, (unsigned char)body.n);
        for (unsigned k = 0; k < body.n; ++k) {
            if (b->n >= MAX_INSNS) {
                b->overflow = 1;
                return;
            }
            b->insn[b->n++] = body.insn[k];
        }
        LD(offsetof(struct seccomp_data, nr));                     // the body clobbered A
    }
    RET(TRAP);
}

// Installs the handler and the filter on every thread of the process.
// mode 0: enforce; 1: audit; 2: profile (enforce, and what ncu's injection needs); 3: offline
// (enforce, and no ioctl but a terminal's: no driver call); GUARD_NO_MEMFD or'd into any of them:
// memfd_create traps too. Returns 0, or a negative errno saying which step failed:
// -1000 - errno for sigaction, -2000 - errno for no_new_privs, -3000 - errno for seccomp,
// -4000 - tid for a thread that could not be synchronised, -5000 the filter was too long.
int grader_guard_install(int mode, int report_fd, long self_pid) {
    static struct builder b;
    g_no_memfd = (mode & GUARD_NO_MEMFD) != 0;
    mode &= ~GUARD_NO_MEMFD;
    g_report_fd = report_fd;
    g_audit = mode == 1;
    g_offline = mode == 3;
    g_self = self_pid;
    build(&b, g_audit, mode == 2);
    if (b.overflow) return -5000;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSYS, &sa, 0) != 0) return -1000 - errno;
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGSYS);
    sigprocmask(SIG_UNBLOCK, &unblock, 0);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -2000 - errno;
    struct sock_fprog prog = {(unsigned short)b.n, b.insn};
    long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
    if (r < 0) return -3000 - errno;
    if (r > 0) return (int)(-4000 - r);
    return 0;
}

// The filter's length in instructions (for the record and the tests).
int grader_guard_filter_length(int mode) {
    static struct builder b;
    g_no_memfd = (mode & GUARD_NO_MEMFD) != 0;
    mode &= ~GUARD_NO_MEMFD;
    g_offline = mode == 3;
    build(&b, mode == 1, mode == 2);
    return b.overflow ? -1 : (int)b.n;
}
