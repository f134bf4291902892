"""The backend is an object decided once (issue: a house the next engineer can walk)."""

from pathlib import Path

import pytest

from grader.core.backend import AUTO, CHOICES, CUDA, EMULATOR, Backend, ChildClasses, Toolchain, named
from grader.core.errors import UsageError
from grader.toolchain.gpuinfo import resolve_backend

PACKAGE = Path(__file__).resolve().parent.parent / "grader"


def test_auto_is_decided_by_the_gpu_and_a_name_is_taken_as_it_is():
    assert resolve_backend(AUTO, has_gpu=True) is CUDA
    assert resolve_backend(AUTO, has_gpu=False) is EMULATOR
    assert resolve_backend("emulator", has_gpu=True) is EMULATOR
    assert resolve_backend(CUDA, has_gpu=False) is CUDA
    assert CHOICES == ("auto", "cuda", "emulator")


def test_an_unknown_backend_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError, match="unknown backend 'gpu': use one of auto, cuda, emulator"):
        named("gpu")


def test_what_each_backend_does():
    assert CUDA.times and CUDA.private_cases and CUDA.records_then_replays and CUDA.on_gpu and CUDA.baseline
    assert CUDA.toolchain.compiler == "nvcc" and CUDA.toolchain.device_code == "fatbin" and CUDA.toolchain.resources
    assert not (EMULATOR.times or EMULATOR.private_cases or EMULATOR.records_then_replays or EMULATOR.on_gpu)
    assert EMULATOR.toolchain.compiler == "g++" and EMULATOR.toolchain.shim and EMULATOR.reverse_check
    assert EMULATOR.checked_by is CUDA and CUDA.checked_by is None
    assert EMULATOR.target("sm_90") == "cpu" and CUDA.target("sm_90") == "sm_90" and f"{CUDA}" == "cuda"
    assert CUDA.child.modules() == ["grader.run.child.cuda", "grader.run.child.recorder",
                                    "grader.run.child.measurer"]


# A third backend, as docs/architecture.md's "Adding a backend" says: a Backend with its toolchain
# and its child classes; the build, the job and the child take it from there, nothing else changed.
HIP = Backend(
    "hip", about="a stand-in GPU backend",
    toolchain=Toolchain(compiler="hipcc", flags=("-O3", "--offload-arch={arch}", "-fPIC"),
                        reference_flags=("-O3", "--offload-arch={arch}", "-fPIC"), library_flags=("-fPIC",),
                        alone_flags=("-fsyntax-only",), templates="cuda", device_code="hsaco"),
    child=ChildClasses(run="test_replay:_Fake"), on_gpu=True, times=True,
    device_files=("/dev/kfd", "/dev/dri/renderD"), visible_devices="HIP_VISIBLE_DEVICES")


def test_a_stand_in_third_backend_builds_with_its_own_toolchain_and_reaches_the_child(tmp_path, monkeypatch):
    import dataclasses

    from grader.exercises import load_exercise
    from grader.core.source import read_submission
    from tests.jobs import child_job
    from grader.run.child import worker
    from grader.toolchain import build, tools
    from grader.toolchain.outcome import BuildResult

    ran = []

    def fake_ninja(args, limits, room):         # the build.ninja the grader wrote, "compiled" in its room
        from grader.toolchain.running import Ran

        folder = room.path
        ran.append((folder / "build.ninja").read_text())
        (folder / "main.o").write_bytes(b"o")
        (folder / "lib.so").write_bytes(b"so")
        return Ran(__import__("subprocess").CompletedProcess(args, 0, "", ""))

    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tools, "require", lambda name: f"/opt/rocm/bin/{name}" if name == "hipcc" else name)
    monkeypatch.setattr(tools, "version", lambda name: f"{name} 6.2")
    monkeypatch.setattr(build, "run_limited", fake_ninja)
    monkeypatch.setattr(build, "check_scratch_folder", lambda: None)
    rubric = load_exercise("bias_gelu_fused")
    sub = read_submission(Path("submissions/bias_gelu_fused/scalar_2d.cu"), rubric.kernel.launcher_name)
    result = build.build_submission(sub, rubric, backend=HIP, arch="gfx942")
    assert result.ok and result.command.startswith("/opt/rocm/bin/hipcc -O3 --offload-arch=gfx942 -fPIC")
    assert "command = /opt/rocm/bin/hipcc -shared -fPIC -o $out $in" in ran[0] and "--wrap" not in ran[0]
    assert "build lib.so: link main.o\n" in ran[0]          # it records nothing: no recorder linked in
    assert "hip build of scalar_2d.cu" in ran[0]
    built = BuildResult(True, result.library, result.object, False, 0.0, "")
    job, cases = child_job(rubric, backend=HIP, build=built, reference=built, has_launcher=False)
    assert job.backend is HIP and job.timing is not None and not job.reverse_check       # it times, as it says
    made = worker._backend_for(dataclasses.replace(job, library=""))
    assert type(made).__name__ == "_Fake"                # the child class HIP names, by no name compared
