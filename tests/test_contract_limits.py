"""What a process touching a submission may use (issue 70): memory counted whole however it is
mapped, processes and threads bounded whoever runs the grader, a build's files within their size
limit (and the cache within its cap), and a build's time-out the student's whatever the load.

Each is tried through a control group (core/cgroups.py, where this machine gives one) and through
the fallback (resource limits) with the group taken away. The limits are lowered through the
rubric to keep each test cheap on a shared machine."""

import dataclasses
import os
import re
import subprocess
import sys

import pytest
from conftest import SUBMISSIONS

from grader.core import cgroups
from grader.run import spawn
from grader.toolchain import running
from grader.toolchain.running import BuildLimits, build_room, run_limited

has_cgroup = pytest.mark.skipif(cgroups.available() is None, reason="this machine gives the grader no control group")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plays both users (root and nobody), which needs root")

KERNEL = r"""
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
"""

LAUNCH = """
    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);
}
"""

# A launcher that takes up to 1 GiB of memory the ways RLIMIT_DATA never counted, 16 MiB at a time
# until it is refused, saying how much it holds, and computes correctly all the same: a hostile
# student's launcher. What it gets must stay within the cap plus 10%.
HOG = r"""
#include <sys/mman.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
""" + KERNEL + r"""
static int gDone = 0;
static char gPage[1 << 20];
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    if (!gDone) {
        gDone = 1;
        const size_t chunk = size_t(16) << 20;
        memset(gPage, 1, sizeof gPage);
        for (size_t m = 0; m < 64; ++m) {
            TAKE
            fprintf(stderr, "TOUCHED %zu\n", (m + 1) * 16);
        }
    }""" + LAUNCH

TAKES = {
    # shared anonymous pages, touched
    "shared anonymous": ("char* p = (char*)mmap(nullptr, chunk, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, "
                         "-1, 0);\n            if (p == (char*)MAP_FAILED) break;\n            memset(p, 1, chunk);"),
    # a memfd grown by writing (ftruncate is refused by the system-call filter), never mapped
    "memfd": ("int fd = memfd_create(\"hog\", 0);\n            if (fd < 0) break;\n            size_t w = 0;\n"
              "            while (w < chunk && write(fd, gPage, sizeof gPage) == (ssize_t)sizeof gPage) w += sizeof gPage;\n"
              "            if (w < chunk) break;"),
}

CAP_MIB = 384           # an honest kernel's emulated buffers fit (the timed shape's take about 260 MiB)


def _grade(path, rubric, **limits):
    from grader.grade.pipeline import grade_submission

    lowered = dataclasses.replace(rubric, limits=dataclasses.replace(rubric.limits, **limits))
    return grade_submission(path, rubric=lowered, backend="emulator")


def _touched_mib(result) -> int:
    said = re.findall(r"TOUCHED (\d+)", result.output.stderr if result.output else "")
    return max((int(n) for n in said), default=0)


@pytest.fixture(params=["control group", "address space"])
def memory_held_by(request, monkeypatch):
    """The child's memory held by its control group, or (none made) by RLIMIT_AS."""
    if request.param == "control group":
        if cgroups.available() is None:
            pytest.skip("this machine gives the grader no control group")
    else:
        monkeypatch.setattr(spawn, "child_group", lambda: None)
    return request.param


@pytest.mark.parametrize("take", list(TAKES))
def test_a_launcher_taking_shared_memory_past_its_cap_is_held_within_it(take, memory_held_by, rubric, write_cu):
    """Through its control group every page counts, a memfd's too; through RLIMIT_AS every mapping (a
    memfd written and never mapped is no mapping: there memfd_create is refused, docs/design.md)."""
    if take == "memfd" and memory_held_by != "control group":
        pytest.skip("without a control group memfd_create is refused: test_contract_attacks.py's "
                    "test_shared_memory_a_launcher_writes_without_a_control_group_is_refused_and_said")
    result = _grade(write_cu(HOG.replace("TAKE", TAKES[take])), rubric, host_memory_mib=CAP_MIB)
    touched = _touched_mib(result)
    # RLIMIT_AS leaves room for the grader's shared area for the outputs (mapped after the cap is set:
    # 132 MiB for this exercise) and a stack for each thread the emulator may start, which the launcher
    # can take while they are not yet used (walls.ADDRESS_SPACE_PER_THREAD)
    room = 1.1 * CAP_MIB
    if memory_held_by != "control group":
        from grader.core.limits import spread_threads
        from grader.run.child.walls import ADDRESS_SPACE_PER_THREAD

        room += 160 + (spread_threads(0) + 4) * (ADDRESS_SPACE_PER_THREAD >> 20)
    assert touched <= room, (touched, result.status, result.message)
    assert touched >= CAP_MIB / 4, (touched, result.status, result.message)    # it did get memory: the limit, not the mapping, stopped it
    how = result.sandbox.host_memory_how
    assert ("cgroup" in how) if memory_held_by == "control group" else how.startswith("RLIMIT_AS"), how
    # stopped at the limit (crashed, named), or refused the memory and went on (graded, never with it)
    assert result.status in ("crashed", "graded"), (result.status, result.message)
    if result.status == "crashed":
        assert "host_memory_exceeded" in result.flags, result.message


def test_an_honest_kernel_is_graded_under_the_address_space_cap(monkeypatch, rubric):
    """The fallback's RLIMIT_AS leaves the emulator's threads and the grader's shared area their room:
    a correct kernel under the lowered cap is graded correct, never refused."""
    monkeypatch.setattr(spawn, "child_group", lambda: None)
    result = _grade(SUBMISSIONS / "float4_launcher.cu", rubric, host_memory_mib=CAP_MIB)
    assert result.status == "graded" and result.correct, (result.status, result.message)
    assert result.sandbox.host_memory_how.startswith("RLIMIT_AS")


# A thread storm: as many threads as it can start (each parked), up to 2,000, then the count.
STORM = r"""
import threading, time
started = 0
try:
    for _ in range(2000):
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        started += 1
except RuntimeError:
    pass
print(started, flush=True)
"""


PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable   # one nobody may run


@needs_root
@pytest.mark.parametrize("grader, held_by", [("root", "control group"), ("root", "RLIMIT_NPROC"),
                                             ("nobody", "RLIMIT_NPROC")])
def test_a_thread_storm_is_bounded_whoever_runs_the_grader(grader, held_by):
    """A child started as Worker starts it (spawn.limits_in_child): where the grader is root, the
    drop to nobody the child then makes (walls.apply_limits); where it is not (nobody here), no control
    group and RLIMIT_NPROC over its own user's processes. At most child_pids() threads in a control
    group, at most the user's room under RLIMIT_NPROC: never the 2,000 the storm asks for."""
    group = spawn.child_group() if held_by == "control group" else None
    if held_by == "control group" and group is None:
        pytest.skip("this machine gives the grader no control group")
    nproc = None if group is not None else spawn.process_limit()       # nobody's processes, plus the room
    drop = "import os; os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)\n"

    def start():
        if grader == "nobody":                                  # the grader itself is nobody
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
        spawn.limits_in_child(60, nproc, 0, group)

    try:
        out = subprocess.run([PYTHON, "-c", (drop if grader == "root" else "") + STORM],
                             preexec_fn=start, capture_output=True, text=True, timeout=120, check=False)
    finally:
        if group is not None:
            group.remove()
    started = int(out.stdout.strip() or -1)
    # A control group holds this child alone; RLIMIT_NPROC holds nobody's processes together (the
    # design: one ceiling for the user), so a classmate's nobody process that ends during the storm
    # frees its room: the bound is the user's room when the child started, less the child's own thread.
    bound = spawn.child_pids() if nproc is None else nproc - 1
    assert 0 < started <= bound < 2000, (started, bound, out.stderr[-500:])


@has_cgroup
def test_a_launchers_thread_storm_in_a_grade_is_bounded_by_its_control_group(rubric, write_cu):
    storm = ("#include <pthread.h>\n#include <unistd.h>\n#include <cstdio>\n" + KERNEL +
             "static void* park(void*) { sleep(60); return nullptr; }\nstatic int gDone = 0;\n"
             "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, "
             "cudaStream_t stream) {\n    if (!gDone) {\n        gDone = 1; int n = 0; pthread_attr_t a; "
             "pthread_attr_init(&a); pthread_attr_setstacksize(&a, 65536);\n"
             "        for (int i = 0; i < 2000; ++i) { pthread_t t; if (pthread_create(&t, &a, park, nullptr)) break; ++n; }\n"
             "        fprintf(stderr, \"THREADS %d\\n\", n);\n    }" + LAUNCH)
    result = _grade(write_cu(storm), rubric)
    said = re.findall(r"THREADS (\d+)", result.output.stderr if result.output else "")
    assert said and int(said[0]) <= spawn.child_pids(), (result.status, result.message, said)
    assert "pids.max" in result.sandbox.limits["processes"]


# A static array written whole into the object file (initialised: .data, not .bss).
def _big_array(mib: int, copies: int = 1) -> str:
    arrays = "".join(f"__attribute__((used)) static char gBig{i}[{mib} << 20] = {{1}};\n" for i in range(copies))
    uses = " + ".join(f"gBig{i}[cols]" for i in range(copies))
    return (arrays + KERNEL + "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, "
            f"int cols, cudaStream_t stream) {{\n    if ({uses} == 7) return;" + LAUNCH)


def _cache_files_over(limit_bytes: int) -> list[str]:
    """The files of the cache's builds (sub-*: a submission's) larger than limit_bytes."""
    from grader.core.locations import cache_root

    return [os.path.join(d, f) for d, _, files in os.walk(cache_root()) for f in files
            if os.path.relpath(d, cache_root()).startswith("sub-") and os.path.getsize(os.path.join(d, f)) > limit_bytes]


@pytest.mark.own_cache
@pytest.mark.parametrize("held_by", ["control group", "RLIMIT_NPROC"])
def test_a_static_array_past_the_file_size_limit_is_the_students_compile_error_and_never_cached(
        held_by, monkeypatch, rubric, write_cu):
    """100 MiB written into the object against a 64 MiB limit: the assembler is stopped (SIGXFSZ),
    which is the student's compile error naming limits.build_file_mib, and nothing of it is kept."""
    if held_by == "RLIMIT_NPROC":
        monkeypatch.setattr(running.cgroups, "make", lambda **_: None)
    result = _grade(write_cu(_big_array(100)), rubric, build_file_mib=64)
    assert result.status == "compile_error", (result.status, result.message)
    assert "limits.build_file_mib" in result.message and "64 MiB" in result.message, result.message
    assert not _cache_files_over(64 << 20)


@pytest.mark.own_cache
def test_outputs_together_past_the_limit_are_refused_before_the_cache_keeps_them(rubric, write_cu):
    """40 MiB in the object and 40 in the library: each file within 64 MiB, together over it."""
    result = _grade(write_cu(_big_array(40)), rubric, build_file_mib=64)
    assert result.status == "compile_error", (result.status, result.message)
    assert "together" in result.message and "limits.build_file_mib" in result.message, result.message
    assert not _cache_files_over(16 << 20)


# An endless compile: constant evaluation of nested loops (each under g++'s per-loop limit, their
# product far past anything a build's time allows).
ENDLESS = ("constexpr long spin() { long s = 0; for (long i = 0; i < 200000; ++i) for (long j = 0; j < 200000; ++j) "
           "s += i ^ j; return s; }\nconstexpr long kSpun = spin();\n")

NINJA = "rule cc\n  command = g++ -std=c++17 -fconstexpr-ops-limit=4000000000000 -c $in -o $out\nbuild a.o: cc a.cpp\n"


@pytest.mark.parametrize("held_by", ["control group", "session"])
def test_an_endless_compile_under_ninja_on_a_loaded_machine_is_the_students_timeout(held_by, monkeypatch):
    """ninja runs the compiler in a process group of its own: its CPU was read as 0 from ninja's
    group, and on a loaded machine the time-out was blamed on the machine (infrastructure_error).
    The whole build's CPU (its control group's, or its session's) says the time went to the code."""
    if held_by == "session":
        monkeypatch.setattr(running.cgroups, "make", lambda **_: None)
    elif cgroups.available() is None:
        pytest.skip("this machine gives the grader no control group")
    monkeypatch.setattr(running.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    # This machine's real load (2 cores shared) is not the test's: the share is lowered so that only a
    # reading of next to nothing (ninja's own group: 0.0 s) blames the machine.
    monkeypatch.setattr(running, "_STARVED_SHARE", 0.1)
    with build_room() as room:
        (room.path / "a.cpp").write_text(ENDLESS)
        (room.path / "build.ninja").write_text(NINJA)
        ran = run_limited(["ninja", "--quiet"], BuildLimits(time_s=4, memory_mib=2048), room)
    assert ran.timed_out and "longer than its limit of 4 s" in ran.over, ran.over
    assert "the host C++ compiler" in ran.over, ran.over


def test_a_grades_build_past_its_time_limit_is_timeout_with_its_stage_named(monkeypatch, rubric):
    """The whole grade: a build stopped at its time limit on a loaded machine is the student's
    `timeout` (no longer a compile_error, nor the machine's), naming the stage it was in."""
    monkeypatch.setattr(running.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    monkeypatch.setattr(running, "_STARVED_SHARE", 0.1)        # as above: the machine's real load is not the test's
    result = _grade(SUBMISSIONS / "unrolled_build_bomb.cu", rubric, build_time_s=4)
    assert result.status == "timeout", (result.status, result.message)
    assert "longer than its limit of 4 s, while running" in result.message, result.message


@has_cgroup
def test_a_control_group_is_made_limited_attached_and_removed():
    """core/cgroups.py: a process started into a group is held by its memory limit (killed, counted),
    and the group is gone once removed."""
    group = cgroups.make(memory_bytes=64 << 20, pids=16, what="test")
    assert group is not None and set(group.folders) >= {"memory", "pids"}
    code = ("import mmap\nm = mmap.mmap(-1, 256 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)\n"
            "for i in range(0, 256 << 20, 4096): m[i] = 1\nprint('survived')")
    try:
        out = subprocess.run([sys.executable, "-S", "-c", code], preexec_fn=group.attach_self, capture_output=True,
                             text=True, timeout=60, check=False)
        assert out.returncode == -9 and "survived" not in out.stdout
        assert group.memory_kills() == 1 and group.memory_peak_bytes() <= 64 << 20
        assert group.cpu_seconds() is None or group.cpu_seconds() > 0
    finally:
        group.remove()
    assert not any(os.path.exists(f) for f in group.folders.values())


def test_a_class_of_large_builds_does_not_hold_the_cache_past_its_cap(tmp_path):
    """Large entries (each within limits.build_file_mib) used a few minutes ago are pruned to the cap;
    an honest recent one, a large one in use now and one being built are spared."""
    import fcntl
    import time

    from grader.toolchain import cache

    def entry(name, kib, age_s):
        d = tmp_path / name
        d.mkdir()
        (d / "lib.so").write_bytes(b"\0" * (kib << 10))
        (d / ".lock").write_text("")
        t = time.time() - age_s
        os.utime(d, (t, t))
        return d

    large = [entry(f"sub-large{i}", 3 << 10, 200 + i) for i in range(3)]      # 3 MiB each, 3 minutes ago
    honest = entry("sub-honest", 100, 200)
    in_use = entry("sub-large-now", 3 << 10, 5)
    building = entry("sub-large-building", 3 << 10, 300)
    with open(building / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        report = cache.prune(limit_bytes=8 << 20, root=tmp_path)
    assert not any(d.exists() for d in large)
    assert honest.exists() and in_use.exists() and building.exists()
    assert report.bytes <= (6 << 20) + (100 << 10)                # what is in use, nothing else
