"""Resource limits: build time and memory, the build cache's cap, host memory shared with other grades."""

import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from grader.toolchain import cache
from grader.toolchain.running import BuildLimits, build_room, run_limited
from grader.toolchain.outcome import parse_gmem
from conftest import SUBMISSIONS

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CI installs it)")


def _run(args, limits, files=None):
    """run_limited in a fresh build room holding files (name -> text): (the process, why a limit stopped it)."""
    with build_room() as room:
        for name, text in (files or {}).items():
            (room.path / name).write_text(text)
        ran = run_limited(args, limits, room)
    return ran.proc, ran.over


def test_a_build_past_its_time_limit_is_stopped_and_says_so(monkeypatch):
    from grader.toolchain import running

    monkeypatch.setattr(running.os, "getloadavg", lambda: (0.5, 0.5, 0.5))     # a quiet machine: the code's time
    proc, why = _run(["sleep", "30"], BuildLimits(time_s=1, memory_mib=1024))
    assert proc.returncode != 0 and "longer than its limit of 1 s" in why     # stopped: sleep ends with 0 by itself


@needs_nvcc
def test_a_build_past_its_memory_limit_is_stopped_and_says_so(tmp_path):
    text = "#include <map>\n#include <vector>\nint f() { std::map<int, std::vector<int>> m; return m.size(); }\n"
    proc, why = _run(["nvcc", "-c", "-o", "a.o", "a.cu"], BuildLimits(60, memory_mib=100), {"a.cu": text})
    assert proc.returncode != 0 and "memory limit of 100 MiB" in why


def test_static_device_memory_is_read_from_ptxas():
    log = "ptxas info    : 268435460 bytes gmem\nptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'\n"
    assert parse_gmem(log) == 268435460
    assert parse_gmem("ptxas info    : Used 12 registers") == 0


def _entry(root, name, mib, age_s, locked=False):
    d = root / name
    d.mkdir()
    (d / "lib.so").write_bytes(b"\0" * (mib << 20))
    (d / ".lock").write_text("")
    t = time.time() - age_s
    os.utime(d, (t, t))
    return d


def test_cache_prunes_least_recently_used_and_spares_recent_and_busy(tmp_path):
    import fcntl

    old = _entry(tmp_path, "sub-old", 3, 3600)
    busy = _entry(tmp_path, "sub-busy", 3, 7200)
    middle = _entry(tmp_path, "sub-middle", 3, 1800)
    recent = _entry(tmp_path, "sub-recent", 3, 5)
    with open(busy / ".lock", "w") as held:           # another grader is building here
        fcntl.flock(held, fcntl.LOCK_EX)
        report = cache.prune(limit_bytes=4 << 20, root=tmp_path)
    assert not old.exists() and not middle.exists()
    assert busy.exists() and recent.exists()
    assert report.pruned == 2 and report.freed_bytes == 6 << 20
    assert cache.report(tmp_path).entries == 2

def test_a_grade_that_added_nothing_to_the_cache_does_not_size_it_again(tmp_path):
    _entry(tmp_path, "sub-old", 3, 3600)
    _entry(tmp_path, "sub-older", 3, 7200)
    first = cache.prune_if_grown(limit_bytes=4 << 20, root=tmp_path)
    assert first is not None and first.pruned == 1
    assert cache.prune_if_grown(limit_bytes=4 << 20, root=tmp_path) is None   # nothing new: not sized
    _entry(tmp_path, "sub-new", 3, 3600)                                        # a build was added
    again = cache.prune_if_grown(limit_bytes=4 << 20, root=tmp_path)
    assert again is not None and again.pruned == 1
    stale = time.time() - 7200                                                  # the last prune long ago
    os.utime(tmp_path / cache.STAMP, (stale, stale))
    assert cache.prune_if_grown(limit_bytes=4 << 20, root=tmp_path) is not None



def test_a_batchs_grades_prune_a_grown_cache_at_most_once_a_minute_and_the_batch_once_at_its_end(tmp_path, monkeypatch):
    _entry(tmp_path, "sub-old", 3, 3600)
    assert cache.prune_if_grown(limit_bytes=4 << 20, root=tmp_path, at_most_every_s=60) is not None   # none before
    time.sleep(0.05)                                                            # past the clock's grain
    _entry(tmp_path, "sub-older", 3, 7200)                                      # the cache grew past its cap
    assert cache.prune_if_grown(limit_bytes=4 << 20, root=tmp_path, at_most_every_s=60) is None      # a minute apart
    assert (tmp_path / "sub-older").exists()
    assert cache.prune_if_grown(limit_bytes=4 << 20, root=tmp_path) is not None                      # the batch's end
    assert not (tmp_path / "sub-older").exists()

    # a batch's grades ask for it in their options, and the batch prunes once after its last grade
    from grader.batch.grading import CACHE_PRUNE_EVERY_S, grade_entries
    from grader.batch.inputs import find_submissions
    from grader.batch.request import ClassRequest
    from grader.core.backend import CUDA
    from grader.grade.machine import Machine
    from grader.exercises import load_exercise
    from grader.grade import pipeline
    from tests.test_insights import result

    asked, pruned = [], []

    def fake(request, *, inputs=None, progress=None):
        asked.append(request.options.cache_prune_every_s)
        return result(fraction=0.9)

    monkeypatch.setattr(pipeline, "grade", fake)
    monkeypatch.setattr(pipeline, "keep_cache_in_bounds", lambda rubric, **kw: pruned.append(kw))
    folder = tmp_path / "class"
    folder.mkdir()
    for i in range(3):
        (folder / f"s{i}.cu").write_text(f"// {i}\n")
    grade_entries(find_submissions(folder), ClassRequest(folder, load_exercise("bias_gelu_fused"), CUDA, jobs=1),
                  machine=Machine(CUDA, {}, ("0",)))
    assert asked == [CACHE_PRUNE_EVERY_S] * 3 and pruned == [{}]


def test_cache_cap_comes_from_the_environment_first(monkeypatch):
    monkeypatch.setenv("GRADER_CACHE_MAX_MIB", "5")
    assert cache.max_bytes(2048) == 5 << 20
    monkeypatch.delenv("GRADER_CACHE_MAX_MIB")
    assert cache.max_bytes(2048) == 2048 << 20


@pytest.mark.slow
def test_a_memory_hog_does_not_disturb_the_grader_or_a_grade_beside_it(rubric):
    from grader.grade.pipeline import grade_submission

    # The grader's own cost of two grades side by side (two sets of float64 references), paid
    # first with two honest kernels, so that what follows measures only what the hog adds.
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda _: grade_submission(SUBMISSIONS / "device_helper.cu", rubric=rubric,
                                                 backend="emulator"), range(2)))
    before = _rss_mib()
    with ThreadPoolExecutor(max_workers=2) as pool:
        hog = pool.submit(grade_submission, SUBMISSIONS / "host_memory_hog.cu", rubric=rubric, backend="emulator")
        honest = pool.submit(grade_submission, SUBMISSIONS / "device_helper.cu", rubric=rubric, backend="emulator")
        hog, honest = hog.result(), honest.result()
    assert hog.status == "crashed" and "host_memory_exceeded" in hog.flags, hog.message
    assert hog.sandbox.peak_rss_mib <= hog.sandbox.rss_at_load_mib + rubric.limits.host_memory_mib + 64
    assert honest.status == "graded" and honest.correct, honest.message
    # The hog took over host_memory_mib (2 GiB) in its child; none of it may be the grader's. The
    # grader's own float64 references for two grades at once move its RSS by a few hundred MiB
    # (measured +83 to +589 on the 2-core CI machine), so the bound is half the hog's allowance.
    grew_mib = _rss_mib() - before
    assert grew_mib < rubric.limits.host_memory_mib / 2, f"the grader itself grew by {grew_mib:.0f} MiB"


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


# Hard limits inherited from the environment (an HPC login node, a container, `ulimit`): the
# grader's own limits are clamped to them (grader/core/limits.py), the grade goes on, and result.json
# says which were lowered. Each grade builds afresh (its own cache), so the builds run under the
# limit too.
INHERITED = {
    "address space": (["--as=7500000000"], "address space (builds)"),
    "CPU seconds": (["--cpu=100"], "CPU seconds (the child)"),
    "open files": (["--nofile=512"], "open files (the child)"),
    "file size": ([f"--fsize={200 * 1024 * 1024}"], "file size (the child)"),
    "private memory": (["--data=2000000000"], "private memory (the child)"),
}


@pytest.mark.skipif(shutil.which("prlimit") is None or shutil.which("g++") is None, reason="needs prlimit and g++")
@pytest.mark.parametrize("kind", list(INHERITED))
def test_a_grade_under_a_low_inherited_hard_limit_is_graded_and_says_so(kind, tmp_path):
    import json
    import subprocess
    import sys

    flags, name = INHERITED[kind]
    env = {**os.environ, "GRADER_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(["prlimit", *flags, sys.executable, "-m", "grader", "submit",
                           str(SUBMISSIONS / "float4_launcher.cu"), "--backend", "emulator", "--format", "json", "-q"],
                          capture_output=True, text=True, env=env, timeout=600)
    result = json.loads(proc.stdout)
    assert result["status"] == "graded" and result["correct"] is True, (result["status"], result["message"])
    assert name in result["sandbox"]["lowered_limits"], result["sandbox"].get("lowered_limits")


def test_clamp_never_asks_above_the_inherited_hard_limit():
    import resource
    import subprocess
    import sys

    # In a child with a known hard limit of 64 open files, whatever this process has.
    code = ("import resource; from grader.core.limits import clamp, lowered; K = resource.RLIMIT_NOFILE; "
            "print(clamp(K, 1024), clamp(K, 16), lowered({K: 16}), lowered({K: 1024}))")
    out = subprocess.run(["prlimit", "--nofile=64:64", sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ("(64, 64) (16, 16) {} {'open files (the child)': {'wanted': 1024, 'inherited': 64}}")
    assert resource.getrlimit(resource.RLIMIT_NOFILE)                       # this process untouched


def test_a_build_runs_at_lower_priority_than_the_grader():
    """running.BUILD_NICE: the compilers yield the cores to the measuring process and the
    children's start (every compiler a build starts inherits it)."""
    import os
    import sys

    from grader.toolchain.running import BUILD_NICE

    proc, why = _run(["nice"], BuildLimits(time_s=30))          # coreutils' nice prints the niceness it runs at
    assert why == "" and int(proc.stdout) == min(19, os.nice(0) + BUILD_NICE)


def test_a_compiler_killed_from_outside_is_the_machines_never_the_students_memory_limit(tmp_path):
    """The out-of-memory killer (or a job's memory limit) ends a compiler with SIGKILL: g++ says
    "Killed signal terminated program cc1plus". That is the machine's shortage, not the file's
    limit (an allocation past the build's limit fails inside the compiler and says so)."""
    from grader.toolchain.build import machine_fault

    fake = "#!/bin/sh\necho 'g++: fatal error: Killed signal terminated program cc1plus' >&2\nexit 1\n"
    proc, why = _run(["sh", "g++"], BuildLimits(time_s=30, memory_mib=1024), {"g++": fake})
    assert proc.returncode == 1 and why == ""
    assert "killed from outside the build" in machine_fault(proc.stderr)


def test_a_build_that_ran_out_of_time_while_the_machine_starved_it_is_the_machines(monkeypatch):
    """A build past its wall-time limit that had little CPU while the machine's load was above its
    cores waited for the machine: infrastructure, naming the load and the fix. The same build on an
    idle machine (a compiler waiting on nothing the machine lacks) stays the file's limit."""
    from grader.core.errors import InfrastructureError
    from grader.toolchain import running

    monkeypatch.setattr(running.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    with pytest.raises(InfrastructureError, match=r"too busy \(load 64.0 on \d+ cores\)"):
        _run(["sleep", "30"], BuildLimits(time_s=1, memory_mib=1024))
    monkeypatch.setattr(running.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    proc, why = _run(["sleep", "30"], BuildLimits(time_s=1, memory_mib=1024))
    assert "longer than its limit of 1 s" in why
    # a load a little above the cores (any batch) leaves each process most of a core: not the machine's
    cores = os.cpu_count() or 1
    monkeypatch.setattr(running.os, "getloadavg", lambda: (1.5 * cores,) * 3)
    proc, why = _run(["sleep", "30"], BuildLimits(time_s=1, memory_mib=1024))
    assert "longer than its limit of 1 s" in why
    monkeypatch.setattr(running.os, "getloadavg", lambda: (2.5 * cores,) * 3)
    with pytest.raises(InfrastructureError, match="too busy"):
        _run(["sleep", "30"], BuildLimits(time_s=1, memory_mib=1024))
    # a build that used its time on the CPU is the file's, however busy the machine: its CPU as read is
    # the whole limit (a real spinning build gets that only on a machine not loaded by others; how a
    # build's CPU is read is test_group_cpu_seconds_counts_the_groups_live_and_ended_processes's)
    monkeypatch.setattr(running.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    monkeypatch.setattr(running, "build_cpu_seconds", lambda *_: 1.5)
    proc, why = _run(["sleep", "30"], BuildLimits(time_s=1.5, memory_mib=1024))
    assert "longer than its limit of 1.5 s" in why


def test_group_cpu_seconds_counts_the_groups_live_and_ended_processes():
    import os
    import signal
    import subprocess

    from grader.core.processes import group_cpu_seconds

    # a shell that burns CPU in a child it has reaped, then waits: the child's time is in its cutime
    proc = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'import time; t=time.process_time()\n"
                             "while time.process_time() - t < 0.5: pass'; sleep 30"], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while (group_cpu_seconds(proc.pid) or 0) < 0.4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert 0.4 <= group_cpu_seconds(proc.pid) < 5
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert group_cpu_seconds(2**22 + 12345) is None           # no such group
