"""More ways for a submission's host code to reach what the run-time wall must keep out of sight.

tests/test_read_wall.py and tests/test_run_wall_holes.py try the plain routes (open, openat2, a
relative path, /proc/self/cwd, /proc/<parent>/root, the parent's descriptors, O_PATH, links in its
own folder); these are the variants a hostile student would try next, each in the real grading
child (run_unscreened: the screen skipped, the wall and the seccomp filter in force):

- routes Landlock must refuse (graded, the kernel correct, every route answered DENIED): another
  spelling of the root (/proc/self/root, /proc/thread-self/root, /proc/self/task/<tid>/root), the
  parent's working folder, chdir("..") to the top then a relative name, a folder opened for reading
  then openat or /dev/fd/<n>/name, paths padded with "//" and "/./" and made thousands of characters
  long, std::ifstream, the parent's memory through /proc/<parent>/mem at the very address where this
  test keeps a secret, readlink of the parent's descriptors, a classmate's child folder beside its
  own, clone3 (answered ENOSYS), and the same from a thread and a std::async task started by a
  static constructor, before any launch;
- calls the seccomp filter must stop first (rejected, blocked_by_sandbox, nothing read): io_uring,
  name_to_handle_at / open_by_handle_at, process_vm_readv and ptrace on the parent, pidfd_getfd of the
  parent's descriptors, posix_spawn and vfork of cat, a raw fork by clone, rename of a classmate's
  file into its folder, std::filesystem::directory_iterator, a Unix socket, unshare;
- what the child's environment, command line and own /proc say: no secret, no classmate's or report
  folder's path, however the grader's environment named them.

A control aims the same routes at the child's own library (which holds a string with the secret's
marker), so the same routes and the same detector are seen to find a marker where reading is allowed.
"""

from __future__ import annotations

import ctypes
import os
import secrets as random_bits
import shutil
import tempfile
from pathlib import Path

import pytest

from grader.core import folders
from grader.run.child import fswall

from test_read_wall import MARK, PEEK, _leaked, secrets  # noqa: F401 - secrets is a fixture used here
from test_wall import KERNEL, run_unscreened
from usr_secret import root_only_file_in_usr

needs_landlock = pytest.mark.skipif(fswall.landlock_abi() <= 0, reason="this kernel has no Landlock")

# More headers, and helpers of this file's own: peek() reads a whole file (up to 4 MiB) and prints the
# text around the first "SECRET-OF" in it, or its first bytes (so a library, whose marker lies deep in
# it, shows the marker where the route reached it).
HELPERS = r"""
#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <future>
#include <filesystem>
#include <dlfcn.h>
#include <spawn.h>
#include <sched.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
extern char** environ;
static void peek_text(const char* how, const char* path, const char* data, size_t n) {
    static const char rev[] = "TNEDUTS-REHTONA-FO-TERCES";      // the marker, kept out of this library's bytes
    char key[sizeof rev]; for (size_t i = 0; i + 1 < sizeof rev; i++) key[i] = rev[sizeof rev - 2 - i];
    const char* hit = (const char*)memmem(data, n, key, sizeof rev - 1);
    size_t from = hit ? (size_t)(hit - data) : 0, to = from + 120 < n ? from + 120 : n;
    std::string s(data + from, data + to);
    for (auto& c : s) if (c == '\n' || c == 0 || (unsigned char)c < 32) c = ' ';
    printf("READ %s %s: %s\n", how, path, s.c_str());
}
static void peek(const char* how, const char* path, int fd) {
    if (fd < 0) { printf("DENIED %s (%d)\n", how, errno); return; }     // short: the output cap is 4 KiB
    static char buf[4 << 20]; size_t n = 0; ssize_t r;
    while (n < sizeof buf && (r = read(fd, buf + n, sizeof buf - n)) > 0) n += (size_t)r;
    close(fd);
    if (n == 0) { printf("DENIED-READ %s\n", how); return; }
    peek_text(how, path, buf, n);
}
static std::string folder_of(const char* p) { std::string s(p); return s.substr(0, s.rfind('/')); }
static std::string name_of(const char* p) { std::string s(p); return s.substr(s.rfind('/') + 1); }
"""

# Each route: statements using P (the path aimed at, a C string) that print READ or DENIED once.
ROUTES = {
    "proc self root": 'char r[8300]; snprintf(r, sizeof r, "/proc/self/root%s", P); peek("self-root", r, open(r, '
                      'O_RDONLY));',
    "proc thread-self root": 'char r[8300]; snprintf(r, sizeof r, "/proc/thread-self/root%s", P); '
                             'peek("thread-self-root", r, open(r, O_RDONLY));',
    "proc self task root": 'char r[8300]; snprintf(r, sizeof r, "/proc/self/task/%d/root%s", (int)gettid(), P); '
                           'peek("task-root", r, open(r, O_RDONLY));',
    "proc parent cwd, up then down": 'std::string r = "/proc/" + std::to_string(getppid()) + "/cwd/"; '
                                     'for (int i = 0; i < 40; i++) r += "../"; r += P + 1; '
                                     'peek("parent-cwd", r.c_str(), open(r.c_str(), O_RDONLY));',
    "chdir .. to the top, relative": 'char here[4096]; if (!getcwd(here, sizeof here)) here[0] = 0; '
                                     'for (int i = 0; i < 64; i++) if (chdir("..") != 0) break; '
                                     'peek("chdir-up", P + 1, open(P + 1, O_RDONLY)); if (here[0]) chdir(here);',
    "folder opened for reading, openat": 'int d = open(folder_of(P).c_str(), O_RDONLY); '
                                         'peek("dir-openat", P, d < 0 ? -1 : openat(d, name_of(P).c_str(), O_RDONLY)); '
                                         'if (d >= 0) close(d);',
    "folder opened for reading, /dev/fd": 'int d = open(folder_of(P).c_str(), O_RDONLY); '
                                          'std::string r = "/dev/fd/" + std::to_string(d) + "/" + name_of(P); '
                                          'peek("dev-fd", r.c_str(), d < 0 ? -1 : open(r.c_str(), O_RDONLY)); '
                                          'if (d >= 0) close(d);',
    "self fd of the root": 'int d = open("/", O_RDONLY); std::string r = "/proc/self/fd/" + std::to_string(d) + P; '
                           'peek("self-fd-root", r.c_str(), d < 0 ? -1 : open(r.c_str(), O_RDONLY)); '
                           'if (d >= 0) close(d);',
    "double slashes and dots": 'std::string r; for (const char* c = P; *c; c++) { r += *c; if (*c == \'/\') r += '
                               '"/./"; } '
                               'peek("slashes", r.c_str(), open(r.c_str(), O_RDONLY));',
    "a path thousands long": 'std::string r; for (int i = 0; i < 1500; i++) r += "/."; r += P; '
                             'peek(("long-" + std::to_string(r.size())).c_str(), P, open(r.c_str(), O_RDONLY));',
    "std::ifstream": 'std::ifstream f(P, std::ios::binary); if (f) { std::stringstream s; s << f.rdbuf(); '
                     'std::string t = s.str(); peek_text("ifstream", P, t.data(), t.size()); } '
                     'else printf("DENIED ifstream (%d)\\n", errno);',
    "openat with O_NOFOLLOW | O_NOATIME | O_CLOEXEC": 'peek("noatime", P, openat(AT_FDCWD, P, O_RDONLY | O_NOFOLLOW | '
                                                      'O_NOATIME | O_CLOEXEC));',
    "readlink of the parent's descriptors": 'for (int fd = 0; fd < 64; fd++) { char r[64], t[4096]; '
                                            'snprintf(r, sizeof r, "/proc/%d/fd/%d", (int)getppid(), fd); '
                                            'ssize_t n = readlink(r, t, sizeof t - 1); if (n > 0) { t[n] = 0; '
                                            'printf("NAMED %s\\n", t); '
                                            'bool system = !strncmp(t, "/usr/", 5) || !strncmp(t, "/lib", 4) || '
                                            '!strncmp(t, "/dev/", 5) || !strncmp(t, "/proc/", 6) || t[0] != \'/\'; '
                                            'int g = system ? -1 : open(t, O_RDONLY); if (g >= 0) '
                                            'peek("parent-fd-name", t, g); } } '
                                            'printf("DENIED parent-fd-names\\n"); (void)P;',
    # the descriptors the wall itself keeps open (O_PATH, on the folders and files its rules name):
    # openat from each folder up to the top and down again, and fchdir into each then a relative name
    "openat from the wall's own descriptors": 'int tried = 0; for (int fd = 3; fd < 512; fd++) { struct stat s; '
                                              'if (fstat(fd, &s) != 0 || !S_ISDIR(s.st_mode)) continue; tried++; '
                                              'std::string r; for (int i = 0; i < 40; i++) r += "../"; r += P + 1; '
                                              'int g = openat(fd, r.c_str(), O_RDONLY); if (g >= 0) '
                                              'peek("pinned-openat", P, g); } '
                                              'printf("DENIED pinned-openat from %d folders\\n", tried);',
    "fchdir into the wall's own descriptors": 'char here[4096]; if (!getcwd(here, sizeof here)) here[0] = 0; '
                                              'int tried = 0; '
                                              'for (int fd = 3; fd < 512; fd++) { struct stat s; '
                                              'if (fstat(fd, &s) != 0 || !S_ISDIR(s.st_mode) || fchdir(fd) != 0) '
                                              'continue; tried++; '
                                              'std::string r; for (int i = 0; i < 40; i++) r += "../"; r += P + 1; '
                                              'int g = open(r.c_str(), O_RDONLY); if (g >= 0) peek("pinned-fchdir", '
                                              'P, g); } '
                                              'if (here[0]) chdir(here); printf("DENIED pinned-fchdir from %d '
                                              'folders\\n", tried);',
}

# Routes that take no path P: each prints READ or DENIED once.
SWEEPS = {
    "clone3, answered ENOSYS": 'unsigned long long a[11] = {0}; a[4] = SIGCHLD; '    # struct clone_args
                               'long pid = syscall(435, a, sizeof a); if (pid == 0) { '
                               'int f = open(SECRETS[0], O_RDONLY); peek("clone3-child", SECRETS[0], f); _exit(0); } '
                               'if (pid > 0) { waitpid((pid_t)pid, nullptr, 0); printf("READ clone3 made process '
                               '%ld\\n", pid); } '
                               'else printf("DENIED clone3 (%d)\\n", errno);',
}


def _c_list(paths) -> str:
    return "static const char* SECRETS[] = {" + ", ".join(f'"{p}"' for p in paths) + "};\n" \
           f"static const int NSECRETS = {len(paths)};\n"


def _routes_on(paths: list[str], names=None) -> list[str]:
    names = sorted(ROUTES) if names is None else names
    return [f'const char* P = "{p}"; ' + ROUTES[r] for r in names for p in paths]


def launcher_source(statements: list[str], paths: list[str], *, at_load: str = "", extra: str = "") -> str:
    """A submission: the correct kernel, and a launcher that runs statements once (each in a block of
    its own) before its launch; at_load: file-scope code run when the library loads."""
    body = "\n".join("        { " + s + " }" for s in statements)
    return (PEEK + HELPERS + _c_list(paths) + extra + KERNEL + at_load +
            "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,\n"
            "                         cudaStream_t stream) {\n    static bool once = false;\n    if (!once) {\n"
            "        once = true;\n" + body + "\n        fflush(stdout);\n    }\n"
            "    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);\n}\n")


@pytest.fixture
def sibling(secrets) -> Path:
    """A classmate's child folder beside where this run's child folders go, with the copy of her
    library in it (what a batch grading several students at once leaves side by side)."""
    base = Path(folders.child_folder_base()[0] or tempfile.gettempdir())
    folder = base / f"grader-run-planted-{random_bits.token_hex(4)}"
    folder.mkdir()
    (folder / "libsubmission.so").write_text(f"{MARK} alice's library in her child folder\n")
    folder.chmod(0o755)
    (folder / "libsubmission.so").chmod(0o644)
    yield folder / "libsubmission.so"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def in_memory():
    """A secret in this process's memory (the grading child's parent), and its address."""
    buf = ctypes.create_string_buffer(f"{MARK} held in the grader's memory".encode())
    yield ctypes.addressof(buf)
    del buf


@pytest.fixture
def root_only(tmp_path) -> Path:
    """A root-only file (0600, root's where this runs as root) in a folder anyone may enter."""
    vault = tmp_path / "vault"
    vault.mkdir()
    secret = vault / "root-only.txt"
    secret.write_text(f"root:{MARK}:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    vault.chmod(0o755)
    tmp_path.chmod(0o755)
    return secret


def _targets(secrets, sibling, root_only) -> list[str]:
    """Every secret, a classmate's child folder, a root-only file, /etc/shadow (readable to the wall,
    never to the child's user) and the exercise's reference."""
    from grader.exercises import load_exercise, load_reference

    reference = Path(load_reference(load_exercise("bias_gelu_fused")).module.__file__)
    return [str(p) for p in (*secrets.values(), sibling, root_only, Path("/etc/shadow"), reference)]


def _no_read(result, *, correct: bool = True) -> None:
    out = result.output.stdout
    assert "bytes dropped" not in out, "the output cap hid part of what the attack printed:\n" + out
    assert _leaked(result) == [], _leaked(result)
    assert not any(line.startswith("READ ") for line in out.splitlines()), out
    assert result.status == "graded", (result.status, result.message)
    if correct:
        assert result.correct, result.message
    assert result.sandbox.reads_confined is True, result.sandbox.reads_detail


@needs_landlock
def test_every_other_spelling_of_a_path_is_refused_and_the_kernel_still_graded(secrets, sibling, root_only, in_memory,
                                                                                 rubric, write_cu):
    """Every route of ROUTES aimed at each secret (a classmate's file, a report, the cache, a
    classmate's child folder, a root-only file, /etc/shadow, the exercise's reference), the parent's
    memory at the secret's address, clone3: one graded run,
    each route answered DENIED, the correct kernel graded correct, no byte of any secret printed."""
    paths = _targets(secrets, sibling, root_only)
    mem = (f'char r[64]; snprintf(r, sizeof r, "/proc/%d/mem", (int)getppid()); int m = open(r, O_RDONLY); '
           f'if (m >= 0) {{ char b[120] = {{0}}; ssize_t n = pread(m, b, 100, (off_t){in_memory}LL); close(m); '
           f'if (n > 0) peek_text("parent-mem", r, b, (size_t)n); else printf("DENIED-READ parent-mem\\n"); }} '
           'else printf("DENIED parent-mem %s (%d)\\n", r, errno);')
    statements = _routes_on(paths) + [mem] + list(SWEEPS.values())
    result = run_unscreened(write_cu(launcher_source(statements, paths)), rubric, "emulator")
    _no_read(result)
    out = result.output.stdout
    assert out.count("DENIED") >= len(ROUTES) * len(paths) + 1 + len(SWEEPS), out
    assert sibling.is_file(), "the planted child folder was swept away before the attack ran"


STATIC_START = r"""
static void peek_all(const char* who) {
    for (int i = 0; i < NSECRETS; i++) {
        char r[8300]; snprintf(r, sizeof r, "%s-open", who); peek(r, SECRETS[i], open(SECRETS[i], O_RDONLY));
        snprintf(r, sizeof r, "/proc/self/root%s", SECRETS[i]); peek(who, r, open(r, O_RDONLY));
    }
    fflush(stdout);
}
struct StartsAtLoad {
    StartsAtLoad() {
        printf("STATIC constructor ran\n");
        std::thread t([] { peek_all("static-thread"); });
        t.join();
        auto f = std::async(std::launch::async, [] { peek_all("static-async"); return 0; });
        f.get();
        peek_all("static-constructor");
    }
};
static StartsAtLoad g_starts_at_load;
__attribute__((constructor)) static void at_load() { peek_all("constructor-attribute"); }
"""


@needs_landlock
def test_a_thread_or_task_started_by_a_static_constructor_is_behind_the_wall(secrets, sibling, root_only, rubric,
                                                                             write_cu):
    """Code that runs when the library loads, before the grader calls the launcher: a static object's
    constructor that starts a std::thread and a std::async task, and an __attribute__((constructor))
    function; each reads nothing."""
    paths = _targets(secrets, sibling, root_only)
    result = run_unscreened(write_cu(launcher_source([], paths, at_load=STATIC_START)), rubric, "emulator")
    _no_read(result)
    out = result.output.stdout
    assert "STATIC constructor ran" in out, out
    assert out.count("DENIED") == 4 * 2 * len(paths), out


# Calls the seccomp filter stops (the submission is then rejected): each aimed at the classmate's file,
# or at the parent (its descriptors, its memory at the address where this test keeps a secret).
TRAPPED = {
    "io_uring_setup": 'unsigned char params[120] = {0}; long fd = syscall(425, 8, params); '
                      'printf("DENIED io_uring %ld (%d)\\n", fd, errno);',
    "name_to_handle_at then open_by_handle_at": (
        'struct { unsigned int bytes; int type; unsigned char h[128]; } fh; fh.bytes = 128; int mount = 0; '
        'long r = syscall(SYS_name_to_handle_at, AT_FDCWD, SECRETS[0], &fh, &mount, 0); '
        'int fd = r == 0 ? (int)syscall(SYS_open_by_handle_at, AT_FDCWD, &fh, O_RDONLY) : -1; '
        'peek("by-handle", SECRETS[0], fd);'),
    "open_by_handle_at with a forged handle": (
        'struct { unsigned int bytes; int type; unsigned char h[8]; } fh = {8, 1, {0}}; '
        'int root = open("/", O_RDONLY); peek("forged-handle", SECRETS[0], '
        '(int)syscall(SYS_open_by_handle_at, root, &fh, O_RDONLY));'),
    "process_vm_readv of the parent": (
        'char b[120] = {0}; struct iovec local = {b, 100}, remote = {(void*)ADDR, 100}; '
        'ssize_t n = syscall(SYS_process_vm_readv, getppid(), &local, 1, &remote, 1, 0); '
        'if (n > 0) peek_text("vm-readv", "parent", b, (size_t)n); else printf("DENIED vm-readv (%d)\\n", errno);'),
    "ptrace attach to the parent": (
        'long r = ptrace(PTRACE_ATTACH, getppid(), 0, 0); if (r == 0) { waitpid(getppid(), nullptr, 0); '
        'long w = ptrace(PTRACE_PEEKDATA, getppid(), (void*)ADDR, 0); peek_text("ptrace", "parent", (const char*)&w, '
        '8); } '
        'else printf("DENIED ptrace (%d)\\n", errno);'),
    "pidfd_getfd of the parent's descriptors": (
        'int pfd = (int)syscall(SYS_pidfd_open, getppid(), 0); for (int fd = 0; pfd >= 0 && fd < 64; fd++) { '
        'int g = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0); if (g >= 0) { struct stat s; '
        'if (fstat(g, &s) == 0 && S_ISREG(s.st_mode)) peek("pidfd-getfd", "parent", g); else close(g); } } '
        'printf("DENIED pidfd (%d)\\n", errno);'),
    "posix_spawn cat": (
        'pid_t pid; char* argv[] = {(char*)"cat", (char*)SECRETS[0], nullptr}; '
        'int r = posix_spawn(&pid, "/bin/cat", nullptr, nullptr, argv, environ); '
        'if (r == 0) waitpid(pid, nullptr, 0); printf("DENIED posix_spawn (%d)\\n", r);'),
    "vfork then exec cat": (
        'pid_t pid = vfork(); if (pid == 0) { execl("/bin/cat", "cat", SECRETS[0], (char*)nullptr); _exit(1); } '
        'if (pid > 0) waitpid(pid, nullptr, 0); printf("DENIED vfork (%d)\\n", errno);'),
    "raw clone without CLONE_THREAD": (
        'long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0); if (pid == 0) { '
        'peek("clone-child", SECRETS[0], open(SECRETS[0], O_RDONLY)); fflush(stdout); _exit(0); } '
        'if (pid > 0) waitpid((pid_t)pid, nullptr, 0); printf("DENIED clone (%d)\\n", errno);'),
    "rename a classmate's file into its folder": (
        'int r = rename(SECRETS[0], "mine.cu"); peek("renamed", "mine.cu", r == 0 ? open("mine.cu", O_RDONLY) : -1);'),
    "std::filesystem::directory_iterator": (
        'std::error_code ec; for (auto& e : std::filesystem::directory_iterator(folder_of(SECRETS[0]), ec)) '
        'peek("listed", e.path().c_str(), open(e.path().c_str(), O_RDONLY)); printf("DENIED iterator (%d)\\n", '
        'ec.value());'),
    "std::filesystem::copy_file into its folder": (
        'std::error_code ec; std::filesystem::copy_file(SECRETS[0], "copied.cu", ec); '
        'peek("copied", "copied.cu", open("copied.cu", O_RDONLY));'),
    "a Unix socket": (
        'int s = socket(AF_UNIX, SOCK_STREAM, 0); struct sockaddr_un a; memset(&a, 0, sizeof a); a.sun_family = '
        'AF_UNIX; '
        'strcpy(a.sun_path + 1, "grader"); int r = s >= 0 ? connect(s, (struct sockaddr*)&a, sizeof a) : -1; '
        'printf("DENIED unix socket %d %d\\n", s, r);'),
    "unshare a user namespace": 'int r = unshare(CLONE_NEWUSER | CLONE_NEWNS); printf("DENIED unshare %d (%d)\\n", r, '
                                'errno);',
    "sendfile from a descriptor of its own": (
        'int f = open("/etc/hostname", O_RDONLY); long n = syscall(SYS_sendfile, 1, f, 0, 64); '
        'printf("DENIED sendfile %ld\\n", n);'),
}


# Of these, Landlock refuses the first call (the classmate's file cannot be opened to be copied): graded.
LANDLOCK_FIRST = {"std::filesystem::copy_file into its folder"}


@needs_landlock
@pytest.mark.parametrize("call", sorted(TRAPPED))
def test_a_call_the_seccomp_filter_stops_reads_nothing(call, secrets, in_memory, rubric, write_cu):
    paths = [str(p) for p in secrets.values()]
    extra = f"static const unsigned long ADDR = {in_memory}UL;\n"
    result = run_unscreened(write_cu(launcher_source([TRAPPED[call]], paths, extra=extra)), rubric, "emulator")
    assert _leaked(result) == [], _leaked(result)
    assert not any(line.startswith("READ ") for line in result.output.stdout.splitlines()), result.output.stdout
    if call in LANDLOCK_FIRST:
        _no_read(result)
        return
    assert result.status == "rejected", (call, result.status, result.message, result.output.stdout)
    assert "blocked_by_sandbox" in result.flags, result.message


def _env_peek(needles: dict[str, str]) -> str:
    """Print the child's environ (small), and for each of its own /proc files its size and which of
    needles (name: text) it holds (the files themselves would pass the 4 KiB output cap)."""
    table = ", ".join(f'{{"{k}", "{v}"}}' for k, v in needles.items())
    return (
        f'static const char* NEEDLES[][2] = {{{table}}}; '
        'for (char** e = environ; *e; e++) printf("ENV %s\\n", *e); '
        'for (const char* n : {"/proc/self/environ", "/proc/self/cmdline", "/proc/self/mountinfo", '
        '"/proc/self/status"}) { '
        'int f = open(n, O_RDONLY); if (f < 0) { printf("DENIED %s\\n", n); continue; } static char b[1 << 20]; '
        'ssize_t k = 0, r; while (k < (ssize_t)sizeof b - 1 && (r = read(f, b + k, sizeof b - 1 - k)) > 0) k += r; '
        'close(f); '
        'printf("SELF %s: %zd bytes\\n", n, k); '
        'for (auto& nd : NEEDLES) if (memmem(b, (size_t)k, nd[1], strlen(nd[1]))) printf("FOUND %s in %s\\n", nd[0], '
        'n); '
        'if (memmem(b, (size_t)k, "TMPDIR=", 7)) printf("FOUND own TMPDIR in %s\\n", n); }'
    )


@needs_landlock
def test_the_childs_environment_and_own_proc_name_no_classmate_report_or_secret(secrets, sibling, monkeypatch, rubric,
                                                                                 write_cu):
    """The grader's environment names the class folder, a report folder, a classmate, the server's
    token and the secret itself (as an instructor's shell may); the child's environ, its
    /proc/self/environ, cmdline, mountinfo and status name none of them (the environment is
    scrubbed), but environ does hold its own TMPDIR (what shows the scan reads what is there)."""
    named = {"CLASS_DIR": str(secrets["classmate"].parent.parent), "REPORT_DIR": str(secrets["report"].parent),
             "GRADER_TOKEN": f"{MARK}-server-token",
             "OLDPWD": str(secrets["classmate"].parent), "COURSE_NOTE": f"{MARK} in the grader's environment",
             "GRADER_SUBMISSION": str(secrets["classmate"])}
    for key, value in named.items():
        monkeypatch.setenv(key, value)
    needles = {**named, "CLASSMATE_CHILD_FOLDER": str(sibling.parent), "MARK": MARK}
    needles.update({key: os.environ[key] for key in ("GRADER_CACHE_DIR", "GRADER_REPORTS_ROOT") if key in os.environ})
    # the needles are written backwards into the source, so that the library holds none of them whole
    source = launcher_source([_env_peek({k: v[::-1] for k, v in needles.items()}).replace(
        "memmem(b, (size_t)k, nd[1], strlen(nd[1]))",
        "[&] { std::string t(nd[1]); std::string w(t.rbegin(), t.rend()); "
        "return memmem(b, (size_t)k, w.data(), w.size()); }()")], [])
    result = run_unscreened(write_cu(source), rubric, "emulator")
    assert result.status == "graded" and result.correct, result.message
    out = result.output.stdout
    assert "bytes dropped" not in out, out
    assert "ENV TMPDIR=" in out, out      # the scan saw something (/proc/self/environ: root's, the child undumpable)
    assert "SELF /proc/self/cmdline" in out and "SELF /proc/self/mountinfo" in out, out
    assert _leaked(result) == [], _leaked(result)
    # The cache's own path is in the child's mountinfo on the emulator (its root of its own binds the
    # cache, run/spawn.child_view) as it is in /proc/self/maps everywhere (its libraries are mapped from
    # there): the grader's folder, whose files the wall opens one at a time; no classmate's name.
    said = [line for line in out.splitlines() if line.startswith("FOUND ") and "own TMPDIR" not in line
            and line != "FOUND GRADER_CACHE_DIR in /proc/self/mountinfo"]
    said += [f"{key} in environ" for key, value in needles.items() if value in out]
    assert said == [], f"the child can read these names: {said}"


CONTROL = f"{MARK}-CONTROL in the student's own library"


@needs_landlock
def test_control_the_same_routes_find_a_marker_where_reading_is_allowed(rubric, write_cu):
    """The detector works: the routes of the first test aimed at the child's own library (found with
    dladdr at run time, in its own folder, readable by design), whose bytes hold a literal with the
    secret's marker, print it; the same helper that finds nothing elsewhere finds it here."""
    own = ('Dl_info i; dladdr((void*)&peek, &i); static std::string mine = i.dli_fname; const char* P = mine.c_str(); ')
    used = ("proc self root", "proc thread-self root", "double slashes and dots", "a path thousands long",
            "std::ifstream", "folder opened for reading, openat")
    statements = [own + ROUTES[r] for r in used]
    statements.append(f'static volatile const char* keep = "{CONTROL}"; '
                      'printf("kept %zu\\n", strlen((const char*)keep));')
    result = run_unscreened(write_cu(launcher_source(statements, [])), rubric, "emulator")
    assert result.status == "graded" and result.correct, result.message
    found = _leaked(result)
    reads = [line for line in result.output.stdout.splitlines() if line.startswith("READ ")]
    assert len(found) >= len(used) - 1 and len(reads) >= len(used) - 1, result.output.stdout


@pytest.fixture
def in_usr():
    """A file holding the secret's marker in a fresh folder under /usr/local/share, which the child's
    wall lets be read (all of /usr): only its owner and mode (root's, 0600) keep it closed, so this
    shows the child runs as nobody. Yields a function setting its mode; needs root."""
    yield from root_only_file_in_usr(f"grader-run-wall-{random_bits.token_hex(6)}",
                                     f"{MARK} root's alone, in a folder the wall lets be read\n")


IN_USR_ROUTES = ("proc self root", "double slashes and dots", "std::ifstream", "folder opened for reading, openat",
                 "chdir .. to the top, relative")


@needs_landlock
@pytest.mark.parametrize("mode", [0o600, 0o644], ids=["root-only", "control-world-readable"])
def test_a_root_only_file_the_wall_lets_be_read_is_not_read(mode, in_usr, rubric, write_cu):
    path = in_usr(mode)
    result = run_unscreened(write_cu(launcher_source(_routes_on([path], IN_USR_ROUTES), [path])), rubric, "emulator")
    if mode == 0o600:
        _no_read(result)
        assert result.output.stdout.count("DENIED") == len(IN_USR_ROUTES), result.output.stdout
    else:       # the control: the same routes read it, and the detector sees the marker
        assert result.status == "graded" and result.correct, result.message
        assert len(_leaked(result)) == len(IN_USR_ROUTES), result.output.stdout
