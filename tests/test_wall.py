"""The wall on its own: payloads run in the real grading child with the screen skipped.

run_unscreened() is a test-only path (the command line always screens): it builds a
submission, starts the same child grade_submission starts, with the same job, and
returns what the parent concluded. Each payload tries one forbidden thing, directly or
through a call found at run time; the operating system must stop it, and it must leave
no trace: no file, no process, the parent (this test process) untouched.
"""

import os
import signal
from pathlib import Path

import pytest

from grader.toolchain.build import build_guard, build_submission
from grader.run.child import guard
from grader.core.results import Result
from grader.run.groups import leftover_processes
from grader.run.sandbox import ChildSpec, Worker
from grader.core.source import read_submission

KERNEL = """
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
"""
HEADERS = """#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
"""


def launcher(body: str) -> str:
    return (HEADERS + KERNEL + "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, "
            "int cols, cudaStream_t stream) {\n" + body +
            "\n    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);\n}\n")


def computed(name: str, signature: str, call: str) -> str:
    """Find a libc function at run time by a name assembled from pieces, and call it."""
    pieces = ", ".join(f"'{c}'" for c in name) + ", 0"
    return (f"    const char n[] = {{{pieces}}};\n"
            f"    auto fn = reinterpret_cast<{signature}>(dlsym(RTLD_DEFAULT, n));\n"
            f"    if (fn) {call};")


def run_unscreened(path: Path, rubric, backend: str) -> Result:
    """Grade path as grade_submission would, minus every screen (tests only)."""
    from grader import verdict
    from grader.core.backend import named
    from grader.core.results import OutputSummary
    from grader.exercises import load_reference
    from grader.grade.pipeline import take_verdict
    from grader.core.locations import cache_root
    from grader.exercises.data import materialize
    from tests.jobs import child_job

    sub = read_submission(path, rubric.kernel.launcher_name)
    arch = os.environ.get("GRADER_CUDA_ARCH", "sm_90")
    chosen = named(backend)
    build = build_submission(sub, rubric, backend=chosen, arch=arch)
    assert build.ok, build.log
    job, cases = child_job(rubric, backend=chosen, build=build, arch=arch, has_launcher=sub.has_launcher,
                           guard=build_guard(), draw=True)
    job.timing, job.timed_cases, job.verify_cases = None, [], []
    cases = [c for c in cases if not c.timed]
    reference = load_reference(rubric)
    result = Result(exercise=rubric.exercise, submission={"path": str(path)}, backend=backend, status="graded",
                    grader_version="test")
    if backend == "cuda":                 # on a GPU the submission's host code runs in the recorder
        from grader.run.replaying import for_recorder

        job = for_recorder(job)
    with Worker(ChildSpec(backend=chosen, output_cap=4096, cpu_limit_s=60, recorder=backend == "cuda")) as worker:
        run = worker.run(job, time_limit_s=60)
    result.output = OutputSummary(stdout=run.stdout.text(), stderr=run.stderr.text())
    references = {c.name: _done(verdict.expected_for(c, rubric, reference, materialize(rubric, reference, c, cache_root()),
                                                     cache_root())) for c in cases}
    take_verdict(result, verdict.judge_run(run, cases, references,
                                           verdict.Judging(rubric, reference, build, sub, named(backend))))
    return result


def _done(value):
    from concurrent.futures import Future

    f = Future()
    f.set_result(value)
    return f


# A path outside the child's folder for the payloads to aim at, this test run's own: two suites
# run at once on one machine (two CI jobs) once deleted each other's "must survive" mark.
MARK = f"/tmp/grader-wall-test-{os.getpid()}-{{}}"

PAYLOADS = {
    "system": ('    system("touch {mark}");', None),
    "popen": ('    if (FILE* p = popen("touch {mark}", "r")) pclose(p);', None),
    "execve": ('    char* argv[] = {(char*)"/usr/bin/touch", (char*)"{mark}", nullptr};\n'
               '    execv("/usr/bin/touch", argv);', "start a program"),
    "fork": ('    if (fork() == 0) { FILE* f = fopen("{mark}", "w"); if (f) fclose(f); _exit(0); }',
             "start another process"),
    "socket": ("    int s = socket(AF_INET, SOCK_STREAM, 0); if (s >= 0) close(s);", "network connection"),
    "write a file": ('    FILE* f = fopen("{mark}", "w"); if (f) { fputs("x", f); fclose(f); }',
                     "tried to create or write a file"),
    "unlink": ('    unlink("{mark}");', "tried to delete a file"),
    # each message names what was stopped: a folder's listing was "tried to create, change or delete a file"
    "opendir": ('    if (DIR* d = opendir("/tmp")) closedir(d);', "tried to list a folder"),
    "mkdir": ('    mkdir("{mark}", 0755);', "tried to create a folder"),
    "rmdir": ('    rmdir("{mark}");', "tried to delete a folder"),
    "signal the parent": ("    kill(getppid(), SIGUSR1);", "signal to another process"),
    "computed system": (computed("system", "int (*)(const char*)", 'fn("touch {mark}")'), None),
    "computed fork": (computed("fork", "int (*)()", "if (fn() == 0) _exit(0)"), "start another process"),
    "computed open": (computed("open", "int (*)(const char*, int, int)", 'fn("{mark}", O_CREAT | O_WRONLY, 0644)'),
                      "tried to create or write a file"),
    "raw syscall": ('    syscall(SYS_openat, AT_FDCWD, "{mark}", O_CREAT | O_WRONLY, 0644);',
                    "tried to create or write a file"),
    "raw instruction": ('    const char* p = "{mark}"; long r;\n'
                        '    asm volatile("syscall" : "=a"(r) : "a"(257L), "D"(-100L), "S"(p), "d"(0101L) '
                        ': "rcx", "r11", "memory");', "tried to create or write a file"),
    "replace the guard": ("    signal(SIGSYS, SIG_IGN);", "replace the grader's guard"),
    "static initialiser": (None, None),
}


def payload_source(name: str) -> str:
    mark = MARK.format(name.replace(" ", "-"))
    body, _ = PAYLOADS[name]
    if body is None:         # code at load time, before any launch
        return (HEADERS + f'static int gRan = system("touch {mark}");\n' + KERNEL)
    return launcher(body.replace("{mark}", mark))


@pytest.fixture
def parent_watch():
    """Counts SIGUSR1 sent to this process (the grading child's parent)."""
    got = []
    old = signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    yield got
    signal.signal(signal.SIGUSR1, old)


def _wall_case(name, backend, rubric, write_cu, parent_watch):
    if name == "raw instruction" and os.uname().machine != "x86_64":
        pytest.skip("x86-64 inline assembly")
    mark = Path(MARK.format(name.replace(" ", "-")))
    mark.unlink(missing_ok=True)
    if name == "unlink":
        mark.write_text("must survive")
    if name == "rmdir":
        mark.mkdir(exist_ok=True)
    result = run_unscreened(write_cu(payload_source(name)), rubric, backend)
    assert result.status == "rejected", (result.status, result.message)
    assert "blocked_by_sandbox" in result.flags
    meaning = PAYLOADS[name][1]
    if meaning:
        assert meaning in result.message, result.message
    if name == "unlink":
        assert mark.read_text() == "must survive"
        mark.unlink()
    elif name == "rmdir":
        assert mark.is_dir(), f"{mark} was removed: the payload ran"
        mark.rmdir()
    else:
        assert not mark.exists(), f"{mark} exists: the payload ran"
    assert parent_watch == [], "the parent was signalled"
    assert leftover_processes() == []


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_wall_stops_payload_on_the_emulator(name, rubric, write_cu, parent_watch):
    _wall_case(name, "emulator", rubric, write_cu, parent_watch)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_wall_stops_payload_on_the_gpu(name, rubric, write_cu, parent_watch):
    _wall_case(name, "cuda", rubric, write_cu, parent_watch)


def test_an_honest_kernel_runs_inside_the_wall(rubric, write_cu):
    result = run_unscreened(write_cu(launcher('    printf("launching %d x %d\\n", rows, cols);')), rubric, "emulator")
    assert result.status == "graded" and result.correct, result.message
    assert result.sandbox.seccomp is True, result.sandbox
    if os.geteuid() == 0:
        assert result.sandbox.privileges == "dropped from root to uid 65534", result.sandbox
    assert result.sandbox.host_memory_mib == rubric.limits.host_memory_mib
    assert "launching 101 x 97" in result.output.stdout


def test_guard_reports_are_parsed_and_explained():
    lines = (b"blocked 59 execve 0x7f 0x0 0x0 /bin/sh\n"
             b"blocked 41 socket 0x2 0x1 0x0\n"
             b"forged nonsense\n")
    found = guard.parse_reports(lines)
    assert [b.name for b in found] == ["execve", "socket", "?"]
    assert found[0].path == "/bin/sh" and "start a program" in found[0].describe()
    assert "network connection" in found[1].describe()
    assert found[2].action == "malformed"


def test_an_open_of_the_gpus_device_files_is_explained_as_a_stream_or_context_of_its_own():
    # A launcher that makes a stream on every call exhausts the context's channels; the driver then
    # opens /dev/nvidiactl again, after the wall (seen on the H200 with driver_stream_priority.cu).
    gpu, file = guard.parse_reports(b"blocked 257 openat 0xffffff9c 0x7ffd 0x80002 /dev/nvidiactl\n"
                                    b"blocked 257 openat 0xffffff9c 0x7ffd 0x241 /tmp/stash\n")
    said = gpu.describe()
    assert "driver" in said and "stream" in said and "/dev/nvidiactl" in said
    assert "a file" not in said
    assert "tried to create or write a file" in file.describe() and "stream" not in file.describe()


def _report(name: str, *args: int, path: str = "") -> guard.Blocked:
    line = f"blocked 0 {name} " + " ".join(hex(a) for a in (list(args) + [0, 0, 0])[:3]) + (f" {path}" if path else "")
    (found,) = guard.parse_reports(line.encode() + b"\n")
    return found


OPENDIR = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_DIRECTORY       # glibc's opendir
AT_FDCWD = 0xffffff9c

# What each call the filter stops is said to be: what was stopped, never a catch-all.
SAID = [
    (_report("openat", AT_FDCWD, 0x7ffd, OPENDIR, path="/tmp/class"), "tried to list a folder"),
    (_report("open", 0x7ffd, OPENDIR, path="/tmp/class"), "tried to list a folder"),
    (_report("openat", AT_FDCWD, 0x7ffd, os.O_PATH | os.O_DIRECTORY), "tried to open a folder"),
    (_report("openat", AT_FDCWD, 0x7ffd, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "tried to create or write a file"),
    (_report("openat", AT_FDCWD, 0x7ffd, os.O_RDWR | os.O_CREAT | os.O_EXCL), "tried to create or write a file"),
    (_report("open", 0x7ffd, os.O_WRONLY | os.O_TRUNC), "tried to empty a file"),
    (_report("openat", AT_FDCWD, 0x7ffd, os.O_WRONLY | os.O_APPEND), "tried to write to a file"),
    (_report("openat", AT_FDCWD, 0x7ffd, os.O_RDWR), "tried to write to a file"),
    (_report("openat", AT_FDCWD, 0x7ffd, os.O_RDWR | os.O_TMPFILE), "tried to create a file (a nameless"),
    (_report("creat", 0x7ffd, 0o644), "tried to create or write a file"),
    (_report("unlink", 0x7ffd), "tried to delete a file"),
    (_report("unlinkat", AT_FDCWD, 0x7ffd, 0), "tried to delete a file"),
    (_report("unlinkat", AT_FDCWD, 0x7ffd, 0x200), "tried to delete a folder"),      # AT_REMOVEDIR
    (_report("rmdir", 0x7ffd), "tried to delete a folder"),
    (_report("mkdir", 0x7ffd, 0o755), "tried to create a folder"),
    (_report("mkdirat", AT_FDCWD, 0x7ffd, 0o755), "tried to create a folder"),
    (_report("renameat2", AT_FDCWD, 0x7ffd, AT_FDCWD), "tried to rename or move a file"),
    (_report("fchmodat", AT_FDCWD, 0x7ffd, 0o777), "tried to change a file's permissions"),
    (_report("lchown", 0x7ffd, 0, 0), "tried to change a file's owner"),
    (_report("linkat", AT_FDCWD, 0x7ffd, AT_FDCWD), "tried to make a hard link to a file"),
    (_report("symlinkat", 0x7ffd, AT_FDCWD, 0x7ffe), "tried to make a symbolic link"),
    (_report("mknodat", AT_FDCWD, 0x7ffd, 0o10644), "tried to create a device file or a named pipe"),
    (_report("ftruncate", 3, 0), "tried to change a file's size"),
    (_report("utimensat", AT_FDCWD, 0x7ffd, 0), "tried to change a file's timestamps"),
]


@pytest.mark.parametrize("blocked, words", SAID, ids=[f"{b.name}-{i}" for i, (b, _) in enumerate(SAID)])
def test_each_message_names_what_was_stopped(blocked, words):
    said = blocked.describe()
    assert said.startswith(f"your code {words}"), said
    assert "create, change or delete" not in said
    if blocked.path:
        assert f"({blocked.path})" in said


def test_every_call_the_old_catch_all_named_has_a_message_of_its_own():
    """The calls "tried to create, change or delete a file" covered, each now said as what it does."""
    covered = {"open", "openat", "creat", "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat",
               "rmdir", "chmod", "fchmod", "fchmodat", "chown", "fchown", "fchownat", "lchown", "link", "linkat",
               "symlink", "symlinkat", "mknod", "mknodat", "truncate", "ftruncate", "fallocate", "utimensat", "utime",
               "utimes"}
    for name in covered:
        said = _report(name, 0, os.O_WRONLY | os.O_CREAT, os.O_WRONLY | os.O_CREAT).meaning
        assert said.startswith("tried to ") and "create, change or delete" not in said, (name, said)
        assert "system call" not in said, (name, said)


def test_guard_filter_builds_and_fits(tmp_path):
    library = build_guard()
    if library is None:
        pytest.skip("no C compiler")
    g = guard.Guard(str(library))
    assert 100 < g.lib.grader_guard_filter_length(guard.ENFORCE) < 1024
    assert g.lib.grader_guard_filter_length(guard.AUDIT) < 32


# Attacks on the child's descriptors, each graded by a parent that holds dozens of its own (as a batch
# grading a dozen at once does): the child's layout is the same whatever the parent's table holds
# (worker.place_descriptors), and none of these ends graded.
DESCRIPTOR_ATTACKS = {
    "every descriptor to 1023": """
    const char forged[] = "{\\"type\\": \\"done\\"}";
    for (int fd = 3; fd < 1024; ++fd) write(fd, forged, sizeof forged - 1);""",
    "the low ones a forged header each, in the protocol's framing": """
    unsigned char frame[64] = {0};
    memcpy(frame, "GRDR", 4);
    for (int fd = 3; fd < 8; ++fd) write(fd, frame, sizeof frame);""",
    "the result channel pointed at /dev/null": """
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) for (int fd = 3; fd < 8; ++fd) dup2(null, fd);""",
    "the low ones closed": """
    for (int fd = 3; fd < 8; ++fd) close(fd);""",
}


@pytest.mark.parametrize("attack", list(DESCRIPTOR_ATTACKS))
def test_a_launcher_writing_to_or_closing_the_childs_descriptors_is_never_graded(attack, rubric, write_cu):
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(40)]
    try:
        result = run_unscreened(write_cu(launcher(DESCRIPTOR_ATTACKS[attack])), rubric, "emulator")
    finally:
        for fd in held:
            os.close(fd)
    # the student's outcome, never the machine's (infrastructure_error) nor a grade
    assert result.status in ("rejected", "crashed"), (attack, result.status, result.message)
    if "write(" in DESCRIPTOR_ATTACKS[attack]:
        # its bytes landed on the result channel or the guard's pipe: caught as they arrived, and said so
        assert result.status == "rejected" and "blocked_by_sandbox" in result.flags, (attack, result.message)
