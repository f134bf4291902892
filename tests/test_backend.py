"""The backend is an object decided once (issue: a house the next engineer can walk)."""

import re
from pathlib import Path

import pytest

from grader.core.backend import AUTO, CHOICES, CUDA, EMULATOR, named
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
    assert CUDA.times and CUDA.private_cases and CUDA.records_then_replays and CUDA.compiler == "nvcc"
    assert not (EMULATOR.times or EMULATOR.private_cases or EMULATOR.records_then_replays)
    assert EMULATOR.compiler == "g++" and EMULATOR.target("sm_90") == "cpu" and CUDA.target("sm_90") == "sm_90"
    assert f"{CUDA}" == "cuda"


def test_no_module_compares_a_backend_name():
    """Every step asks the Backend what it does. The child (run/child/) is the exception: it is
    told the backend's name in its job, across a process boundary, and starts its own."""
    compare = re.compile(r"""[!=]=\s*["'](cuda|emulator)["']|["'](cuda|emulator)["']\s*[!=]=""")
    found = [f"{p.relative_to(PACKAGE.parent)}:{n}" for p in PACKAGE.rglob("*.py") if "child" not in p.parts
             for n, line in enumerate(p.read_text().splitlines(), 1) if compare.search(line)]
    assert found == []
