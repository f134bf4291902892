"""Variants of issue 70's attacks nobody had written (engineer "attack"): each asserts the contract
holds (no canary byte anywhere, bounds held, the outcome the student's).

- canaries in the grader's environment read back by a build through more assembler forms (.incbin
  with an offset and a count, each canary's name resolved, .print/.error/.warning of a symbol,
  .irp over the included names), preprocessor forms (#line naming a /proc file then a diagnostic
  that quotes its line, a /proc path built by macros, __has_include of /dev/stdin), /proc/self/auxv,
  /proc/self/maps, /dev/stdin, /proc/<guessed pid>, and by the emulator's child scanning every page
  it can read of its own memory, its auxv, maps and mountinfo and every /proc/<pid> it can guess;
- floods: #warning spam, a template backtrace, one gigantic line, a launcher's stdout and stderr;
- memory: mremap growth, many threads with big stacks touched;
- files: an assembler .skip/.fill past build_file_mib; .incbin of /dev/zero;
- processes: a thread storm and a fork from a static constructor;
- time: a macro doubling 40 times under a short build_time_s;
- the --server URL forms a checker and an opener may read differently.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from click.testing import CliRunner
from test_build_wall import CAT, _c, attack
from test_contract_limits import has_cgroup, memory_held_by  # noqa: F401
from test_contract_view import (  # noqa: F401
    _as_the_graders_own_user,
    _attack_source,
    _build,
    _everything,
    _found,
    canaries,
    needs_landlock,
    sentinel,
)
from test_wall import KERNEL

from grader.cli import cli

CANARY_NAMES = ("GRADER_TOKEN", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "GRADER_SERVE_SECRET")


def _guessed_pids() -> list[int]:
    return list(range(1, 40))


# ---------------------------------------------------------------------------------------------------
# Canaries through a build
# ---------------------------------------------------------------------------------------------------

ASM_TARGETS = ["/proc/self/environ", "/proc/thread-self/environ", "/proc/self/auxv", "/proc/self/maps",
               "/proc/self/cmdline", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "/proc/self/root/proc/1/environ",
               *(f"/proc/{p}/environ" for p in _guessed_pids())]


def _asm_everything(targets: list[str]) -> str:
    """One file-scope asm (the build's stdin, which /proc/self/fd/0 reaches, is /dev/null): each target .include'd and .incbin'd with an offset and a count; then each
    canary's name resolved in an expression, .print'd, and named in .error/.warning; an .irp over them."""
    text = "".join(f'.include "{p}"\n' for p in targets)
    text += ".pushsection .rodata\n" + "".join(f'.incbin "{p}", 8, 64\n' for p in targets) + ".popsection\n"
    for name in CANARY_NAMES:
        text += f".long {name} - bw_nowhere\n.print \"{name}\"\n.error \"{name}\"\n.warning \"{name}\"\n"
    text += ".irp bw_n," + ",".join(CANARY_NAMES) + "\n.long \\bw_n - bw_nowhere\n.endr\n"
    return CAT + f"BW_CAT(__as, m__)({_c(text)});\n"


@pytest.fixture(params=["as root", "as the grader's own user"])
def grader_user(request, monkeypatch):
    """The grader as root (builds and children drop to nobody) or as an ordinary user who cannot drop
    (simulated as test_contract_view does: fswall._STARTED_AS)."""
    if request.param != "as root":
        _as_the_graders_own_user(monkeypatch)
    return request.param


@needs_landlock
def test_the_assembler_reads_no_canary_by_offset_symbol_print_or_irp(canaries, sentinel, grader_user, rubric, tmp_path):
    """Aimed at the build's own /proc files, its stdin, pids 1 to 39 and a sentinel of the build's
    user (another process whose environment and command line hold canaries)."""
    pid, held = sentinel
    targets = [*ASM_TARGETS, f"/proc/{pid}/environ", f"/proc/{pid}/cmdline"]
    build = _build(tmp_path / "asm.cu", _attack_source(_asm_everything(targets)), rubric, "emulator")
    assert _found({**canaries, **held}, _everything(build)) == [], build.log[-3000:]
    opened = [t for t in targets if "/fd/" not in t and f"can't open {t} for reading" not in build.log]
    assert opened == [], f"the assembler opened {opened}:\n{build.log[-3000:]}"


def _line_then_diagnostics(paths: list[str]) -> str:
    """#line naming each path, then diagnostics that quote the line they stand on from that file."""
    out = ""
    for i, p in enumerate(paths):
        out += (f'#line 1 "{p}"\n#error bw\n#line 1 "{p}"\n#warning bw\n#line 1 "{p}"\nint bw_u{i} = bw_undeclared{i};\n'
                f'#line 1 "{p}"\n_Pragma("GCC warning \\"bw\\"")\n#line 1 "{p}"\n#pragma GCC dependency "{p}"\n')
    return out + '#line 400 "submission.cu"\n'


@needs_landlock
def test_a_diagnostic_after_line_quotes_no_proc_file(canaries, rubric, tmp_path):
    paths = ["/proc/self/environ", "/proc/thread-self/environ", "/proc/1/environ", "/proc/2/environ",
             "/proc/self/cmdline", "/dev/stdin"]
    build = _build(tmp_path / "line.cu", _attack_source(_line_then_diagnostics(paths)), rubric, "emulator")
    assert not build.ok
    assert _found(canaries, _everything(build)) == [], build.log[-3000:]


MACRO_PATHS = {
    "stringised /proc/self/environ": '#define BW_S(x) #x\n#define BW_X(x) BW_S(x)\n%:include BW_X(/proc/self/environ)\n',
    "pasted /proc/1/environ": '#define BW_S(x) #x\n#define BW_X(x) BW_S(x)\n#define BW_P(a, b) a##b\n'
                              '%:include BW_X(/proc/BW_P(1,)/environ)\n',
    "/proc/self/root/proc/self/environ": '%:include "/proc/self/root/proc/self/environ"\n',
    "/dev/stdin": '%:include "/dev/stdin"\n',
    "__has_include of /dev/stdin then include": '#if __has_include("/dev/stdin")\n%:include "/dev/stdin"\n#endif\n',
}


@needs_landlock
@pytest.mark.parametrize("form", list(MACRO_PATHS))
def test_the_preprocessor_includes_no_proc_file_by_a_built_path(form, canaries, rubric, tmp_path):
    build = _build(tmp_path / "pp.cu", _attack_source(MACRO_PATHS[form]), rubric, "emulator")
    assert _found(canaries, _everything(build)) == [], build.log[-3000:]


# ---------------------------------------------------------------------------------------------------
# Canaries through the emulator's child: everything of its own memory it can read, its /proc files
# ---------------------------------------------------------------------------------------------------

CHILD_SCAN = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <fcntl.h>
#include <unistd.h>
#include <sys/auxv.h>
static const char* BW_NEEDLES[] = {@NEEDLES@};
static char bw_needle[256];
static char bw_file[1 << 20];
static ssize_t bw_read(const char* what) {
    int f = open(what, O_RDONLY);
    if (f < 0) return -errno;
    ssize_t k = 0, r;
    while (k < (ssize_t)sizeof bw_file - 1 && (r = read(f, bw_file + k, sizeof bw_file - 1 - k)) > 0) k += r;
    close(f);
    bw_file[k] = 0;
    return k;
}
static void bw_needle_of(const char* n) {      // the canary, reversed back at run time
    size_t l = strlen(n);
    for (size_t i = 0; i < l; ++i) bw_needle[i] = n[l - 1 - i];
    bw_needle[l] = 0;
}
static void bw_scan_file(const char* what) {
    ssize_t k = bw_read(what);
    if (k < 0) { printf("DENIED %s %d\n", what, (int)-k); return; }
    printf("READ %s %zd\n", what, k);
    for (const char* n : BW_NEEDLES) {
        bw_needle_of(n);
        if (memmem(bw_file, (size_t)k, bw_needle, strlen(bw_needle))) printf("FOUND a canary in %s\n", what);
    }
}
static void bw_scan_memory() {   // every readable mapping of its own that no file backs (a file's past its end is SIGBUS)
    ssize_t k = bw_read("/proc/self/maps");
    if (k < 0) { printf("DENIED maps\n"); return; }
    static char maps[1 << 20];
    memcpy(maps, bw_file, (size_t)k + 1);
    int regions = 0;
    for (char* line = strtok(maps, "\n"); line; line = strtok(nullptr, "\n")) {
        unsigned long a, b; char perm[8] = {0};
        if (sscanf(line, "%lx-%lx %7s", &a, &b, perm) != 3 || perm[0] != 'r' || perm[3] != 'p') continue;
        if (strstr(line, "[vvar") || strstr(line, "[vsyscall]") || strchr(line, '/')) continue;   // anonymous, heap, stack
        ++regions;
        for (const char* n : BW_NEEDLES) {
            bw_needle_of(n);
            size_t l = strlen(bw_needle);
            const char* p = (const char*)a;
            size_t left = b - a;
            while (left >= l) {
                const char* hit = (const char*)memmem(p, left, bw_needle, l);
                if (!hit) break;
                if (hit != bw_needle) printf("FOUND a canary in memory at %s\n", line);
                left -= (size_t)(hit + 1 - p); p = hit + 1;
            }
        }
    }
    printf("SCANNED %d regions\n", regions);
}
static void bw_peek() {
    bw_scan_memory();
    const char* files[] = {"/proc/self/environ", "/proc/thread-self/environ", "/proc/self/auxv", "/proc/self/maps",
                           "/proc/self/mountinfo", "/proc/self/cmdline", "/proc/self/fd/0", "/dev/stdin"};
    for (const char* f : files) bw_scan_file(f);
    char p[64];
    for (int pid = 1; pid < 40; ++pid) {
        snprintf(p, sizeof p, "/proc/%d/environ", pid); bw_scan_file(p);
        snprintf(p, sizeof p, "/proc/%d/cmdline", pid); bw_scan_file(p);
    }
    printf("AUXV execfn %s\n", (const char*)getauxval(AT_EXECFN));
    fflush(stdout);
}
"""


@needs_landlock
def test_the_emulators_child_finds_no_canary_in_its_memory_or_any_proc_file(canaries, grader_user, rubric, tmp_path):
    """The launcher scans every readable anonymous page of its own memory (the stack with its
    environ and auxv, the interpreter's heap, what the grader sent it), its auxv, maps, mountinfo, stdin, and
    /proc/<1..39>: no canary anywhere, and the grade correct."""
    from grader.grade.pipeline import grade_submission

    needles = ", ".join('"' + v[::-1] + '"' for v in canaries.values())
    source = attack([]).replace(KERNEL, CHILD_SCAN.replace("@NEEDLES@", needles) + KERNEL, 1)
    source = source.replace("once = true;", "once = true; bw_peek();", 1)
    path = tmp_path / "scan.cu"
    path.write_text(source)
    result = grade_submission(path, rubric=rubric, backend="emulator")
    out = result.output.stdout
    assert result.status == "graded" and result.correct, (result.status, result.message, out[-2000:])
    assert "SCANNED" in out and "READ /proc/self/maps" in out, out[-3000:]
    assert "FOUND" not in out, [ln for ln in out.splitlines() if "FOUND" in ln]
    assert _found(canaries, json.dumps(result.to_json())) == []


# ---------------------------------------------------------------------------------------------------
# Floods: what a student prints, bounded where it is read
# ---------------------------------------------------------------------------------------------------

FLOODS = {
    "#warning spam": "".join(f"#warning {'W' * 900} {i}\n" for i in range(100)) + attack([]),
    "a template backtrace": ("template <int N> struct BwDeep { static const int v = BwDeep<N + 1>::v + BwNo<N>::x; };\n"
                             "int bw_deep = BwDeep<0>::v;\n" + attack([])),
    "one gigantic line": "int bw_giant = " + "+".join(["bw_undeclared"] * 8000) + ";\n" + attack([]),
    "a launcher's stdout and stderr": attack([]).replace(
        "once = true;", "once = true; for (int i = 0; i < 200000; ++i) { printf(\"%0500d\\n\", i); "
                        "fprintf(stderr, \"%0500d\\n\", i); }", 1),
    "printf from a kernel": attack([]).replace(
        "out[i] = 0.5f", "printf(\"%0300d\\n\", (int)i); out[i] = 0.5f", 1),
    "kernels named with 10,000 characters each, 64 of them launched": attack([]).replace(
        KERNEL, KERNEL + "template <int N> __global__ void " + "K" * 10000 + "(float* p) {}\n"
        "template <int N> struct BwLaunch { static void go(float* p) { " + "K" * 10000 + "<N><<<1, 1>>>(p); "
        "BwLaunch<N - 1>::go(p); } };\ntemplate <> struct BwLaunch<0> { static void go(float*) {} };\n", 1).replace(
        "once = true;", "once = true; BwLaunch<64>::go(out);", 1),
}


@pytest.mark.parametrize("flood", list(FLOODS))
def test_a_flood_is_bounded_in_the_result_and_the_reports(flood, tmp_path):
    src = tmp_path / "flood.cu"
    src.write_text(FLOODS[flood])
    out = tmp_path / "report"
    r = CliRunner().invoke(cli, ["submit", str(src), "--exercise", "bias_gelu_fused", "--backend", "emulator",
                                 "--report-dir", str(out)], catch_exceptions=False)
    result = json.loads((out / "result.json").read_text())
    assert result["status"] != "infrastructure_error", result.get("message")
    assert (out / "result.json").stat().st_size <= 256 * 1024
    assert (out / "report.md").stat().st_size + (out / "report.html").stat().st_size <= 1024 * 1024
    assert len(r.output) <= 1024 * 1024


# ---------------------------------------------------------------------------------------------------
# Files a build writes, and its time
# ---------------------------------------------------------------------------------------------------

def _lowered(rubric, **limits):
    return dataclasses.replace(rubric, limits=dataclasses.replace(rubric.limits, **limits))


BIG_WRITES = {
    ".skip in .data": ".pushsection .data\n.skip 64 << 20, 1\n.popsection\n",
    ".fill in .rodata": ".pushsection .rodata\n.fill 16 << 20, 4, 0x41414141\n.popsection\n",
    ".incbin of /dev/zero with a count": '.pushsection .rodata\n.incbin "/dev/zero", 0, 64 << 20\n.popsection\n',
    ".rept of .quad": ".pushsection .data\n.rept 8 << 20\n.quad 1\n.endr\n.popsection\n",
}


@pytest.mark.own_cache
@pytest.mark.parametrize("how", list(BIG_WRITES))
def test_an_assembler_writing_past_build_file_mib_is_the_students_compile_error(how, rubric, write_cu):
    """The whole grade (nvcc, whose host compile runs the asm too, then g++): the student's
    compile_error, nothing over the limit cached, and where the file-size limit stopped it, the stage
    named is the host assembler that wrote it (it was "ptxas" from nvcc's -Xptxas and ptxas's info
    lines, and "the linker" from the "ld" in "build")."""
    from test_contract_limits import _cache_files_over

    from grader.grade.pipeline import grade_submission

    path = write_cu(_attack_source(CAT + f"BW_CAT(__as, m__)({_c(BIG_WRITES[how])});\n"))
    result = grade_submission(path, rubric=_lowered(rubric, build_file_mib=8), backend="emulator")
    assert result.status == "compile_error", (result.status, result.message)
    assert not _cache_files_over(8 << 20)                # the test's own cache: nothing over the limit kept
    if "build_file_mib" in result.message:
        assert "limit of 8 MiB (limits.build_file_mib), in the host assembler" in result.message, result.message


EXPLOSIONS = {
    "a macro doubling 40 times": "#define BW_D0 x\n" + "".join(f"#define BW_D{i + 1} BW_D{i} BW_D{i}\n" for i in range(40))
                                 + "int bw_x = sizeof(BW_D40);\n",
    "a template instantiated 2^30 ways": ("template <int N> struct BwT { static constexpr long v = BwT<N - 1>::v + "
                                          "BwT<N - 2>::v; };\ntemplate <> struct BwT<0> { static constexpr long v = 0; };\n"
                                          "template <> struct BwT<1> { static constexpr long v = 1; };\n"
                                          "#pragma GCC optimize(\"O0\")\nlong bw_t = BwT<100000>::v;\n"),
}


@pytest.mark.parametrize("how", list(EXPLOSIONS))
def test_an_explosion_at_compile_time_is_the_students(how, rubric, write_cu, monkeypatch):
    """Under a short build_time_s and build memory, on a machine said to be loaded: the student's
    timeout or compile_error, never the machine's. As in test_contract_limits, the share is lowered so
    that only a CPU reading of next to nothing (time spent where the build's CPU is not read) would
    blame the machine: this 2-core machine's real load is not the test's."""
    from grader.grade.pipeline import grade_submission
    from grader.toolchain import running

    monkeypatch.setattr(running.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    monkeypatch.setattr(running, "_STARVED_SHARE", 0.1)

    path = write_cu(_attack_source(EXPLOSIONS[how]))
    result = grade_submission(path, rubric=_lowered(rubric, build_time_s=8.0, build_memory_mib=1024),
                              backend="emulator")
    assert result.status in ("timeout", "compile_error"), (result.status, result.message)


# ---------------------------------------------------------------------------------------------------
# Memory, threads and processes of the child
# ---------------------------------------------------------------------------------------------------

MORE_TAKES = {
    "mremap growth": ("static char* g = nullptr; static size_t have = 0;\n"
                      "            char* p = g ? (char*)mremap(g, have, have + chunk, MREMAP_MAYMOVE)\n"
                      "                        : (char*)mmap(nullptr, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);\n"
                      "            if (p == (char*)MAP_FAILED) break;\n            memset(p + have, 1, chunk); g = p; have += chunk;"),
    "big thread stacks touched": ("pthread_attr_t at; pthread_attr_init(&at); pthread_attr_setstacksize(&at, chunk);\n"
                                  "            pthread_t t; if (pthread_create(&t, &at, [](void*) -> void* { volatile char s[15 << 20]; "
                                  "for (size_t i = 0; i < sizeof s; i += 4096) s[i] = 1; sleep(30); return nullptr; }, nullptr)) break;\n"
                                  "            usleep(20000);"),
    "MADV_DONTFORK then touched": ("char* p = (char*)mmap(nullptr, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | "
                                   "MAP_NORESERVE, -1, 0);\n            if (p == (char*)MAP_FAILED) break;\n"
                                   "            madvise(p, chunk, MADV_DONTFORK); memset(p, 1, chunk);"),
}


@pytest.mark.parametrize("take", list(MORE_TAKES))
def test_a_launcher_taking_memory_another_way_is_held_within_its_cap(take, memory_held_by, rubric, write_cu):
    """Held by the child's control group, or (none made) by RLIMIT_AS: within the cap plus 10% (and,
    by RLIMIT_AS, the room test_contract_limits leaves the emulator's threads and shared area), and it
    did take memory (the limit, not the mapping, stopped it)."""
    from test_contract_limits import CAP_MIB, HOG, _grade, _touched_mib

    hog = HOG.replace("#include <unistd.h>", "#include <unistd.h>\n#include <pthread.h>", 1)
    result = _grade(write_cu(hog.replace("TAKE", MORE_TAKES[take])), rubric, host_memory_mib=CAP_MIB)
    touched = _touched_mib(result)
    room = 1.1 * CAP_MIB
    if "cgroup" not in result.sandbox.host_memory_how:
        from grader.core.limits import spread_threads
        from grader.run.child.walls import ADDRESS_SPACE_PER_THREAD

        room += 160 + (spread_threads(0) + 4) * (ADDRESS_SPACE_PER_THREAD >> 20)
    assert touched <= room, (touched, result.status, result.message)
    assert touched >= CAP_MIB / 4, (touched, result.status, result.message)
    assert result.status in ("crashed", "graded"), (result.status, result.message)


# The screen refuses a file-scope initialiser that calls a function (a courtesy, read from the built
# object): here the constructor calls only through pointers kept in data, so the wall behind the
# screen (the system-call filter, the process limit) is what is tried.
CTOR = CAT + ("#include <pthread.h>\n#include <unistd.h>\n#include <cstdio>\n"
              "static void* bw_park(void*) { sleep(60); return nullptr; }\n"
              "static int (*volatile bw_create)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*) = pthread_create;\n"
              "static pid_t (*volatile bw_fork)() = fork;\n"
              "static int (*volatile bw_fmt)(char*, size_t, const char*, ...) = snprintf;\n"
              "static ssize_t (*volatile bw_write)(int, const void*, size_t) = write;\n"
              "#define bw_print(what, n) do { char b[64]; int k = bw_fmt(b, sizeof b, what, n); bw_write(2, b, k); } while (0)\n"
              "#define BW_CTOR __attribute__((BW_CAT(constr, uctor)))\n")
CONSTRUCTORS = {
    "a thread storm": (CTOR + "BW_CTOR static void bw_storm() { int n = 0;\n"
                       "  for (int i = 0; i < 3000; ++i) { pthread_t t; if (bw_create(&t, nullptr, bw_park, nullptr)) break; ++n; }\n"
                       "  bw_print(\"THREADS %d\\n\", n); }\n"),
    "a fork bomb": (CTOR + "BW_CTOR static void bw_forks() { int n = 0; for (int i = 0; i < 3000; ++i) "
                    "{ if (bw_fork() < 0) break; ++n; } bw_print(\"FORKS %d\\n\", n); }\n"),
}


@pytest.mark.parametrize("how", list(CONSTRUCTORS))
def test_a_static_constructors_storm_is_bounded_and_the_students(how, rubric, write_cu):
    from grader.grade.pipeline import grade_submission
    from grader.run import spawn

    result = grade_submission(write_cu(_attack_source(CONSTRUCTORS[how])), rubric=rubric, backend="emulator")
    said = re.findall(r"(?:THREADS|FORKS) (\d+)", result.output.stderr if result.output else "")
    assert result.status != "infrastructure_error", result.message
    assert all(int(n) < spawn.child_pids() for n in said), said
    if how == "a fork bomb":
        assert result.status == "rejected" and not said, (result.status, result.message, said)


# ---------------------------------------------------------------------------------------------------
# --server: the checker and the opener must read the same host
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["http://evil.example\\@127.0.0.1", "http://user@127.0.0.1:9", "http://evil.example:80@127.0.0.1"])
def test_a_server_url_with_user_info_is_refused(url):
    from grader.core.errors import UsageError
    from grader.serve.client import server_url

    with pytest.raises(UsageError):
        server_url(url)


# Every way to take shared memory a launcher could write, without a control group (the H100 host has none
# to delegate): RLIMIT_AS counts a mapping, never a memory file written and not mapped, so memfd_create
# is refused there (guard.c's GUARD_NO_MEMFD) and a /dev/shm file is an open that creates (refused); a
# shared anonymous mapping is address space, held by RLIMIT_AS (test_contract_limits.py's
# test_a_launcher_taking_shared_memory_past_its_cap_is_held_within_it). Each takes up to 1 GiB, 16 MiB at a time (HOG).
SHARED_TAKES = {
    "memfd written": ("memfd", "memfd_create"),
    "memfd ftruncate then written": (
        "int fd = memfd_create(\"hog\", MFD_CLOEXEC);\n            if (fd < 0 || ftruncate(fd, chunk) != 0) break;\n"
        "            if (pwrite(fd, gPage, sizeof gPage, chunk - sizeof gPage) < 0) break;", "memfd_create"),
    "memfd fallocate": ("int fd = memfd_create(\"hog\", 0);\n            if (fd < 0 || fallocate(fd, 0, 0, chunk) != 0) break;",
                        "memfd_create"),
    "memfd mapped": ("int fd = syscall(SYS_memfd_create, \"hog\", 0);\n            if (fd < 0) break;\n"
                     "            char* p = (char*)mmap(nullptr, chunk, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);\n"
                     "            if (p == (char*)MAP_FAILED) break;\n            memset(p, 1, chunk);", "memfd_create"),
    "a /dev/shm file": ("char name[64]; snprintf(name, sizeof name, \"/dev/shm/hog-%zu\", m);\n"
                        "            int fd = open(name, O_RDWR | O_CREAT, 0600);\n            if (fd < 0) break;\n"
                        "            for (size_t w = 0; w < chunk; w += sizeof gPage)\n"
                        "                if (write(fd, gPage, sizeof gPage) < 0) break;", "/dev/shm/hog-0"),
    "shm_open": ("char name[64]; snprintf(name, sizeof name, \"/hog-%zu\", m);\n"
                 "            int fd = shm_open(name, O_RDWR | O_CREAT, 0600);\n            if (fd < 0) break;\n"
                 "            for (size_t w = 0; w < chunk; w += sizeof gPage) if (write(fd, gPage, sizeof gPage) < 0) break;",
                 "/dev/shm/hog-0"),
}
SHARED_HEADERS = "#include <fcntl.h>\n#include <sys/syscall.h>\n"


@pytest.mark.parametrize("take", list(SHARED_TAKES))
def test_shared_memory_a_launcher_writes_without_a_control_group_is_refused_and_said(take, monkeypatch, rubric, write_cu):
    """Where RLIMIT_AS holds the cap, each way to a memory file no mapping counts is refused before it
    runs: the student's rejected, blocked_by_sandbox, the message naming the call and why."""
    from test_contract_limits import CAP_MIB, HOG, TAKES, _grade, _touched_mib

    from grader.run import spawn

    monkeypatch.setattr(spawn, "child_group", lambda: None)
    code, named = SHARED_TAKES[take]
    source = SHARED_HEADERS + HOG.replace("TAKE", TAKES.get(code, code))
    result = _grade(write_cu(source), rubric, host_memory_mib=CAP_MIB)
    assert result.sandbox.host_memory_how.startswith("RLIMIT_AS"), result.sandbox.host_memory_how
    assert result.status == "rejected" and "blocked_by_sandbox" in result.flags, (result.status, result.message)
    assert named in result.message, result.message
    if named == "memfd_create":
        assert "no control group" in result.message and "malloc" in result.message, result.message
    assert _touched_mib(result) == 0, result.output.stderr if result.output else ""


@has_cgroup
def test_a_correct_kernel_that_takes_a_memfd_is_graded_where_a_control_group_counts_it(rubric, write_cu):
    """Fairness: where the child's control group counts every page, a memory file is allowed (a
    correct launcher that uses one for a scratch buffer is graded correct)."""
    from test_contract_limits import KERNEL, LAUNCH, _grade

    scratch = ("#include <sys/mman.h>\n#include <unistd.h>\n" + KERNEL +
               "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, "
               "cudaStream_t stream) {\n    static int fd = memfd_create(\"scratch\", MFD_CLOEXEC);\n"
               "    char b[4096] = {1};\n    if (fd < 0 || write(fd, b, sizeof b) != (ssize_t)sizeof b) return;" + LAUNCH)
    result = _grade(write_cu(scratch), rubric, host_memory_mib=384)
    assert "cgroup" in result.sandbox.host_memory_how, result.sandbox.host_memory_how
    assert result.status == "graded" and result.correct, (result.status, result.message)
