import os
from types import SimpleNamespace
from pathlib import Path

import pytest

from grader.core.backend import EMULATOR
from grader.run import protocol
from grader.run.sandbox import CappedOutput


def test_capped_output_keeps_head_and_tail():
    c = CappedOutput(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        c.feed(chunk)
    assert c.total == 26 and bytes(c.head) == b"abcde" and bytes(c.tail) == b"vwxyz" and c.dropped == 16
    assert "16 bytes dropped" in c.text()


def _frames(*frames, key=b"k" * 32):
    r, w = os.pipe()
    channel = protocol.Channel(w, key)
    for header, payload in frames:
        channel.send(header, payload)
    os.close(w)
    data = os.read(r, 1 << 16)
    os.close(r)
    return data


def test_frames_round_trip_and_partial_frames_are_reported():
    key = b"k" * 32
    data = _frames(({"type": "case", "n": 1}, b"\x00\x01\x02\x03"), ({"type": "done"}, b""), key=key)
    frames, problem = protocol.parse(data, key)
    assert problem is None and [f.header["type"] for f in frames] == ["case", "done"]
    assert frames[0].payload == b"\x00\x01\x02\x03"
    frames, problem = protocol.parse(data[:-3], key)
    assert len(frames) == 1 and "ended inside a frame" in problem


def test_forged_and_injected_frames_are_detected():
    key = b"k" * 32
    good = _frames(({"type": "hello"}, b""), ({"type": "done"}, b""), key=key)
    # a frame signed with another key (a submission that guessed the format, not the key)
    forged = _frames(({"type": "done"}, b""), key=b"x" * 32)
    frames, problem = protocol.parse(forged, key)
    assert frames == [] and problem == protocol.TAMPERED
    # raw bytes written into the pipe between two real frames
    first = _frames(({"type": "hello"}, b""), key=key)
    frames, problem = protocol.parse(first + b'{"type": "done"}' + good[len(first):], key)
    assert [f.header["type"] for f in frames] == ["hello"] and problem
    # a real frame replayed out of order (the sequence number is signed)
    frames, problem = protocol.parse(good + first, key)
    assert [f.header["type"] for f in frames] == ["hello", "done"] and problem == protocol.TAMPERED


def test_the_running_check_stops_at_the_first_forged_frame_and_waits_on_a_partial_one():
    key = b"k" * 32
    good = _frames(({"type": "hello"}, b"\x00" * 64), ({"type": "done"}, b""), key=key)
    check = protocol.StreamCheck(key)
    for cut in range(0, len(good), 7):              # a stream arriving in pieces, every cut point
        assert check.feed(good[:cut]) is None
    assert check.feed(good) is None
    first = _frames(({"type": "hello"}, b"\x00" * 64), key=key)
    forged = first + b'{"type": "done"}' + b"\x00" * 40
    check = protocol.StreamCheck(key)
    assert check.feed(forged[:len(first)]) is None
    assert check.feed(forged) == protocol.TAMPERED and check.problem == protocol.TAMPERED
    # a header length past the limit is forged at once, before its bytes arrive
    assert protocol.StreamCheck(key).feed(b"\xff\xff\xff\x7f" + b"\x00" * 36) == protocol.TAMPERED


def test_a_line_no_guard_wrote_on_its_pipe_is_seen_while_it_arrives():
    from grader.run.child.guard import forged_report

    real = b"blocked 57 fork 0 0 0\naudit 2 open 0 0 0 /tmp/x\n"
    assert not forged_report(b"") and not forged_report(real)
    assert not forged_report(real + b"bloc") and not forged_report(b"aud")      # a real line still arriving
    assert forged_report(b'{"type": "done"}') and forged_report(real + b"x")
    assert forged_report(b"blocker 1 2 3\n")


def test_a_child_that_forges_its_channel_is_stopped_at_once_not_at_its_time_limit(rubric, write_cu):
    """A launcher that writes a forged frame on every descriptor (up to 1023: the channel keeps the number the parent gave it, which a long test run pushes past 16) and then spins: the parent stops
    it as soon as the forged bytes arrive (on a GPU such a child once ran to its 60 s limit)."""
    from grader.grade.pipeline import grade_submission

    path = write_cu("""
extern "C" long write(int fd, const void* buf, unsigned long n);
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const char forged[] = "{\\"type\\": \\"done\\"}";
    for (int fd = 3; fd < 1024; ++fd) write(fd, forged, sizeof forged - 1);
    for (volatile unsigned long spin = 0; ; ++spin) {}
}
""", name="forge_then_spin.cu")
    result = grade_submission(path, rubric=rubric, backend="emulator")
    assert result.status == "rejected" and "result channel" in result.message, result.message
    assert result.phases["child_s"] < rubric.limits.time_limit_s, result.phases     # stopped before its limit was


def test_leftover_processes_sees_a_workers_group_until_it_is_cancelled():
    from grader.run.sandbox import ChildSpec, Worker
    from grader.run.groups import leftover_processes

    w = Worker(ChildSpec(backend=EMULATOR, output_cap=64, cpu_limit_s=10))
    try:
        assert w.proc.pid in leftover_processes()
    finally:
        w.cancel()
    assert w.proc.pid not in leftover_processes()


def child_cpu_limit(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        return int(next(line for line in f if line.startswith("Max cpu time")).split()[3])


def test_the_cpu_time_limit_counts_every_thread_the_child_may_keep_busy():
    """A slow, correct kernel spread over 4 cores burns CPU time 4 times as fast: its backstop
    limit is 4 times the time limit (+30 s of start-up), not the time limit it would reach first."""
    from grader.run.sandbox import ChildSpec, Worker

    for threads, want in ((1, 40), (4, 70)):
        w = Worker(ChildSpec(backend=EMULATOR, output_cap=64, cpu_limit_s=10, cpu_threads=threads))
        try:
            assert child_cpu_limit(w.proc.pid) == want
        finally:
            w.cancel()


def test_a_grade_gives_the_child_cpu_time_for_its_emulator_threads(monkeypatch, tmp_path):
    import grader.grade.launcher
    import grader.grade.pipeline
    from grader.core.limits import spread_threads
    from grader.exercises import load_exercise

    seen = []
    real = grader.grade.launcher.Worker

    def spy(spec):
        seen.append(spec.cpu_threads)
        return real(spec)

    monkeypatch.setattr(grader.grade.launcher, "Worker", spy)   # the Launcher: where every child starts
    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path))
    sample = Path(__file__).parent.parent / "submissions" / "bias_gelu_fused" / "compile_error.cu"
    for threads in (0, 1):
        grader.grade.pipeline.grade_submission(sample, rubric=load_exercise("bias_gelu_fused"), backend="emulator",
                                        emulator_threads=threads)
    assert seen == [spread_threads(0), 1]


def test_every_frame_kind_survives_the_wire_and_a_malformed_one_is_none():
    from grader.run import protocol
    from grader.core.contract import (FRAME_TYPES, CaseFrame, Fault, LaunchRecord, Output, TimingFrame, decode, encode)

    key = protocol.new_key()
    r, w = os.pipe()
    channel = protocol.Channel(w, key)
    sent = [cls() if cls is not CaseFrame else CaseFrame("c", True, [Output("out", 3, 1)], [LaunchRecord("k")],
                                                             fault=Fault(11, 16, 1, 0, "", "out", "past"))
            for cls in FRAME_TYPES.values()]
    sent[list(FRAME_TYPES).index("timing")] = TimingFrame({"submission": [0.1]}, "converged", 1.0)
    for f in sent:
        channel.send(f, b"\\0" * 4)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    frames, problem = protocol.parse(data, key)
    assert problem is None and [f.data for f in frames] == sent
    assert decode({"type": "case"}) is None and decode({"type": "nope"}) is None and decode([1]) is None
    assert encode(sent[1])["type"] == list(FRAME_TYPES)[1]


def test_large_payloads_travel_through_the_sealed_shared_area_and_a_span_outside_it_is_tampering():
    key, size = b"k" * 32, 1 << 20
    fd = protocol.shared_area()
    assert fd is not None and protocol.size_shared_area(fd, size)
    with open(f"/proc/self/fd/{fd}", "r+b", buffering=0) as f:      # the seal: nobody can shrink it
        try:
            os.ftruncate(f.fileno(), 10)
            shrunk = True
        except PermissionError:
            shrunk = False
    assert not shrunk
    writer = protocol.SharedWriter(fd, size)
    at, address = writer.reserve(4096)
    import ctypes

    ctypes.memmove(address, b"\x07" * 4096, 4096)
    assert writer.reserve(size) is None                              # no room left: the pipe, then
    r, w = os.pipe()
    channel = protocol.Channel(w, key)
    channel.send({"type": "case", "n": 1}, shared=(at, 4096))
    channel.send({"type": "case", "n": 2}, shared=(size - 8, 16))   # reaches past the area's end
    os.close(w)
    frames, problem = protocol.parse(os.read(r, 1 << 16), key)
    os.close(r)
    assert problem is None
    area, problem = protocol.resolve_shared(frames[:1], fd, size)
    assert problem is None and bytes(frames[0].payload) == b"\x07" * 4096 and "shared" not in frames[0].header
    _, problem = protocol.resolve_shared(frames[1:], fd, size)
    assert problem == protocol.TAMPERED
    os.close(fd)


def test_a_recording_frame_is_encoded_as_asdict_gives_it_and_decodes_back_whole():
    """encode's quick path for the recorder's frame (its calls' rows not copied) gives the header
    the generic path gave, and the parent reads the same recording back."""
    import dataclasses
    import json

    from grader.core.contract import RecordedOp, Recording, RecordingFrame, decode, encode

    rec = Recording(calls={"lesson 101x97": [[0, 0, 0]], "timed 1": [[1, 1, 0], [1, 2, 0]]},
                    ops=[[RecordedOp(kind="launch", kernel="k", grid=[2, 1, 1], args="00ff")],
                         [RecordedOp(kind="memset", dst=4096, nbytes=64), RecordedOp(kernel="k")]],
                    views=[{"x": 4096}, {"x": 8192, "out": 1 << 20}, {"x": 1}],
                    late=[RecordedOp(error="cudaError 1")], errors={"1": "invalid value"})
    frame = RecordingFrame(rec)
    header = encode(frame)
    assert header == {"type": "recording", **dataclasses.asdict(frame)}
    assert decode(json.loads(json.dumps(header))) == frame
    # and the measuring process's job, which carries it
    from grader.core.backend import CUDA
    from grader.core.contract import GuardMode, Job, Limits, ReplayPart, Role

    job = Job(backend=CUDA, library="", reference_library="ref.so", guard_library=None, guard_mode=GuardMode.ENFORCE,
              limits=Limits(512, 1 << 20, True), cases=[], guard_floats=64, role=Role.REPLAY,
              replay=ReplayPart(rec, device_code=["00ab"], device_globals=["g"], device_heap=True, layout_seed=7))
    assert job.to_json() == dataclasses.asdict(job)
    assert Job.from_json(json.loads(json.dumps(job.to_json()))) == job


def test_room_mapped_ahead_is_handed_to_the_first_send_of_its_size_and_never_overlaps_later_room():
    """The measuring process maps (and page-locks) its timed outputs' room before its gate, outside
    the GPU's lane; the send of that size then takes it, and every other send gets room of its own."""
    import ctypes

    size, piece = 1 << 22, 1 << 20
    fd = protocol.shared_area()
    assert fd is not None and protocol.size_shared_area(fd, size)
    writer = protocol.SharedWriter(fd, size)
    first, second = writer.reserve_ahead(piece), writer.reserve_ahead(piece + 4)
    small = writer.reserve(4096)                                     # no piece of its size ahead: mapped after them
    assert writer.reserve(piece + 4) == second and writer.reserve(piece) == first
    spans = sorted([(first[0], piece), (second[0], piece + 4), (small[0], 4096)])
    assert all(a + n <= b for (a, n), (b, _) in zip(spans, spans[1:]))
    ctypes.memmove(first[1], b"\x05" * 16, 16)
    again = writer.reserve(piece)                                    # handed out once: the next one is new room
    assert again is not None and again[0] >= small[0] + 4096
    os.close(fd)


def test_the_measuring_process_maps_its_timed_outputs_room_ahead_and_locks_it_only_when_sending():
    """worker.Sender.prepare maps one piece for each timed set's outputs (guards included) before the
    gate; sending that set's outputs lands in it, and page-locks it then (in the lane: registering
    host memory touches the GPU's page tables)."""
    from grader.core.contract import Buffer, Call, CaseJob, Job
    from grader.run.child.worker import Sender

    class Backend:
        def __init__(self):
            self.pinned = []

        def pin_host(self, address, nbytes):
            self.pinned.append(nbytes)
            return True

        def read_into(self, region, address):
            pass

    floats, pad = 1 << 19, 64
    sets = [CaseJob(name=f"timed {k}", buffers=[Buffer(name="x", role="in", floats=floats),
                                                Buffer(name="out", role="out", floats=floats)],
                    launch=Call(args=[])) for k in range(2)]
    plain = SimpleNamespace(timed_cases=sets, timing=object(), guard_floats=pad)
    job, area = SimpleNamespace(timed_output_bytes=lambda: Job.timed_output_bytes(plain)), 16 * floats
    fd = protocol.shared_area()
    assert fd is not None and protocol.size_shared_area(fd, area)
    r, w = os.pipe()
    shared, backend = protocol.SharedWriter(fd, area), Backend()
    sender = Sender(protocol.Channel(w, b"k" * 32), shared)
    sender.prepare(job)
    assert shared.ahead() and backend.pinned == []                    # mapped, nothing page-locked yet
    nbytes = 4 * (floats + 2 * pad)
    sender.send(backend, {"type": "case", "name": "timed 0"}, [SimpleNamespace(nbytes=nbytes)])
    assert backend.pinned == [nbytes]
    import mmap

    grain = mmap.ALLOCATIONGRANULARITY
    assert shared.reserve(nbytes)[0] == -(-nbytes // grain) * grain     # timed 1's room, mapped ahead after timed 0's
    os.close(w), os.close(r), os.close(fd)


def test_the_preload_maps_the_timed_outputs_room_before_the_job_and_the_job_takes_that_area():
    """Worker.preload with the job: the measuring process maps the timed outputs' room while the
    recorder records; the job's sender takes that area (same descriptor, same size) and a send of
    that size lands in the room mapped ahead. An area the job does not name is not taken."""
    from grader.run.child import worker

    area, piece = 1 << 23, (1 << 20) + 512
    fd = protocol.shared_area()
    assert fd is not None and protocol.size_shared_area(fd, area)
    worker._preload({"preload": [], "area": area, "room": [piece, 100]}, fd)     # 100 bytes: the pipe's
    shared = worker._shared_room(fd, area)
    assert shared is not None and shared.ahead()
    first = shared.reserve(piece)
    assert first is not None and first[0] == 0                                  # the room the preload mapped
    second = shared.reserve(piece)
    assert second is not None and second[0] >= piece                            # handed out once only
    worker._preload({"preload": [], "area": area, "room": [piece]}, fd)
    other = worker._shared_room(fd, area * 2)                                     # not the area the preload sized
    assert other is not None and not other.ahead() and not worker._AHEAD
    assert worker._shared_room(-1, 0) is None
    os.close(fd)


def test_a_child_imports_numpy_before_the_wall_and_prints_nothing_of_its_own():
    """The child runs with -S (no site-packages) and imports numpy for the stopping rule: numpy's
    folder is on its path. A failed import once printed a traceback into the student's output."""
    from grader.exercises import load_exercise
    from grader.grade.pipeline import grade_submission

    result = grade_submission("submissions/bias_gelu_fused/scalar_2d.cu", rubric=load_exercise("bias_gelu_fused"),
                              backend="emulator")
    assert result.status == "graded" and result.correct
    assert result.output.stderr == "" and result.output.stdout == ""


def test_after_the_childs_preload_the_stopping_rule_opens_and_imports_nothing():
    """Inside the wall a file opened or a module imported is a blocked system call, and the
    submission is rejected for it: numpy.random, imported lazily on first use, once rejected every
    GPU grade. The child's preload, then an audit hook that fails on any open or import, then the
    stopping rule on as many rounds as the timing takes."""
    import subprocess
    import sys

    from grader.run.spawn import numpy_parent as _numpy_parent, package_parent as _package_parent

    code = """
import sys
from grader.run.child import worker
from grader.core.backend import EMULATOR
worker.preload(EMULATOR, False)
def hook(event, args):
    if event in ("open", "import"):
        raise RuntimeError(f"after the preload: {event} {args[0]!r}")
sys.addaudithook(hook)
from grader.core.stats import fraction_interval, median
import random
r = random.Random(1)
floor = [40 + r.random() for _ in range(2000)]
sub = [60 + r.random() for _ in range(2000)]
ci = fraction_interval(floor, sub, resamples=200)
print("ok", round(ci.median, 3), median(floor) > 0)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_package_parent(), _numpy_parent()]))
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok 0.6"), out.stdout


def test_the_stopping_rule_runs_inside_the_real_wall(tmp_path):
    """The same, under the seccomp filter itself (built with the C compiler, as the emulator's
    children use it): the preload, the wall, then the stopping rule on 2,000 rounds (index arrays
    of 16 MiB: numpy's large allocations madvise), with no system call blocked or reported."""
    import subprocess
    import sys

    import pytest

    from grader.run.spawn import numpy_parent as _numpy_parent, package_parent as _package_parent
    from grader.toolchain.build import build_guard

    library = build_guard()
    if library is None:
        pytest.skip("no C compiler to build the wall")
    code = f"""
import os, sys
from grader.run.child import guard, worker
from grader.core.backend import EMULATOR
worker.preload(EMULATOR, False)
read_fd, write_fd = os.pipe()
status = guard.Guard({str(library)!r}).install(mode=guard.ENFORCE, report_fd=write_fd)
assert status.seccomp, status
from grader.core.stats import fraction_interval
import random
r = random.Random(2)
floor = [40 + r.random() for _ in range(2000)]
sub = [60 + r.random() for _ in range(2000)]
for _ in range(3):
    ci = fraction_interval(floor, sub, resamples=200)
os.close(write_fd)
reports = os.read(read_fd, 65536)
print("ok", round(ci.median, 3), len(reports))
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_package_parent(), _numpy_parent()]))
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    word, median, reports = out.stdout.split()
    assert word == "ok" and 0.6 < float(median) < 0.7 and reports == "0", out.stdout


def test_others_can_enter_reads_every_folder_on_the_way(tmp_path):
    from grader.core.folders import others_can_enter as _others_can_enter

    inner = tmp_path / "private" / "inner"
    inner.mkdir(parents=True)
    os.chmod(tmp_path / "private", 0o700)
    os.chmod(inner, 0o755)
    try:
        assert not _others_can_enter(str(inner))          # its own bits are fine; its parent's are not
        os.chmod(tmp_path / "private", 0o711)
        assert _others_can_enter(str(inner)) == _others_can_enter(str(tmp_path))
        assert not _others_can_enter(str(tmp_path / "missing"))
    finally:
        os.chmod(tmp_path / "private", 0o755)


def test_a_temporary_directory_nobody_can_enter_moves_the_childs_folder_and_says_so(tmp_path, monkeypatch):
    """As root the child drops to nobody: with TMPDIR under a private folder (what `mktemp -d`
    makes, as CI did) its copy of the library could not be opened ("Permission denied"), and a
    correct kernel could not be graded. The grader puts the children's folders where nobody can
    enter them and says so in result.json; a run that does not drop privileges changes nothing."""
    import tempfile

    import pytest

    from grader.exercises import load_exercise
    from grader.grade.pipeline import grade_submission
    from grader.core import folders

    private = tmp_path / "private"
    (private / "tmp").mkdir(parents=True)
    os.chmod(private, 0o700)
    monkeypatch.setenv("TMPDIR", str(private / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)            # gettempdir() reads TMPDIR again
    folders.child_folder_base.cache_clear()
    try:
        base, adapted = folders.child_folder_base()
        if os.geteuid() != 0:
            assert (base, adapted) == (None, [])
            pytest.skip("the folder only moves where the grader runs as root (CI does)")
        assert base == "/tmp" and "cannot enter the temporary directory" in adapted[0]
        result = grade_submission("submissions/bias_gelu_fused/scalar_2d.cu",
                                  rubric=load_exercise("bias_gelu_fused"), backend="emulator")
        assert result.status == "graded" and result.correct, result.message
        assert result.sandbox.adapted == adapted
        assert not list((private / "tmp").glob("grader-run-*"))
    finally:
        folders.child_folder_base.cache_clear()
        os.chmod(private, 0o755)


def test_a_done_frame_ends_the_stream_only_when_it_is_the_last_whole_frame():
    key = b"k" * 32
    done = _frames(({"type": "case", "n": 1}, b"\x00" * 8), ({"type": "done", "t": 1.0}, b""), key=key)
    assert protocol.ends_with_done(done, key)
    assert not protocol.ends_with_done(done[:-2], key)                       # cut inside the done frame
    assert not protocol.ends_with_done(_frames(({"type": "case"}, b""), key=key), key)
    assert not protocol.ends_with_done(done, b"x" * 32)                      # not signed with this run's key
    assert not protocol.ends_with_done(b"", key)


@pytest.fixture
def leaving_when_done(monkeypatch):
    """Every child run as the measuring process is: left once its done frame is in, reaped in the
    background (the emulator's child stands in for it here)."""
    from grader.run import sandbox

    runs = []
    original = sandbox.Worker.run

    def run(self, job, **kw):
        kw["leave_when_done"] = True
        runs.append(self)
        return original(self, job, **kw)
    monkeypatch.setattr(sandbox.Worker, "run", run)
    return runs


def test_a_child_left_when_done_keeps_its_output_and_is_reaped(leaving_when_done, rubric, write_cu):
    """Leaving the measuring process once it has sent everything (its CUDA context's teardown
    took 0.15 s a grade) loses nothing: its verdict, what it printed, and no process or folder
    of it is left once it has been reaped."""
    from test_wall import launcher, run_unscreened

    from grader.run.groups import leftover_processes, settle

    result = run_unscreened(write_cu(launcher('    printf("launching %d x %d\\n", rows, cols);')), rubric, "emulator")
    assert result.status == "graded" and result.correct, result.message
    assert "launching 101 x 97" in result.output.stdout
    settle()
    worker = leaving_when_done[-1]
    assert worker.proc.returncode is not None and not Path(worker._workdir).exists()
    assert leftover_processes() == []


def test_a_child_that_ends_without_its_done_frame_is_still_waited_for(leaving_when_done, rubric, write_cu):
    """Without a done frame (the child died) nothing is left early: the exit status and the end
    of stderr are what the verdict reads."""
    from test_wall import launcher, run_unscreened

    result = run_unscreened(write_cu(launcher('    fprintf(stderr, "bye\\n"); fflush(stderr); abort();')),
                            rubric, "emulator")
    assert result.status == "crashed", (result.status, result.message)
    assert "bye" in result.output.stderr


@pytest.fixture
def gated(monkeypatch):
    """Every child run as the measuring process is: handed its job at once, run only once the gate
    (standing in for the recorder's end: a pause here) has opened. Each run as it came back, with
    whether the child had said anything by the gate's end and the seconds the whole call took."""
    import select
    import time

    from grader.run import sandbox

    runs = []
    original = sandbox.Worker.run

    def run(self, job, **kw):
        said_before_the_gate = []

        def gate():
            time.sleep(GATE_PAUSE_S)
            waiting = select.poll()
            waiting.register(self._read_fd, select.POLLIN)
            said_before_the_gate.append(bool(waiting.poll(0)))

        kw["gate"] = gate
        start = time.perf_counter()
        out = original(self, job, **kw)
        runs.append((out, said_before_the_gate, time.perf_counter() - start))
        return out
    monkeypatch.setattr(sandbox.Worker, "run", run)
    return runs


GATE_PAUSE_S = 2.0


def test_a_gated_child_runs_its_job_only_after_the_gate_and_is_timed_from_it(gated, rubric, write_cu):
    """The measuring process parses its job and loads while the recorder is torn down; its cases
    run after the gate, whose wait is not counted as the child's time."""
    from test_wall import launcher, run_unscreened

    from grader.core.contract import HelloFrame

    result = run_unscreened(write_cu(launcher('    printf("launching %d x %d\\n", rows, cols);')), rubric, "emulator")
    assert result.status == "graded" and result.correct, (result.status, result.message)
    assert "launching 101 x 97" in result.output.stdout
    run, said_before_the_gate, whole_s = gated[-1]
    # Orders, not durations (a loaded machine may start the child after the pause has passed): by the
    # gate's end the child had sent nothing on its channel; it said hello, then ran its cases; and
    # the call's time less the gate's pause bounds the run's, which counts from the gate.
    assert said_before_the_gate == [False]
    assert any(isinstance(f.data, HelloFrame) for f in run.frames)
    assert 0 < run.seconds <= whole_s - GATE_PAUSE_S


def test_a_gated_child_whose_gate_never_opens_runs_nothing(rubric, write_cu, tmp_path):
    """Where the parent closes stdin without the go byte (it ended first), the child sends nothing
    and loads nothing more: no hello frame, no case."""
    from test_wall import launcher

    from tests.jobs import child_job
    from grader.toolchain.build import build_guard, build_submission
    from grader.core.source import read_submission
    from grader.run import sandbox

    sub = read_submission(write_cu(launcher("")), rubric.kernel.launcher_name)
    build = build_submission(sub, rubric, backend=EMULATOR, arch="sm_90")
    job, _ = child_job(rubric, backend=EMULATOR, build=build, has_launcher=True, guard=build_guard(), draw=True)
    job.timing, job.timed_cases, job.verify_cases = None, [], []

    with sandbox.Worker(sandbox.ChildSpec(backend=EMULATOR, output_cap=1 << 16, cpu_limit_s=30)) as worker:
        real = worker.proc.stdin.write      # stdin is closed with the go byte never written
        worker.proc.stdin.write = lambda data: real(data) if data != protocol.GO else None
        run = worker.run(job, time_limit_s=20, gate=lambda: None)
    assert run.frames == [] and not run.timed_out, run.frames
    assert run.returncode == 0


def test_gone_returns_once_a_child_left_when_done_is_reaped(leaving_when_done, rubric, write_cu, monkeypatch):
    """The gate the measuring process waits behind is the recorder's gone(): it returns once the
    child left when done has been reaped, its folder removed, however long the reaping takes
    (held back here by a second)."""
    import time

    from test_wall import launcher, run_unscreened

    from grader.run import sandbox

    reap = sandbox.Worker._reap_in_background

    def slowly(self):
        time.sleep(1.0)
        reap(self)
    monkeypatch.setattr(sandbox.Worker, "_reap_in_background", slowly)
    result = run_unscreened(write_cu(launcher("")), rubric, "emulator")
    assert result.correct, result.message
    worker = leaving_when_done[-1]
    worker.gone()
    assert worker.proc.returncode is not None and not Path(worker._workdir).exists()


def test_folders_a_killed_grader_left_are_swept_and_fresh_ones_kept(tmp_path, monkeypatch):
    """A SIGKILLed grader cannot remove its children's folders (46 had piled up in /tmp over a
    day of tests): the next grader removes this user's that are older than a run can be."""
    import time as clock

    from grader.core import folders

    old, fresh, other = tmp_path / "grader-run-old", tmp_path / "grader-run-fresh", tmp_path / "unrelated-old"
    for folder in (old, fresh, other):
        folder.mkdir()
    (old / "submission.so").write_bytes(b"x")
    past = clock.time() - folders.STALE_FOLDER_S - 60
    for folder in (old, other):
        os.utime(folder, (past, past))
    monkeypatch.setattr(folders, "FALLBACK_BASES", ())
    folders.sweep_stale_folders(str(tmp_path))
    assert not old.exists() and fresh.is_dir() and other.is_dir()


def test_libraries_preloaded_before_the_job_are_loaded_first_and_the_job_still_runs(rubric, write_cu, tmp_path):
    """Worker.preload: the child loads the grader's libraries the parent names before its job
    arrives (a measuring process starts the reference library's CUDA runtime while the recorder
    records); the job's own load finds them loaded, and a name that cannot be loaded is left to
    the job to report, never a hang or a lost job."""
    from test_wall import launcher

    from grader.core.contract import CaseFrame, HelloFrame
    from tests.jobs import child_job
    from grader.toolchain.build import build_guard, build_submission
    from grader.core.source import read_submission
    from grader.run import sandbox

    sub = read_submission(write_cu(launcher("")), rubric.kernel.launcher_name)
    build = build_submission(sub, rubric, backend=EMULATOR, arch="sm_90")
    job, _ = child_job(rubric, backend=EMULATOR, build=build, has_launcher=True, guard=build_guard(), draw=True)
    job.timing, job.timed_cases, job.verify_cases = None, [], []

    for names in ([job.reference_library], [str(tmp_path / "missing.so"), job.reference_library]):
        with sandbox.Worker(sandbox.ChildSpec(backend=EMULATOR, output_cap=1 << 16, cpu_limit_s=30)) as worker:
            worker.preload(names)
            run = worker.run(job, time_limit_s=30)
        hello = next(f.data for f in run.frames if isinstance(f.data, HelloFrame))
        assert hello.preloaded_t is not None and hello.preloaded_t <= hello.job_t, (hello, names)
        cases = [f.data for f in run.frames if isinstance(f.data, CaseFrame)]
        assert len(cases) == len(job.cases) and all(c.ok for c in cases), names

    with sandbox.Worker(sandbox.ChildSpec(backend=EMULATOR, output_cap=1 << 16, cpu_limit_s=30)) as worker:   # none sent: none said
        run = worker.run(job, time_limit_s=30)
    assert next(f.data for f in run.frames if isinstance(f.data, HelloFrame)).preloaded_t is None


def test_the_childs_descriptors_sit_at_the_same_low_numbers_whatever_the_parent_holds(tmp_path):
    """A parent grading a dozen at once holds dozens of descriptors: the child's result channel,
    the guard's pipe and the rest are moved to 3, 4, ... all the same, so forge_channel.cu (which
    writes a forged frame to descriptors 3 to 15) is caught inside a batch as in a lone grade
    (on an H200 host, graded at once with others, it was not: its writes missed)."""
    import os

    from conftest import ROOT
    from grader.exercises import load_exercise
    from grader.grade.pipeline import grade_submission

    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(40)]       # the parent's table, as a batch's
    try:
        assert max(held) > 16           # the parent's next descriptors sit past the forger's 3 to 15 (the
                                        # suite may already hold some: CI's run had 42 open at this point)
        result = grade_submission(ROOT / "submissions" / "bias_gelu_fused" / "forge_channel.cu",
                                  rubric=load_exercise("bias_gelu_fused"), backend="emulator")
    finally:
        for fd in held:
            os.close(fd)
    assert result.status == "rejected" and "blocked_by_sandbox" in result.flags, (result.status, result.message)
    assert "result channel" in result.message


def test_place_descriptors_moves_each_to_its_slot_and_closes_the_old_number():
    """Moved in order to 3, 4, ...; the old numbers above the slots closed; one in a slot already
    (the pipe's write end, low in a fresh process) is moved as well; one not open stays as it is."""
    import json
    import subprocess
    import sys

    code = """
import json, os
from grader.run.child.worker import place_descriptors
import fcntl
r, w = os.pipe()
r2 = fcntl.fcntl(r, fcntl.F_DUPFD, 50)      # the reading end out of the slots' way (the parent's, in a real child)
os.close(r)
r = r2
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(20)]
high = held.pop()
for fd in held:
    os.close(fd)
placed = place_descriptors([high, w, 999])
os.write(4, b"x")
print(json.dumps({"placed": {str(k): v for k, v in placed.items()}, "high": high, "w": w, "read": os.read(r, 1).decode(),
                  "open": sorted(int(f) for f in os.listdir("/proc/self/fd"))}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["placed"] == {str(got["high"]): 3, str(got["w"]): 4} and got["read"] == "x"
    assert got["high"] not in got["open"] and 3 in got["open"] and 4 in got["open"]


def test_place_descriptors_never_closes_a_descriptor_not_the_graders():
    """Under a wrapper (Nsight Compute's injected library opens its own before main), a slot may
    hold a descriptor that is not the grader's: it is left alone, and ours stays where it was."""
    import json
    import subprocess
    import sys

    code = """
import fcntl, json, os
from grader.run.child.worker import place_descriptors
theirs = os.open(os.devnull, os.O_RDONLY)           # the lowest free: 3
r, w = os.pipe()
ours = fcntl.fcntl(w, fcntl.F_DUPFD, 40)
os.close(w)
placed = place_descriptors([ours])
os.write(ours, b"y")
print(json.dumps({"theirs": theirs, "placed": placed, "read": os.read(r, 1).decode(),
                  "theirs_open": os.path.exists(f"/proc/self/fd/{theirs}")}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["theirs"] == 3 and got["placed"] == {} and got["read"] == "y" and got["theirs_open"]


def test_a_child_started_past_descriptor_1024_is_waited_for(monkeypatch):
    """A batch's many children at once put a Worker's pipes past descriptor 1024, where select()
    raises ValueError (the counters' pass of a batch of samples failed so on the H100): waiting for
    the child to be ready still works there."""
    import resource

    from grader.run.sandbox import ChildSpec, Worker

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"descriptors are limited to {hard} here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1200 if hard == resource.RLIM_INFINITY else min(hard, 1200), hard))
    held = []
    try:
        while True:
            fd = os.open(os.devnull, os.O_RDONLY)
            held.append(fd)
            if fd >= 1030:
                break
        with Worker(ChildSpec(backend=EMULATOR, output_cap=64, cpu_limit_s=10)) as worker:
            assert worker._ready_fd > 1024
            waited = worker.wait_ready(30)
        assert waited < 30
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_workers_group_is_forgotten_once_empty_and_kept_while_anything_of_it_lives():
    """A long run wraps the kernel's process numbers: a group number our child once had may be
    another process's group later (a suite on two workers counted three such 'leftovers'). A group
    is forgotten once nothing of it is left, and kept for the leftover checks while a member lives."""
    import subprocess

    from grader.run import groups

    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    groups.started(proc.pid)
    try:
        groups.forget_if_empty(proc.pid, wait_s=0.05)
        assert proc.pid in groups.STARTED_GROUPS and proc.pid in groups.leftover_processes()
    finally:
        groups.kill_group(proc)
        proc.wait()
    groups.forget_if_empty(proc.pid)
    assert proc.pid not in groups.STARTED_GROUPS and groups.leftover_processes({proc.pid}) == []
