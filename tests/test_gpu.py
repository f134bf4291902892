"""GPU tests: skipped without a GPU; scripts/gpu-check runs them on the device."""

import re

import pytest
import torch

from grader.core.backend import CUDA
from grader.toolchain.build import build_submission
from grader.core.contract import CaseFrame
from grader.exercises import load_exercise
from grader.grade.pipeline import grade_submission
from grader.batch.manifest import load_manifest, run_samples
from grader.run.replaying import run_worker
from grader.core.source import read_submission
from conftest import SUBMISSIONS, sample_folders

pytestmark = pytest.mark.gpu
SAMPLES = [(folder, e.file) for folder in sample_folders()
           for e in load_manifest(folder / "manifest.yaml", CUDA, load_exercise(folder.name))]


@pytest.mark.parametrize("folder,name", SAMPLES, ids=[f"{f.name}/{n}" for f, n in SAMPLES])
def test_sample_on_the_gpu(folder, name):
    (outcome,) = run_samples(folder, rubric=load_exercise(folder.name), backend="cuda", only=[name])
    assert outcome.ok, f"{name}: {outcome.problems}"


def _outputs(name, rubric, backend):
    from grader.toolchain import gpuinfo

    from grader.core.backend import named
    from tests.jobs import child_job

    sub = read_submission(SUBMISSIONS / name, rubric.kernel.launcher_name)
    arch = gpuinfo.arch()
    build = build_submission(sub, rubric, backend=named(backend), arch=arch)
    job, _ = child_job(rubric, backend=named(backend), build=build, arch=arch, has_launcher=sub.has_launcher, draw=True)
    job.cases, job.timing, job.timed_cases, job.verify_cases, job.reverse_check = job.cases[:8], None, [], [], False
    run = run_worker(job, time_limit_s=60, output_cap=4096)
    out = {}
    for f in run.frames:
        if isinstance(f.data, CaseFrame) and f.data.ok:
            meta = f.data.outputs[0]
            n = meta.floats + 2 * meta.pad
            out[f.data.case] = torch.frombuffer(bytearray(f.payload[: n * 4]), dtype=torch.float32)
    return out


DETERMINISTIC = ["scalar_2d.cu", "float4_launcher.cu", "flat_index_mod.cu", "int_cols.cu", "tanh_gelu.cu",
                 "missing_bias.cu", "bias_by_row.cu"]


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_emulator_and_gpu_agree_within_tolerance(name, rubric):
    gpu, emu = _outputs(name, rubric, "cuda"), _outputs(name, rubric, "emulator")
    assert gpu and set(gpu) == set(emu)
    for case in gpu:
        a, b = gpu[case].double(), emu[case].double()
        finite = torch.isfinite(a) & torch.isfinite(b)
        assert torch.equal(torch.isfinite(a), torch.isfinite(b)), case
        assert torch.allclose(a[finite], b[finite], rtol=rubric.tolerance.rtol, atol=rubric.tolerance.atol), case


def test_timing_of_a_good_kernel(rubric):
    r = grade_submission(SUBMISSIONS / "float4_launcher.cu", rubric=rubric, backend="cuda")
    t = r.timing
    assert r.status == "graded" and r.correct and t is not None
    assert t.samples >= rubric.timing.min_samples
    assert t.fraction_ci[0] <= t.fraction <= t.fraction_ci[1]
    assert t.floor_gbps == max(c.gbps for c in t.copies if c.kind in rubric.timing.floor)
    assert {c.kind for c in t.copies} == {"copy_scalar", "copy_vec4", "memcpy"}
    assert t.chain_ms and t.chain_ms > t.submission_ms
    assert r.device.before and r.device.after and r.device.name
    assert all(c.passed for c in r.cases if c.kind == "timed") and len([c for c in r.cases if c.kind == "timed"]) == 2


def test_the_counters_pass_reads_the_timed_call_and_changes_no_grade(rubric):
    """issue 36: Nsight Compute on the replayed timed call, behind the profile wall; the counters
    of the lesson's 2D kernel are a coalesced warp's (4 sectors a load request), the byte model's
    bytes, and the fraction and tier are the timing's own."""
    r = grade_submission(SUBMISSIONS / "scalar_2d.cu", rubric=rubric, backend="cuda", counters=True)
    c = r.counters
    assert r.status == "graded" and r.correct and c is not None
    assert c.kernels, c.problem
    (k,) = c.kernels
    assert k.kernel == "biasGeluFused" and k.load_ideal == 4.0
    assert 3.5 <= k.load_sectors_per_request <= 4.5 and 3.5 <= k.store_sectors_per_request <= 4.5
    assert 0.8 <= c.dram_over_model <= 1.2 and c.model_bytes == r.timing.bytes_moved
    assert 0 < k.dram_pct <= 100 and k.dram_gbps > 100 and k.achieved_occupancy_pct > 0
    assert not [f for f in r.findings if f.source == "counters"]
    # scalar_2d is 0.60 of the floor on an H200 and at the silver line (0.755) on an H100
    assert r.tier in ("below", "silver") and r.fraction == r.timing.fraction


def test_illegal_address_is_crashed_with_cudas_message(rubric):
    r = grade_submission(SUBMISSIONS / "illegal_write.cu", rubric=rubric, backend="cuda")
    assert r.status == "crashed" and "illegal" in r.message.lower()


@pytest.mark.parametrize("name", ["small_blocks.cu", "tiny_grid.cu", "float4_launcher.cu", "sm_count_grid_stride.cu",
                                  "occupancy_launcher.cu"])
def test_the_runtime_logs_each_launch_and_its_occupancy_matches_the_calculator(name, rubric):
    """The launch log on the GPU (the link's wrap of the runtime's launch) names the kernels, and
    the runtime's occupancy equals launches.blocks_per_sm from ptxas's registers, which is what
    the emulator reports."""
    from grader.toolchain import gpuinfo
    from grader.analysis.launches import ARCH_LIMITS, blocks_per_sm

    r = grade_submission(SUBMISSIONS / name, rubric=rubric, backend="cuda")
    assert r.status == "graded" and r.launches, r.message
    limits = ARCH_LIMITS[gpuinfo.arch()]
    for lc in r.launches:
        assert lc.occupancy_source == "runtime" and lc.registers, lc
        threads = lc.block[0] * lc.block[1] * lc.block[2]
        assert lc.blocks_per_sm == blocks_per_sm(limits, threads=threads, registers=lc.registers,
                                                 shared_bytes=lc.shared_bytes), lc
        assert lc.launches >= 10      # the timed samples


@pytest.mark.parametrize("name", ["bias_gelu_fused", "rope_half_split", "gelu_sum"])
def test_calibrate_times_the_lessons_kernels_on_the_gpu(name):
    from grader.core.backend import CUDA
    from grader.grade.calibration import calibrate

    rubric = load_exercise(name)
    cal = calibrate(rubric, backend=CUDA)
    copies = [r for r in cal.rows if r.copy]
    runs = [r for r in cal.rows if not r.copy]
    assert [r.name for r in runs] == [run.name for run in rubric.calibrate.runs]
    assert max(r.fraction for r in copies) == 1.0 and cal.device.get("name")
    assert all(0.05 < r.fraction < 1.3 and r.median_ms > 0 for r in runs), cal.rows


def _record_both_ways(folder, name):
    """name recorded by the recorder without a GPU and by the GPU's (each in its own child, the
    grade's job): (why the first needs the GPU, its recording, the GPU's recording)."""
    import dataclasses

    from grader.core.contract import OfflinePart, RecordingFrame
    from tests.jobs import child_job
    from grader.run.replaying import needs_gpu, record, recording_refusals
    from grader.run.sandbox import ChildSpec, Worker
    from grader.toolchain import gpuinfo
    from grader.toolchain.build import build_driver_stand_in, build_guard, device_code, kernel_parameters

    rubric = load_exercise(folder.name)
    if not (folder / name).is_file():                   # made by the samples' run (huge_source.cu)
        return None
    sub = read_submission(folder / name, rubric.kernel.launcher_name, rubric.kernel.signature)
    if not hasattr(sub, "has_launcher"):
        return None
    arch = gpuinfo.arch()
    build = build_submission(sub, rubric, backend=CUDA, arch=arch)
    if not build.ok:
        return None
    job, _ = child_job(rubric, backend=CUDA, build=build, arch=arch, has_launcher=sub.has_launcher,
                       guard=build_guard())
    params = kernel_parameters(device_code(build.library))
    recordings, why = [], ""
    for gpu in (False, True):
        with Worker(ChildSpec(backend=CUDA, output_cap=4096, cpu_limit_s=60, device="0", gpu=gpu)) as recorder:
            run = record(recorder, job, time_limit_s=60,
                         offline=OfflinePart(params, str(build_driver_stand_in())))
        if not gpu:
            why = needs_gpu(run)
        got = next((f.data.recording for f in run.frames if isinstance(f.data, RecordingFrame)), None)
        # refused: by the wall, as a forged stream (forge_channel.cu: where the forgery lands in the
        # recorder's frames depends on its speed), or by the parent's reading of the recording
        refused = bool(run.blocked) or bool(run.stream_problem) or (
            got is not None and bool(recording_refusals(got, "launcher", api=CUDA.api)))
        recordings.append((dataclasses.asdict(got) if got is not None else None, refused))
    return why, recordings[0], recordings[1]


def _reads_the_clock(path) -> bool:
    """A launcher that reads the clock records what its speed gives (skip_when_called_fast.cu launches
    a fifth of the rows when called within 0.5 ms of its last return): its two recordings may differ
    as two recordings on the GPU may."""
    return bool(re.search(r"::now\(\)|clock_gettime|gettimeofday|__rdtsc", path.read_text()))


def test_the_recorder_without_a_gpu_records_what_the_gpus_recorder_records():
    """Every sample that builds, recorded both ways: where the recorder without a GPU stands (it
    needs nothing only the GPU answers), its recording is the GPU recorder's, op for op and byte
    for byte (or both are refused: a thread's late launches come when they come); and it stands
    for most of the samples (the fast path is real)."""
    from concurrent.futures import ThreadPoolExecutor

    stood, sent, differ = [], [], []
    with ThreadPoolExecutor(max_workers=8) as pool:           # builds and recordings: nothing is timed
        every = list(pool.map(lambda sample: (sample, _record_both_ways(*sample)), SAMPLES))
    for (folder, name), both in every:
        if both is None:
            continue
        why, offline, on_gpu = both
        if why:
            sent.append(f"{folder.name}/{name}: {why}")
        elif offline[0] != on_gpu[0] and not (offline[1] and on_gpu[1]) and not _reads_the_clock(folder / name):
            differ.append(f"{folder.name}/{name}: without a GPU {str(offline)[:600]} / on it {str(on_gpu)[:600]}")
        else:
            stood.append(name)
    print(f"recorded without a GPU: {len(stood)}; on the GPU: {len(sent)}", *sent, sep="\n  ")
    assert differ == [], f"recordings differ: {differ}"
    assert len(stood) >= 2 * len(sent), sent
