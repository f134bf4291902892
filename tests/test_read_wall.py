"""The file-system wall (grader/run/child/fswall.py): a submission reads nothing of the class.

Each attack is a launcher that tries to read a secret placed where a classmate's file, a report
folder, the grader's cache or the grader's own package would be, by one route (open, openat,
openat2, a relative path, /proc/self/cwd, /proc/<parent>/root, /proc/<parent>/cwd, the parent's
open descriptors through /proc, descriptors it may have inherited, opendir, dlopen, mmap) and
prints what it got. It runs in the real grading child (run_unscreened, the screen skipped); the
kernel is correct, so the grade is correct, and no byte of any secret may reach its output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.run.child import fswall

from test_wall import KERNEL, run_unscreened

LANDLOCK = fswall.landlock_abi() > 0
needs_landlock = pytest.mark.skipif(not LANDLOCK, reason="this kernel has no Landlock: the wall cannot go up "
                                    "(its absence is tested in test_a_machine_without_landlock_*)")

MARK = "SECRET-OF-ANOTHER-STUDENT"

PEEK = r"""
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>
static void show(const char* how, const char* path, int fd) {
    if (fd < 0) { printf("DENIED %s %s\n", how, path); return; }
    char buf[256]; ssize_t n = read(fd, buf, sizeof buf - 1); close(fd);
    if (n < 0) { printf("DENIED-READ %s %s\n", how, path); return; }
    buf[n] = 0; for (ssize_t i = 0; i < n; i++) if (buf[i] == '\n') buf[i] = ' ';
    printf("READ %s %s: %s\n", how, path, buf);
}
static void up_to_root(char* out, size_t size) {    // "../../.." from the working directory to /
    char cwd[4096]; out[0] = 0;
    if (!getcwd(cwd, sizeof cwd)) return;
    for (char* c = cwd; *c; c++) if (*c == '/') strncat(out, "../", size - strlen(out) - 1);
}
"""

# How each attack reaches a path P (a C string): a statement using P that calls show() or prints.
ROUTES = {
    "open": 'show("open", P, open(P, O_RDONLY));',
    "fopen": 'if (FILE* f = fopen(P, "r")) { char b[200] = {0}; fread(b, 1, 199, f); fclose(f); '
             'printf("READ fopen %s: %s\\n", P, b); } else printf("DENIED fopen %s\\n", P);',
    "openat": 'show("openat", P, openat(AT_FDCWD, P, O_RDONLY));',
    "openat2": 'struct open_how how; memset(&how, 0, sizeof how); how.flags = O_RDONLY; '
               'show("openat2", P, (int)syscall(SYS_openat2, AT_FDCWD, P, &how, sizeof how));',
    "relative path": 'char rel[8192]; up_to_root(rel, sizeof rel); strncat(rel, P + 1, sizeof rel - strlen(rel) - 1); '
                     'show("relative", rel, open(rel, O_RDONLY));',
    "proc self cwd": 'char q[8192]; up_to_root(q, sizeof q); char r[8300]; '
                     'snprintf(r, sizeof r, "/proc/self/cwd/%s%s", q, P + 1); show("cwd", r, open(r, O_RDONLY));',
    "proc parent root": 'char r[8300]; snprintf(r, sizeof r, "/proc/%d/root%s", (int)getppid(), P); '
                        'show("parent-root", r, open(r, O_RDONLY));',
    "proc 1 root": 'char r[8300]; snprintf(r, sizeof r, "/proc/1/root%s", P); show("init-root", r, open(r, O_RDONLY));',
    "mmap": 'int fd = open(P, O_RDONLY); if (fd >= 0) { void* m = mmap(0, 64, PROT_READ, MAP_PRIVATE, fd, 0); '
            'if (m != MAP_FAILED) printf("READ mmap %s: %.60s\\n", P, (const char*)m); close(fd); } '
            'else printf("DENIED mmap %s\\n", P);',
    "dlopen": 'void* h = dlopen(P, RTLD_NOW); printf("%s dlopen %s: %s\\n", h ? "READ" : "DENIED", P, h ? "" : dlerror());',
    "opendir": 'char d[4096]; strncpy(d, P, sizeof d - 1); d[sizeof d - 1] = 0; *strrchr(d, \'/\') = 0; '
               'if (DIR* dir = opendir(d)) { struct dirent* e; while ((e = readdir(dir))) printf("READ opendir %s: %s\\n", '
               'd, e->d_name); closedir(dir); } else printf("DENIED opendir %s\\n", d);',
    # Landlock does not check an O_PATH open: the descriptor it gives must open nothing itself.
    "O_PATH reopened": 'int o = open(P, O_PATH); char r[64]; snprintf(r, sizeof r, "/proc/self/fd/%d", o); '
                       'show("opath-reopen", r, open(r, O_RDONLY)); if (o >= 0) close(o);',
    "O_PATH folder, openat": 'char d[4096]; strncpy(d, P, sizeof d - 1); d[sizeof d - 1] = 0; char* b = strrchr(d, \'/\'); '
                             '*b = 0; int o = open(d, O_PATH | O_DIRECTORY); show("opath-openat", b + 1, openat(o, b + 1, O_RDONLY)); '
                             'if (o >= 0) close(o);',
    "fchdir, relative": 'char d[4096]; strncpy(d, P, sizeof d - 1); d[sizeof d - 1] = 0; char* b = strrchr(d, \'/\'); '
                        '*b = 0; int o = open(d, O_PATH | O_DIRECTORY); char here[4096]; if (!getcwd(here, sizeof here)) here[0] = 0; '
                        'if (o >= 0 && fchdir(o) == 0) show("fchdir", b + 1, open(b + 1, O_RDONLY)); '
                        'else printf("DENIED fchdir %s\\n", d); if (here[0]) chdir(here); if (o >= 0) close(o);',
    "chdir, relative": 'char d[4096]; strncpy(d, P, sizeof d - 1); d[sizeof d - 1] = 0; char* b = strrchr(d, \'/\'); '
                       '*b = 0; char here[4096]; if (!getcwd(here, sizeof here)) here[0] = 0; '
                       'if (chdir(d) == 0) show("chdir", b + 1, open(b + 1, O_RDONLY)); else printf("DENIED chdir %s\\n", d); '
                       'if (here[0]) chdir(here);',
    # A name in its own (writable) folder for the secret: a symbolic link, a hard link (the seccomp
    # filter stops both calls first; were it absent, Landlock checks where a link leads, and refuses
    # linking a file in from a folder it may not read).
    "symlink in its folder": 'unlink("peek-s"); symlink(P, "peek-s"); show("symlink", "peek-s", open("peek-s", O_RDONLY));',
    "hard link in its folder": 'unlink("peek-h"); link(P, "peek-h"); show("hardlink", "peek-h", open("peek-h", O_RDONLY));',
}

# Routes whose first system call the seccomp filter stops (the submission is then rejected: stopped
# either way, and nothing may leak).
SECCOMP_FIRST = {"opendir", "symlink in its folder", "hard link in its folder", "O_PATH reopened",
                 "O_PATH folder, openat", "fchdir, relative"}

# Routes that take no path: every descriptor the child holds or its parent holds.
SWEEPS = {
    "inherited descriptors": 'for (int fd = 3; fd < 1024; fd++) { struct stat s; if (fstat(fd, &s) == 0 && '
                             'S_ISREG(s.st_mode)) { char b[200] = {0}; if (pread(fd, b, 199, 0) > 0) '
                             'printf("READ fd %d: %s\\n", fd, b); } }',
    "parent's descriptors": 'for (int fd = 0; fd < 1024; fd++) { char r[64]; snprintf(r, sizeof r, "/proc/%d/fd/%d", '
                            '(int)getppid(), fd); int f = open(r, O_RDONLY | O_NONBLOCK); if (f >= 0) { char b[200] = {0}; '
                            'if (read(f, b, 199) > 0) printf("READ parent-fd %s: %s\\n", r, b); close(f); } }',
    "parent's environment": 'char r[64]; snprintf(r, sizeof r, "/proc/%d/environ", (int)getppid()); '
                            'show("environ", r, open(r, O_RDONLY));',
}


def attack(statements: list[str]) -> str:
    body = "\n".join("    { " + s + " }" for s in statements)
    return (PEEK + KERNEL + "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, "
            "int cols, cudaStream_t stream) {\n    static bool once = false;\n    if (!once) {\n        once = true;\n"
            + body + "\n        fflush(stdout);\n    }\n"
            "    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);\n}\n")


def _route(route: str, path: str) -> str:
    return f'const char* P = "{path}"; ' + ROUTES[route]


@pytest.fixture
def secrets(tmp_path) -> dict[str, Path]:
    """A secret where each thing a submission must not read lies: a classmate's file in a class folder,
    a report folder's result.json, a file in the grader's cache."""
    cls = tmp_path / "class" / "alice"
    cls.mkdir(parents=True)
    (cls / "kernel.cu").write_text(f"// {MARK} alice's kernel\n")
    report = tmp_path / "out" / "alice"
    report.mkdir(parents=True)
    (report / "result.json").write_text(json.dumps({"note": f"{MARK} alice's result"}))
    cache = Path(os.environ["GRADER_CACHE_DIR"]) / "planted"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "other.txt").write_text(f"{MARK} in the cache\n")
    for p in tmp_path.rglob("*"):                     # world-readable, as course folders are kept
        p.chmod(0o755 if p.is_dir() else 0o644)
    tmp_path.chmod(0o755)
    return {"classmate": cls / "kernel.cu", "report": report / "result.json", "cache": cache / "other.txt"}


def _leaked(result) -> list[str]:
    text = result.output.stdout + result.output.stderr + result.message
    return [line for line in text.splitlines() if MARK in line]


def _grade_attack(source: str, rubric, write_cu, backend: str, seccomp_may_stop: bool = False):
    """seccomp_may_stop: the route's system call is one the seccomp filter stops first (opendir's
    open flags), which rejects the submission: stopped either way, and nothing may leak. On a GPU
    run_unscreened runs the recorder alone (the host code), whose outputs are stand-ins: graded, but
    not judged correct."""
    result = run_unscreened(write_cu(source), rubric, backend)
    if seccomp_may_stop and result.status == "rejected":
        assert "blocked_by_sandbox" in result.flags, result.message
        return result
    assert result.status == "graded", (result.status, result.message)
    assert result.correct or backend == "cuda", result.message
    return result


@needs_landlock
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_no_route_reads_a_classmates_file_a_report_or_the_cache(route, secrets, rubric, write_cu):
    result = _grade_attack(attack([_route(route, str(p)) for p in secrets.values()]), rubric, write_cu, "emulator",
                           seccomp_may_stop=route in SECCOMP_FIRST)
    assert _leaked(result) == []
    assert not any(line.startswith("READ ") for line in result.output.stdout.splitlines()), result.output.stdout
    if result.status == "graded":
        assert result.output.stdout.count("DENIED") >= len(secrets), result.output.stdout
    assert result.sandbox.reads_confined is True and result.sandbox.reads_detail.startswith("Landlock ABI")


@needs_landlock
def test_the_graders_own_package_is_out_of_reach(rubric, write_cu):
    from grader.core.locations import PACKAGE_DIR

    init = PACKAGE_DIR / "__init__.py"
    result = _grade_attack(attack([_route(r, str(init)) for r in ("open", "openat2", "mmap")]), rubric, write_cu,
                           "emulator")
    assert "READ " not in result.output.stdout, result.output.stdout
    assert "DENIED open " + str(init) in result.output.stdout


@needs_landlock
@pytest.mark.parametrize("sweep", sorted(SWEEPS))
def test_no_descriptor_of_the_child_or_its_parent_reads_a_secret(sweep, secrets, rubric, write_cu):
    held = [os.open(p, os.O_RDONLY) for p in secrets.values()]      # this process is the grading child's parent
    for fd in held:
        os.set_inheritable(fd, True)                                 # as a careless parent would leave them
    try:
        result = _grade_attack(attack([SWEEPS[sweep]]), rubric, write_cu, "emulator")
    finally:
        for fd in held:
            os.close(fd)
    assert _leaked(result) == [], _leaked(result)


@needs_landlock
def test_what_a_kernel_needs_is_still_readable_and_its_own_folder_writable(rubric, write_cu):
    """The wall refuses only what the grade does not need: the system's files, /proc/self, /dev/null
    and the child's own folder still work, so printf, <iostream>, getenv and the like are unchanged."""
    result = _grade_attack(attack([
        _route("open", "/etc/hostname") if Path("/etc/hostname").exists() else 'printf("no hostname\\n");',
        'show("status", "/proc/self/status", open("/proc/self/status", O_RDONLY));',
        'int n = open("/dev/null", O_RDONLY); printf("%s devnull\\n", n >= 0 ? "OPENED" : "FAILED"); if (n >= 0) close(n);',
        'char c[4096]; printf("cwd %s\\n", getcwd(c, sizeof c) ? "ok" : "failed");',
    ]), rubric, write_cu, "emulator")
    out = result.output.stdout
    assert "READ status /proc/self/status: Name:" in out, out
    assert "OPENED devnull" in out and "cwd ok" in out, out


def _confined_python(code: str, private: Path) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter after fswall.confine(private=...), as the grading child does."""
    from grader.core.locations import PACKAGE_DIR

    script = textwrap.dedent(f"""
        import os, sys
        from grader.run.child import fswall
        done = fswall.confine(private={str(private)!r}, grader_package={str(PACKAGE_DIR)!r})
        print("CONFINED", done.confined, done.detail, done.ms, flush=True)
    """) + textwrap.dedent(code)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR.parent))
    return subprocess.run([sys.executable, "-c", script], cwd=private, env=env, capture_output=True, text=True,
                          timeout=60)


def _private(tmp_path: Path) -> Path:
    private = tmp_path / "private"
    private.mkdir(exist_ok=True)
    return private


@needs_landlock
def test_a_link_planted_in_the_private_folder_before_the_wall_leads_nowhere(secrets, tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    (private / "mine.txt").write_text("my own\n")
    os.symlink(secrets["classmate"], private / "planted")
    os.symlink(secrets["classmate"].parent, private / "planted-folder")
    os.link(private / "mine.txt", private / "hard")
    run = _confined_python("""
        for name in ("planted", "planted-folder/kernel.cu"):
            try:
                print("READ", name, open(name).read())
            except OSError as e:
                print("DENIED", name, e.errno)
        print("OWN", open("mine.txt").read().strip(), open("hard").read().strip())
        open("new.txt", "w").write("written")
        print("WROTE", open("new.txt").read())
    """, private)
    assert run.returncode == 0, run.stderr
    assert "CONFINED True" in run.stdout, run.stdout
    assert MARK not in run.stdout and "READ" not in run.stdout, run.stdout
    assert "DENIED planted 13" in run.stdout and "DENIED planted-folder/kernel.cu 13" in run.stdout
    assert "OWN my own my own" in run.stdout and "WROTE written" in run.stdout


@needs_landlock
def test_behind_landlock_alone_the_routes_seccomp_stops_first_read_nothing_either(secrets, tmp_path):
    """The routes the seccomp filter stops first (O_PATH descriptors, links made in the child's own
    folder, a directory listing), tried where only the file-system wall stands: each still reads
    nothing of a classmate's, whatever name or descriptor it reaches the file by."""
    private = _private(tmp_path)
    targets = [str(p) for p in secrets.values()]
    run = _confined_python(f"""
        targets = {targets!r}
        def tried(how, fn):
            try:
                print("READ", how, fn())
            except OSError as e:
                print("DENIED", how, e.errno)
        for i, path in enumerate(targets):
            folder, name = os.path.split(path)
            def reopened():
                fd = os.open(path, os.O_PATH)
                return open("/proc/self/fd/%d" % fd).read()
            def through_folder():
                fd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
                return os.read(os.open(name, os.O_RDONLY, dir_fd=fd), 200)
            def after_fchdir():
                here = os.getcwd()
                fd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
                os.fchdir(fd)
                try:
                    return open(name).read()
                finally:
                    os.chdir(here)
            def symlinked():
                os.symlink(path, "peek-s%d" % i)
                return open("peek-s%d" % i).read()
            def hard_linked():
                os.link(path, "peek-h%d" % i)
                return open("peek-h%d" % i).read()
            def listed():
                return os.listdir(folder)
            for how, fn in (("reopened", reopened), ("through-folder", through_folder), ("fchdir", after_fchdir),
                            ("symlink", symlinked), ("hardlink", hard_linked), ("listdir", listed)):
                tried(how, fn)
        print("DONE")
    """, private)
    assert run.returncode == 0, run.stderr
    assert "CONFINED True" in run.stdout and "DONE" in run.stdout, run.stdout + run.stderr
    assert MARK not in run.stdout and "READ" not in run.stdout, run.stdout
    assert run.stdout.count("DENIED") == 6 * len(targets), run.stdout


@needs_landlock
def test_a_thread_started_after_the_wall_is_behind_it_too(secrets, tmp_path):
    run = _confined_python(f"""
        import threading
        got = []
        def peek():
            try:
                got.append(open({str(secrets["classmate"])!r}).read())
            except OSError as e:
                got.append("DENIED %d" % e.errno)
        t = threading.Thread(target=peek); t.start(); t.join()
        print(got[0])
    """, _private(tmp_path))
    assert "DENIED 13" in run.stdout and MARK not in run.stdout, run.stdout + run.stderr


def test_a_machine_without_landlock_grades_and_says_so_and_the_rubric_can_refuse(rubric):
    """Where the kernel has no Landlock the child says so; the notice tells the reader, and
    limits.require_read_wall turns the grade into infrastructure_error naming the fix."""
    import dataclasses

    from grader.core.contract import ChildSandbox
    from grader.core.results import Result, SandboxSummary
    from grader.report.files import notices
    from grader.verdict import read_wall_stop

    no_wall = SandboxSummary(seccomp=True, reads_confined=False,
                             reads_detail="reads not confined: this kernel has no Landlock")
    assert read_wall_stop(rubric, no_wall) is None                # the default grades on
    result = Result(exercise=rubric.exercise, submission={"path": "k.cu"}, backend="emulator", status="graded",
                    grader_version="test", sandbox=no_wall)
    assert any("file-system wall was not in force" in n and "no Landlock" in n for n in notices(result))
    strict = dataclasses.replace(rubric, limits=dataclasses.replace(rubric.limits, require_read_wall=True))
    stop = read_wall_stop(strict, no_wall)
    assert stop is not None and stop.status == "infrastructure_error"
    assert "limits.require_read_wall" in stop.message and "Landlock" in stop.message
    walled = SandboxSummary(seccomp=True, reads_confined=True, reads_detail="Landlock ABI 7")
    assert read_wall_stop(strict, walled) is None
    # on a GPU the recorder runs the host code: its sandbox counts too
    walled.recorder = ChildSandbox(reads_confined=False, reads_detail="reads not confined: no Landlock")
    assert read_wall_stop(strict, walled) is not None


def test_every_right_the_abi_knows_is_handled():
    assert fswall.every_right(1) == (1 << 13) - 1
    assert fswall.every_right(3) & fswall.TRUNCATE and not fswall.every_right(3) & fswall.IOCTL_DEV
    assert fswall.every_right(7) & fswall.IOCTL_DEV and fswall.every_right(7) & fswall.REFER


def test_the_plan_leaves_the_graders_package_and_other_folders_out(tmp_path):
    from grader.core.locations import PACKAGE_DIR

    readable, writable = fswall.plan(private=str(tmp_path), grader_package=str(PACKAGE_DIR))
    assert not any(p == str(PACKAGE_DIR) or p.startswith(str(PACKAGE_DIR) + "/") for p in readable)
    assert str(tmp_path.resolve()) in writable
    assert not any(p in ("/", "/tmp", "/home", "/root") for p in readable + writable), readable


GPU_ROUTES = ("open", "openat2", "relative path", "proc self cwd", "proc parent root", "mmap", "dlopen")


@pytest.mark.gpu
def test_on_the_gpu_the_recorder_is_walled_when_the_kernel_has_landlock(secrets, rubric, write_cu):
    """On a GPU the submission's host code runs in the recorder (with or without the device):
    every route of the emulator's test, at once, and what the machine offers said either way."""
    result = _grade_attack(attack([_route(r, str(p)) for r in GPU_ROUTES for p in secrets.values()]), rubric,
                           write_cu, "cuda")
    print("GPU read wall:", result.sandbox.reads_confined, result.sandbox.reads_detail, result.sandbox.read_wall_ms,
          "ms;", result.output.stdout.count("DENIED"), "denied")
    if LANDLOCK:
        assert _leaked(result) == [], _leaked(result)
        assert result.sandbox.reads_confined is True, result.sandbox.reads_detail
    else:
        assert result.sandbox.reads_confined is False and "Landlock" in result.sandbox.reads_detail


@pytest.mark.gpu
@needs_landlock
@pytest.mark.parametrize("sweep", sorted(SWEEPS))
def test_on_the_gpu_no_descriptor_reads_a_secret(sweep, secrets, rubric, write_cu):
    held = [os.open(p, os.O_RDONLY) for p in secrets.values()]
    try:
        result = _grade_attack(attack([SWEEPS[sweep]]), rubric, write_cu, "cuda")
    finally:
        for fd in held:
            os.close(fd)
    assert _leaked(result) == [], _leaked(result)
