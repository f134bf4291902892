"""`grader calibrate`: the lesson's own reference kernels of an exercise, timed on this GPU.

The copies the floor is measured with, and the runs the exercise's rubric lists (for bias + GELU
the staged and the fused chain, for RoPE the three ways of writing the rotation), each with its
byte model, at the exercise's timed shape, in a child as grading does. An instructor sees where
the tier lines sit on their hardware before a class submits.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from grader.core import exprs
from grader.core.backend import Backend
from grader.core.contract import Arg, CalibrationFrame, CalibrationRun, Call, FatalFrame, GuardMode, Job, TimingJob
from grader.core.errors import InfrastructureError
from grader.core.locations import cache_root
from grader.core.stats import median
from grader.core.typed import from_data
from grader.exercises import casefiles, data, load_reference
from grader.exercises.plan import buffer_of, case_job, timed_cases
from grader.exercises.rubric import Rubric, dims_values
from grader.grade.jobs import child_limits
from grader.run import lanes
from grader.run.sandbox import ChildSpec, Worker
from grader.toolchain import gpuinfo
from grader.toolchain.build import build_guard, build_reference


@dataclass
class Row:
    name: str
    note: str                 # the byte model in words
    bytes_moved: int
    median_ms: float
    gbps: float
    fraction: float           # of the floor (the fastest copy in rubric.timing.floor)
    copy: bool = False


@dataclass
class Calibration:
    exercise: str
    title: str
    dims: dict
    device: dict
    floor_kind: str
    tiers: dict               # tier name -> its line, a fraction of the floor
    rows: list[Row] = field(default_factory=list)


def calibrate(rubric: Rubric, *, backend: Backend, device: str | None = None) -> Calibration:
    """Time the exercise's calibration runs and the copies on a GPU with backend (one that times);
    InfrastructureError without one."""
    reading = gpuinfo.probe()
    if reading is None:
        raise InfrastructureError("grader calibrate times kernels on an NVIDIA GPU and none is visible here")
    if not rubric.calibrate.runs:
        raise InfrastructureError(f"exercise {rubric.exercise!r} lists no calibrate runs in {rubric.path}")
    exercise = load_reference(rubric)
    arch = gpuinfo.arch(reading)
    reference = build_reference(backend=backend, arch=arch, exercise_kernels=exercise.kernels)
    case = timed_cases(rubric, chain=True)[0]
    data.materialize(rubric, exercise, case, cache_root())
    cj = case_job(rubric, case, has_launcher=False, files=casefiles.files_of(rubric, exercise, case, cache_root()))
    values = dims_values(rubric, rubric.timing.dims)
    cj.buffers += [dataclasses.replace(buffer_of(t, values), role="out", init="zero") for t in rubric.calibrate.scratch]
    names = {b.name for b in cj.buffers}
    runs = [CalibrationRun(run.name, [Call([Arg(tensor=a) if a in names else Arg(value=int(exprs.evaluate(a, values)))
                                            for a in step.args], kernel=step.kernel) for step in run.steps])
            for run in rubric.calibrate.runs]
    t = rubric.timing
    copy_floats = int(exprs.evaluate(t.copy_floats, values))
    lim = rubric.limits
    guard = build_guard()
    job = Job(backend=backend, library="", reference_library=str(reference.library),
              guard_library=str(guard) if guard else None,
              guard_mode=GuardMode.ENFORCE, limits=child_limits(rubric),
              cases=[], guard_floats=0,
              timing=TimingJob(floor=list(t.floor), informational_floor=t.informational_floor, copy_floats=copy_floats,
                               warmup=3, min_samples=rubric.calibrate.rounds, max_samples=rubric.calibrate.rounds,
                               target_half_width=0.0, budget_s=0.0, hard_budget_s=0.0, slow_launch_s=0.0, chain=False,
                               floor_buffers=t.floor_buffers),
              timed_cases=[cj], calibrate=runs, calibration_rounds=rubric.calibrate.rounds)
    device = device or lanes.default_device()
    with Worker(ChildSpec(backend=backend, output_cap=lim.output_cap_bytes, cpu_limit_s=lim.time_limit_s,
                          device=device)) as worker:
        worker.wait_ready(timeout_s=lim.time_limit_s)
        with lanes.gpu_lane(device):
            run = worker.run(job, time_limit_s=lim.time_limit_s)
    frames = [f.data for f in run.frames]
    frame = next((f for f in frames if isinstance(f, CalibrationFrame)), None)
    if frame is None:
        fatal = next((f for f in frames if isinstance(f, FatalFrame)), None)
        raise InfrastructureError(f"calibration of {rubric.exercise} failed: "
                                  f"{fatal.error if fatal else run.stderr.text()[-2000:]}")
    return _rows(rubric, frame, copy_floats * 8, values)


def _rows(rubric: Rubric, frame: CalibrationFrame, copy_bytes: int, values: dict) -> Calibration:
    samples = frame.samples_ms
    copies = {k: median(samples[k]) for k in dict.fromkeys(rubric.timing.floor + [rubric.timing.informational_floor])}
    floor_kind = min(rubric.timing.floor, key=lambda k: copies[k])
    floor_gbps = copy_bytes / (copies[floor_kind] * 1e-3) / 1e9
    cal = Calibration(rubric.exercise, rubric.title, dict(rubric.timing.dims), frame.device, floor_kind,
                      {"gold": rubric.tiers.gold, "silver": rubric.tiers.silver})
    copy_note = f"{copy_bytes / 8:.0f} floats read and written"
    for kind, ms in copies.items():
        gbps = copy_bytes / (ms * 1e-3) / 1e9
        cal.rows.append(Row(kind, copy_note, copy_bytes, ms, gbps, gbps / floor_gbps, copy=True))
    for run in rubric.calibrate.runs:
        moved = int(exprs.evaluate(run.bytes, values))
        ms = median(samples[run.name])
        gbps = moved / (ms * 1e-3) / 1e9
        cal.rows.append(Row(run.name, run.note, moved, ms, gbps, gbps / floor_gbps))
    return cal


def write_json(calibrations: list[Calibration], path: Path) -> None:
    """The tables as JSON (`grader calibrate --json-out`): what docs/figures.md restates."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"kind": "calibrate", "calibrations": [dataclasses.asdict(c) for c in calibrations]},
                               indent=1))


def read_json(path: Path) -> list[Calibration]:
    return [from_data(Calibration, c) for c in json.loads(path.read_text(encoding="utf-8"))["calibrations"]]


def render(cal: Calibration) -> str:
    """The lesson's table: each row's byte model above it, GB/s and the fraction of the floor."""
    dims = " x ".join(f"{k}={v}" for k, v in cal.dims.items())
    lines = [f"{cal.exercise}: {cal.title}", f"  on {cal.device.get('name', 'this GPU')} at {dims}; floor: "
             f"{cal.floor_kind}; gold at {cal.tiers['gold']:.2f}, silver at {cal.tiers['silver']:.2f} of it", ""]
    lines.append(f"  {'kernel':<52} {'MB':>8} {'ms':>9} {'GB/s':>8} {'x floor':>8}")
    for r in cal.rows:
        if not r.copy and r.note:
            lines.append(f"  # {r.note}")
        lines.append(f"  {r.name[:52]:<52} {r.bytes_moved / 1e6:8.1f} {r.median_ms:9.4f} {r.gbps:8.1f} {r.fraction:8.3f}")
    return "\n".join(lines) + "\n"
