"""The run-time wall's last holes (issue 65): what a child that runs submission code can no longer
reach, and what happens where the wall cannot go up.

- /dev: the child's writable places there are the device files it needs, never a folder: with
  TMPDIR on /dev/shm every child's own folder lies there, and a classmate's was readable.
- /proc: a child reads its own entries and the machine's, never another process's command line,
  environment or folders (its parent's included).
- limits.require_read_wall on a machine without Landlock (simulated by a seccomp filter that answers
  ENOSYS to landlock_create_ruleset, as an old kernel does): the submission is never loaded, so
  nothing it would print or read exists, and the grade is infrastructure_error.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from grader.core import fswall

from test_read_wall import MARK, PEEK, attack
from test_wall import KERNEL, run_unscreened

needs_landlock = pytest.mark.skipif(fswall.landlock_abi() <= 0, reason="this kernel has no Landlock")


def _confined_python(code: str, private: Path) -> subprocess.CompletedProcess:
    from test_read_wall import _confined_python as run

    return run(code, private)


@needs_landlock
def test_a_childs_folder_under_dev_shm_is_its_own_and_a_classmates_there_is_closed(tmp_path):
    """TMPDIR=/dev/shm/...: two children's folders side by side under /dev; each reads and writes its
    own, and the other's file answers EACCES (the wall once granted all of /dev)."""
    base = Path("/dev/shm") / f"grader-test-{os.getpid()}"
    mine, other = base / "grader-run-mine", base / "grader-run-other"
    for folder in (mine, other):
        folder.mkdir(parents=True, exist_ok=True)
    (other / "lib.so").write_text(f"{MARK} a classmate's library copy\n")
    (other / "kernel.cpp1.ii").write_text(f"{MARK} a classmate's intermediate\n")
    try:
        run = _confined_python(f"""
            for p in ({str(other / 'lib.so')!r}, {str(other / 'kernel.cpp1.ii')!r}):
                try:
                    print("READ", open(p).read())
                except OSError as e:
                    print("DENIED", e.errno)
            try:
                print("LISTED", os.listdir({str(base)!r}))
            except OSError as e:
                print("DENIED-LIST", e.errno)
            open("mine.txt", "w").write("own")
            print("OWN", open("mine.txt").read())
            n = open("/dev/null", "w"); n.write("x"); n.close(); print("DEVNULL ok")
            print("URANDOM", len(open("/dev/urandom", "rb").read(8)))
        """, mine)
    finally:
        subprocess.run(["rm", "-rf", str(base)])
    assert "CONFINED True" in run.stdout, run.stdout + run.stderr
    assert MARK not in run.stdout and "READ" not in run.stdout, run.stdout
    assert run.stdout.count("DENIED 13") == 2 and "DENIED-LIST 13" in run.stdout, run.stdout
    assert "OWN own" in run.stdout and "DEVNULL ok" in run.stdout and "URANDOM 8" in run.stdout, run.stdout


@needs_landlock
def test_a_child_learns_nothing_of_other_processes_but_reads_its_own(tmp_path):
    """Another process's command line (the class path, other report folders), environment and working
    folder, the parent's included, answer EACCES; /proc/self, /proc/meminfo and /proc/sys still read."""
    private = tmp_path / "private"
    private.mkdir()
    neighbour = subprocess.Popen(["sleep", "60", MARK])         # a process whose command line names the secret
    try:
        run = _confined_python(f"""
            import os
            for p in ("/proc/%d/cmdline" % {neighbour.pid}, "/proc/%d/cmdline" % os.getppid(),
                      "/proc/%d/environ" % os.getppid(), "/proc/1/cmdline", "/proc/%d/status" % {neighbour.pid}):
                try:
                    print("READ", p, open(p, "rb").read()[:200])
                except OSError as e:
                    print("DENIED", p, e.errno)
            for p in ("/proc/%d/cwd" % os.getppid(), "/proc/%d/root/etc/hostname" % {neighbour.pid}):
                try:
                    print("READ", p, os.listdir(p) if not p.endswith("hostname") else open(p).read())
                except OSError as e:
                    print("DENIED", p, e.errno)
            try:
                print("LISTED /proc", [n for n in os.listdir("/proc") if n.isdigit()][:5])
            except OSError as e:
                print("DENIED list", e.errno)
            print("SELF", open("/proc/self/status").read().split()[1])
            print("MEM", open("/proc/meminfo").read().split()[0])
            print("SYS", open("/proc/sys/kernel/ostype").read().strip())
            print("TASKS", len(os.listdir("/proc/self/task")) >= 1)
        """, private)
    finally:
        neighbour.kill()
        neighbour.wait()
    out = run.stdout
    assert "CONFINED True" in out, out + run.stderr
    assert MARK not in out and "READ" not in out and "LISTED" not in out, out
    assert out.count("DENIED") == 8, out
    assert "SELF python" in out and "MEM MemTotal:" in out and "SYS Linux" in out and "TASKS True" in out, out


# A seccomp filter that answers ENOSYS to landlock_create_ruleset (444), as a kernel without Landlock
# does, for the program it execs: the grading child, started under it as under Nsight Compute.
NO_LANDLOCK_C = r"""
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <unistd.h>
int main(int argc, char** argv) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 444, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { sizeof code / sizeof code[0], code };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) return 111;
    execvp(argv[1], argv + 1);
    return 112;
}
"""


@pytest.fixture
def no_landlock(tmp_path, monkeypatch) -> list[str]:
    """The wrapper under which a child finds no Landlock (the Worker's wrapper, as ncu is)."""
    src = tmp_path / "nolandlock.c"
    src.write_text(NO_LANDLOCK_C)
    exe = tmp_path / "nolandlock"
    done = subprocess.run(["cc", "-O1", "-o", str(exe), str(src)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no C compiler for the wrapper: {done.stderr[-300:]}")
    os.chmod(tmp_path, 0o755)
    return [str(exe)]


def _with_wrapper(monkeypatch, wrapper: list[str]) -> None:
    from grader.run import sandbox

    real = sandbox.Worker.__init__

    def wrapped(self, **kw):
        kw.setdefault("wrapper", wrapper)
        real(self, **kw)

    monkeypatch.setattr(sandbox.Worker, "__init__", wrapped)


PRINTS_AT_LOAD = PEEK + KERNEL + textwrap.dedent(f"""
    static int said = printf("LOADED {MARK}\\n");
    void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {{
        biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, s>>>(x, bias, out, cols);
    }}
""")


def test_require_read_wall_without_landlock_never_loads_the_submission(no_landlock, monkeypatch, rubric, write_cu):
    """Without Landlock and with limits.require_read_wall, the child refuses before the submission's
    static initialisers run: nothing it prints exists, and the grade is the machine's. Without the
    requirement the same file loads (and says so), which is what the first assertion could miss."""
    _with_wrapper(monkeypatch, no_landlock)
    path = write_cu(PRINTS_AT_LOAD)
    loose = run_unscreened(path, rubric, "emulator")
    assert f"LOADED {MARK}" in loose.output.stdout, loose.output.stdout + loose.output.stderr
    assert loose.sandbox.reads_confined is False and "no Landlock" in loose.sandbox.reads_detail
    strict = dataclasses.replace(rubric, limits=dataclasses.replace(rubric.limits, require_read_wall=True))
    refused = run_unscreened(path, strict, "emulator")
    assert MARK not in refused.output.stdout + refused.output.stderr
    assert refused.status == "infrastructure_error", (refused.status, refused.message)
    assert "require_read_wall" in refused.message and "Landlock" in refused.message


def test_require_read_wall_without_landlock_refuses_the_build_first(monkeypatch, tmp_path, rubric):
    """The build refuses too, before any compiler runs, where the rubric requires the wall."""
    from grader.core.errors import InfrastructureError
    from grader.toolchain import running

    monkeypatch.setattr(fswall, "landlock_abi", lambda: 0)
    with running.build_room() as room:
        with pytest.raises(InfrastructureError, match="require_read_wall"):
            running.run_limited(["true"], running.BuildLimits(require_wall=True), room)
        ran = running.run_limited(["true"], running.BuildLimits(), room)
    assert ran.proc.returncode == 0 and not ran.confined and "no Landlock" in ran.wall


@needs_landlock
def test_a_grades_result_says_its_build_was_walled(rubric, tmp_path, monkeypatch):
    """result.json's build.reads_confined and build.wall say what the build ran behind, built and
    cached alike (a cached build's record carries it)."""
    from grader.core.backend import EMULATOR
    from grader.core.source import read_submission
    from grader.grade.steps import summary
    from grader.toolchain.build import build_submission
    from conftest import SUBMISSIONS

    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "cache"))
    sub = read_submission(SUBMISSIONS / "scalar_2d.cu", rubric.kernel.launcher_name)
    for cached in (False, True):
        build = build_submission(sub, rubric, backend=EMULATOR)
        said = summary(build)
        assert build.ok and build.cached is cached
        assert said.reads_confined is True and said.wall.startswith("Landlock ABI"), said.wall
        if os.geteuid() == 0:
            assert "its own root" in said.wall, said.wall

