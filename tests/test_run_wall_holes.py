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
import sys
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

    def wrapped(self, spec):
        real(self, spec if spec.wrapper else dataclasses.replace(spec, wrapper=tuple(wrapper)))

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



# -- the driver's threads: the recorder on the GPU makes its context behind its wall ------------------

_LATE_CONTEXT = r"""
import ctypes, os, sys, threading, types
from grader.core.contract import Limits, Role
from grader.run.child import walls

secret, late = sys.argv[1], sys.argv[2] == "late"
libc = ctypes.CDLL(None)
events = []


class DriverLike:
    '''Stands in for the CUDA backend: its constructor starts a thread (cuInit starts the driver's,
    one of which runs the host callbacks a launcher enqueues) that reads a file when asked, and
    writes its own /proc/<pid> entry as the driver's start does.'''

    workspace_cap = 0

    def __init__(self):
        events.append(("backend", libc.prctl(3, 0, 0, 0, 0)))     # PR_GET_DUMPABLE when it was made
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write("driver-like")
        self.ask, self.seen = threading.Event(), []
        self.thread = threading.Thread(target=self._callback_thread)
        self.thread.start()

    def _callback_thread(self):
        self.ask.wait()
        try:
            self.seen.append("READ " + open(secret).read().strip())
        except OSError as exc:
            self.seen.append(f"DENIED {exc.errno}")

    def set_device_heap(self, n):
        return 0

    def memory(self):
        return None, None

    def launch_threads(self):
        return None


job = types.SimpleNamespace(guard_library=None, role=Role.RUN, offline=None, reference_library=None,
                            limits=Limits(host_memory_mib=0, device_heap_bytes=0, drop_privileges=False),
                            backend=types.SimpleNamespace(device_files=(), on_gpu=True, driver_library="libc.so.6"),
                            guard_mode=None, library=None, shared_bytes=0, emulator_threads=0)
real_read_wall = walls.read_wall
walls.read_wall = lambda job, **kw: (events.append(("wall", libc.prctl(3, 0, 0, 0, 0))), real_read_wall(job, **kw))[1]
backend, sandbox = walls.behind_the_wall(DriverLike, job, 2, late=late)
events.append(("after", libc.prctl(3, 0, 0, 0, 0)))
backend.ask.set()
backend.thread.join()
print("EVENTS", events)
print("CONFINED", sandbox.reads_confined, sandbox.reads_detail)
print("CALLBACK", backend.seen[0])
"""


@needs_landlock
@pytest.mark.parametrize("late", [True, False], ids=["late", "at-start"])
def test_a_thread_the_backend_starts_is_behind_the_wall_only_where_the_context_is_made_late(late, tmp_path):
    """walls.behind_the_wall(late=True), the recorder on the GPU: the file-system wall goes up before
    the backend is made, so a thread its constructor starts (the CUDA driver's, where a host callback
    runs) reads no classmate's file; it is made while the process is still dumpable (an undumpable
    process's /proc/<pid> is root's, which the driver's start writes) and the process is undumpable
    before anything of the submission's runs. At the start (late=False, every other child), a thread
    started by the backend is outside the wall: what the order changes."""
    from grader.core.locations import PACKAGE_DIR

    secret = tmp_path / "classmate.cu"
    secret.write_text(f"// {MARK}\n")
    private = tmp_path / "private"
    private.mkdir()
    run = subprocess.run([sys.executable, "-c", _LATE_CONTEXT, str(secret), "late" if late else "start"], cwd=private,
                         env=dict(os.environ, PYTHONPATH=str(PACKAGE_DIR.parent)), capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines())
    events = eval(lines["EVENTS"])              # noqa: S307 - the list this test's own script printed
    assert lines["CONFINED"].startswith("True"), run.stdout
    order = [name for name, _ in events]
    if late:
        assert order == ["wall", "backend", "after"], events
        assert dict(events) == {"wall": 1, "backend": 1, "after": 0}, events      # dumpable until the backend is made
        assert lines["CALLBACK"] == "DENIED 13", run.stdout
        assert "thread(s) started before it" not in lines["CONFINED"], run.stdout
    else:
        assert order == ["backend", "wall", "after"], events
        assert events[-1] == ("after", 0)
        assert lines["CALLBACK"] == f"READ // {MARK}", run.stdout
        assert "1 thread(s) started before it" in lines["CONFINED"], run.stdout


def test_only_the_recorder_on_the_gpu_makes_its_context_behind_its_wall():
    """The 'walledgpu' flag (worker.main: no context at the start, the backend made behind the wall)
    goes to the recorder on the GPU alone: not to the measuring process, which runs no host code of
    the submission and whose context is made while the parent builds, nor to the recorder without a
    GPU (no context at all), nor to the emulator."""
    from grader.core.backend import CUDA, EMULATOR
    from grader.run.sandbox import ChildSpec, Worker

    cases = [(CUDA, dict(recorder=True), True), (CUDA, dict(recorder=False), False),
             (CUDA, dict(recorder=True, gpu=False), False), (EMULATOR, dict(recorder=True), False)]
    for backend, kwargs, walled in cases:
        with Worker(ChildSpec(backend=backend, output_cap=64, cpu_limit_s=10, **kwargs)) as worker:
            argv = list(worker.proc.args)
        assert ("walledgpu" in argv) is walled, (backend.name, kwargs, argv)
        assert ("nogpu" in argv) is (backend is CUDA and kwargs.get("gpu") is False), argv


CALLBACK_PEEK = PEEK + KERNEL + r"""
#include <cuda.h>
static const char* g_paths[8];
static int g_count = 0;
static void CUDA_CB peek_from_driver_thread(void*) {
    printf("CALLBACK ran on a driver thread\n");
    for (int i = 0; i < g_count; i++) show("callback", g_paths[i], open(g_paths[i], O_RDONLY));
    fflush(stdout);
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    static bool once = false;
    if (!once) {
        once = true;
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult q;
        // reached by a computed name: no wrapped runtime call names it
        char name[] = "cuLaunchHostFuncX"; name[16] = 0;
        if (cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q) == cudaSuccess && fn) {
            typedef CUresult (*Launch)(CUstream, CUhostFn, void*);
            CUresult r = ((Launch)fn)((CUstream)stream, peek_from_driver_thread, nullptr);
            printf("ENQUEUED %d\n", (int)r);
            cudaStreamSynchronize(stream);
        } else printf("NO ENTRY POINT\n");
        fflush(stdout);
    }
    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);
}
"""


@pytest.mark.gpu
@needs_landlock
def test_on_the_gpu_a_host_callback_on_the_drivers_thread_is_behind_the_wall(rubric, write_cu, tmp_path):
    """The recorder on the GPU makes its CUDA context behind its wall, so the driver's threads (where
    a host callback runs) are walled too: a callback reached through cudaGetDriverEntryPoint by a
    computed name reads none of the secrets, and the recorder reports no thread outside its wall."""
    from test_read_wall import _leaked

    secret = tmp_path / "classmate.cu"
    secret.write_text(f"// {MARK}\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    text = CALLBACK_PEEK.replace("static int g_count = 0;",
                                 f'static int g_count = 1; static int g_set = (g_paths[0] = "{secret}", 0);')
    result = run_unscreened(write_cu(text), rubric, "cuda")
    out = result.output.stdout
    print("callback attack:", out[:600], result.sandbox.reads_detail)
    assert MARK not in out + result.output.stderr, out
    assert _leaked(result) == []
    assert result.sandbox.reads_confined, result.sandbox.reads_detail
    assert "thread(s) started before it" not in (result.sandbox.reads_detail or ""), result.sandbox.reads_detail


def test_the_measuring_process_says_its_driver_threads_run_none_of_the_students_host_code(monkeypatch):
    """A report's sandbox line for the measuring process (the one judged on a GPU) counts the
    driver's threads outside its wall, and says what they may run there: none of the student's host
    code, which runs in the recorder alone (whose context is made behind its wall)."""
    import types

    from grader.core.contract import Role
    from grader.core.fswall import Confinement
    from grader.run.child import walls

    def confined(**kwargs):
        done = Confinement(True, "Landlock ABI 7 (2 thread(s) started before it, the driver's, are outside it)")
        done.threads_outside = 2
        return done

    monkeypatch.setattr(walls.fswall, "confine", confined)
    job = types.SimpleNamespace(role=Role.REPLAY, offline=None, backend=types.SimpleNamespace(device_files=(), on_gpu=True))
    _, detail, _ = walls.read_wall(job)
    assert "none of its host code" in detail
    job.role = Role.RUN
    assert "host code" not in walls.read_wall(job)[1]


# -- what exists: the emulator's child runs in a root of its own ---------------------------------------

_EXISTS = r"""
static void exists(const char* what, const char* p) {
    struct stat s;
    int st = stat(p, &s) == 0 ? 0 : errno;
    int ac = access(p, F_OK) == 0 ? 0 : errno;
    int fd = open(p, O_RDONLY);
    int op = fd >= 0 ? 0 : errno;
    if (fd >= 0) close(fd);
    printf("EXISTS %s stat=%d access=%d open=%d\n", what, st, ac, op);
}
"""


@pytest.fixture
def world_searchable():
    """A folder beneath /tmp itself, every folder on the way searchable by anyone, as course folders
    are kept (pytest's own folders are their owner's alone, which would hide what lies beneath from
    the child's user whatever else held)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="world-searchable-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs_landlock
def test_a_launcher_cannot_tell_whether_a_classmate_has_handed_in(world_searchable, rubric, write_cu):
    """On the CPU emulator the child runs in a root of its own (run/spawn.child_view): a classmate's
    file, the class folder and a report folder do not exist there, so stat, access and open answer
    for them exactly as for a path that exists nowhere (Landlock alone answered EACCES for a file
    that exists and ENOENT for one that does not, and stat succeeded: a launcher could tell which
    classmates had handed in, and when). The grade says the child had its own root."""
    from grader.grade.pipeline import grade_submission

    tmp_path = world_searchable
    klass = tmp_path / "class"
    (klass / "alice").mkdir(parents=True)
    (klass / "alice" / "kernel.cu").write_text(f"// {MARK}\n")
    reports = tmp_path / "out" / "alice"
    reports.mkdir(parents=True)
    (reports / "result.json").write_text("{}")
    for p in [tmp_path, *tmp_path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    pairs = [("classmate", klass / "alice" / "kernel.cu", klass / "bob" / "kernel.cu"),
             ("class folder", klass / "alice", klass / "carol"),
             ("report", reports / "result.json", tmp_path / "out" / "bob" / "result.json")]
    calls = [f'exists("{name} there", "{there}"); exists("{name} missing", "{missing}");'
             for name, there, missing in pairs]
    source = "#include <cerrno>\n" + attack(calls).replace(KERNEL, KERNEL + _EXISTS, 1)
    result = grade_submission(write_cu(source), rubric=rubric, backend="emulator")
    assert result.status == "graded" and result.correct, result.message
    said = dict(line.split(" ", 1)[1].rsplit(" stat=", 1) for line in result.output.stdout.splitlines()
                if line.startswith("EXISTS "))
    for name, _, _ in pairs:
        assert said[f"{name} there"] == said[f"{name} missing"], (name, said)
        assert said[f"{name} there"].startswith("2 "), (name, said)             # ENOENT, as nowhere
    assert result.sandbox.root == "its own root", result.sandbox.root
