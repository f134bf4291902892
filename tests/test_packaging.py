"""The package as users install it: a built wheel carries the exercises, the reference kernels,
the templates and the child's sources, and grades a sample outside the checkout."""

import json
import os
import shutil
import subprocess
import sys
import tomllib

import pytest

from conftest import ROOT, SUBMISSIONS


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_subpackage_and_data_folder_is_listed():
    listed = set(_config()["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "grader").rglob("__init__.py")}
    data_only = {".".join(d.relative_to(ROOT).parts) for d in (ROOT / "grader").iterdir()
                 if d.is_dir() and d.name != "__pycache__" and not (d / "__init__.py").exists()}
    assert on_disk | data_only <= listed, (on_disk | data_only) - listed
    mapped = _config()["package-dir"]
    assert {v for v in mapped.values()} == {"rubrics", "reference"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from the checkout, unpacked into its own folder (its dependencies are this
    environment's)."""
    tmp = tmp_path_factory.mktemp("wheel")
    try:
        import setuptools  # noqa: F401
        isolation = ["--no-build-isolation"]
    except ImportError:
        isolation = []
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", str(ROOT),
                            "-w", str(tmp / "dist")], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp / "dist").glob("grader-*.whl")
    target = tmp / "site"
    got = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                         capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-2000:]
    return target


def test_the_wheel_carries_the_data(installed):
    for rel in ("grader/data/rubrics/bias_gelu_fused.yaml", "grader/data/reference/kernels.cu",
                "grader/data/reference/bias_gelu_fused/reference.py", "grader/data/reference/bias_gelu_fused/kernels.cu",
                "grader/templates/cuda/harness.cu.j2", "grader/templates/cuda/recorder.cpp.j2",
                "grader/templates/emulator/harness.cu.j2", "grader/shim/cuda_shim.h", "grader/run/child/guard.c"):
        assert (installed / rel).is_file(), rel


def test_a_wheel_install_grades_a_sample_outside_the_checkout(installed, tmp_path):
    if shutil.which("g++") is None:
        pytest.skip("the emulator needs g++")
    sample = tmp_path / "float4_launcher.cu"
    shutil.copy(SUBMISSIONS / "float4_launcher.cu", sample)
    env = {**os.environ, "PYTHONPATH": str(installed), "GRADER_CACHE_DIR": str(tmp_path / "cache")}
    where = subprocess.run([sys.executable, "-c", "import grader, grader.exercises.rubric as r, grader.toolchain.build as b; "
                            "print(grader.__file__); print(r.DEFAULT_RUBRIC); print(b.REFERENCE_SOURCE)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(installed)) for line in where.stdout.split()), where.stdout
    run = subprocess.run([sys.executable, "-m", "grader", "submit", str(sample), "--backend", "emulator",
                          "--format", "json", "--no-github"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert result["status"] == "graded" and result["correct"] is True
