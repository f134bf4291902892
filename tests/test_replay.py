"""Record, then replay (grader/run/child/replay.py): the relocation of a recorded launch's arguments,
what refuses a recording, the recorder's job, the same calls in the same order in both children,
and the device code read from a built library. The GPU half (a replay through the driver) is in
test_gpu.py and the attack samples, run by scripts/gpu-check."""

import dataclasses
import random
import struct
from pathlib import Path

import pytest

from grader.core.backend import CUDA
from grader.run.child import replay
from grader.run.child.backends import ChildBackend, LaunchOutcome, Region
from grader.run.child.replay import SLACK, STAND_IN_BASE, Param, Refused, StandIns, relocate
from grader.run.replaying import recording_refusals
from grader.core.contract import RecordedOp, Recording


def _params(*sizes):
    out, at = [], 0
    for size in sizes:
        at += -at % min(size, 8)
        out.append(Param(at, size))
        at += size
    return out


def _pack(params, values):
    buf = bytearray(max(p.offset + p.size for p in params))
    for p, v in zip(params, values):
        buf[p.offset: p.offset + p.size] = v.to_bytes(p.size, "little") if isinstance(v, int) else v
    return bytes(buf)


STAND = StandIns()
X, BIAS, OUT = STAND.take(4096 * 4), STAND.take(64 * 4), STAND.take(4096 * 4)
GIVEN = {"x": (X, 4096 * 4), "bias": (BIAS, 64 * 4), "out": (OUT, 4096 * 4)}
REAL = {"x": 0x7F10_0000_0000, "bias": 0x7F10_0100_0000, "out": 0x7F10_0200_0000}


def _words(args, params):
    return [int.from_bytes(args[p.offset: p.offset + p.size], "little") for p in params]


def test_stand_ins_are_aligned_apart_and_in_the_window():
    s = StandIns()
    a, b = s.take(64 << 20), s.take(16)
    assert replay.in_stand_in_window(a) and replay.in_stand_in_window(b)
    assert a % 4096 == b % 4096 == SLACK % 4096 and b - a >= (64 << 20) + 2 * SLACK
    assert not replay.in_stand_in_window(2**40 - 1) and not replay.in_stand_in_window(16384 * 1024)


def test_pointers_are_relocated_and_integers_kept():
    params = _params(8, 8, 8, 8)                           # (x, bias, out, size_t cols)
    args = _pack(params, [X, BIAS, OUT, 1024])
    got = _words(relocate(args, params, GIVEN, REAL, kernel="k", case="c"), params)
    assert got == [REAL["x"], REAL["bias"], REAL["out"], 1024]


def test_pointers_into_a_buffer_and_just_past_it_keep_their_offset():
    params = _params(8, 8, 4)                              # (const float* x + k, float* out + rows*cols, int)
    args = _pack(params, [X + 4 * 100, OUT + 4096 * 4, 7])
    got = _words(relocate(args, params, GIVEN, REAL, kernel="k", case="c"), params)
    assert got == [REAL["x"] + 400, REAL["out"] + 4096 * 4, 7]
    before = _pack(_params(8), [X - 4])                    # out - 1 style: within the slack before the buffer
    assert _words(relocate(before, _params(8), GIVEN, REAL, kernel="k", case="c"), _params(8)) == [REAL["x"] - 4]


def test_a_pointer_inside_a_struct_parameter_is_relocated():
    params = [Param(0, 24), Param(24, 4)]                  # struct {float* out; const float* x; long n}; int
    struct_bytes = struct.pack("<QQq", OUT, X, 5)
    args = struct_bytes + (3).to_bytes(4, "little")
    out = relocate(args, params, GIVEN, REAL, kernel="k", case="c")
    assert struct.unpack("<QQq", out[:24]) == (REAL["out"], REAL["x"], 5) and out[24:] == args[24:]


@pytest.mark.parametrize("bad", [STAND_IN_BASE + 5 * replay.STAND_IN_SLOT, OUT + 4096 * 4 + SLACK + 8])
def test_an_address_in_no_buffer_of_the_call_is_refused_in_the_students_terms(bad):
    params = _params(8, 8, 8, 8)
    with pytest.raises(Refused) as err:
        relocate(_pack(params, [X, BIAS, bad, 64]), params, GIVEN, REAL, kernel="biasGeluFused", case="random 7x9")
    text = str(err.value)
    assert "argument 3 of biasGeluFused" in text and "random 7x9" in text and "earlier call" in text


def test_random_words_never_pass_as_pointers_unless_they_lie_in_a_buffer():
    rng = random.Random(5)
    params = _params(*([8] * 6))
    for _ in range(200):
        values = [rng.getrandbits(rng.choice((16, 32, 40, 63))) for _ in params]
        args = _pack(params, values)
        out = relocate(args, params, GIVEN, REAL, kernel="k", case="c")
        assert _words(out, params) == values                 # none lies in the stand-in window


def _op(**kw):
    return RecordedOp(kernel="_Z13biasGeluFusedPKfS0_Pfm", **kw)


@pytest.mark.parametrize("op,words", [
    (_op(thread="outside"), "started a thread that launched biasGeluFused after the launcher returned"),
    (_op(thread="other"), "from a thread of its own"),
    (_op(stream="other"), "on a stream the grader did not give it"),
    (_op(error="cudaError 700"), "could not read the launch (cudaError 700)"),
])
def test_a_recording_is_refused_with_what_the_launcher_did(op, words):
    late = Recording(ops=[[_op()]], late=[op]) if op.thread == "outside" else Recording(ops=[[_op(), op]])
    reasons = recording_refusals(late, "launchBiasGeluFused", api=CUDA.api)
    assert len(reasons) == 1 and words in reasons[0] and reasons[0].startswith("your launcher launchBiasGeluFused")


def test_a_thread_s_launches_are_one_refusal_whatever_they_were():
    """issue 37: a thread that launched during one call and after another, whose launches the
    recorder could not read (its context's error), and copied too, is one message: the thread's;
    a launch of the launcher's own that could not be read is a second cause, said apart."""
    ops = [[_op(), _op(thread="other", error="cudaError 201"), _op(kind="memset", thread="other", call="cudaMemsetAsync")]]
    late = [_op(thread="outside", error="cudaError 201")]
    reasons = recording_refusals(Recording(ops=ops, late=late), "launchBiasGeluFused", api=CUDA.api)
    assert len(reasons) == 1 and "from a thread of its own" in reasons[0] and "start no threads" in reasons[0]
    reasons = recording_refusals(Recording(ops=[[_op(error="cudaError 700"), _op(thread="other")]]), "launchX",
                                 api=CUDA.api)
    assert len(reasons) == 2 and "cudaError 700" in reasons[0] and "thread" in reasons[1]


def test_launches_on_the_given_the_default_and_the_per_thread_stream_are_accepted():
    ops = [[_op(stream="given"), _op(stream="per_thread"), _op(kind="attribute", thread="outside")]]
    assert recording_refusals(Recording(ops=ops), None, api=CUDA.api) == []


# ---------------------------------------------------------------------------
# The two children make the same calls: the recorder every call the measurer may make.


class _Fake(ChildBackend):
    """A backend of nothing but counters: memory is numbers, every event 1 ms apart (or noisy)."""

    repeats_checks = True      # as a GPU: a check's second run repeats it

    def __init__(self, measures: bool, *, api=None):
        self.measures, self.calls, self._next, self.rng = measures, [], 1 << 20, random.Random(3)
        self.api = api

    def alloc(self, floats, name):
        self._next += 4 * floats + 256
        return Region(self._next, floats)

    def kept(self, floats):
        return self.alloc(floats, "kept")

    def input(self, host_ptr, floats, shape, name):
        return Region(self.alloc(floats, name).ptr, floats, shape)

    def fill(self, region, bits):
        pass

    def read(self, region):
        return b""

    def read_into(self, region, address):
        pass

    def checksums(self, regions):
        return [0] * len(regions)

    def checksum_into(self, region, slots, index):
        pass

    def launch_submission(self, call, views):
        self.calls.append(call.key)
        return LaunchOutcome(True)

    def reference_call(self, call, views):
        return LaunchOutcome(True)

    def copy(self, which, src, dst):
        return LaunchOutcome(True)

    def reset_persisting_l2(self):
        pass

    def reset_launch_log(self):
        pass

    def launch_log(self):
        return []

    def event(self):
        return 0

    def record(self, event):
        pass

    def elapsed_ms(self, start, end):
        return 1.0 + (self.rng.random() * 0.02 if self.measures else 0.0)

    def device(self):
        return {"l2_bytes": 1 << 20}

    def baseline(self, expression):
        return lambda views: None


def _job(exercise="bias_gelu_fused"):
    from grader.toolchain.outcome import BuildResult
    from grader.exercises import load_exercise
    from tests.jobs import child_job

    built = BuildResult(True, Path("lib.so"), None, False, 0.0, "")
    job, _ = child_job(load_exercise(exercise), backend=CUDA, build=built, reference=built, has_launcher=True)
    return job


@pytest.mark.parametrize("exercise", ["bias_gelu_fused", "gelu_sum"])
def test_the_recorder_makes_every_call_the_measurer_makes_in_its_order(exercise, monkeypatch):
    from grader.run.child import timing, worker

    monkeypatch.setattr(timing, "_baseline_gap", lambda *a: 0.0)       # no torch: the fake's baseline is nothing
    job = _job(exercise)
    job.timing = dataclasses.replace(job.timing, max_samples=300, budget_s=0.05)
    sender = worker.NullSender()
    files = worker.InputFiles([])
    runs = {}
    for measures in (False, True):
        fake = _Fake(measures)
        for cj in job.cases:
            worker.run_case(fake, cj, job, files, sender, False)
        timing.run_timing(fake, job, files, sender)
        runs[measures] = fake.calls
    recorded, measured = runs[False], runs[True]
    assert len(measured) < len(recorded)                     # the measurer stopped early; the recorder did not
    for key in set(measured):
        mine = [k for k in measured if k == key]
        assert len(mine) <= recorded.count(key), key
    # Up to where the measurer stopped sampling, the order is the same call for call.
    first_difference = next(i for i, (a, b) in enumerate(zip(recorded, measured)) if a != b) \
        if recorded[: len(measured)] != measured else len(measured)
    checks = next(i for i, k in enumerate(measured) if k.startswith("timed"))
    assert checks == len(job.cases) * 2 and first_difference > checks    # every check runs twice


class _Kept:
    """A sender that keeps every frame it is given (a fake's outputs are empty)."""

    def __init__(self):
        self.frames = []
        self.channel = self

    def send(self, *args, **_kw):
        self.frames.append(args[1] if len(args) == 3 else args[0])


def test_a_timing_sends_its_samples_then_every_set_and_a_launch_too_slow_to_sample_only_set_0(monkeypatch):
    from grader.core.contract import CaseFrame, TimingFrame
    from grader.run.child import timing, worker

    monkeypatch.setattr(timing, "_baseline_gap", lambda *a: 0.0)
    job = _job()
    job.timing = dataclasses.replace(job.timing, max_samples=60, budget_s=0.05, min_samples=20)
    sets = [c.name for c in job.timed_cases]
    fake, kept = _Fake(True), _Kept()
    timing.run_timing(fake, job, worker.InputFiles([]), kept)
    frame = kept.frames[0]
    assert isinstance(frame, TimingFrame) and frame.stop_reason in ("converged", "budget", "max_samples")
    assert len(frame.samples_ms["submission"]) >= 20 and set(frame.samples_ms) >= {"submission", *job.timing.floor}
    assert [f.case for f in kept.frames[1:] if isinstance(f, CaseFrame)] == sets
    assert frame.skipped == []

    slow, kept = _Fake(True), _Kept()
    slow.elapsed_ms = lambda start, end: 1000.0 * (job.timing.slow_launch_s + 1)
    timing.run_timing(slow, job, worker.InputFiles([]), kept)
    frame = kept.frames[0]
    assert isinstance(frame, TimingFrame) and frame.stop_reason == "too_slow"
    assert all(len(v) == 1 for v in frame.samples_ms.values()) and frame.skipped == sets[1:]
    assert [f.case for f in kept.frames[1:] if isinstance(f, CaseFrame)] == sets[:1]
    assert slow.calls.count(job.timed_cases[0].launch.key) == 1 and len(slow.calls) == 1


def test_a_launch_too_slow_to_sample_keeps_its_output_from_copies_on_its_buffers(monkeypatch):
    """With the floor on the submission's buffers, the too-slow path's copies would write set 0's
    output before it is sent: a correct kernel would read as one that wrote x. They run on a pair
    of their own there, and every copy of a sampled timing on the sets' own buffers."""
    from grader.core.contract import FloorPlacement
    from grader.run.child import timing, worker

    monkeypatch.setattr(timing, "_baseline_gap", lambda *a: 0.0)
    job = _job()
    assert job.timing.floor_placement is FloorPlacement.SUBMISSION         # the rubric's choice

    class Watched(_Fake):
        def output(self, n, pad, name, init="poison", shape=()):
            full, view = super().output(n, pad, name, init, shape)
            self.outputs.append(view.ptr)
            return full, view

        def copy(self, which, src, dst):
            self.copied.append(dst.ptr)
            return super().copy(which, src, dst)

    def run(slow: bool):
        fake = Watched(True)
        fake.outputs, fake.copied = [], []
        if slow:
            fake.elapsed_ms = lambda start, end: 1000.0 * (job.timing.slow_launch_s + 1)
        timing.run_timing(fake, dataclasses.replace(job, timing=dataclasses.replace(job.timing, max_samples=40,
                                                                                     min_samples=20, budget_s=0.05)),
                          worker.InputFiles([]), _Kept())
        return fake

    slow = run(True)
    assert len(slow.copied) == len(set(job.timing.floor) | {job.timing.informational_floor})
    assert not set(slow.copied) & set(slow.outputs)          # no copy wrote an output of a timed set
    sampled = run(False)
    assert set(sampled.copied) <= set(sampled.outputs) and len(set(sampled.copied)) == len(job.timed_cases)


def test_every_batch_of_timed_rounds_is_enqueued_behind_a_held_stream_and_released_before_the_wait(monkeypatch):
    """Each batch of rounds: the stream held before its first region is enqueued, released after
    its last, then synchronised; so no region's start event is reached before its launch is
    queued. Not for the recorder (nothing runs), nor where the rubric turns it off; and once a hold
    ended by its timeout (a call waited on the held stream), the rest of the sampling runs unheld."""
    from grader.core.contract import TimingFrame
    from grader.run.child import timing, worker

    monkeypatch.setattr(timing, "_baseline_gap", lambda *a: 0.0)
    job = _job()

    class Ordered(_Fake):
        def __init__(self, measures, time_out_at=None):
            super().__init__(measures)
            self.log, self.time_out_at, self.holds, self.timed_out = [], time_out_at, 0, 0
            self.cannot_hold = False

        def hold(self):
            self.log.append("hold")
            self.holds += 1
            if self.holds == self.time_out_at:
                self.timed_out += 1
            return not self.cannot_hold

        def release(self):
            self.log.append("release")
            return self.timed_out

        def record(self, event):
            self.log.append("record")

        def synchronize(self):
            self.log.append("sync")
            return LaunchOutcome(True)

    def run(measures, time_out_at=None, **change):
        fake, kept = Ordered(measures, time_out_at), _Kept()
        timing.run_timing(fake, dataclasses.replace(job, timing=dataclasses.replace(
            job.timing, max_samples=40, min_samples=40, budget_s=5, **change)), worker.InputFiles([]), kept)
        return fake.log, kept.frames[0]

    log, frame = run(True)
    first = log.index("hold")
    assert log[:first].count("record") >= 2 and "release" not in log[:first]       # the probe: not held
    batches = " ".join(log[first:]).split("hold ")[1:]
    assert len(batches) == len(frame.samples_ms["submission"]) // timing.BATCH == 4
    for b in batches:
        words = b.split()
        assert words.count("record") == 2 * timing.BATCH * len(frame.samples_ms)     # every region inside it
        at = words.index("release")
        assert words[at + 1] == "sync" and words[at + 2] == "release" and "record" not in words[at:at + 3]
    assert isinstance(frame, TimingFrame) and frame.holds_timed_out == 0
    log, frame = run(True, time_out_at=2)
    assert log.count("hold") == 2 and frame.holds_timed_out == 1        # held until one timed out, then not
    assert len(frame.samples_ms["submission"]) == 40
    log, frame = run(True, hold_rounds=False)
    assert "hold" not in log and "release" not in log and frame.holds_timed_out == 0
    # a hold that could not start: asked once, the rounds run unheld, every sample taken
    fake, kept = Ordered(True), _Kept()
    fake.cannot_hold = True
    timing.run_timing(fake, dataclasses.replace(job, timing=dataclasses.replace(
        job.timing, max_samples=40, min_samples=40, budget_s=5)), worker.InputFiles([]), kept)
    assert fake.log.count("hold") == 1 and "release" not in fake.log
    assert len(kept.frames[0].samples_ms["submission"]) == 40
    log, _ = run(False)
    assert "hold" not in log and "release" not in log


def test_the_recorders_job_names_no_input_file():
    job = _job()
    from grader.run.replaying import for_recorder

    rec = for_recorder(job)
    assert rec.role == "record" and rec.input_files() == [] and job.input_files()
    assert [c.launch for c in rec.cases] == [c.launch for c in job.cases]
    assert all(c.launch.key == c.name for c in job.cases + job.timed_cases)


# ---------------------------------------------------------------------------
# The device code the measuring process loads, read from the library nvcc built.


@pytest.mark.skipif(not __import__("shutil").which("nvcc"), reason="needs nvcc")
def test_the_device_code_is_read_from_the_built_library(rubric):
    from grader.toolchain.build import FATBIN_MAGIC, build_submission, device_code
    from grader.core.source import read_submission
    from conftest import SUBMISSIONS

    sub = read_submission(SUBMISSIONS / "float4_launcher.cu", rubric.kernel.launcher_name)
    build = build_submission(sub, rubric, backend=CUDA, arch="sm_90")
    assert build.ok, build.log
    pieces = device_code(build.library)
    assert len(pieces) >= 1 and pieces == device_code(build.library)          # kept beside the library
    for p in pieces:
        magic, _version, header, size = struct.unpack_from("<IHHQ", p.read_bytes())
        assert magic == FATBIN_MAGIC and p.stat().st_size == header + size
    assert sum(p.stat().st_size for p in pieces) > 4096        # the submission's kernels, not only the empty one


def test_the_static_variables_the_measuring_process_restores_are_read_from_the_build(rubric, write_cu):
    from grader.toolchain import tools
    from grader.toolchain.build import build_submission, device_variables
    from grader.core.source import read_submission

    if tools.locate("cuobjdump") is None:
        pytest.skip("no cuobjdump")
    p = write_cu("namespace t { __device__ float table[64]; }\nstatic __device__ int hidden;\n__constant__ float k[4];\n"
                 "__device__ int flag;\n"
                 "__global__ void biasGeluFused(const float* x, const float* b, float* o, size_t c) {\n"
                 "  o[0] = t::table[0] + hidden + k[0] + flag;\n}\n")
    build = build_submission(read_submission(p, rubric.kernel.launcher_name), rubric, backend=CUDA, arch="sm_90")
    assert build.ok, build.log
    found = device_variables(build.object)
    assert {"_ZN1t5tableE", "hidden", "k", "flag"} <= set(found)
    assert not [n for n in found if n.startswith(".")]
    assert device_variables(build.object) == found                      # kept beside the object


def test_the_device_symbols_are_read_from_either_listing_cuobjdump_prints():
    """cuobjdump 13.5 names a symbol's type; 13.0 prints its info byte (the device's toolkit): both
    give the static variables and the call of malloc (a listing read one way only restored no
    variable and poisoned no heap on the H200)."""
    from grader.toolchain.build import elf_symbols

    named = """
   0x4                0              0x4  OBJECT        WEAK    DEFAULT    -                                      0  .nv.reservedSmem.offset0
   0x8                0              0x8  OBJECT        LOCAL   DEFAULT    -                                   0x19  g_memo
  0x11                0            0x400  FUNC          GLOBAL  DEFAULT    ENTRY                               0x15  _Z5storePKfiiii
  0x15                0                0  FUNC          GLOBAL  DEFAULT    -                                      0  malloc
0x18    malloc    R_CUDA_64    0x0
"""
    numeric = """
   0x3                0                0       0x3       0      0x2  .shstrtab
   0x8                0              0x8       0x1       0     0x19  g_memo
   0x9              0x8              0x4       0x1       0     0x19  g_hit
  0x11                0            0x400      0x12      0x10   0x15  _Z5storePKfiiii
  0x15                0                0      0x12       0        0  malloc
0x18    malloc    R_CUDA_64    0x0
    3    7b8    258 18  8                       SYMTAB        0    2       19 .symtab
"""
    assert elf_symbols(named) == [(".nv.reservedSmem.offset0", "OBJECT"), ("g_memo", "OBJECT"),
                                  ("_Z5storePKfiiii", "FUNC"), ("malloc", "FUNC")]
    assert elf_symbols(numeric) == [("g_memo", "OBJECT"), ("g_hit", "OBJECT"), ("_Z5storePKfiiii", "FUNC"),
                                    ("malloc", "FUNC")]


def test_a_device_code_that_calls_malloc_is_told_apart_from_one_that_does_not(rubric, write_cu):
    """uses_device_heap: malloc in a kernel (through a helper, too) is seen in the build's ELF, so
    the measuring process poisons and counts the heap for it; a kernel without it costs nothing."""
    from grader.toolchain import tools
    from grader.toolchain.build import build_submission, uses_device_heap
    from grader.core.source import read_submission

    if tools.locate("cuobjdump") is None:
        pytest.skip("no cuobjdump")
    body = ("__global__ void biasGeluFused(const float* x, const float* b, float* o, size_t c) {\n"
            "  o[0] = x[0] + b[0]%s;\n}\n")
    helper = "__device__ float* scratch() { return static_cast<float*>(malloc(64)); }\n"
    plain = write_cu(body % "")
    heap = write_cu(helper + body % " + (scratch() != nullptr)", name="heap.cu")
    built = [build_submission(read_submission(p, rubric.kernel.launcher_name), rubric, backend=CUDA, arch="sm_90")
             for p in (plain, heap)]
    assert all(b.ok for b in built), [b.log for b in built]
    assert [uses_device_heap(b.object) for b in built] == [False, True]


def test_heap_memory_a_call_kept_withholds_the_tier_and_says_why():
    """A timing whose calls kept device-heap memory from one to the next earns no tier, whatever
    its fraction: the flag and a sentence that names malloc without free."""
    from grader.core.contract import TimingFrame
    from grader.exercises.rubric import load_rubric
    from grader.verdict import Verdict, _Frames, _timed

    rubric = load_rubric()
    fast = [0.1] * 60
    floors = {k: [0.1] * 60 for k in rubric.timing.floor}
    for kept, tier in ((0, "gold"), (1 << 20, "below")):
        v = Verdict(correct=True)
        read = _Frames(v)
        read.timing = TimingFrame({"submission": fast, **floors}, "converged", 1.0, heap_kept_bytes=kept)
        _timed(v, read, rubric)
        assert v.tier == tier, (kept, v.tier, v.feedback)
        assert ("heap_kept_across_calls" in v.flags) == bool(kept)
    assert "1024 KiB of the device heap" in v.feedback and "free()" in v.feedback


def test_the_child_takes_the_class_its_backend_names_for_the_role(monkeypatch):
    """worker._backend_for instantiates the class the job's Backend.child names for its role, built
    from the job (from_job): the recorder's for RECORD, the measuring process's (with the recording,
    the device code, the layout seed and every call's sizes) for REPLAY, the emulator's for an
    emulator job, a stand-in backend's own class; a GPU job that names a library is never run
    directly, and a role the backend has no class for is said."""
    from grader.core.backend import EMULATOR, ChildClasses
    from grader.core.contract import ReplayPart, Role
    from grader.run.child import emulator, measurer, recorder, worker

    made = {}

    def capture(name):
        def init(self, *args, **kw):
            made[name] = (args, kw)
        return init

    monkeypatch.setattr(recorder.RecordingBackend, "__init__", capture("record"))
    monkeypatch.setattr(measurer.ReplayBackend, "__init__", capture("replay"))
    monkeypatch.setattr(emulator.EmulatorBackend, "__init__", capture("emulator"))
    job = _job()
    assert type(worker._backend_for(dataclasses.replace(job, role=Role.RECORD))) is recorder.RecordingBackend
    rec = Recording()
    part = ReplayPart(rec, device_code=["a.fatbin"], layout_seed=7)
    replayer = worker._backend_for(dataclasses.replace(job, role=Role.REPLAY, replay=part))
    assert type(replayer) is measurer.ReplayBackend
    _, kw = made["replay"]
    assert kw["part"] is part
    assert set(kw["sizes"]) == {c.launch.key for c in job.cases + job.timed_cases + job.baseline_cases}
    emulated = worker._backend_for(dataclasses.replace(job, backend=EMULATOR, role=Role.RUN, emulator_threads=3))
    assert type(emulated) is emulator.EmulatorBackend and made["emulator"][1] == {"threads": 3, "api": EMULATOR.api, "thread_check": False}
    assert made["record"][1] == {"api": job.backend.api} and kw["backend"] is job.backend     # the job's runtime
    with pytest.raises(ValueError, match="recorded, then replayed"):
        worker._backend_for(dataclasses.replace(job, role=Role.RUN, library="lib.so"))
    with pytest.raises(ValueError, match="no child for the replay role"):
        worker._backend_for(dataclasses.replace(job, backend=EMULATOR, role=Role.REPLAY))
    stand_in = dataclasses.replace(EMULATOR, name="stand-in", child=ChildClasses(run="test_replay:_Fake"))
    assert type(worker._backend_for(dataclasses.replace(job, backend=stand_in, role=Role.RUN))) is _Fake


def test_a_job_carries_its_backend_across_the_pipe_whole():
    """The job's JSON brings the Backend back equal to the one sent (its toolchain, its child
    classes, its capabilities), and the role as the enum."""
    import json

    from grader.core.backend import CUDA, EMULATOR
    from grader.core.contract import Job, OfflinePart, ReplayPart, Role

    for backend in (CUDA, EMULATOR):
        job = dataclasses.replace(_job(), backend=backend, role=Role.REPLAY)
        back = Job.from_json(json.loads(json.dumps(job.to_json())))
        assert back.backend == backend and back.role is Role.REPLAY
    # a role's part travels whole, and is absent from the jobs of the other roles
    rec = Recording(calls={"k": [[0, 0, 0]]}, ops=[[RecordedOp(kernel="_Z1kPf")]], views=[{"x": 1}])
    replay = dataclasses.replace(_job(), role=Role.REPLAY, replay=ReplayPart(rec, ["a.fatbin"], ["g"], True, 7))
    back = Job.from_json(json.loads(json.dumps(replay.to_json())))
    assert back.replay == replay.replay and isinstance(back.replay.recording.ops[0][0], RecordedOp)
    assert back.offline is None
    offline = dataclasses.replace(_job(), role=Role.RECORD, offline=OfflinePart({"_Z1kPf": [[0, 8]]}, "/x/libcuda.so.1"))
    back = Job.from_json(json.loads(json.dumps(offline.to_json())))
    assert back.offline == offline.offline and back.replay is None


def test_the_recorder_s_and_the_measurer_s_clocks_become_phases_named_for_each():
    """Both children's hello and done frames are read by one function (contract.clock_phases):
    the recorder's under recorder_*, the measuring process's under child_*; a moment not reached
    (no timing: no sampled_t) is left out."""
    from types import SimpleNamespace

    from grader.core.contract import DoneFrame, HelloFrame, clock_phases
    from grader.grade.ways import recorder_times as _recorder_times

    run = SimpleNamespace(frames=[SimpleNamespace(data=HelloFrame(t=0.4, ready_t=0.1, job_t=0.3, loaded_t=0.35)),
                                  SimpleNamespace(data=DoneFrame(t=0.9, checks_t=0.5))])
    assert _recorder_times(run) == {"recorder_ready_t": 0.1, "recorder_job_t": 0.3, "recorder_loaded_t": 0.35,
                                    "recorder_hello_t": 0.4, "recorder_done_t": 0.9, "recorder_checks_t": 0.5}
    assert clock_phases(DoneFrame(t=2.0, checks_t=1.0, sampled_t=1.5), "child") == {
        "child_done_t": 2.0, "child_checks_t": 1.0, "child_sampled_t": 1.5}


class _StandChild:
    """A Worker as the ways and the replay use it, each call noted in events (run: its kwargs in given)."""

    def __init__(self, events, name, frames, gpu):
        self.events, self.name, self.frames, self.gpu, self.given = events, name, frames, gpu, []

    def wait_ready(self, timeout_s):
        self.events.append((self.name, "ready"))
        return 0.0

    def run(self, job, **kw):
        from grader.run.sandbox import CappedOutput, ChildRun

        self.events.append((self.name, "run", job.role.value))
        self.given.append(kw)
        if kw.get("gate"):
            kw["gate"]()
            self.events.append((self.name, "gate opened"))
        return ChildRun(frames=self.frames, returncode=0, timed_out=False, seconds=0.01,
                        stdout=CappedOutput(1 << 10), stderr=CappedOutput(1 << 10))

    def cancel(self):
        self.events.append((self.name, "cancel"))

    def gone(self):
        self.events.append((self.name, "gone"))


def test_the_measurer_runs_nothing_until_the_recorder_is_gone():
    """record_then_replay: the recorder is left once its done frame is in (reaped in the
    background), and the measuring process is handed its job with the recorder's gone() as its
    gate, so nothing of the replay runs while the recorder might."""
    from grader.run import protocol
    from grader.run.replaying import DeviceCode, ReplayPlan, record_then_replay
    from grader.core.contract import RecordingFrame, encode
    events = []

    recording = Recording(calls={}, ops=[], views=[])
    frame = protocol.Frame(encode(RecordingFrame(recording)), b"")
    # the recorder on the GPU: record_then_replay's path in the lane
    recorder, measurer = _StandChild(events, "recorder", [frame], gpu=True), _StandChild(events, "measurer", [], gpu=True)
    record_then_replay(recorder, measurer, _job(), plan=ReplayPlan(DeviceCode(["a.fatbin"]), None, 5))
    assert events[0] == ("recorder", "run", "record") and recorder.given[0]["leave_when_done"] is True
    assert events[2] == ("measurer", "run", "replay")
    assert measurer.given[0]["gate"] is not None    # gated: its gate waits for the recorder's end
    assert events[3:] == [("recorder", "gone"), ("measurer", "gate opened")]


# -- the launcher's stream-ordered work (memsets, copies, symbols, the workspace) -----------------

WS = (replay.WORKSPACE_BASE + SLACK, 1 << 20)
SPANS = replay.call_spans(GIVEN, {"out"}, [WS])
CAP = 256 << 20


def _problem(spans=SPANS, **op):
    return replay.stream_op_problem(RecordedOp(**op), spans, who="your launcher", workspace_cap=CAP, api=CUDA.api)


def test_the_call_s_buffers_never_reach_the_workspace_half_of_the_window():
    s = StandIns()
    for _ in range(3000):                       # past the lower half's 2048 slots: it wraps, never upwards
        assert STAND_IN_BASE <= s.take(1 << 20) < replay.WORKSPACE_BASE


@pytest.mark.parametrize("op", [
    dict(kind="memset", call="cudaMemsetAsync", dst=OUT, nbytes=4096 * 4),            # the whole output
    dict(kind="memset", call="cudaMemset", dst=OUT + 400, nbytes=16),                  # a part of it
    dict(kind="memset", call="cudaMemsetAsync", dst=WS[0], nbytes=WS[1]),              # the workspace
    dict(kind="copy", call="cudaMemcpyAsync", direction="d2d", dst=WS[0], src=X, nbytes=4096 * 4),
    dict(kind="copy", call="cudaMemcpyAsync", direction="d2d", dst=OUT, src=WS[0] + 64, nbytes=1024),
    dict(kind="copy", call="cudaMemcpy", direction="h2d", dst=WS[0], nbytes=64, args="00" * 64),
    dict(kind="symbol", call="cudaMemcpyToSymbol", direction="h2d", kernel="table", nbytes=8, args="00" * 8),
    dict(kind="alloc", call="cudaMalloc", dst=WS[0], nbytes=WS[1]),
    dict(kind="free", call="cudaFree", dst=WS[0]),
])
def test_stream_work_inside_the_call_s_outputs_and_workspace_is_replayed(op):
    assert _problem(**op) is None


@pytest.mark.parametrize("op, words", [
    (dict(kind="memset", call="cudaMemsetAsync", dst=X, nbytes=64), "cudaMemsetAsync on the input x"),
    (dict(kind="copy", call="cudaMemcpyAsync", direction="d2d", dst=BIAS, src=WS[0], nbytes=64), "on the input bias"),
    (dict(kind="memset", call="cudaMemset", dst=OUT, nbytes=4096 * 4 + 4), "outside every buffer"),      # one past
    (dict(kind="memset", call="cudaMemset", dst=STAND_IN_BASE + (1 << 38), nbytes=4), "a pointer kept from an earlier call"),
    (dict(kind="copy", call="cudaMemcpyAsync", direction="d2d", dst=OUT, src=STAND_IN_BASE + (1 << 38), nbytes=4),
     "with a source that lies outside every buffer"),
    (dict(kind="copy", call="cudaMemcpy", direction="d2h", dst=0x1000, src=OUT, nbytes=4),
     "copied device memory to the host (cudaMemcpy, 4 bytes)"),
    (dict(kind="free", call="cudaFree", dst=BIAS), "cudaFree on memory it did not allocate"),
    (dict(kind="alloc", call="cudaMalloc", nbytes=4 << 30, error="over_workspace"), "limits.workspace_mib"),
    (dict(kind="copy", call="cudaMemcpyAsync", direction="h2d", dst=OUT, nbytes=2 << 20, error="too_much_data"),
     "uploaded more than 1.0 MiB from the host"),
    (dict(kind="copy", call="cudaMemcpyAsync", direction="h2d", dst=0x7F00_0000, nbytes=4, error="unknown_address"),
     "neither a buffer the grader passed nor one your launcher allocated"),
    (dict(kind="symbol", call="cudaMemcpyToSymbol", nbytes=4, error="unknown_symbol"), "not a __device__"),
])
def test_stream_work_the_replay_cannot_reproduce_is_refused_in_the_students_terms(op, words):
    problem = _problem(**op)
    assert problem is not None and words in problem, problem
    assert problem.startswith("your launcher")


def test_the_parent_refuses_what_needs_no_addresses_and_leaves_the_rest_to_the_measuring_process():
    def refusals(*ops):
        return recording_refusals(Recording(calls={"c": [[0, 0, 0]]}, ops=[list(ops)], views=[{}]), "launchX",
                                  workspace_cap=CAP, api=CUDA.api)
    assert refusals(RecordedOp(kind="memset", call="cudaMemsetAsync", dst=X, nbytes=64)) == []   # needs the sizes
    assert "copied device memory to the host" in refusals(
        RecordedOp(kind="copy", call="cudaMemcpy", direction="d2h", dst=1, src=OUT, nbytes=4))[0]
    assert "on a stream the grader did not give it" in refusals(
        RecordedOp(kind="memset", call="cudaMemsetAsync", dst=OUT, nbytes=4, stream="other"))[0]
    assert "after the launcher returned" in refusals(
        RecordedOp(kind="copy", call="cudaMemcpyAsync", direction="d2d", dst=OUT, src=X, nbytes=4, thread="outside"))[0]
    assert "limits.workspace_mib" in refusals(RecordedOp(kind="alloc", call="cudaMalloc", nbytes=1 << 40,
                                                         error="over_workspace"))[0]


def test_addresses_of_stream_work_are_relocated_into_the_grader_s_buffers():
    real = {**REAL, replay.workspace_name(0, WS[1]): 0x7F20_0000_0000}
    assert replay.relocate_address(OUT + 40, SPANS, real) == REAL["out"] + 40
    assert replay.relocate_address(WS[0] + 4096, SPANS, real) == 0x7F20_0000_0000 + 4096
    with pytest.raises(Refused):
        replay.relocate_address(STAND_IN_BASE + (1 << 38), SPANS, real)


def test_a_kernel_parameter_into_the_workspace_is_relocated_like_a_tensor():
    name = replay.workspace_name(0, WS[1])
    params = _params(8, 8, 4)
    args = _pack(params, [X, WS[0] + 256, 7])
    out = relocate(args, params, {**GIVEN, name: WS}, {**REAL, name: 0x7F20_0000_0000}, kernel="k", case="c")
    assert struct.unpack_from("<QQi", out) == (REAL["x"], 0x7F20_0000_0000 + 256, 7)


def test_the_workspace_is_every_successful_allocation_once():
    ops = [RecordedOp(kind="alloc", dst=WS[0], nbytes=WS[1]), RecordedOp(kind="alloc", dst=WS[0], nbytes=WS[1]),
           RecordedOp(kind="alloc", nbytes=1 << 40, error="over_workspace"), RecordedOp(kind="launch")]
    assert replay.workspaces(ops) == [WS]


@pytest.mark.parametrize("name, refused", [
    ("cudaMalloc", False), ("cudaMallocAsync", False), ("cudaFree", False), ("cudaFreeAsync", False),
    ("cudaMemcpy", False), ("cudaMemcpyAsync", False), ("cudaMemset", False), ("cudaMemsetAsync", False),
    ("cudaMemcpyToSymbol", False), ("cudaMemcpyToSymbolAsync", False), ("cudaStreamSynchronize", False),
    ("cudaDeviceSynchronize", False), ("cudaSetDevice", False), ("cudaEventCreate", False),
    ("cudaEventRecord", False), ("cudaEventSynchronize", False), ("cudaStreamWaitEvent", False),
    ("cudaEventDestroy", False),
    ("cudaStreamCreate", True), ("cudaMallocHost", True), ("cudaMallocManaged", True), ("cudaMemcpy2DAsync", True),
    ("cudaMemcpyFromSymbol", True), ("cudaGetSymbolAddress", True), ("cudaMemcpyPeerAsync", True),
    ("cuMemcpyHtoD", True), ("cudaDeviceSetLimit", True), ("cudaGraphLaunch", True), ("cudaLaunchHostFunc", True),
    ("cudaMallocFromPoolAsync", True), ("cudaDeviceReset", True),
])
def test_the_screen_refuses_only_what_the_replay_cannot_reproduce(name, refused):
    from grader.analysis.screening import refused_call

    assert refused_call(CUDA.api, name) is refused


def test_a_recorder_that_ran_out_of_threads_is_a_refusal_that_says_so():
    """A launcher that starts a thread at every call piles them up in the recorder until one cannot
    start (std::system_error, "Resource temporarily unavailable", then abort): the grade is the
    replay's refusal of threads, saying why, not a crash; any other death stays a crash."""
    from grader.run.replaying import THREADS_RAN_OUT, DeviceCode, ReplayPlan, record_then_replay, threads_ran_out
    from grader.run.sandbox import CappedOutput, ChildRun

    def died(signal_name, text):
        err = CappedOutput(4096)
        err.feed(text.encode())
        return ChildRun([], -6, False, 0.1, CappedOutput(64), err, signal_name=signal_name)

    abort = "terminate called after throwing an instance of 'std::system_error'\n  what():  Resource temporarily unavailable\n"
    assert threads_ran_out(died("SIGABRT", abort))
    assert not threads_ran_out(died("SIGSEGV", "Segmentation fault\n"))
    assert not threads_ran_out(died(None, abort))              # it exited by itself: not the limit's abort

    class _Recorder:
        gpu = True

        def __init__(self, run):
            self.run_ = run

        def run(self, job, **kw):
            return self.run_

        def cancel(self):
            pass

        def gone(self):
            pass

    out = record_then_replay(_Recorder(died("SIGABRT", abort)), None, _job(), plan=ReplayPlan(DeviceCode([]), None, 5))
    assert out.refusals == [THREADS_RAN_OUT] and "start no threads" in THREADS_RAN_OUT and out.measurer is None
    out = record_then_replay(_Recorder(died("SIGSEGV", "")), None, _job(), plan=ReplayPlan(DeviceCode([]), None, 5))
    assert out.refusals == []


def test_sampling_stops_once_the_interval_is_clear_of_every_tier_line(monkeypatch):
    """issue 35: a fraction far from every tier line stops at min_samples with a looser interval
    (tier_settled); one whose interval holds a line samples on; tier_half_width 0 turns it off."""
    from grader.core.stats import Interval
    from grader.run.child import timing, worker

    monkeypatch.setattr(timing, "_baseline_gap", lambda *a: 0.0)
    job = _job()
    job.timing = dataclasses.replace(job.timing, max_samples=60, budget_s=30.0, min_samples=20,
                                     target_half_width=0.005, tier_half_width=0.02, tier_lines=[0.75, 0.9, 1.0])

    def stopped(interval, **change):
        monkeypatch.setattr(timing, "fraction_interval", lambda *a, **k: interval)
        kept = _Kept()
        timing.run_timing(_Fake(True), dataclasses.replace(job, timing=dataclasses.replace(job.timing, **change)),
                          worker.InputFiles([]), kept)
        return kept.frames[0].stop_reason, len(kept.frames[0].samples_ms["submission"])

    assert stopped(Interval(0.5, 0.495, 0.505)) == ("tier_settled", 20)
    assert stopped(Interval(0.75, 0.7425, 0.7575)) == ("max_samples", 60)          # 0.75 inside: go on
    assert stopped(Interval(0.5, 0.49, 0.51)) == ("max_samples", 60)               # wider than tier_half_width
    assert stopped(Interval(0.5, 0.495, 0.505), tier_half_width=0.0) == ("max_samples", 60)
    assert stopped(Interval(0.5, 0.4999, 0.5001)) == ("converged", 20)


def test_settled_needs_the_whole_interval_on_one_side_of_every_line():
    from grader.core.stats import Interval
    from grader.run.child.timing import settled

    lines = [0.75, 0.9, 1.0]
    assert settled(Interval(0.95, 0.94, 0.96), lines, 0.02)
    assert not settled(Interval(0.9, 0.895, 0.905), lines, 0.02)         # a line inside
    assert not settled(Interval(1.0, 0.999, 1.001), lines, 0.02)         # the floor inside: exceeds or not
    assert not settled(Interval(0.6, 0.55, 0.65), lines, 0.02)           # clear, but too wide
    assert not settled(Interval(0.6, 0.595, 0.605), lines, 0.0)
    # within half_width of the floor, though clear of it: sampled on (the runs that strayed kept otherwise)
    assert not settled(Interval(0.991, 0.9855, 0.9965), lines, 0.01)
    assert not settled(Interval(1.009, 1.0035, 1.0145), lines, 0.01)
    assert settled(Interval(0.975, 0.97, 0.98), lines, 0.01)


def test_the_way_without_a_gpu_records_before_the_inputs_and_replays_after_them():
    """grade/ways.RecordedOffline: the recorder (which reads no input) records as soon as it has
    started; the grade waits for the inputs on disk only after that (their drawing and numpy's
    import beside the recording), then for the measuring process, and hands it its job, gated on
    the recorder's end and taking the lane in that gate."""
    from concurrent.futures import Future

    from grader.core.contract import RecordingFrame, encode
    from grader.grade.ways import RecordedOffline
    from grader.run import protocol
    from grader.run.replaying import DeviceCode

    events = []

    frame = protocol.Frame(encode(RecordingFrame(Recording(calls={}, ops=[], views=[]))), b"")
    code = Future()
    code.set_result(DeviceCode(["a.fatbin"], kernel_params={"_Z1kPf": [[0, 8]]}))
    way = RecordedOffline(_job(), 5, None, inputs=lambda: events.append(("inputs", "on disk")),
                          recorder=_StandChild(events, "recorder", [frame], gpu=False),
                          measurer=_StandChild(events, "measurer", [], gpu=True),
                          code=code, on_gpu_recorder=None, say=lambda m: None)
    assert way.before_lane() is way
    way.in_lane(lambda: events.append(("lane", "taken")), None)
    assert events == [("recorder", "ready"), ("recorder", "run", "record"), ("recorder", "cancel"),
                      ("inputs", "on disk"), ("measurer", "ready"), ("measurer", "run", "replay"),
                      ("recorder", "gone"), ("lane", "taken"), ("measurer", "gate opened")]
    assert way.recorded is not None and way.clock.inputs_wait_s is not None and way.clock.offline_record_s is not None


def test_a_recording_short_of_the_graders_calls_is_refused_not_crashed():
    """A launcher whose host code patched the recording process so that calls are skipped
    (submissions/bias_gelu_fused/python_capi_replay_outputs.cu) leaves a recording short of the
    calls the measurement makes: the measuring process refuses it in the student's terms (the grade
    is rejected), where it once ended the timing with a RuntimeError graded as a crash."""
    from types import SimpleNamespace

    from grader.run.child.measurer import ReplayBackend
    from grader.run.child.replay import Refused

    fake = SimpleNamespace(recording=SimpleNamespace(calls={"timed 16384x1024 set 0": []}), _used={})
    call = SimpleNamespace(key="timed 16384x1024 set 0")
    with pytest.raises(Refused, match="changed what the grader's recording process sent"):
        ReplayBackend.launch_submission(fake, call, {})


def test_the_recorder_stops_calling_the_launcher_exactly_where_the_recording_is_refused():
    """The recorder stops calling a launcher once a thread of its own did something the parent
    refuses (replay.refused_from_a_thread: RecordingBackend._settled), so the recording is short of
    the grader's calls from there on; it must be refused for exactly those, or the short recording
    reaches the measuring process, which would blame the student's host code for changing it. An
    attribute or a cache preference set from a helper thread is neither (it changes nothing replayed)."""
    from grader.core.contract import RecordedOp, Recording
    from grader.run.child.recorder import _KINDS
    from grader.run.child.replay import refused_from_a_thread
    from grader.run.replaying import recording_refusals

    for kind in _KINDS.values():
        for thread in ("other", "outside"):
            op = RecordedOp(kind=kind, thread=thread, kernel="_Z13biasGeluFusedPKfS0_Pfm", nbytes=4,
                            direction="h2d" if kind in ("copy", "symbol") else "")
            refused = bool(recording_refusals(Recording(ops=[[op]]), "launchBiasGeluFused", api=CUDA.api))
            if kind == "launch_attributes":          # refused from any thread, for what it is
                assert refused
                continue
            assert refused_from_a_thread(op) == refused, (
                kind, thread, recording_refusals(Recording(ops=[[op]]), "x", api=CUDA.api))
    assert not refused_from_a_thread(RecordedOp(kind="attribute", thread="other"))
    assert not refused_from_a_thread(RecordedOp(kind="launch", thread="caller"))


@pytest.mark.parametrize("measures,rounds", [(False, 5), (True, 1)], ids=["recorder", "measurer"])
def test_only_the_measuring_process_cuts_its_warm_up_short(measures, rounds):
    """A slow warm-up round (here the budget is already spent after the first) ends the measuring
    process's warm-up; the recorder's warm-up, whose time is the launcher's host code, takes every
    round the measuring process may take, so that its recording is never short of them (a short
    one is refused, which would blame an honest, slow launcher)."""
    from types import SimpleNamespace

    from grader.run.child.timing import _Timing

    calls = []
    fake = SimpleNamespace(cfg=SimpleNamespace(budget_s=0.0, warmup=5), backend=SimpleNamespace(measures=measures),
                           round_variants={"submission": lambda: calls.append(1)}, before=lambda name: None,
                           sums=SimpleNamespace(take=lambda s: None), last_set=lambda: 0, _synchronize=lambda: None)
    _Timing.warm_up(fake)
    assert len(calls) == rounds
