"""Issue 36: what the hardware counted. Nsight Compute's CSV read into KernelCounters, the counter
findings from the rubric, the report's table, the wall's profile mode, and every way the pass can
give no counters without failing the grade.

tests/data/ncu-h200-probe.csv is ncu 2025.3.1's own output on the H200 (driver 580.159.04) for a
coalesced copy, a stride-8 copy and a kernel that reads its input twice, 2^26 floats each, run with
run/profiling.py's METRICS (scripts/gpu-check's probe)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.analysis import findings
from grader.analysis.sass import KernelCode
from grader.core.contract import GuardMode, Role
from grader.core.results import CountersSummary, Result
from grader.exercises import choose
from grader.run import profiling
from grader.run.child import guard
from grader.toolchain.build import build_guard

PROBE = Path(__file__).parent / "data" / "ncu-h200-probe.csv"
N = 1 << 26


@pytest.fixture(scope="module")
def probed():
    return profiling.counters_of(profiling.read_csv(PROBE.read_text()), {"copyStride8": "stride8 (as written)"})


def test_ncus_csv_is_read_launch_by_launch(probed):
    assert [k.mangled for k in probed] == ["copyCoalesced", "copyStride8", "readTwice"]
    coalesced, strided, twice = probed
    assert strided.kernel == "stride8 (as written)" and coalesced.kernel == "copyCoalesced"
    assert coalesced.grid == [262144, 1, 1] and coalesced.block == [256, 1, 1]
    # 4 sectors a request for a warp reading consecutive floats, 32 for a stride of 8 floats
    assert coalesced.load_sectors_per_request == 4.0 and coalesced.store_sectors_per_request == 4.0
    assert strided.load_sectors_per_request == 32.0
    assert twice.load_sectors_per_request == 4.0
    assert coalesced.dram_bytes == 268443648 + 249042176
    assert coalesced.dram_pct == pytest.approx(49.98) and coalesced.dram_gbps == pytest.approx(2404.7)
    assert coalesced.duration_us == pytest.approx(215.2)
    assert coalesced.achieved_occupancy_pct == pytest.approx(71.45) and coalesced.theoretical_occupancy_pct == 100
    assert coalesced.l2_hit_pct == pytest.approx(49.85)


def test_the_call_s_dram_bytes_over_the_byte_model(probed):
    twice = profiling.summarise([probed[2]], model_bytes=2 * 4 * N)
    assert twice.dram_over_model == pytest.approx((536876544 + 256362752) / (8 * N), abs=0.01)
    once = profiling.summarise([probed[0]], model_bytes=2 * 4 * N)
    assert once.dram_over_model < 1.0          # L2 kept some of the writes at the kernel's end
    assert profiling.summarise([], model_bytes=8 * N).dram_over_model is None


def test_csv_without_rows_or_with_odd_values():
    assert profiling.read_csv("==PROF== Connected to process 1\n==ERROR== something\n") == []
    text = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n"0","k","n/a"\n"1","k","1,500"\n'
    rows = profiling.read_csv(text)
    assert [r["ID"] for r in rows] == ["0", "1"]
    kernels = profiling.counters_of(rows, {})
    assert kernels[0].duration_us == 0 and kernels[1].duration_us == 1.5
    assert kernels[0].load_sectors_per_request is None        # no load counted: no ratio


def _kernel(mangled: str, width: int, store_width: int = 4) -> KernelCode:
    return KernelCode(mangled, mangled, True, {"global_loads": 2, "max_load_bytes": width, "min_load_bytes": width,
                                               "global_stores": 1, "max_store_bytes": store_width, "gpu_fill": 1.0})


def _codes(kernels, counters, exercise="bias_gelu_fused"):
    rubric = choose(exercise=exercise, rubric_path=None, file=None)
    got = findings.explain(findings.with_counters(kernels, counters), rubric, None, "H200")
    return {f.code: f for f in got if f.source == "counters"}


@pytest.mark.parametrize("exercise", ["bias_gelu_fused", "gelu_sum", "rope_half_split"])
def test_a_strided_kernel_is_uncoalesced_and_a_coalesced_one_is_not(probed, exercise):
    counters = profiling.summarise(probed[:2], model_bytes=None)
    found = _codes([_kernel("copyCoalesced", 4), _kernel("copyStride8", 4)], counters, exercise)
    assert set(found) == {"uncoalesced"}
    f = found["uncoalesced"]
    assert f.kernel == "copyStride8" and "32" in f.message and "needs 4" in f.message
    assert f.evidence and f.evidence[0].startswith("Nsight Compute: 32 sectors per load request (ideal 4)")


def test_float4_loads_are_judged_against_their_own_ideal(probed):
    # 16-byte loads: a warp's request is 16 sectors; 32 is twice that, a stride of two float4s
    wide = dataclasses.replace(probed[1], mangled="wide", load_sectors_per_request=16.0)
    assert "uncoalesced" not in _codes([_kernel("wide", 16)], profiling.summarise([wide], None))
    wider = dataclasses.replace(probed[1], mangled="wide", load_sectors_per_request=32.0)
    assert "uncoalesced" in _codes([_kernel("wide", 16)], profiling.summarise([wider], None))


def test_reading_x_twice_is_extra_traffic_and_reading_it_once_is_not(probed):
    found = _codes([_kernel("readTwice", 4)], profiling.summarise([probed[2]], model_bytes=2 * 4 * N))
    assert set(found) == {"extra_traffic"}
    assert "1.48 times" in found["extra_traffic"].message
    assert not _codes([_kernel("copyCoalesced", 4)], profiling.summarise([probed[0]], model_bytes=2 * 4 * N))


def test_low_achieved_occupancy_against_the_theoretical(probed):
    starved = dataclasses.replace(probed[0], achieved_occupancy_pct=20.0, theoretical_occupancy_pct=100.0)
    found = _codes([_kernel("copyCoalesced", 4)], profiling.summarise([starved], None))
    assert set(found) == {"low_achieved_occupancy"}
    assert "20.0% of the SM's warps" in found["low_achieved_occupancy"].message
    fine = dataclasses.replace(probed[0], achieved_occupancy_pct=30.0, theoretical_occupancy_pct=50.0)
    assert not _codes([_kernel("copyCoalesced", 4)], profiling.summarise([fine], None))
    # a grid too small to fill the GPU is underfilled_grid's cause: one message for it, not two
    small = dataclasses.replace(_kernel("copyCoalesced", 4), facts={**_kernel("copyCoalesced", 4).facts, "gpu_fill": 0.1})
    assert not _codes([small], profiling.summarise([starved], None))


def test_uncoalesced_stores_are_their_own_cause_only_when_the_loads_are_fine(probed):
    stores = dataclasses.replace(probed[0], store_sectors_per_request=32.0)
    assert set(_codes([_kernel("copyCoalesced", 4)], profiling.summarise([stores], None))) == {"uncoalesced_stores"}
    both = dataclasses.replace(probed[1], store_sectors_per_request=32.0)
    assert set(_codes([_kernel("copyStride8", 4)], profiling.summarise([both], None))) == {"uncoalesced"}


def test_without_counters_no_counter_finding_and_the_code_findings_stand():
    rubric = choose(exercise="bias_gelu_fused", rubric_path=None, file=None)
    kernels = [_kernel("k", 4)]
    for counters in (None, CountersSummary(problem="ncu was not found")):
        got = findings.explain(findings.with_counters(kernels, counters), rubric, None, "H200")
        assert {f.code for f in got} == {"scalar_loads"} and all(f.source == "code" for f in got)


def test_ncus_command_names_only_the_submission_s_kernels():
    cmd = profiling.ncu_command("/usr/local/cuda/bin/ncu", ["_Z3fooPKfPf", "_Z3fooPKfPf", "k$1"], "/tmp/x.csv", 40)
    at = cmd.index("--kernel-name")
    assert cmd[at + 1] == r"regex:^(_Z3fooPKfPf|k\$1)$"
    assert cmd[cmd.index("--launch-count") + 1] == str(profiling.MAX_LAUNCHES)
    assert cmd[cmd.index("--kernel-name-base") + 1] == "mangled"
    assert cmd[cmd.index("--metrics") + 1].split(",") == list(profiling.METRICS)
    assert cmd[cmd.index("--log-file") + 1] == "/tmp/x.csv"


def _replay_job():
    from grader.core.backend import CUDA
    from grader.core.contract import Call, CaseJob, Job, Limits, RecordedOp, Recording, ReplayPart

    recording = Recording(calls={"timed": [[0, 0, 0]]}, views=[{}],
                          ops=[[RecordedOp(kernel="_Z13biasGeluFusedPKfS0_Pfm"), RecordedOp(kind="memset"),
                                RecordedOp(kernel="_Z4tailPf", kind="cooperative")]])
    timed = [CaseJob(f"timed {i}", [], Call([], key="timed"), chain=Call([], kernel="chain"), timed=True)
             for i in range(2)]
    return Job(backend=CUDA, library="", reference_library="ref.so", guard_library=None, guard_mode=GuardMode.ENFORCE,
               limits=Limits(1024, 0, True), cases=[CaseJob("small", [], Call([], key="small"))], guard_floats=64,
               timed_cases=timed, role=Role.REPLAY, replay=ReplayPart(recording, device_code=["a.fatbin"]), gated=True)


def test_the_timed_call_s_kernels_are_read_from_the_recording():
    job = _replay_job()
    assert profiling.call_kernels(job.replay.recording, "timed") == ["_Z13biasGeluFusedPKfS0_Pfm", "_Z4tailPf"]
    assert profiling.call_kernels(job.replay.recording, "nothing") == []


class _Run:
    def __init__(self, blocked=(), timed_out=False):
        self.blocked, self.timed_out = list(blocked), timed_out


def test_why_there_are_no_counters():
    restricted = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    assert "administrators only" in profiling.problem_of(restricted, _Run(), ["k"])
    blocked = guard.parse_reports(b"blocked 44 sendto 0x10 0x362c095c 0x8\n")
    said = profiling.problem_of("", _Run(blocked), ["k"])
    assert "wall" in said and "sendto" in said
    assert "time limit" in profiling.problem_of("", _Run(timed_out=True), ["k"])
    assert "said: ==ERROR== The application returned an error code (3)." in profiling.problem_of(
        "==PROF== x\n==ERROR== The application returned an error code (3).\n", _Run(), ["k"])
    assert "no kernel" in profiling.problem_of("", None, [])


def test_the_profile_job_replays_the_first_timed_set_once_behind_the_profile_wall():
    replay = _replay_job()
    job = profiling.profile_job(replay, ["k"])
    assert job.role == Role.PROFILE and job.guard_mode == GuardMode.PROFILE
    assert job.timing is None and job.cases == [] and job.timed_cases == [] and not job.gated
    assert [c.name for c in job.verify_cases] == [replay.timed_cases[0].name]
    assert job.verify_cases[0].chain is None
    assert job.replay is replay.replay and job.offline is None


def test_the_backends_say_who_reads_counters():
    from grader.core.backend import CUDA, EMULATOR

    assert CUDA.toolchain.profiler == "ncu" and CUDA.child.profile.endswith(":ReplayBackend")
    assert EMULATOR.toolchain.profiler == "" and EMULATOR.child.profile == ""


_WALLED = textwrap.dedent("""
    import os, socket, sys
    from grader.run.child import guard
    mode = {"enforce": guard.ENFORCE, "profile": guard.PROFILE}[sys.argv[2]]
    status = guard.Guard(sys.argv[1]).install(mode=mode, report_fd=2)
    assert status.seccomp, status
    print(status.detail, flush=True)
    what = sys.argv[3]
    if what == "socket":
        a, b = socket.socketpair() if False else (socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM), None)
        a.bind("\\0grader-test-" + str(os.getpid()))
        print("socket ok", flush=True)
    elif what == "file":
        with open(os.path.join(sys.argv[4], "ncu-lock"), "w") as f:
            f.write("x")
        os.unlink(os.path.join(sys.argv[4], "ncu-lock"))
        print("file ok", flush=True)
    elif what == "exec":
        os.execv("/bin/true", ["/bin/true"])
""")


def _walled(tmp_path, mode: str, what: str):
    library = build_guard()
    if library is None:
        pytest.skip("no C compiler")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    return subprocess.run([sys.executable, "-c", _WALLED, str(library), mode, what, str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("what", ["socket", "file"])
def test_the_profile_wall_lets_ncus_socket_and_files_through_and_enforce_does_not(tmp_path, what):
    ok = _walled(tmp_path, "profile", what)
    assert ok.returncode == 0 and f"{what} ok" in ok.stdout and "profile mode" in ok.stdout, ok.stderr
    stopped = _walled(tmp_path, "enforce", what)
    assert stopped.returncode == guard.EXIT_CODE and f"{what} ok" not in stopped.stdout
    assert "blocked" in stopped.stderr


def test_the_profile_wall_still_stops_starting_a_program(tmp_path):
    stopped = _walled(tmp_path, "profile", "exec")
    assert stopped.returncode == guard.EXIT_CODE and "blocked 59 execve" in stopped.stderr


def test_the_profile_wall_fits():
    library = build_guard()
    if library is None:
        pytest.skip("no C compiler")
    g = guard.Guard(str(library))
    enforce, profile = (g.lib.grader_guard_filter_length(m) for m in (guard.ENFORCE, guard.PROFILE))
    assert enforce < profile < 1024


def _result_with(counters: CountersSummary) -> Result:
    r = Result(exercise="bias_gelu_fused", submission={"path": "k.cu", "sha256": "0"}, backend="cuda",
               status="graded", grader_version="t", correct=True)
    r.counters = counters
    return r


@pytest.mark.parametrize("fmt", ["markdown", "html", "text"])
def test_the_report_shows_the_counters_or_why_there_are_none(probed, fmt):
    from grader.report.files import render_html, render_markdown, render_text

    rubric = choose(exercise="bias_gelu_fused", rubric_path=None, file=None)
    render = {"markdown": render_markdown, "html": render_html, "text": render_text}[fmt]
    counted = profiling.summarise(probed, model_bytes=2 * 4 * N)
    counted.tool = "Nsight Compute 2025.3.1.0"
    probed[0].load_ideal = 4.0
    graded = _result_with(counted)
    graded.gbps = 2404.4
    text = render(graded, rubric)
    assert "copyStride8" in text or "stride8 (as written)" in text
    assert "grader's own figure: 2404 GB/s" in text
    assert "Nsight Compute 2025.3.1.0" in text
    assert "32.0" in text and "4.0 (4)" in text
    none = render(_result_with(CountersSummary(problem="ncu was not found: install Nsight Compute")), rubric)
    assert "ncu was not found: install Nsight Compute" in none


def test_result_json_keeps_the_counters(probed):
    from grader.core.results import result_from_json

    r = _result_with(profiling.summarise(probed, model_bytes=8 * N))
    back = result_from_json(r.to_json())
    assert back.counters == r.counters and back.counters.kernels[1].load_sectors_per_request == 32.0


def test_no_ncu_is_a_problem_said_not_a_failed_grade(monkeypatch):
    from grader.core.backend import CUDA
    from grader.grade.children import GradeRun
    from grader.grade.ways import ChildRuns
    from grader.toolchain import tools
    monkeypatch.setattr(tools, "locate", lambda name: None)
    run = GradeRun.__new__(GradeRun)
    run.backend, run.say = CUDA, lambda _m: None
    got = run.counters(ChildRuns(judged=None, runs=[], replay=_replay_job()), launches=[], model_bytes=8)
    assert got.kernels == [] and got.problem.startswith("ncu was not found") and "Nsight Compute" in got.problem
    got = run.counters(ChildRuns(judged=None, runs=[], replay=None), launches=[], model_bytes=8)
    assert "timed call" in got.problem


def test_a_counters_pass_that_breaks_is_said_and_the_grade_stands(monkeypatch):
    """ncu found but failing to start (a broken install, a folder the child cannot use): the
    pass's exception becomes its problem, never an infrastructure_error of the grade."""
    from grader.core.backend import CUDA
    from grader.grade.children import GradeRun
    from grader.grade.ways import ChildRuns
    from grader.run import lanes
    from grader.toolchain import tools
    import contextlib

    monkeypatch.setattr(tools, "locate", lambda name: "/opt/broken/ncu")
    monkeypatch.setattr(lanes, "gpu_lane", lambda device: contextlib.nullcontext())

    def broken(*_a, **_kw):
        raise PermissionError(13, "Permission denied", "/opt/broken/ncu")
    monkeypatch.setattr(profiling, "profile_call", broken)
    run = GradeRun.__new__(GradeRun)
    run.backend, run.say, run.device = CUDA, lambda _m: None, None
    run.rubric = choose(exercise="bias_gelu_fused", rubric_path=None, file=None)
    got = run.counters(ChildRuns(judged=None, runs=[], replay=_replay_job()), launches=[], model_bytes=8)
    assert got.kernels == [] and "could not run (PermissionError" in got.problem and "grade above stands" in got.problem


def test_the_manifest_judges_counter_findings_only_when_there_are_counters(probed):
    from grader.batch.manifest import Expectation, judge
    from grader.core.results import FindingEntry

    exp = Expectation(file="k.cu", correct=True, counter_findings=["uncoalesced"], findings=["scalar_loads"])
    r = _result_with(profiling.summarise(probed, None))
    r.findings = [FindingEntry("scalar_loads", "k", "m", "a"), FindingEntry("uncoalesced", "k", "m", "a", [], "counters")]
    assert judge(exp, r) == []
    r.findings = r.findings[:1]
    assert any("counter findings none, expected ['uncoalesced']" in p for p in judge(exp, r))
    r.counters = CountersSummary(problem="ncu was not found")
    assert any("no counters: ncu was not found" in p for p in judge(exp, r))
    r.backend = "emulator"
    assert judge(exp, r) == []


def test_counters_on_the_emulator_say_they_are_the_gpus(tmp_path):
    from grader.grade.pipeline import grade_submission

    rubric = choose(exercise="bias_gelu_fused", rubric_path=None, file=None)
    sample = Path(__file__).resolve().parent.parent / "submissions" / "bias_gelu_fused" / "row_major_threads.cu"
    r = grade_submission(sample, rubric=rubric, backend="emulator", counters=True)
    assert r.status == "graded" and r.correct and r.fraction is None
    assert r.counters is not None and r.counters.kernels == []
    assert r.counters.problem.startswith("the counters are the GPU's") and "emulator backend has none" in r.counters.problem
    assert grade_submission(sample, rubric=rubric, backend="emulator").counters is None


def test_ncus_version_line_is_read_as_every_tools(monkeypatch):
    import subprocess as sp

    from grader.toolchain import tools

    said = ("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n"
            "Version 2025.3.1.0 (build 36398880) (public-release)\n")
    monkeypatch.setattr(tools, "require", lambda name: f"/usr/local/cuda/bin/{name}")
    monkeypatch.setattr(tools.subprocess, "run", lambda *a, **kw: sp.CompletedProcess(a, 0, stdout=said))
    tools.version.cache_clear()
    try:
        assert tools.version("ncu") == "Nsight Compute 2025.3.1.0"
    finally:
        tools.version.cache_clear()
